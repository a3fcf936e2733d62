//! The reconciler: level-triggered, per container. [`next_action`] is the pure decision (given desired,
//! applied and observed, what is the one next operation?); [`container_status`] says what `get containers`
//! shows; [`backoff_ms`] paces retries. The driver loop that applies these to the store and dispatches to
//! agents lives in [`crate::driver`].

use std::collections::BTreeMap;

use pxfleet_spec::plan::{ActionKind, FieldChange};
use pxfleet_spec::{Container, Fleet};

use crate::convert;
use crate::model::{
    AppliedContainer, ContainerStatus, DesiredContainer, ObservedContainer, OpState, Operation,
    OperationKind,
};

/// What the reconciler wants done next for one container.
#[derive(Debug, Clone, PartialEq)]
pub struct NextAction {
    pub node: String,
    pub vm_id: u32,
    pub kind: OperationKind,
    /// Why, for the operation listing ("memory 512 -> 1024", "template changed: replace").
    pub reason: String,
}

/// Inputs for one container.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub desired: Option<&'a DesiredContainer>,
    pub applied: Option<&'a AppliedContainer>,
    /// The container carrying this entry's mark, on any node.
    pub observed: Option<&'a ObservedContainer>,
    /// Whether the desired template is available on the desired node (seeded or reported cached).
    pub template_ready: bool,
}

/// Fields whose change needs a new container (destroy, then create).
pub fn replace_reason(applied: &Container, desired: &Container) -> Option<&'static str> {
    if applied.template != desired.template {
        Some("template changed")
    } else if applied.unprivileged != desired.unprivileged {
        Some("unprivileged changed")
    } else if applied.datastore_id != desired.datastore_id {
        Some("datastore_id changed")
    } else {
        None
    }
}

/// What `pct set` must fix on an existing container, as the spec planner's diff finds it: `updates` are fields
/// the file changed since they were applied, `drift` fields that moved away from the applied value on the node
/// (a repair). Values PVE normalises (tag order and case, MAC case, a trailing newline in the description,
/// `cpuunits: 100`) compare equal there, so they never count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Changes {
    pub updates: Vec<FieldChange>,
    pub drift: Vec<FieldChange>,
    /// Disks to grow, from the plan's resize actions: (`rootfs` or `mpN`, new size in GiB).
    pub grow: Vec<(String, u64)>,
    /// The plan's update or repair needs a restart of the running container (it says "(then restarted)").
    pub restart: bool,
}

impl Changes {
    /// No field to set (disks to grow aside).
    pub fn is_empty(&self) -> bool {
        self.updates.is_empty() && self.drift.is_empty()
    }

    /// The plan field names that differ, updates first.
    pub fn fields(&self) -> Vec<String> {
        self.updates
            .iter()
            .chain(&self.drift)
            .map(|c| c.field.clone())
            .collect()
    }

    /// One `field from -> to` text per change; drifted ones start with `drift: `.
    pub fn texts(&self) -> Vec<String> {
        let mut out: Vec<String> = self.updates.iter().map(change_text).collect();
        out.extend(
            self.drift
                .iter()
                .map(|c| format!("drift: {}", change_text(c))),
        );
        out
    }

    /// The operation's reason: `memory 512 -> 1024`, `repair: tags ["a"] -> ["web"], memory 1024 -> 512`, or
    /// both separated by `; `.
    pub fn reason(&self) -> String {
        let join = |v: &[FieldChange]| v.iter().map(change_text).collect::<Vec<_>>().join(", ");
        match (self.updates.is_empty(), self.drift.is_empty()) {
            (_, true) => join(&self.updates),
            (true, false) => format!("repair: {}", join(&self.drift)),
            (false, false) => format!("{}; repair: {}", join(&self.updates), join(&self.drift)),
        }
    }
}

