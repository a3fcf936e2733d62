//! Changing a fleet's desired state: plan, submit, destroy and set-power. Each parses or reloads the fleet,
//! prepares it against a snapshot of the world ([`crate::planning`]), checks the revision the caller expects
//! and the fleet's policies, merges passwords (given, kept from the secrets tree, or generated), stores a new
//! revision and runs a reconcile pass so the operations exist when the caller is answered. The gRPC
//! handlers in [`crate::grpc::fleet_service`] only authorise and convert.
//!
//! Parsing, planning, storing and the pass are synchronous and take seconds at 10,000 containers: they run on
//! the blocking pool ([`blocking`]), never on an async worker. The fleet's lock and the placement lock are
//! taken on the async side and moved into the blocking work, so they are held until it ends even when the
//! caller goes away meanwhile.

use std::collections::HashMap;
use std::sync::Arc;

use pxfleet_spec::{Diagnostic, Fleet, MemFiles};
use pxfleet_tls::Identity;

use crate::error::{Error, Result};
use crate::model::{ContainerStatus, DesiredContainer, Operation};
use crate::planning::{prepare, Prepared, Snapshot};
use crate::policy::PolicyReport;
use crate::query;
use crate::state::State;
use crate::store::StoreError;

mod change;
mod store;

pub use change::{destroy, set_power};
use store::{active_ops, free_later, store_revision};

/// A fleet as a client sends it: the file's name and text, and the files it includes.
#[derive(Debug, Clone, Default)]
pub struct Source {
    pub file_name: String,
    pub text: String,
    pub files: HashMap<String, String>,
}

impl Source {
    fn mem_files(&self) -> MemFiles {
        MemFiles(
            self.files
                .iter()
                .map(|(k, v)| (k.into(), v.clone()))
                .collect(),
        )
    }

    /// `limits.max_fleet_bytes`, before anything is parsed.
    fn check_size(&self, state: &State) -> Result<()> {
        state.limiter.config().check_fleet_bytes(
            &self.file_name,
            std::iter::once(self.text.as_str())
                .chain(self.files.keys().map(String::as_str))
                .chain(self.files.values().map(String::as_str)),
        )
    }

    /// The parsed fleet, or the diagnostics that refuse it.
    fn parse(&self) -> std::result::Result<Fleet, Vec<Diagnostic>> {
        let name = if self.file_name.is_empty() {
            "fleet.yaml"
        } else {
            &self.file_name
        };
        pxfleet_spec::parse_fleet(name, &self.text, &self.mem_files()).map_err(|d| d.0)
    }

    /// The fleet's own policies and the admin's against the prepared fleet and its plan (`None`: there are
    /// none), for a submit by `caller`.
    fn policy(
        &self,
        state: &State,
        caller: &Identity,
        prepared: &Prepared,
    ) -> Result<std::result::Result<Option<PolicyReport>, Vec<Diagnostic>>> {
        let own = match crate::policy::check(
            &self.file_name,
            &self.text,
            &self.mem_files(),
            &prepared.fleet,
            &prepared.plan,
        ) {
            Ok(own) => own,
            Err(d) => return Ok(Err(d)),
        };
        let admin = crate::policy::admin_check(
            state,
            &crate::policy::AdminRequest {
                action: "submit",
                user: caller,
                fleet: &prepared.fleet,
                plan: &prepared.plan,
                containers: prepared.fleet.containers.keys().cloned().collect(),
            },
        )?;
        Ok(Ok(crate::policy::merge(own, admin)))
    }
}

/// What `plan` answers: the plan, or the diagnostics that refuse the fleet. `fleet` is empty when the file
/// could not be parsed.
#[derive(Debug, Clone, Default)]
pub struct Planned {
    pub fleet: String,
    pub base_revision: u64,
    /// The plan as pxfleet's JSON plan document (empty when refused).
    pub plan_json: String,
    pub has_changes: bool,
    pub diagnostics: Vec<Diagnostic>,
    pub policy: Option<PolicyReport>,
}

/// What `submit` answers: the revision stored (or kept, when nothing changed) and its operations, or the
/// diagnostics that refuse the fleet.
#[derive(Debug, Clone, Default)]
pub struct Submitted {
    pub fleet: String,
    pub revision: u64,
    pub operations: Vec<Arc<Operation>>,
    pub diagnostics: Vec<Diagnostic>,
    pub plan_json: String,
    pub policy: Option<PolicyReport>,
}

