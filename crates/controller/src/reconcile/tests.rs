//! The reconcile loop end to end on a temporary store: planning, dispatch windows, results, retries, drift
//! repair, vanished containers and template digests.

use std::collections::BTreeSet;

use pxfleet_proto::v1 as pb;

use super::*;
use crate::grpc::convert;
use crate::model::{ContainerStatus, DesiredContainer, OpState};
use crate::query::container_rows;
use crate::testutil::{
    container, desired_of, next_message, node, on_update_pb, operations_sent, result, submit_dev,
    test_state, AgentRx,
};
use std::sync::Arc;

/// A controller whose node n1 is connected-ready, caches the ubuntu template and knows its digest.
fn state() -> Arc<State> {
    let st = test_state();
    let mut n = node("n1", 8000);
    n.last_seen_ms = st.now_ms();
    n.inventory.templates = vec!["local:vztmpl/ubuntu.tar.xz".into()];
    n.template_digests.insert(
        "http://127.0.0.1/ubuntu.tar.xz".into(),
        crate::model::TemplateDigest {
            template: "ubuntu".into(),
            sha256: "aa".repeat(32),
            recorded_ms: 1,
        },
    );
    st.store.update_node("n1", |r| *r = n.clone()).unwrap();
    st
}

fn submit(st: &State, containers: Vec<DesiredContainer>) {
    let secrets = [("web".to_string(), "pw-123456".to_string())].into();
    submit_dev(st, serde_json::json!({}), containers, secrets);
}

fn web(template_name: &str) -> DesiredContainer {
    let mut c = container("web");
    c.template = template_name.into();
    c.node = Some("n1".into());
    c.vm_id = Some(1000);
    let mut d = desired_of(c);
    d.container.node = None;
    d.container.vm_id = None;
    if template_name != "ubuntu" {
        d.template.source = pxfleet_spec::TemplateSource::Pveam {
            appliance: "ubuntu.tar.xz".into(),
        };
    }
    d.revision = 0;
    d
}

/// Runs a pass and returns the one operation dispatched to n1.
fn dispatched(st: &State, rx: &mut AgentRx) -> pb::Operation {
    pass(st, st.now_ms()).unwrap();
    match next_message(rx).expect("an operation was dispatched").msg {
        Some(pb::controller_message::Msg::Operation(op)) => op,
        other => panic!("not an operation: {other:?}"),
    }
}

fn finish(st: &State, op: &pb::Operation, ok: bool, running: bool) {
    let container = (ok && matches!(op.kind, Some(pb::operation::Kind::Create(_)))).then(|| {
        pb::ObservedContainer {
            vm_id: op.vm_id,
            power: if running {
                pb::PowerState::Running
            } else {
                pb::PowerState::Stopped
            } as i32,
            managed: true,
            config: match &op.kind {
                Some(pb::operation::Kind::Create(c)) => c.spec.clone(),
                _ => None,
            },
            ..Default::default()
        }
    });
    let u = pb::OperationUpdate {
        container,
        ..result(op, (!ok).then_some("pct create failed: boom"))
    };
    assert!(on_update_pb(st, "n1", &u).unwrap());
}

fn kind(op: &pb::Operation) -> &'static str {
    match op.kind {
        Some(pb::operation::Kind::Create(_)) => "create",
        Some(pb::operation::Kind::Destroy(_)) => "destroy",
        Some(pb::operation::Kind::Update(_)) => "update",
        Some(pb::operation::Kind::Start(_)) => "start",
        _ => "other",
    }
}

fn many(n: u32) -> Vec<DesiredContainer> {
    (0..n)
        .map(|i| {
            let mut d = web("ubuntu");
            d.name = format!("c{i:03}");
            d.container = container(&d.name);
            d.vm_id = 1000 + i;
            d
        })
        .collect()
}

