//! The read model: everything a reconcile pass looks at ([`World`], loaded from the store's decoded cache) and
//! the rows of `get containers` ([`ContainerRow`], [`container_rows`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use pxfleet_spec::TemplateSource;

use crate::model::{
    AppliedContainer, ContainerStatus, DesiredContainer, ManagedBy, ObservedContainer, OpState,
    Operation,
};
use crate::reconcile::decide::container_status;
use crate::state::State;
use crate::store::StoreError;

/// One row of `get containers`. The records are shared with the store's decoded cache: `GetContainers` builds
/// 10,000 rows at a time (the benchmark polls it four times a second), and copying each container's spec,
/// observation and operation into them was a sixth of the controller's CPU.
#[derive(Debug, Clone)]
pub struct ContainerRow {
    pub fleet: String,
    pub name: String,
    pub desired: Option<Arc<DesiredContainer>>,
    pub observed: Option<Arc<ObservedContainer>>,
    pub latest_op: Option<Arc<Operation>>,
    pub status: ContainerStatus,
    /// Fields on the node moved away from what was applied (a repair is due); see
    /// [`crate::realise::drifted`].
    pub drifted: bool,
    /// Fields its last update left pending until the next restart (`restart_policy: never`); see
    /// [`crate::realise::pending_restart`].
    pub pending_restart: Vec<String>,
    /// Not created yet because its clone source is not ready (see [`World::clone_source_wait`]).
    pub waiting: Option<String>,
}

impl ContainerRow {
    pub fn node(&self) -> String {
        self.desired
            .as_ref()
            .map(|d| d.node.clone())
            .or_else(|| self.observed.as_ref().map(|o| o.node.clone()))
            .unwrap_or_default()
    }
    pub fn vm_id(&self) -> u32 {
        self.desired
            .as_ref()
            .map(|d| d.vm_id)
            .or_else(|| self.observed.as_ref().map(|o| o.vm_id))
            .unwrap_or(0)
    }
    /// The error of the latest operation, when it failed.
    pub fn error(&self) -> Option<String> {
        self.latest_op
            .as_ref()
            .filter(|o| o.state == OpState::Failed)
            .and_then(|o| o.last_error.clone())
    }
}

pub(crate) type Key = (String, String);

/// Everything a pass looks at, shared with the store's decoded cache (nothing is copied to build it).
pub(crate) struct World {
    pub(crate) desired: BTreeMap<Key, Arc<DesiredContainer>>,
    pub(crate) applied: BTreeMap<Key, Arc<AppliedContainer>>,
    pub(crate) observed: BTreeMap<Key, Vec<Arc<ObservedContainer>>>,
    pub(crate) latest: BTreeMap<Key, Arc<Operation>>,
    pub(crate) ops: Vec<Arc<Operation>>,
    pub(crate) keys: BTreeSet<Key>,
}

impl World {
    pub(crate) fn desired(&self, k: &Key) -> Option<&DesiredContainer> {
        self.desired.get(k).map(|d| &**d)
    }
    pub(crate) fn applied(&self, k: &Key) -> Option<&AppliedContainer> {
        self.applied.get(k).map(|a| &**a)
    }
    pub(crate) fn observed(&self, k: &Key) -> Option<&[Arc<ObservedContainer>]> {
        self.observed.get(k).map(|v| v.as_slice())
    }
    pub(crate) fn latest(&self, k: &Key) -> Option<&Operation> {
        self.latest.get(k).map(|o| &**o)
    }

    /// The desired containers that are the source of some container's `clone:` template (fleet.yaml `state:
    /// template` next to the containers cloned from it), by node and vm_id; empty when no template clones one.
    pub(crate) fn clone_sources(&self) -> HashMap<(&str, u32), &Key> {
        let wanted: HashSet<(&str, u32)> = self
            .desired
            .values()
            .filter_map(|d| match &d.template.source {
                TemplateSource::Clone { vm_id, node, .. } => Some((node.as_str(), *vm_id)),
                _ => None,
            })
            .collect();
        if wanted.is_empty() {
            return HashMap::new();
        }
        self.desired
            .iter()
            .filter(|(_, d)| wanted.contains(&(d.node.as_str(), d.vm_id)))
            .map(|(k, d)| ((d.node.as_str(), d.vm_id), k))
            .collect()
    }