fn change_text(c: &FieldChange) -> String {
    if c.sensitive {
        return format!("{} changed", c.field);
    }
    let show = |v: &Option<serde_json::Value>| {
        let text = match v {
            None => "none".to_string(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
        };
        let text = text.replace('\n', " ");
        if text.chars().count() > 48 {
            format!("{}...", text.chars().take(45).collect::<String>())
        } else {
            text
        }
    };
    format!("{} {} -> {}", c.field, show(&c.from), show(&c.to))
}

/// The differences `pct set` can fix between desired `d` and observation `o`, found by the spec planner
/// ([`pxfleet_spec::plan::plan`]) on this one container. `applied` counts only when it is the same container
/// (node and vm_id). What the reconciler decides itself is left out of the comparison: replacement (template,
/// unprivileged, datastore), moves, power and locks. Disks to grow come from the plan's resize actions.
pub fn changes(
    d: &DesiredContainer,
    applied: Option<&AppliedContainer>,
    o: &ObservedContainer,
) -> Changes {
    let applied = applied.filter(|a| a.node == o.node && a.vm_id == o.vm_id);
    let mut want = d.container.clone();
    want.node = Some(d.node.clone());
    want.vm_id = Some(d.vm_id);
    want.password = None;
    let fleet_of = |c: Container| Fleet {
        name: d.fleet.clone(),
        allow_privileged: true,
        templates: BTreeMap::new(),
        containers: [(d.name.clone(), c)].into(),
        hooks: vec![],
        spans: Default::default(),
    };
    let fallback = applied.map(|a| &a.container).unwrap_or(&d.container);
    let Some(mut obs) = convert::spec_observed(&d.fleet, &d.name, o, Some(fallback)) else {
        return Changes::default();
    };
    obs.node = d.node.clone();
    obs.vm_id = d.vm_id;
    obs.lock = None;
    let oc = &mut obs.config;
    oc.template = Some(want.template.clone());
    oc.unprivileged = want.unprivileged;
    if want.datastore_id.is_some() {
        oc.datastore_id = want.datastore_id.clone();
    }
    let applied_fleet = applied.map(|a| {
        fleet_of(Container {
            password: None,
            ..a.container.clone()
        })
    });
    let plan = match pxfleet_spec::plan::plan(&fleet_of(want), applied_fleet.as_ref(), &[obs]) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(fleet = %d.fleet, container = %d.name, error = %e, "drift check refused");
            return Changes::default();
        }
    };
    let mut out = Changes::default();
    for a in plan.actions {
        match a.kind {
            ActionKind::Update {
                changes,
                restart_required,
            } => {
                out.updates.extend(changes);
                out.restart |= restart_required;
            }
            ActionKind::Repair {
                drift,
                restart_required,
            } => {
                out.drift.extend(drift);
                out.restart |= restart_required;
            }
            ActionKind::Resize { disk, to_gib, .. } => out.grow.push((disk, to_gib.ceil() as u64)),
            _ => {}
        }
    }
    out
}

/// Where a container the file does not pin to a node is adopted: found on another node than desired (moved by
/// hand) under its vm_id, on a node its `constraints.nodes` allow. Such a container is never destroyed and
/// recreated by the reconciler on its own (no submit planned it); the desired node follows it.
pub fn adopt_node<'a>(d: &DesiredContainer, o: &'a ObservedContainer) -> Option<&'a str> {
    let allowed =
        d.container.constraints.nodes.is_empty() || d.container.constraints.nodes.contains(&o.node);
    (!d.node_pinned && o.node != d.node && o.vm_id == d.vm_id && o.lock.is_none() && allowed)
        .then_some(o.node.as_str())
}