/// A large submit hands an agent at most `dispatch_window` operations; each result lets the next one
/// go, and all of them are dispatched in the end.
#[test]
fn dispatch_is_windowed_per_node_and_drains() {
    let st = state();
    let window = st.config.reconciler.dispatch_window as usize;
    let (_, mut rx) = st.sessions.register("n1");
    submit(&st, many(30));
    pass(&st, st.now_ms()).unwrap();
    let first = operations_sent(&mut rx);
    assert_eq!(first.len(), window, "only the window is in flight");
    let mut created: BTreeSet<u32> = first.iter().map(|o| o.vm_id).collect();
    let mut in_flight = first;
    let mut rounds = 0;
    while let Some(op) = in_flight.pop() {
        rounds += 1;
        assert!(rounds < 1000, "does not settle");
        finish(&st, &op, true, true);
        pass(&st, st.now_ms()).unwrap();
        for next in operations_sent(&mut rx) {
            if kind(&next) == "create" {
                assert!(created.insert(next.vm_id), "one create per container");
            }
            in_flight.push(next);
        }
        assert!(in_flight.len() <= window, "never more than the window");
    }
    assert_eq!(created.len(), 30, "every container's create was dispatched");
}

/// What a pass plans is stored whether it is sent or not: the operations it sends as dispatched, on the stream
/// they went on, with the deadline they were sent with (stored once, never pending first); the ones the window
/// holds back as pending, and they go out later.
#[test]
fn a_pass_stores_what_it_sends_as_dispatched_on_its_stream_and_what_waits_as_pending() {
    let st = state();
    let window = st.config.reconciler.dispatch_window as usize;
    let (conn, mut rx) = st.sessions.register("n1");
    submit(&st, many(window as u32 + 3));
    pass(&st, st.now_ms()).unwrap();
    let sent = operations_sent(&mut rx);
    assert_eq!(sent.len(), window);
    let ops = st.store.ops().unwrap();
    assert_eq!(ops.len(), window + 3, "every planned operation is stored");
    for o in &ops {
        match sent.iter().find(|s| s.op_id == o.id) {
            Some(s) => {
                assert_eq!(o.state, OpState::Dispatched, "{}", o.id);
                assert_eq!(o.dispatched_conn, conn);
                assert_eq!(o.deadline_ms.map(|d| d as i64), Some(s.deadline_unix_ms));
            }
            None => {
                assert_eq!(o.state, OpState::Pending, "{}", o.id);
                assert_eq!(o.dispatched_ms, None);
            }
        }
    }
    finish(&st, &sent[0], true, true);
    assert_eq!(operations_sent(&mut rx).len(), 1, "a held one goes out");
}

/// A result frees a slot of the node's window and the node's next due operation goes out with it, before any
/// further pass; the window still holds, and every container is created once.
#[test]
fn a_result_sends_the_nodes_next_operation_without_waiting_for_a_pass() {
    let st = state();
    let window = st.config.reconciler.dispatch_window as usize;
    let (_, mut rx) = st.sessions.register("n1");
    submit(&st, many(window as u32 + 3));
    pass(&st, st.now_ms()).unwrap();
    let mut in_flight = operations_sent(&mut rx);
    assert_eq!(in_flight.len(), window);
    let mut created: BTreeSet<u32> = in_flight.iter().map(|o| o.vm_id).collect();
    for _ in 0..3 {
        let op = in_flight.remove(0);
        finish(&st, &op, true, true);
        let next = operations_sent(&mut rx);
        assert_eq!(
            next.len(),
            1,
            "the result sent one more operation, no pass ran"
        );
        assert_eq!(kind(&next[0]), "create");
        assert!(created.insert(next[0].vm_id), "one create per container");
        in_flight.extend(next);
        assert_eq!(in_flight.len(), window, "never more than the window");
    }
    // the backlog is empty now: a further result sends nothing, and the pass after it nothing either
    finish(&st, &in_flight.remove(0), true, true);
    assert!(operations_sent(&mut rx).is_empty());
    pass(&st, st.now_ms()).unwrap();
    assert!(operations_sent(&mut rx).is_empty());
    assert_eq!(created.len(), window + 3);
}