    /// Why container `d` (not created yet) cannot be cloned now: its `clone:` template copies a container another
    /// entry of the controller is to make (`sources`: [`World::clone_sources`]), which is not there yet as it must
    /// be: created, unlocked, and a template when its file says `state: template`. `None`: it may be cloned (also
    /// when the source is no desired container: `pct clone` finds it or says it is missing).
    pub(crate) fn clone_source_wait(
        &self,
        d: &DesiredContainer,
        sources: &HashMap<(&str, u32), &Key>,
    ) -> Option<String> {
        let TemplateSource::Clone { vm_id, node, .. } = &d.template.source else {
            return None;
        };
        let key = *sources.get(&(node.as_str(), *vm_id))?;
        let src = self.desired(key)?;
        let what = format!(
            "waiting for clone source {}/{} (CT {vm_id} on {node})",
            key.0, key.1
        );
        let o = self
            .observed(key)
            .and_then(|l| l.iter().find(|o| o.node == *node && o.vm_id == *vm_id));
        match o {
            None => Some(format!("{what}: not created yet")),
            Some(o) if o.lock.is_some() => Some(format!(
                "{what}: locked ({})",
                o.lock.as_deref().unwrap_or_default()
            )),
            Some(o)
                if src.container.state.is_template()
                    && !o.config.as_ref().is_some_and(|c| c.is_template) =>
            {
                Some(format!("{what}: not a template yet"))
            }
            Some(_) => None,
        }
    }

    /// `d` as the reconciler works towards it: each `volume_of` mount point resolved to the volume its source (a
    /// container of the same fleet, on the same node) has there, as the node reports it, and for a clone the file
    /// gives no mount points, the storage volumes `pct clone` copied for it (its own, named for its vm_id) kept as
    /// the existing volumes they are. `Err(why)` while a `volume_of` is not known (the container waits, and `pxctl
    /// get` says why). Borrowed when nothing changes.
    pub(crate) fn volumes_resolved<'a>(
        &self,
        d: &'a DesiredContainer,
    ) -> Result<std::borrow::Cow<'a, DesiredContainer>, String> {
        use pxfleet_spec::MountPoint;
        let mounts = &d.container.mount_points;
        if mounts.is_empty() && d.template.source.is_clone() {
            let kept: Vec<MountPoint> = self
                .observed(&(d.fleet.clone(), d.name.clone()))
                .and_then(|l| l.iter().find(|o| o.node == d.node && o.vm_id == d.vm_id))
                .and_then(|o| o.config.as_ref())
                .map(|cfg| {
                    cfg.mount_points
                        .iter()
                        .filter(|m| {
                            m.volume.as_deref().and_then(pxfleet_spec::volume_owner)
                                == Some(d.vm_id)
                        })
                        .filter_map(|m| m.as_existing())
                        .collect()
                })
                .unwrap_or_default();
            if kept.is_empty() {
                return Ok(std::borrow::Cow::Borrowed(d));
            }
            let mut owned = d.clone();
            owned.container.mount_points = kept;
            return Ok(std::borrow::Cow::Owned(owned));
        }
        if !mounts
            .iter()
            .any(|m| matches!(m, MountPoint::VolumeOf { .. }))
        {
            return Ok(std::borrow::Cow::Borrowed(d));
        }
        let source_on_node = |source: &str| {
            self.observed(&(d.fleet.clone(), source.to_string()))
                .and_then(|l| l.iter().find(|o| o.node == d.node))
        };
        let mounts = pxfleet_spec::resolve_volumes(mounts, |source, path| {
            crate::planning::volumes::volume_at(source_on_node(source)?, path)
        })
        .map_err(|(source, path)| {
            let why = match source_on_node(&source) {
                None => "not created yet",
                Some(o) if o.config.is_none() => "its configuration not reported yet",
                Some(_) => "no volume mounted there",
            };
            format!("waiting for the volume of {source} at {path}: {why}")
        })?;
        let mut owned = d.clone();
        owned.container.mount_points = mounts;
        Ok(std::borrow::Cow::Owned(owned))
    }
}