/// The one next operation for a container, or None when it is as desired (or must wait: a locked container).
pub fn next_action(v: View<'_>) -> Option<NextAction> {
    let destroy = |o: &ObservedContainer, reason: String| NextAction {
        node: o.node.clone(),
        vm_id: o.vm_id,
        kind: OperationKind::Destroy,
        reason,
    };
    let Some(d) = v.desired else {
        return v.observed.map(|o| destroy(o, "left the fleet".into()));
    };
    let Some(o) = v.observed else {
        if !v.template_ready {
            return Some(NextAction {
                node: d.node.clone(),
                vm_id: 0,
                kind: OperationKind::SeedTemplate {
                    name: d.container.template.clone(),
                    template: d.template.clone(),
                },
                reason: format!("template {} needed on {}", d.container.template, d.node),
            });
        }
        return Some(NextAction {
            node: d.node.clone(),
            vm_id: d.vm_id,
            kind: OperationKind::Create {
                container: Box::new(d.container.clone()),
                template: d.template.clone(),
            },
            reason: if v.applied.is_some() {
                "missing: recreate".into()
            } else {
                "new".into()
            },
        });
    };
    if o.node != d.node {
        if o.lock.is_some() {
            return None;
        }
        // The plan's move: `pct migrate`, the container keeps its vm_id, MACs and data.
        return Some(NextAction {
            node: o.node.clone(),
            vm_id: o.vm_id,
            kind: OperationKind::Migrate {
                target: d.node.clone(),
                restart: o.running,
            },
            reason: format!("moves from {} to {}", o.node, d.node),
        });
    }
    if o.vm_id != d.vm_id {
        return Some(destroy(
            o,
            format!("vm_id {} -> {}: replace", o.vm_id, d.vm_id),
        ));
    }
    if o.lock.is_some() {
        return None;
    }
    let applied = v.applied.filter(|a| a.node == o.node && a.vm_id == o.vm_id);
    if let Some(a) = applied {
        if let Some(why) = replace_reason(&a.container, &d.container) {
            return Some(destroy(o, format!("{why}: replace")));
        }
        if a.template != d.template && a.container.template == d.container.template {
            return Some(destroy(o, "template source changed: replace".into()));
        }
    }
    let at = |kind| NextAction {
        node: d.node.clone(),
        vm_id: d.vm_id,
        kind,
        reason: String::new(),
    };
    let ch = changes(d, applied, o);
    if let Some((disk, gib)) = ch.grow.first() {
        let what = if disk == "rootfs" {
            "disk_size".to_string()
        } else {
            disk.clone()
        };
        return Some(NextAction {
            reason: format!("{what} -> {gib} GiB"),
            ..at(OperationKind::Resize {
                disk: disk.clone(),
                disk_gib: *gib,
            })
        });
    }
    if !ch.is_empty() {
        return Some(NextAction {
            reason: ch.reason(),
            ..at(OperationKind::Update {
                container: Box::new(d.container.clone()),
                template: d.template.clone(),
                fields: ch.fields(),
                restart: ch.restart,
            })
        });
    }
    let want_running = d.container.state.is_running();
    if !o.running && want_running {
        return Some(NextAction {
            reason: "stopped: start".into(),
            ..at(OperationKind::Start)
        });
    }
    if o.running && !want_running {
        return Some(NextAction {
            reason: "state stopped: stop".into(),
            ..at(OperationKind::Stop)
        });
    }
    None
}

/// What `get containers` shows, from the container's latest operation (if any) and what is observed.
/// `max_attempts` decides when a failed operation leaves the container `failed` rather than retrying.
pub fn container_status(
    latest_op: Option<&Operation>,
    observed: Option<&ObservedContainer>,
    max_attempts: u32,
) -> ContainerStatus {
    if let Some(op) = latest_op {
        if op.state.is_active() {
            return match op.kind {
                OperationKind::SeedTemplate { .. } | OperationKind::Create { .. } => {
                    ContainerStatus::Creating
                }
                OperationKind::Destroy => ContainerStatus::Destroying,
                _ => ContainerStatus::Updating,
            };
        }
        if op.state == OpState::Failed && op.attempt >= max_attempts {
            return ContainerStatus::Failed;
        }
    }
    match observed {
        Some(o) if o.lock.is_some() => ContainerStatus::Updating,
        Some(o) if o.running => ContainerStatus::Running,
        Some(_) => ContainerStatus::Stopped,
        None => ContainerStatus::Pending,
    }
}