/// What a submit asks for besides the fleet.
#[derive(Debug, Clone, Default)]
pub struct SubmitOptions {
    /// The revision the plan was made on (refused when the fleet moved since).
    pub expected_revision: Option<u64>,
    /// A saved plan (`pxctl plan --out`): refused unless it is what would be done now.
    pub plan_json: String,
    /// Store a new revision even when nothing changed, so failed containers are tried again.
    pub retry_failed: bool,
    /// Answer without the plan's JSON (the client has it): rendering and sending it is 18 MB at 10,000
    /// containers. A refusal (policy) still carries it.
    pub omit_plan: bool,
}

/// A revision stored by destroy or set-power, and its operations.
#[derive(Debug, Clone, Default)]
pub struct Changed {
    pub revision: u64,
    pub operations: Vec<Arc<Operation>>,
}

/// The power change `set_power` makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerAction {
    Start,
    Stop,
    Restart,
}

impl PowerAction {
    fn verb(self) -> &'static str {
        match self {
            PowerAction::Start => "start",
            PowerAction::Stop => "stop",
            PowerAction::Restart => "restart",
        }
    }
}

fn snapshot(state: &State, fleet: &str) -> Result<Snapshot, StoreError> {
    Snapshot::take(&state.store, fleet, |n| crate::nodes::status(state, n))
}

/// Prepares `fleet` (or its destruction: no containers) against the current state.
fn prepare_now(
    state: &State,
    file: &str,
    fleet: Fleet,
) -> Result<(Snapshot, std::result::Result<Prepared, Vec<Diagnostic>>)> {
    let snap = snapshot(state, &fleet.name)?;
    let prepared = prepare(file, fleet, &snap, state.config.vm_ids, snap.revision + 1);
    Ok((snap, prepared))
}

/// Runs `work` on the blocking pool and waits for it (a panic there becomes an internal error).
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Internal(format!("fleet change task failed: {e}")))
}

/// A parsed fleet the caller may submit, and what allowed the host powers of its containers
/// ([`crate::grants::check`]): per container, the sentence its plan prints.
type Checked = (Fleet, crate::grants::Powers);

/// The parsed fleet of `source` after the size and container limits, the caller's right to change it
/// (`may_change`) and to give its containers host powers (an admin, or the fleet's grants: `admin`), or the
/// diagnostics that refuse it. The parse runs on the blocking pool; `source` comes back with the answer.
async fn parse_checked(
    state: &Arc<State>,
    source: Source,
    may_change: impl Fn(&str) -> Result<()>,
    admin: bool,
) -> Result<(Source, std::result::Result<Checked, Vec<Diagnostic>>)> {
    let st = state.clone();
    let (source, parsed) = blocking(move || {
        let parsed = source.check_size(&st).map(|()| source.parse());
        (source, parsed)
    })
    .await?;
    let fleet = match parsed? {
        Ok(f) => f,
        Err(d) => return Ok((source, Err(d))),
    };
    may_change(&fleet.name)?;
    // before anything reads a secret file the fleet names (no file oracle for operators)
    let mut refused = match admin {
        true => vec![],
        false => {
            let mut r = crate::hooks::operator_refusals(&source.file_name, &fleet);
            r.extend(crate::hooks::operator_hook_urls(
                &source.file_name,
                &fleet,
                &state.config.hook_urls,
            ));
            r
        }
    };
    // no hook reads the controller's own data, an admin's neither; hooks used by name are defined
    refused
        .extend(crate::hooks::Protected::of(&state.config).check_fleet(&source.file_name, &fleet));
    if refused.is_empty() {
        refused.extend(
            state
                .config
                .hook_catalog
                .check_fleet(&source.file_name, &fleet),
        );
    }
    let grants = state.store.grants(Some(&fleet.name))?;
    // the vm_ids of the fleet's stored containers (whose volumes it may mount, which it need not adopt)
    let stored = state.store.desired_vm_ids(&fleet.name)?;
    let powers = match crate::grants::check(&source.file_name, &fleet, &stored, &grants, admin) {
        Ok(p) => p,
        Err(d) => {
            refused.extend(d);
            Default::default()
        }
    };
    if !refused.is_empty() {
        return Ok((source, Err(refused)));
    }
    let refused = state
        .config
        .template_urls
        .check_fleet(&source.file_name, &fleet);
    if !refused.is_empty() {
        return Ok((source, Err(refused)));
    }
    state
        .limiter
        .config()
        .check_fleet_containers(&fleet.name, fleet.containers.len())?;
    Ok((source, Ok((fleet, powers))))
}