pub(crate) fn load(state: &State) -> Result<World, StoreError> {
    let store = &state.store;
    let fleets: BTreeSet<String> = store.fleets()?.into_iter().map(|f| f.name).collect();
    let desired: BTreeMap<Key, Arc<DesiredContainer>> = store
        .all_desired_shared()?
        .into_iter()
        .map(|d| ((d.fleet.clone(), d.name.clone()), d))
        .collect();
    let applied: BTreeMap<Key, Arc<AppliedContainer>> = store
        .all_applied_shared()?
        .into_iter()
        .map(|a| ((a.fleet.clone(), a.name.clone()), a))
        .collect();
    let mut observed: BTreeMap<Key, Vec<Arc<ObservedContainer>>> = BTreeMap::new();
    for o in store.all_observed_shared()? {
        if let Some(ManagedBy { fleet, name }) = &o.managed {
            if fleets.contains(fleet) {
                observed
                    .entry((fleet.clone(), name.clone()))
                    .or_default()
                    .push(o);
            }
        }
    }
    if desired.values().any(|d| d.container.adopt) {
        let all: Vec<ObservedContainer> = store
            .all_observed_shared()?
            .iter()
            .map(|o| (**o).clone())
            .collect();
        for (k, o) in crate::adopt::targets_of(desired.values().map(|d| &**d), all) {
            observed.entry(k).or_insert_with(|| vec![Arc::new(o)]);
        }
    }
    let ops = store.ops_shared()?;
    let mut latest: BTreeMap<Key, Arc<Operation>> = BTreeMap::new();
    for op in &ops {
        // a finished snapshot is not what the container's state follows from (OperationKind::is_aside)
        if !op.container.is_empty() && (!op.kind.is_aside() || op.state.is_active()) {
            latest.insert((op.fleet.clone(), op.container.clone()), op.clone());
        }
    }
    let keys = desired
        .keys()
        .chain(applied.keys())
        .chain(observed.keys())
        .cloned()
        .collect();
    Ok(World {
        desired,
        applied,
        observed,
        latest,
        ops,
        keys,
    })
}

/// The observed container for an entry: the one where desired (or applied) says it is, else any.
pub(crate) fn pick<'a>(
    list: Option<&'a [Arc<ObservedContainer>]>,
    d: Option<&DesiredContainer>,
    a: Option<&AppliedContainer>,
) -> Option<&'a ObservedContainer> {
    pick_shared(list, d, a).map(|o| &**o)
}

/// [`pick`], shared.
fn pick_shared<'a>(
    list: Option<&'a [Arc<ObservedContainer>]>,
    d: Option<&DesiredContainer>,
    a: Option<&AppliedContainer>,
) -> Option<&'a Arc<ObservedContainer>> {
    let list = list?;
    let at = |node: &str, vm_id: u32| list.iter().find(|o| o.node == node && o.vm_id == vm_id);
    d.and_then(|d| at(&d.node, d.vm_id))
        .or_else(|| a.and_then(|a| at(&a.node, a.vm_id)))
        .or_else(|| list.first())
}

/// Every managed container with its status, sorted by fleet and name.
pub fn container_rows(state: &State) -> Result<Vec<ContainerRow>, StoreError> {
    let w = load(state)?;
    let max = state.config.reconciler.max_attempts;
    let sources = w.clone_sources();
    Ok(w.keys
        .iter()
        .map(|k| {
            let d = w.desired(k);
            let o = pick_shared(w.observed(k), d, w.applied(k)).cloned();
            let latest = w.latest.get(k).cloned();
            let drifted = match (d.map(|d| w.volumes_resolved(d)), o.as_deref()) {
                (Some(Ok(d)), Some(o))
                    if o.lock.is_none() && o.node == d.node && o.vm_id == d.vm_id =>
                {
                    crate::realise::drifted(&d, w.applied(k), o)
                }
                _ => false,
            };
            let waiting = match (d, &o) {
                (Some(d), None) if !sources.is_empty() => w.clone_source_wait(d, &sources),
                _ => None,
            }
            .or_else(|| d.and_then(|d| w.volumes_resolved(d).err()));
            ContainerRow {
                waiting,
                drifted,
                pending_restart: crate::realise::pending_restart(latest.as_deref()),
                fleet: k.0.clone(),
                name: k.1.clone(),
                desired: w.desired.get(k).cloned(),
                // A failure of an older revision is being retried by the newer one: not failed (any more).
                status: container_status(
                    latest.as_deref().filter(|l| {
                        l.state != OpState::Failed || d.is_none_or(|d| l.revision >= d.revision)
                    }),
                    o.as_deref(),
                    max,
                ),
                observed: o,
                latest_op: latest,
            }
        })
        .collect())
}
