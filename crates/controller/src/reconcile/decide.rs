//! The reconciler's small decisions around the planner's: [`adopt_node`] (a container moved by hand that the file
//! does not pin is adopted where it is), [`container_status`] (what `get containers` shows) and [`backoff_ms`]
//! (retry pacing). The one next operation for a container is the planner's first action, mapped by
//! [`crate::realise::next_operation`]; the loop that applies these to the store and dispatches to agents is the
//! rest of [`crate::reconcile`].

use crate::model::{
    ContainerStatus, DesiredContainer, ObservedContainer, OpState, Operation, OperationKind,
};

/// Where a container the file does not pin to a node is adopted: found on another node than desired (moved by
/// hand) under its vm_id, on a node its `constraints.nodes` allow. Such a container is never destroyed and
/// recreated by the reconciler on its own (no submit planned it); the desired node follows it.
pub fn adopt_node<'a>(d: &DesiredContainer, o: &'a ObservedContainer) -> Option<&'a str> {
    let allowed =
        d.container.constraints.nodes.is_empty() || d.container.constraints.nodes.contains(&o.node);
    (!d.node_pinned && o.node != d.node && o.vm_id == d.vm_id && o.lock.is_none() && allowed)
        .then_some(o.node.as_str())
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
        // A create the agent failed after it made the container (e.g. `wait_for_ip`'s address never came) is not
        // retried (the container exists); unless a start follows, it stays what it was: failed, with its error.
        // One whose deadline passed without a result may have been done by the agent: shown by observation.
        if op.state == OpState::Failed
            && matches!(op.kind, OperationKind::Create { .. })
            && observed.is_some_and(|o| o.lock.is_none())
            && !op
                .last_error
                .as_deref()
                .is_some_and(|e| e.starts_with(super::pass::NO_RESULT))
        {
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
    use crate::model::AppliedContainer;
    use crate::realise::{next_operation, View, NO_NODES};
    use crate::testutil::{applied_of, container, desired_of, template};

    fn desired() -> DesiredContainer {
        let mut c = container("web");
        c.node = Some("n1".into());
        c.vm_id = Some(1000);
        desired_of(c)
    }

    fn applied(d: &DesiredContainer) -> AppliedContainer {
        applied_of(d.container.clone())
    }

    fn observed(d: &DesiredContainer) -> ObservedContainer {
        ObservedContainer {
            node: d.node.clone(),
            vm_id: d.vm_id,
            hostname: d.container.hostname.clone(),
            running: true,
            managed: Some(crate::model::ManagedBy {
                fleet: d.fleet.clone(),
                name: d.name.clone(),
            }),
            cores: d.container.cores,
            memory_mib: d.container.memory,
            swap_mib: d.container.swap,
            disk_gib: d.container.disk_size,
            ..ObservedContainer::default()
        }
    }

    fn kind(v: View<'_>) -> Option<&'static str> {
        next_operation(&v).map(|a| a.kind.name())
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
            nodes: &NO_NODES,
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
        let act = next_operation(&view(Some(&d), Some(&a), None, true)).unwrap();
        assert_eq!(
            (act.kind.name(), act.reason.as_str()),
            ("create", "missing: recreate")
        );
        // memory changed: update in place, reason says what
        let mut d2 = d.clone();
        d2.container.memory = 1024;
        let act = next_operation(&view(Some(&d2), Some(&a), Some(&o), true)).unwrap();
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
        let act = next_operation(&view(Some(&d5), Some(&a), Some(&o), true)).unwrap();
        assert_eq!(
            (act.kind.name(), act.reason.as_str()),
            ("destroy", "template changed: replace")
        );
        // moved to another node: migrated from the old one (restarted: it runs), not replaced
        let mut d6 = d.clone();
        d6.node = "n2".into();
        let act = next_operation(&view(Some(&d6), Some(&a), Some(&o), true)).unwrap();
        assert_eq!(act.node, "n1");
        assert_eq!(
            act.kind,
            OperationKind::Migrate {
                target: "n2".into(),
                restart: true
            }
        );
        let act = next_operation(&view(Some(&d6), Some(&a), Some(&stopped), true)).unwrap();
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
            container_status(Some(&op(create.clone(), OpState::Failed, 3)), None, 3),
            ContainerStatus::Failed
        );
        // a create that failed after it made the container (wait_for_ip): nothing retries it, so failed
        let mut failed = op(create, OpState::Failed, 1);
        failed.last_error = Some("CT 100 has no IPv6 address after 60s (wait_for_ip)".into());
        assert_eq!(
            container_status(Some(&failed), Some(&o), 3),
            ContainerStatus::Failed
        );
        // one whose deadline passed without a result may have been done: the observation says
        failed.last_error = Some(format!("{} 600 s", crate::reconcile::pass::NO_RESULT));
        assert_eq!(
            container_status(Some(&failed), Some(&o), 3),
            ContainerStatus::Running
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
