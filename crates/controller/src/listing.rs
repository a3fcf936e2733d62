//! What pxctl reads: fleets with their container counts, containers (one row each, desired joined with
//! observed), one container described (operations, drift, hook results), operations, history and outputs
//! (passwords only when asked for, and then audited). Controller types only; the gRPC handlers in
//! [`crate::grpc::fleet_service`] turn them into answers.

use std::collections::BTreeMap;

use pxfleet_tls::Identity;

use crate::error::{Error, Result};
use crate::hooks::HookResult;
use crate::model::{AuditEntry, FleetRecord, Operation, Revision};
use crate::query::{self, ContainerRow};
use crate::state::State;

/// A fleet and how many of its containers are in each state.
#[derive(Debug, Clone)]
pub struct FleetView {
    pub record: FleetRecord,
    pub container_count: u32,
    /// Container state (as `get containers` words it) to count.
    pub states: BTreeMap<String, u32>,
}

/// Every fleet.
pub fn fleets(state: &State) -> Result<Vec<FleetView>> {
    let rows = query::container_rows(state)?;
    Ok(state
        .store
        .fleets()?
        .into_iter()
        .map(|f| {
            let mine: Vec<&ContainerRow> = rows
                .iter()
                .filter(|r| r.fleet == f.name && r.desired.is_some())
                .collect();
            let mut states: BTreeMap<String, u32> = BTreeMap::new();
            for r in &mine {
                *states.entry(r.status.as_str().into()).or_default() += 1;
            }
            FleetView {
                container_count: mine.len() as u32,
                states,
                record: f,
            }
        })
        .collect())
}

/// The containers of `fleet` on `node` (either empty: all).
pub fn containers(state: &State, fleet: &str, node: &str) -> Result<Vec<ContainerRow>> {
    Ok(query::container_rows(state)?
        .into_iter()
        .filter(|row| fleet.is_empty() || row.fleet == fleet)
        .filter(|row| node.is_empty() || row.node() == node)
        .collect())
}

/// One container in full.
#[derive(Debug, Clone)]
pub struct Description {
    pub row: ContainerRow,
    /// Every operation kept for it.
    pub operations: Vec<Operation>,
    /// What differs between desired and observed, in words.
    pub drift: Vec<String>,
    pub hooks: Vec<HookResult>,
}

/// Container `name` of `fleet`.
pub fn describe(state: &State, fleet: &str, name: &str) -> Result<Description> {
    let row = query::container_rows(state)?
        .into_iter()
        .find(|row| row.fleet == fleet && row.name == name)
        .ok_or_else(|| Error::NotFound(format!("fleet {fleet} has no container {name}")))?;
    let operations = state
        .store
        .ops()?
        .into_iter()
        .filter(|o| o.fleet == fleet && o.container == name)
        .collect();
    let drift = match (row.desired.as_deref(), row.observed.as_deref()) {
        (Some(d), Some(o)) => {
            let applied = state.store.applied(fleet, name)?;
            crate::realise::change_texts(&crate::realise::View {
                desired: Some(d),
                applied: applied.as_ref(),
                observed: Some(o),
                template_ready: true,
                nodes: &crate::realise::NO_NODES,
            })
        }
        _ => vec![],
    };
    Ok(Description {
        operations,
        drift,
        hooks: crate::hooks::results(state, fleet, name)?,
        row,
    })
}

/// Operations of `fleet` on `node` (either empty: all), only active ones if asked, the newest `limit`
/// (200 when 0), oldest first.
pub fn operations(
    state: &State,
    fleet: &str,
    node: &str,
    active_only: bool,
    limit: u32,
) -> Result<Vec<Operation>> {
    let mut ops: Vec<Operation> = state
        .store
        .ops()?
        .into_iter()
        .filter(|o| fleet.is_empty() || o.fleet == fleet)
        .filter(|o| node.is_empty() || o.node == node)
        .filter(|o| !active_only || o.state.is_active())
        .collect();
    let limit = if limit == 0 { 200 } else { limit as usize };
    if ops.len() > limit {
        ops.drain(..ops.len() - limit);
    }
    Ok(ops)
}