/// An operation the agent never acknowledged is sent again with the same id once the stream it went out
/// on is gone (the agent reconnected); on the live stream it is never re-sent, however long the
/// acknowledgement takes (the stream delivers in order, the controller may just be behind in reading).
#[test]
fn unacknowledged_operations_are_sent_again_only_when_their_stream_is_gone() {
    let st = state();
    let (_, mut rx) = st.sessions.register("n1");
    submit(&st, many(2));
    let t0 = st.now_ms();
    pass(&st, t0).unwrap();
    let sent = operations_sent(&mut rx);
    assert_eq!(sent.len(), 2);
    // the agent acknowledges the first only
    let ack = pb::OperationUpdate {
        op_id: sent[0].op_id.clone(),
        state: pb::OperationState::Running as i32,
        message: "received".into(),
        ..Default::default()
    };
    assert!(!on_update_pb(&st, "n1", &ack).unwrap());
    // long past the acknowledgement deadline, node silent, same stream: nothing is re-sent
    let later = t0 + (st.config.reconciler.ack_timeout_secs * 10) * 1000;
    pass(&st, later).unwrap();
    assert!(
        operations_sent(&mut rx).is_empty(),
        "the live stream is not re-sent to"
    );
    let resent = |st: &State| {
        st.metrics
            .render(&Default::default())
            .lines()
            .any(|l| l.starts_with("pxfleet_operations_resent_total") && !l.ends_with(" 0"))
    };
    assert!(!resent(&st));
    // the agent reconnects (a new stream) without that operation in its hello: sent again on the new one
    let (_, mut rx2) = st.sessions.register("n1");
    pass(&st, later + 1_000).unwrap();
    let again = operations_sent(&mut rx2);
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].op_id, sent[1].op_id, "the same operation, same id");
    assert!(operations_sent(&mut rx).is_empty());
    assert!(resent(&st));
}

/// A node that heartbeats but whose operations do not move is shown stalled, with the reason.
#[test]
fn a_node_whose_operations_do_not_move_is_stalled() {
    let st = state();
    let (_, mut rx) = st.sessions.register("n1");
    submit(&st, many(3));
    let t0 = st.now_ms();
    pass(&st, t0).unwrap();
    assert_eq!(operations_sent(&mut rx).len(), 3);
    let ops = st.store.ops().unwrap();
    let mine: Vec<&Operation> = ops.iter().collect();
    let mut n = st.store.node("n1").unwrap().unwrap();
    let stall = st.config.reconciler.stall_secs * 1000;
    n.last_seen_ms = t0 + stall + 5_000; // heartbeats keep coming
    let (status, reason) = crate::nodes::health(&st, &n, &mine, t0 + 1_000);
    assert_eq!(status, crate::model::NodeStatus::Ready, "{reason}");
    let (status, reason) = crate::nodes::health(&st, &n, &mine, t0 + stall + 5_000);
    assert_eq!(status, crate::model::NodeStatus::Stalled);
    assert!(reason.contains("3 operation(s) in flight"), "{reason}");
    assert!(reason.contains("create of dev/c00"), "{reason}");
    // an update from the agent counts as movement
    n.last_op_update_ms = t0 + stall;
    let (status, _) = crate::nodes::health(&st, &n, &mine, t0 + stall + 5_000);
    assert_eq!(status, crate::model::NodeStatus::Ready);
}

#[test]
fn create_replace_remove_cycle() {
    let st = state();
    let (_, mut rx) = st.sessions.register("n1");
    submit(&st, vec![web("ubuntu")]);
    let op = dispatched(&st, &mut rx);
    assert_eq!(kind(&op), "create");
    finish(&st, &op, true, true);
    // converged: nothing more to do, status running
    pass(&st, st.now_ms()).unwrap();
    assert!(rx.try_recv().is_err());
    assert_eq!(
        container_rows(&st).unwrap()[0].status,
        ContainerStatus::Running
    );
    // template changed: destroy, then create
    submit(&st, vec![web("other")]);
    let op = dispatched(&st, &mut rx);
    assert_eq!(kind(&op), "destroy");
    finish(&st, &op, true, true);
    let op = dispatched(&st, &mut rx);
    assert_eq!(kind(&op), "create");
    finish(&st, &op, true, true);
    // removed from the fleet: destroyed, and then forgotten
    submit(&st, vec![]);
    let op = dispatched(&st, &mut rx);
    assert_eq!(kind(&op), "destroy");
    finish(&st, &op, true, true);
    pass(&st, st.now_ms()).unwrap();
    assert!(rx.try_recv().is_err());
    assert!(container_rows(&st).unwrap().is_empty());
    assert!(st.store.all_applied().unwrap().is_empty());
}

