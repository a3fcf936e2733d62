//! The fleet changes the controller makes to a stored spec: set-power and destroy. Each reloads the head
//! revision's spec ([`stored_spec`]), changes it, prepares it again and stores a new revision, under the
//! fleet's lock on the blocking pool.

use std::collections::BTreeMap;
use std::sync::Arc;

use pxfleet_spec::Fleet;
use pxfleet_tls::Identity;

use super::store::{active_ops, store_revision};
use super::{blocking, prepare_now, Changed, PowerAction};
use crate::error::{Error, Result};
use crate::model::Revision;
use crate::planning::Prepared;
use crate::reconcile;
use crate::state::State;

/// The stored spec of `fleet` with the containers named (all when empty) set to start or stop; a restart
/// also stops them once the revision is stored (the reconciler starts them again).
pub async fn set_power(
    state: &Arc<State>,
    author: &Identity,
    fleet_name: &str,
    containers: &[String],
    action: PowerAction,
    expected_revision: Option<u64>,
) -> Result<Changed> {
    let (author, fleet, containers) = (author.clone(), fleet_name.to_string(), containers.to_vec());
    under_fleet_lock(state, fleet_name, move |st| {
        set_power_locked(st, &author, &fleet, &containers, action, expected_revision)
    })
    .await
}

fn set_power_locked(
    state: &State,
    author: &Identity,
    fleet_name: &str,
    containers: &[String],
    action: PowerAction,
    expected_revision: Option<u64>,
) -> Result<Changed> {
    let (head, mut fleet) = stored_spec(state, fleet_name)?;
    check_names(&fleet, fleet_name, containers)?;
    let desired = if action == PowerAction::Stop {
        pxfleet_spec::DesiredState::Stopped
    } else {
        pxfleet_spec::DesiredState::Running
    };
    // A template never runs (and stays one when stopped): named, it is an error; in "all", it is left out.
    if let Some(t) = containers.iter().find(|c| {
        fleet
            .containers
            .get(*c)
            .is_some_and(|c| c.state.is_template())
    }) {
        return Err(Error::FailedPrecondition(format!(
            "container {t} of fleet {fleet_name} is a template (state: template): PVE cannot start or stop a template"
        )));
    }
    let chosen: Vec<String> = fleet
        .containers
        .iter()
        .filter(|(k, c)| {
            !c.state.is_template() && (containers.is_empty() || containers.contains(k))
        })
        .map(|(k, _)| k.clone())
        .collect();
    for k in &chosen {
        if let Some(c) = fleet.containers.get_mut(k) {
            c.state = desired;
        }
    }
    let prepared = prepare_stored(state, fleet.clone())?;
    let verb = action.verb();
    crate::policy::admin_gate(
        state,
        &crate::policy::AdminRequest {
            action: verb,
            user: author,
            fleet: &prepared.fleet,
            plan: &prepared.plan,
            containers: chosen.clone(),
        },
    )?;
    let revision = store_revision(
        state,
        author,
        fleet,
        prepared,
        expected_revision.or(Some(head.revision)),
        verb,
        None,
    )?;
    // A restart of a running container: stopped here, started again by the reconciler (its state is
    // running). Only once the revision is stored, so a refused one stops nothing.
    if action == PowerAction::Restart {
        reconcile::queue_restarts(state, fleet_name, &chosen, revision)?;
        state.changed();
    }
    tracing::info!(fleet = %fleet_name, revision, action = verb, containers = ?chosen, "power state changed");
    Ok(Changed {
        revision,
        operations: active_ops(state, fleet_name, Some(revision))?,
    })
}

/// Destroys the containers named (the whole fleet when none) by storing a revision without them.
pub async fn destroy(
    state: &Arc<State>,
    author: &Identity,
    fleet_name: &str,
    containers: &[String],
    expected_revision: Option<u64>,
) -> Result<Changed> {
    let (author, fleet, containers) = (author.clone(), fleet_name.to_string(), containers.to_vec());
    under_fleet_lock(state, fleet_name, move |st| {
        destroy_locked(st, &author, &fleet, &containers, expected_revision)
    })
    .await
}