/// The plan says truthfully what the containers it creates or changes may do to their host, and what allowed it.
fn note_powers(plan: &mut pxfleet_spec::plan::Plan, powers: &crate::grants::Powers) {
    let touched: std::collections::BTreeSet<&str> =
        plan.actions.iter().map(|a| a.container.as_str()).collect();
    let notes: Vec<String> = powers
        .iter()
        .filter(|(c, _)| touched.contains(c.as_str()))
        .map(|(_, note)| note.clone())
        .collect();
    plan.warnings.extend(notes);
}

/// Plans `source` (or its destruction) against the current state, without storing anything.
pub async fn plan(
    state: &Arc<State>,
    source: Source,
    destroy: bool,
    may_change: impl Fn(&str) -> Result<()>,
    caller: &Identity,
) -> Result<Planned> {
    // a plan of the fleet's removal gives no container any power
    let admin = caller.is_admin() || destroy;
    let (source, parsed) = parse_checked(state, source, may_change, admin).await?;
    let (mut fleet, mut powers) = match parsed {
        Ok(f) => f,
        Err(diagnostics) => {
            return Ok(Planned {
                diagnostics,
                ..Default::default()
            })
        }
    };
    if destroy {
        fleet.containers.clear();
        powers.clear();
    }
    let st = state.clone();
    let caller = caller.clone();
    blocking(move || plan_parsed(&st, &caller, &source, fleet, &powers)).await?
}

fn plan_parsed(
    state: &State,
    caller: &Identity,
    source: &Source,
    fleet: Fleet,
    powers: &crate::grants::Powers,
) -> Result<Planned> {
    let name = fleet.name.clone();
    let (snap, prepared) = prepare_now(state, &source.file_name, fleet)?;
    let refused = |diagnostics| Planned {
        fleet: name.clone(),
        base_revision: snap.revision,
        diagnostics,
        ..Default::default()
    };
    Ok(match prepared {
        Ok(mut p) => match source.policy(state, caller, &p)? {
            Ok(policy) => {
                note_powers(&mut p.plan, powers);
                for (container, error) in crate::realise::repairs_not_holding(state, &name)? {
                    p.plan
                        .warnings
                        .push(format!("container {container}: {error}"));
                }
                Planned {
                    fleet: name.clone(),
                    base_revision: snap.revision,
                    plan_json: pxfleet_spec::render::json::render(&p.plan),
                    diagnostics: vec![],
                    has_changes: !p.plan.is_empty(),
                    policy,
                }
            }
            Err(diagnostics) => refused(diagnostics),
        },
        Err(diagnostics) => refused(diagnostics),
    })
}

/// Submits `source`: checks, stores a new revision (unless nothing changed) and runs a reconcile pass.
pub async fn submit(
    state: &Arc<State>,
    author: &Identity,
    source: Source,
    options: SubmitOptions,
    may_change: impl Fn(&str) -> Result<()>,
) -> Result<Submitted> {
    let (source, parsed) = parse_checked(state, source, may_change, author.is_admin()).await?;
    let (fleet, powers) = match parsed {
        Ok(f) => f,
        Err(diagnostics) => {
            return Ok(Submitted {
                diagnostics,
                ..Default::default()
            })
        }
    };
    let fleet_guard = state.fleet_lock(&fleet.name).lock_owned().await;
    let placing = state.placement_lock.clone().lock_owned().await;
    let st = state.clone();
    let author = author.clone();
    blocking(move || {
        let _held = (fleet_guard, placing);
        submit_locked(&st, &author, &source, &options, fleet, &powers)
    })
    .await?
}