/// A created container missing from every report (between two nodes while migrated by hand, or deleted
/// by hand) is created again only once it stayed missing for the grace period.
#[test]
fn a_vanished_container_is_recreated_only_after_the_grace_period() {
    let st = state();
    let (_, mut rx) = st.sessions.register("n1");
    submit(&st, vec![web("ubuntu")]);
    let op = dispatched(&st, &mut rx);
    finish(&st, &op, true, true);
    let t0 = st.now_ms();
    pass(&st, t0).unwrap();
    assert!(rx.try_recv().is_err());
    st.store.set_observed("n1", op.vm_id, None).unwrap();
    pass(&st, t0 + 1).unwrap();
    pass(&st, t0 + VANISHED_GRACE_MS - 1_000).unwrap();
    assert!(
        operations_sent(&mut rx).is_empty(),
        "no create while it may be between nodes"
    );
    pass(&st, t0 + VANISHED_GRACE_MS + 2).unwrap();
    let again = operations_sent(&mut rx);
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].vm_id, op.vm_id, "recreated under its vm_id");
}

/// A vanished container that is no longer desired is forgotten: its grace-period entry does not outlive it.
#[test]
fn a_vanished_container_removed_from_the_file_is_forgotten() {
    let st = state();
    let (_, mut rx) = st.sessions.register("n1");
    submit(&st, vec![web("ubuntu")]);
    let op = dispatched(&st, &mut rx);
    finish(&st, &op, true, true);
    st.store.set_observed("n1", op.vm_id, None).unwrap();
    let t0 = st.now_ms();
    pass(&st, t0).unwrap();
    assert_eq!(
        st.reconciler.vanished.lock().unwrap().len(),
        1,
        "waiting for it"
    );
    submit(&st, vec![]);
    pass(&st, t0 + 1).unwrap();
    assert!(
        st.reconciler.vanished.lock().unwrap().is_empty(),
        "forgotten"
    );
    assert!(operations_sent(&mut rx).is_empty(), "and not created again");
}

#[test]
fn failures_retry_then_fail_with_the_agents_error() {
    let st = state();
    let (_, mut rx) = st.sessions.register("n1");
    submit(&st, vec![web("ubuntu")]);
    let mut attempts = vec![];
    for _ in 0..3 {
        let op = dispatched(&st, &mut rx);
        attempts.push(op.attempt);
        finish(&st, &op, false, false);
    }
    assert_eq!(attempts, vec![1, 2, 3]);
    pass(&st, st.now_ms()).unwrap();
    assert!(rx.try_recv().is_err(), "no fourth attempt");
    let row = &container_rows(&st).unwrap()[0];
    assert_eq!(row.status, ContainerStatus::Failed);
    assert_eq!(row.error().as_deref(), Some("pct create failed: boom"));
    // a new submit that changes the container starts over
    let mut w = web("ubuntu");
    w.container.memory = 1024;
    submit(&st, vec![w]);
    assert_eq!(dispatched(&st, &mut rx).attempt, 1);
}

#[test]
fn an_update_that_changes_nothing_is_not_repeated_in_a_loop() {
    let st = state();
    let (_, mut rx) = st.sessions.register("n1");
    submit(&st, vec![web("ubuntu")]);
    let op = dispatched(&st, &mut rx);
    finish(&st, &op, true, true);
    // the node keeps reporting 512 MiB although 1024 is desired and every update "succeeds"
    let mut w = web("ubuntu");
    w.container.memory = 1024;
    submit(&st, vec![w]);
    let mut updates = 0;
    for _ in 0..10 {
        pass(&st, st.now_ms()).unwrap();
        while let Some(m) = next_message(&mut rx) {
            if let Some(pb::controller_message::Msg::Operation(op)) = m.msg {
                assert_eq!(kind(&op), "update");
                updates += 1;
                on_update_pb(
                    &st,
                    "n1",
                    &pb::OperationUpdate {
                        op_id: op.op_id,
                        state: pb::OperationState::Succeeded as i32,
                        ..Default::default()
                    },
                )
                .unwrap();
            }
        }
    }
    assert_eq!(updates, 3, "max_attempts bounds repeated no-op updates");
    // ... and it says so, and stays stopped: no new round a minute (or ten) later
    let row = &container_rows(&st).unwrap()[0];
    assert_eq!(row.status, ContainerStatus::Failed);
    let error = row.error().unwrap_or_default();
    assert!(
        error.starts_with(
            "drift: repair does not hold (memory: wanted 1024, node has 512): repaired 3 times"
        ),
        "{error}"
    );
    for later in [61_000, REPAIR_HOLD_MS + 1] {
        pass(&st, st.now_ms() + later).unwrap();
        assert!(
            operations_sent(&mut rx).is_empty(),
            "no repair {later} ms later"
        );
    }
    // a submit (a new revision) tries again
    let mut w = web("ubuntu");
    w.container.memory = 2048;
    submit(&st, vec![w]);
    let op = dispatched(&st, &mut rx);
    assert_eq!((kind(&op), op.attempt), ("update", 1));
}