/// Runs `change` on the blocking pool under the lock of `fleet_name`, taken here and held until it ends (also
/// when the caller goes away meanwhile).
async fn under_fleet_lock<T: Send + 'static>(
    state: &Arc<State>,
    fleet_name: &str,
    change: impl FnOnce(&State) -> Result<T> + Send + 'static,
) -> Result<T> {
    let guard = state.fleet_lock(fleet_name).lock_owned().await;
    let st = state.clone();
    blocking(move || {
        let _held = guard;
        change(&st)
    })
    .await?
}

fn destroy_locked(
    state: &State,
    author: &Identity,
    fleet_name: &str,
    containers: &[String],
    expected_revision: Option<u64>,
) -> Result<Changed> {
    let (head, mut fleet) = stored_spec(state, fleet_name)?;
    check_names(&fleet, fleet_name, containers)?;
    let chosen: Vec<String> = match containers.is_empty() {
        true => fleet.containers.keys().cloned().collect(),
        false => containers.to_vec(),
    };
    let before = fleet.clone();
    fleet.containers.retain(|k, _| !chosen.contains(k));
    let prepared = prepare_stored(state, fleet.clone())?;
    // the policies see the fleet as it is, with the containers the plan destroys
    crate::policy::admin_gate(
        state,
        &crate::policy::AdminRequest {
            action: "destroy",
            user: author,
            fleet: &before,
            plan: &prepared.plan,
            containers: chosen,
        },
    )?;
    let revision = store_revision(
        state,
        author,
        fleet,
        prepared,
        expected_revision.or(Some(head.revision)),
        "destroy",
        None,
    )?;
    Ok(Changed {
        revision,
        operations: active_ops(state, fleet_name, None)?,
    })
}

fn check_names(fleet: &Fleet, fleet_name: &str, containers: &[String]) -> Result<()> {
    match containers
        .iter()
        .find(|c| !fleet.containers.contains_key(*c))
    {
        Some(c) => Err(Error::NotFound(format!(
            "fleet {fleet_name} has no container {c}"
        ))),
        None => Ok(()),
    }
}

/// The fleet's head revision and its stored spec, made ready to be prepared again: passwords from the
/// secrets tree, and `node` left open again where the scheduler (not the file) chose it, so that a
/// container moved by hand stays adoptable.
fn stored_spec(state: &State, fleet: &str) -> Result<(Revision, Fleet)> {
    let st = &state.store;
    let head = st
        .revision(fleet, st.fleet(fleet)?.map(|f| f.revision).unwrap_or(0))?
        .ok_or_else(|| Error::NotFound(format!("no fleet {fleet}")))?;
    let mut spec: Fleet = serde_json::from_value(head.spec.clone())
        .map_err(|e| Error::Internal(format!("stored spec of fleet {fleet} unreadable: {e}")))?;
    let secrets = st.secrets(fleet)?;
    let placed: BTreeMap<String, bool> = st
        .desired(fleet)?
        .into_iter()
        .map(|d| (d.name, d.node_pinned))
        .collect();
    for (k, c) in spec.containers.iter_mut() {
        c.password = secrets.get(k).map(|p| pxfleet_spec::Secret::new(p.clone()));
        if placed.get(k) == Some(&false) {
            c.node = None;
        }
    }
    Ok((head, spec))
}

/// Prepares a stored spec changed by the controller itself (power, destroy): any diagnostic refuses it.
fn prepare_stored(state: &State, fleet: Fleet) -> Result<Prepared> {
    let (_, prepared) = prepare_now(state, "(stored spec)", fleet)?;
    prepared.map_err(|d| {
        Error::FailedPrecondition(
            d.iter()
                .map(|d| d.message.clone())
                .collect::<Vec<_>>()
                .join("; "),
        )
    })
}