/// Operation `op_id` when it exists and matches `fleet` and `node` (each empty: any).
pub fn operation(state: &State, fleet: &str, node: &str, op_id: &str) -> Result<Vec<Operation>> {
    Ok(state
        .store
        .op(op_id)?
        .filter(|o| (fleet.is_empty() || o.fleet == fleet) && (node.is_empty() || o.node == node))
        .into_iter()
        .collect())
}

/// The revisions of `fleet`, newest first, at most `limit` (all when 0).
pub fn history(state: &State, fleet: &str, limit: u32) -> Result<Vec<Revision>> {
    let mut revisions: Vec<Revision> = state.store.revisions(fleet)?.into_iter().rev().collect();
    if limit > 0 {
        revisions.truncate(limit as usize);
    }
    Ok(revisions)
}

/// One container of `pxctl output`.
#[derive(Debug, Clone)]
pub struct ContainerOutput {
    pub name: String,
    pub vm_id: u32,
    pub node: String,
    pub hostname: String,
    pub addresses: Vec<String>,
    /// Only when asked for.
    pub password: Option<String>,
    pub has_password: bool,
    /// `(disk, path, volume id, size in GiB)`: rootfs, then the mount points with a storage volume.
    pub volumes: Vec<(String, String, String, f64)>,
}

/// A fleet's outputs at its head revision.
#[derive(Debug, Clone)]
pub struct Output {
    pub fleet: String,
    pub revision: u64,
    pub containers: Vec<ContainerOutput>,
}

/// A container's volumes as its node reported them: the root disk, then each mount point on a storage volume.
fn volumes(c: &pxfleet_spec::observed::ObservedConfig) -> Vec<(String, String, String, f64)> {
    let mut out = Vec::new();
    if let Some(v) = &c.rootfs_volume {
        out.push(("rootfs".into(), "/".into(), v.clone(), c.disk_size_gib));
    }
    for m in &c.mount_points {
        if let Some(v) = &m.volume {
            out.push((
                format!("mp{}", m.slot),
                m.mount.path().to_string(),
                v.clone(),
                m.size_gib.unwrap_or(0.0),
            ));
        }
    }
    out
}

/// The outputs of `fleet`; with `show_sensitive` the passwords too, and the read is audited.
pub fn output(
    state: &State,
    by: Option<&Identity>,
    fleet: &str,
    show_sensitive: bool,
) -> Result<Output> {
    let head = state
        .store
        .fleet(fleet)?
        .ok_or_else(|| Error::NotFound(format!("no fleet {fleet}")))?;
    let secrets = state.store.secrets(fleet)?;
    if show_sensitive {
        state.store.audit(&AuditEntry {
            time_ms: state.now_ms(),
            actor: by.map(|i| i.uri()).unwrap_or_default(),
            action: "output_sensitive".into(),
            target: fleet.to_string(),
            detail: String::new(),
        })?;
    }
    let containers = query::container_rows(state)?
        .iter()
        .filter(|row| row.fleet == fleet && row.desired.is_some())
        .map(|row| {
            let pw = secrets.get(&row.name);
            ContainerOutput {
                name: row.name.clone(),
                vm_id: row.vm_id(),
                node: row.node(),
                hostname: row
                    .desired
                    .as_ref()
                    .map(|d| d.container.hostname.clone())
                    .unwrap_or_default(),
                addresses: row
                    .observed
                    .as_ref()
                    .map(|o| o.addresses.clone())
                    .unwrap_or_default(),
                password: pw.filter(|_| show_sensitive).cloned(),
                has_password: pw.is_some(),
                volumes: row
                    .observed
                    .as_ref()
                    .and_then(|o| o.config.as_ref())
                    .map(volumes)
                    .unwrap_or_default(),
            }
        })
        .collect();
    Ok(Output {
        fleet: fleet.to_string(),
        revision: head.revision,
        containers,
    })
}