/// The submit of the parsed `fleet`, under its fleet's lock and the placement lock.
fn submit_locked(
    state: &State,
    author: &Identity,
    source: &Source,
    options: &SubmitOptions,
    fleet: Fleet,
    powers: &crate::grants::Powers,
) -> Result<Submitted> {
    let name = fleet.name.clone();
    let (snap, prepared) = prepare_now(state, &source.file_name, fleet.clone())?;
    let mut prepared = match prepared {
        Ok(p) => p,
        Err(diagnostics) => {
            return Ok(Submitted {
                fleet: name,
                diagnostics,
                ..Default::default()
            })
        }
    };
    note_powers(&mut prepared.plan, powers);
    // Policies first: a denial stores nothing, so nothing is applied.
    let policy = match source.policy(state, author, &prepared)? {
        Ok(policy) => policy,
        Err(diagnostics) => {
            return Ok(Submitted {
                fleet: name,
                diagnostics,
                ..Default::default()
            })
        }
    };
    if let Some(report) = policy.as_ref().filter(|p| p.denied()) {
        tracing::info!(fleet = %name, "submit refused by policy");
        return Ok(Submitted {
            fleet: name,
            diagnostics: crate::policy::denials(report),
            plan_json: pxfleet_spec::render::json::render(&prepared.plan),
            policy,
            ..Default::default()
        });
    }
    if !options.plan_json.is_empty() {
        check_saved_plan(
            &name,
            &options.plan_json,
            options.expected_revision,
            &snap,
            &prepared,
        )?;
    }
    let expected = options.expected_revision.or(Some(snap.revision));
    if expected.is_some_and(|e| e != snap.revision) {
        return Err(StoreError::RevisionMoved {
            fleet: name,
            expected: expected.unwrap_or_default(),
            actual: snap.revision,
        }
        .into());
    }
    let plan_json = if options.omit_plan {
        String::new()
    } else {
        pxfleet_spec::render::json::render(&prepared.plan)
    };
    if snap.revision > 0
        && !options.retry_failed
        && (prepared.plan.is_empty() || !has_failed(state, &name)?)
        && unchanged(state, &fleet, &prepared, &snap)?
    {
        // Nothing new to record: no revision, no operations. Also when the plan is not empty only because
        // the stored revision is still being applied (a second submit of the same file while the first is in
        // flight finds nothing to add); a fleet with failed containers is retried by a new revision.
        return Ok(Submitted {
            fleet: name,
            revision: snap.revision,
            operations: vec![],
            diagnostics: vec![],
            plan_json,
            policy,
        });
    }
    free_later(snap);
    let revision = store_revision(
        state,
        author,
        fleet,
        prepared,
        expected,
        "submit",
        Some((source.file_name.as_str(), source.text.as_str())),
    )?;
    tracing::info!(fleet = %name, revision, author = %author.uri(), "fleet submitted");
    Ok(Submitted {
        operations: active_ops(state, &name, Some(revision))?,
        fleet: name,
        revision,
        diagnostics: vec![],
        plan_json,
        policy,
    })
}

/// A saved plan is accepted only on the revision it was made on and only when it is what would be done now.
fn check_saved_plan(
    name: &str,
    plan_json: &str,
    expected_revision: Option<u64>,
    snap: &Snapshot,
    prepared: &Prepared,
) -> Result<()> {
    let saved = pxfleet_spec::render::json::parse(plan_json).map_err(|e| {
        Error::InvalidArgument(format!("the saved plan is not a pxfleet plan: {e}"))
    })?;
    if expected_revision.is_some_and(|e| e != snap.revision) {
        return Err(StoreError::RevisionMoved {
            fleet: name.to_string(),
            expected: expected_revision.unwrap_or_default(),
            actual: snap.revision,
        }
        .into());
    }
    if saved.actions != prepared.plan.actions {
        return Err(Error::FailedPrecondition(format!(
            "fleet {name}: the saved plan no longer matches what would be done (something changed since it \
             was made); plan again"
        )));
    }
    Ok(())
}

/// Whether a container of `fleet` is stuck failed (a resubmit of the same file retries it).
fn has_failed(state: &State, fleet: &str) -> Result<bool> {
    Ok(query::container_rows(state)?
        .iter()
        .any(|r| r.fleet == fleet && r.status == ContainerStatus::Failed))
}

/// Whether `prepared` equals what is stored: same placed containers, and no password given that differs.
fn unchanged(state: &State, source: &Fleet, prepared: &Prepared, snap: &Snapshot) -> Result<bool> {
    let name = &prepared.fleet.name;
    let key = |d: &DesiredContainer| {
        (
            d.name.clone(),
            d.node.clone(),
            d.vm_id,
            d.container.clone(),
            d.template.clone(),
        )
    };
    let mut old: Vec<_> = snap
        .desired
        .iter()
        .filter(|d| d.fleet == *name)
        .map(key)
        .collect();
    let mut new: Vec<_> = prepared.desired.iter().map(key).collect();
    old.sort_by(|a, b| a.0.cmp(&b.0));
    new.sort_by(|a, b| a.0.cmp(&b.0));
    let secrets = state.store.secrets(name)?;
    let passwords_same = source.containers.iter().all(|(k, c)| {
        c.password
            .as_ref()
            .is_none_or(|p| secrets.get(k).map(String::as_str) == Some(p.expose()))
    });
    Ok(old == new && passwords_same)
}