#[test]
fn a_start_that_does_not_hold_stops_and_says_so() {
    let st = state();
    let (_, mut rx) = st.sessions.register("n1");
    submit(&st, vec![web("ubuntu")]);
    let op = dispatched(&st, &mut rx);
    finish(&st, &op, true, false);
    // every start succeeds, and the container is stopped again before the next pass
    let mut starts = 0;
    for _ in 0..6 {
        pass(&st, st.now_ms()).unwrap();
        for op in operations_sent(&mut rx) {
            assert_eq!(kind(&op), "start");
            starts += 1;
            let u = pb::OperationUpdate {
                op_id: op.op_id,
                state: pb::OperationState::Succeeded as i32,
                ..Default::default()
            };
            on_update_pb(&st, "n1", &u).unwrap();
        }
    }
    assert_eq!(starts, 3);
    let row = &container_rows(&st).unwrap()[0];
    assert_eq!(row.status, ContainerStatus::Failed);
    assert!(
        row.error()
            .unwrap_or_default()
            .starts_with("drift: repair does not hold (state: wanted running, node has stopped)"),
        "{:?}",
        row.error()
    );
    pass(&st, st.now_ms() + REPAIR_HOLD_MS + 1).unwrap();
    assert!(operations_sent(&mut rx).is_empty());
}

#[test]
fn disconnected_node_keeps_operations_pending_and_stopped_container_is_started() {
    let st = state();
    submit(&st, vec![web("ubuntu")]);
    pass(&st, st.now_ms()).unwrap();
    let ops = st.store.ops().unwrap();
    assert_eq!((ops.len(), ops[0].state), (1, OpState::Pending));
    let (_, mut rx) = st.sessions.register("n1");
    let op = dispatched(&st, &mut rx);
    assert_eq!(op.op_id, ops[0].id);
    finish(&st, &op, true, false);
    // observed stopped: start it (repair)
    let op = dispatched(&st, &mut rx);
    assert_eq!(kind(&op), "start");
}

/// What the agent reports for `spec` once PVE stored it: tags lower-cased and sorted without the mark tag,
/// the description with the managed-by line and a trailing newline, MACs in lower case, `cpuunits: 100`.
fn reported(spec: &pb::ContainerSpec) -> pb::ObservedContainer {
    let mut cfg = spec.clone();
    cfg.password = None;
    cfg.template_volid.clear();
    cfg.tags = pxfleet_spec::observed::normalise_tags(&cfg.tags);
    cfg.description = format!(
        "{}\nmanaged-by: pxfleet fleet={} name={}\n",
        cfg.description, cfg.fleet, cfg.name
    );
    for i in &mut cfg.interfaces {
        i.mac = if i.mac.is_empty() {
            format!("bc:24:11:00:00:{:02x}", i.index)
        } else {
            i.mac.to_lowercase()
        };
    }
    cfg.cpu_units = cfg.cpu_units.or(Some(100));
    pb::ObservedContainer {
        vm_id: cfg.vm_id,
        power: pb::PowerState::Running as i32,
        managed: true,
        config: Some(cfg),
        ..Default::default()
    }
}