/// Retry delay before attempt `attempt` (2 = first retry): base * 2^(attempt-2), capped, with +-25% jitter
/// taken from `jitter` in [0, 1).
pub fn backoff_ms(attempt: u32, base_ms: u64, max_ms: u64, jitter: f64) -> u64 {
    let exp = attempt.saturating_sub(2).min(20);
    let raw = base_ms.saturating_mul(1u64 << exp).min(max_ms);
    let factor = 0.75 + 0.5 * jitter.clamp(0.0, 1.0);
    (raw as f64 * factor) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{container, template};

    fn desired() -> DesiredContainer {
        let mut c = container("web");
        c.node = Some("n1".into());
        c.vm_id = Some(1000);
        DesiredContainer {
            fleet: "dev".into(),
            name: "web".into(),
            node: "n1".into(),
            vm_id: 1000,
            container: c,
            template: template(),
            revision: 1,
            node_pinned: true,
        }
    }

    fn applied(d: &DesiredContainer) -> AppliedContainer {
        AppliedContainer {
            fleet: d.fleet.clone(),
            name: d.name.clone(),
            node: d.node.clone(),
            vm_id: d.vm_id,
            container: d.container.clone(),
            template: d.template.clone(),
        }
    }

    fn observed(d: &DesiredContainer) -> ObservedContainer {
        ObservedContainer {
            node: d.node.clone(),
            vm_id: d.vm_id,
            hostname: d.container.hostname.clone(),
            running: true,
            managed: None,
            cores: d.container.cores,
            memory_mib: d.container.memory,
            swap_mib: d.container.swap,
            disk_gib: d.container.disk_size,
            ..ObservedContainer::default()
        }
    }

    fn kind(v: View<'_>) -> Option<&'static str> {
        next_action(v).map(|a| a.kind.name())
    }

    #[test]
    fn next_operation_table() {
        let d = desired();
        let a = applied(&d);
        let o = observed(&d);
        let view = |desired, applied, observed, template_ready| View {
            desired,
            applied,
            observed,
            template_ready,
        };
        // new container: seed the template first, then create
        assert_eq!(
            kind(view(Some(&d), None, None, false)),
            Some("seed_template")
        );
        assert_eq!(kind(view(Some(&d), None, None, true)), Some("create"));
        // as desired: nothing
        assert_eq!(kind(view(Some(&d), Some(&a), Some(&o), true)), None);
        // stopped by hand: start
        let stopped = ObservedContainer {
            running: false,
            ..o.clone()
        };
        assert_eq!(
            kind(view(Some(&d), Some(&a), Some(&stopped), true)),
            Some("start")
        );
        // deleted by hand: recreate
        let act = next_action(view(Some(&d), Some(&a), None, true)).unwrap();
        assert_eq!(
            (act.kind.name(), act.reason.as_str()),
            ("create", "missing: recreate")
        );
        // memory changed: update in place, reason says what
        let mut d2 = d.clone();
        d2.container.memory = 1024;
        let act = next_action(view(Some(&d2), Some(&a), Some(&o), true)).unwrap();
        assert_eq!(
            (act.kind.name(), act.reason.as_str()),
            ("update", "memory 512 -> 1024")
        );
        // tags changed (not observed in detail): update, from the applied record
        let mut d3 = d.clone();
        d3.container.tags = vec!["web".into()];
        assert_eq!(
            kind(view(Some(&d3), Some(&a), Some(&o), true)),
            Some("update")
        );
        // disk grew: resize
        let mut d4 = d.clone();
        d4.container.disk_size = 8;
        assert_eq!(
            kind(view(Some(&d4), Some(&a), Some(&o), true)),
            Some("resize")
        );
        // template changed: destroy (the create follows once it is gone)
        let mut d5 = d.clone();
        d5.container.template = "debian".into();
        let act = next_action(view(Some(&d5), Some(&a), Some(&o), true)).unwrap();
        assert_eq!(
            (act.kind.name(), act.reason.as_str()),
            ("destroy", "template changed: replace")
        );
        // moved to another node: migrated from the old one (restarted: it runs), not replaced
        let mut d6 = d.clone();
        d6.node = "n2".into();
        let act = next_action(view(Some(&d6), Some(&a), Some(&o), true)).unwrap();
        assert_eq!(act.node, "n1");
        assert_eq!(
            act.kind,
            OperationKind::Migrate {
                target: "n2".into(),
                restart: true
            }
        );
        let act = next_action(view(Some(&d6), Some(&a), Some(&stopped), true)).unwrap();
        assert_eq!(
            act.kind,
            OperationKind::Migrate {
                target: "n2".into(),
                restart: false
            }
        );
        // left the fleet: destroy
        assert_eq!(kind(view(None, Some(&a), Some(&o), true)), Some("destroy"));
        // left the fleet and already gone: nothing
        assert_eq!(kind(view(None, Some(&a), None, true)), None);
        // locked (mid-create on the node): wait
        let locked = ObservedContainer {
            lock: Some("create".into()),
            ..o.clone()
        };
        assert_eq!(kind(view(Some(&d2), Some(&a), Some(&locked), true)), None);
    }

    #[test]
    fn a_container_moved_by_hand_is_adopted_only_when_the_file_does_not_pin_its_node() {
        let mut d = desired();
        let moved = ObservedContainer {
            node: "n2".into(),
            ..observed(&d)
        };
        // pinned by the file: not adopted (the reconciler's own move applies)
        assert_eq!(adopt_node(&d, &moved), None);
        d.node_pinned = false;
        assert_eq!(adopt_node(&d, &moved), Some("n2"));
        // where it should be, or another vm_id, or a node the constraints exclude: not adopted
        assert_eq!(adopt_node(&d, &observed(&d)), None);
        let other = ObservedContainer {
            vm_id: 1001,
            ..moved.clone()
        };
        assert_eq!(adopt_node(&d, &other), None);
        d.container.constraints.nodes = vec!["n1".into(), "n3".into()];
        assert_eq!(adopt_node(&d, &moved), None);
    }

    #[test]
    fn status_from_op_and_observation() {
        let d = desired();
        let o = observed(&d);
        let op = |kind, state, attempt| Operation {
            id: "x".into(),
            fleet: "dev".into(),
            container: "web".into(),
            node: "n1".into(),
            vm_id: 1000,
            kind,
            attempt,
            state,
            created_ms: 0,
            not_before_ms: 0,
            dispatched_ms: None,
            dispatched_conn: 0,
            deadline_ms: None,
            finished_ms: None,
            last_error: None,
            revision: 1,
            reason: String::new(),
        };
        assert_eq!(container_status(None, None, 3), ContainerStatus::Pending);
        assert_eq!(
            container_status(None, Some(&o), 3),
            ContainerStatus::Running
        );
        let create = OperationKind::Create {
            container: Box::new(d.container.clone()),
            template: template(),
        };
        assert_eq!(
            container_status(Some(&op(create.clone(), OpState::Dispatched, 1)), None, 3),
            ContainerStatus::Creating
        );
        assert_eq!(
            container_status(
                Some(&op(OperationKind::Destroy, OpState::Pending, 1)),
                Some(&o),
                3
            ),
            ContainerStatus::Destroying
        );
        // failed but retries left: shown by observation; exhausted: failed
        assert_eq!(
            container_status(Some(&op(create.clone(), OpState::Failed, 2)), None, 3),
            ContainerStatus::Pending
        );
        assert_eq!(
            container_status(Some(&op(create, OpState::Failed, 3)), None, 3),
            ContainerStatus::Failed
        );
        let stopped = ObservedContainer {
            running: false,
            ..o
        };
        assert_eq!(
            container_status(None, Some(&stopped), 3),
            ContainerStatus::Stopped
        );
    }

    #[test]
    fn backoff_doubles_with_cap_and_jitter() {
        assert_eq!(backoff_ms(2, 1000, 60_000, 0.5), 1000);
        assert_eq!(backoff_ms(3, 1000, 60_000, 0.5), 2000);
        assert_eq!(backoff_ms(4, 1000, 60_000, 0.0), 3000);
        assert_eq!(backoff_ms(30, 1000, 60_000, 0.5), 60_000);
        assert!(backoff_ms(3, 1000, 60_000, 0.99) < 2500);
    }
}