#[test]
fn drift_on_the_node_is_repaired_naming_the_fields_and_normalised_values_do_not_count() {
    let st = state();
    let (_, mut rx) = st.sessions.register("n1");
    let mut w = web("ubuntu");
    w.container.tags = vec!["Web".into(), "db".into()];
    w.container.description = Some("Web server".into());
    w.container.interfaces[0].mac_address = Some("BC:24:11:AA:BB:CC".parse().unwrap());
    w.container.interfaces[0].mtu = Some(1400);
    submit(&st, vec![w]);
    let op = dispatched(&st, &mut rx);
    let Some(pb::operation::Kind::Create(create)) = &op.kind else {
        panic!("expected a create: {op:?}")
    };
    let spec = create.spec.clone().unwrap();
    finish(&st, &op, true, true);
    // the node reports it as PVE normalises it: equal, nothing to do, not drifted
    let obs = convert::observed_from_pb("n1", &reported(&spec));
    st.store.set_observed("n1", 1000, Some(&obs)).unwrap();
    for _ in 0..3 {
        pass(&st, st.now_ms()).unwrap();
        assert!(
            next_op(&mut rx).is_none(),
            "no flapping on normalised values"
        );
    }
    assert!(!container_rows(&st).unwrap()[0].drifted);

    // changed by hand on the node: tags, memory, the bridge, the MTU and onboot
    let mut o = reported(&spec);
    let cfg = o.config.as_mut().unwrap();
    cfg.tags = vec!["db".into()];
    cfg.memory_mib = 1024;
    cfg.interfaces[0].bridge = "vmbr1".into();
    cfg.interfaces[0].mtu = None;
    cfg.onboot = true;
    st.store
        .set_observed("n1", 1000, Some(&convert::observed_from_pb("n1", &o)))
        .unwrap();
    assert!(container_rows(&st).unwrap()[0].drifted);
    let op = dispatched(&st, &mut rx);
    let Some(pb::operation::Kind::Update(u)) = &op.kind else {
        panic!("expected an update: {op:?}")
    };
    let mut fields = u.changed_fields.clone();
    fields.sort();
    assert_eq!(
        fields,
        ["bridge", "memory", "mtu", "start_on_boot", "tags"],
        "{u:?}"
    );
    let stored = st.store.op(&op.op_id).unwrap().unwrap();
    for part in [
        "repair: ",
        "memory 1024 -> 512",
        "bridge vmbr1 -> vmbr0",
        "mtu none -> 1400",
        r#"tags ["db"] -> ["db","web"]"#,
    ] {
        assert!(
            stored.reason.contains(part),
            "{part:?} in {:?}",
            stored.reason
        );
    }
    // the update carries the whole desired spec; once the node reports it back, nothing is left to do
    let u = pb::OperationUpdate {
        op_id: op.op_id.clone(),
        state: pb::OperationState::Succeeded as i32,
        container: Some(reported(&spec)),
        ..Default::default()
    };
    assert!(on_update_pb(&st, "n1", &u).unwrap());
    pass(&st, st.now_ms()).unwrap();
    assert!(next_op(&mut rx).is_none());
    assert!(!container_rows(&st).unwrap()[0].drifted);
}

fn seed_result(st: &State, node: &str, op: &pb::Operation, sha256: &str) {
    let u = pb::OperationUpdate {
        op_id: op.op_id.clone(),
        state: pb::OperationState::Succeeded as i32,
        message: "template present".into(),
        template_sha256: sha256.into(),
        ..Default::default()
    };
    assert!(on_update_pb(st, node, &u).unwrap());
}

fn next_op(rx: &mut AgentRx) -> Option<pb::Operation> {
    match next_message(rx)?.msg {
        Some(pb::controller_message::Msg::Operation(op)) => Some(op),
        _ => None,
    }
}

#[test]
fn unpinned_template_digests_are_recorded_and_a_differing_node_fails() {
    let st = state();
    let mut n2 = node("n2", 8000);
    n2.last_seen_ms = st.now_ms();
    st.store.update_node("n2", |r| *r = n2.clone()).unwrap();
    let (_, mut rx1) = st.sessions.register("n1");
    let (_, mut rx2) = st.sessions.register("n2");
    let url = "http://127.0.0.1/u.tar.xz";
    let on = |name: &str, node: &str, vm_id: u32| {
        let mut d = web("ubuntu");
        d.name = name.into();
        d.container.name = name.into();
        d.container.template = "u.tar.xz".into();
        d.template.source = pxfleet_spec::TemplateSource::Url {
            url: url.into(),
            checksum: None,
        };
        d.node = node.into();
        d.vm_id = vm_id;
        d
    };
    submit(
        &st,
        vec![
            on("a", "n1", 1000),
            on("b", "n2", 1001),
            on("c", "n2", 1002),
        ],
    );
    pass(&st, st.now_ms()).unwrap();
    // each node seeds once (the cached file on n1 is not trusted without its digest)
    let s1 = next_op(&mut rx1).expect("seed on n1");
    let s2 = next_op(&mut rx2).expect("seed on n2");
    assert!(
        next_op(&mut rx2).is_none(),
        "one seed per template and node"
    );
    let Some(pb::operation::Kind::SeedTemplate(seed)) = &s1.kind else {
        panic!("expected a seed: {s1:?}")
    };
    assert_eq!((seed.url.as_str(), seed.checksum.as_ref()), (url, None));
    seed_result(&st, "n1", &s1, &"aa".repeat(32));
    seed_result(&st, "n2", &s2, &"BB".repeat(32));
    let n1 = st.store.node("n1").unwrap().unwrap();
    assert_eq!(n1.template_digests[url].sha256, "aa".repeat(32));
    let n2 = st.store.node("n2").unwrap().unwrap();
    assert_eq!(n2.template_digests[url].sha256, "bb".repeat(32));
    // n1 reported first: its container is created; n2's containers fail, naming both digests
    pass(&st, st.now_ms()).unwrap();
    let c = next_op(&mut rx1).expect("create on n1");
    assert_eq!(kind(&c), "create");
    pass(&st, st.now_ms()).unwrap();
    assert!(next_op(&mut rx2).is_none(), "nothing is created on n2");
    let rows = container_rows(&st).unwrap();
    for name in ["b", "c"] {
        let row = rows.iter().find(|r| r.name == name).unwrap();
        assert_eq!(row.status, ContainerStatus::Failed, "{name}");
        let e = row.error().unwrap();
        assert!(
            e.contains(&"aa".repeat(32)) && e.contains(&"bb".repeat(32)),
            "{e}"
        );
        assert!(e.contains("sha256:"), "says how to pin: {e}");
    }
    // still failed (no new operations) on later passes
    let before = st.store.ops().unwrap().len();
    pass(&st, st.now_ms()).unwrap();
    assert_eq!(st.store.ops().unwrap().len(), before);
}

/// `pxctl snapshot`: refused where PVE would refuse it or nothing is there yet, with what to do; queued once
/// (a rollback of a running container starts it again), and not twice while one is in flight.
#[test]
fn snapshots_are_refused_with_a_reason_and_queued_one_at_a_time() {
    use crate::model::{ManagedBy, ObservedContainer, OperationKind, SnapshotAction};
    use crate::reconcile::queue_snapshot;
    let st = state();
    submit(&st, vec![web("ubuntu")]);
    let q = |name: &str, action, snap: &str| {
        queue_snapshot(&st, "pxfleet://user/alice", "dev", name, action, snap, "")
    };
    let e = q("web", SnapshotAction::Create, "s1").unwrap_err();
    assert!(e.to_string().contains("not on a node yet"), "{e}");
    let obs = ObservedContainer {
        node: "n1".into(),
        vm_id: 1000,
        running: true,
        managed: Some(ManagedBy {
            fleet: "dev".into(),
            name: "web".into(),
        }),
        ..Default::default()
    };
    st.store.set_observed("n1", 1000, Some(&obs)).unwrap();
    let e = q("web", SnapshotAction::Create, "1st").unwrap_err();
    assert!(e.to_string().contains("snapshot name `1st`"), "{e}");
    let e = q("nope", SnapshotAction::Create, "s1").unwrap_err();
    assert!(
        e.to_string().contains("fleet dev has no container nope"),
        "{e}"
    );
    let op = q("web", SnapshotAction::Rollback, "s1").unwrap();
    match &op.kind {
        OperationKind::Snapshot(s) => {
            assert_eq!(s.action, SnapshotAction::Rollback);
            assert!(s.start, "a running container is started again");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!((op.node.as_str(), op.vm_id), ("n1", 1000));
    let e = q("web", SnapshotAction::Delete, "s1").unwrap_err();
    assert!(e.to_string().contains("operation in flight"), "{e}");
    let audit = st.store.audit_log().unwrap();
    assert!(
        audit
            .iter()
            .any(|a| a.action == "snapshot_rollback" && a.target == "dev"),
        "{audit:?}"
    );
}
