//! Property: over random desired / applied / observed states of one container, the operations the reconciler
//! emits realise exactly the actions of the plan `pxctl plan` would print (same planner, same inputs), in order,
//! and once they have all succeeded the plan is empty.

use proptest::prelude::*;

use pxfleet_spec::observed::{ObservedContainer as SpecObserved, PowerState};
use pxfleet_spec::plan::simulate::{apply_to_observed, generated_mac, SimOptions};
use pxfleet_spec::plan::{Action, ActionKind, Plan};
use pxfleet_spec::{Container, DesiredState, Fleet, MountPoint};

use super::*;
use crate::model::ManagedBy;
use crate::testutil::{applied_of, container, desired_of};

/// The knobs a random container state turns.
#[derive(Debug, Clone)]
struct Knobs {
    memory: u64,
    cores: Option<u32>,
    disk: u64,
    tags: bool,
    nesting: bool,
    domain: bool,
    stopped: bool,
    template: bool,
    unprivileged: bool,
    mount_gib: Option<u64>,
    protection: bool,
}

fn knobs() -> impl Strategy<Value = Knobs> {
    (
        prop_oneof![Just(512u64), Just(1024)],
        prop_oneof![Just(None), Just(Some(1u32)), Just(Some(2))],
        prop_oneof![Just(4u64), Just(8)],
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(None), Just(Some(2u64)), Just(Some(4))],
        prop_oneof![Just(false), Just(false), Just(false), Just(true)],
    )
        .prop_map(
            |(
                memory,
                cores,
                disk,
                tags,
                nesting,
                domain,
                stopped,
                template,
                unprivileged,
                mount_gib,
                protection,
            )| Knobs {
                memory,
                cores,
                disk,
                tags,
                nesting,
                domain,
                stopped,
                template,
                unprivileged,
                mount_gib,
                protection,
            },
        )
}

fn build(k: &Knobs, node: &str, vm_id: u32) -> Container {
    let mut c = container("web");
    c.node = Some(node.into());
    c.vm_id = Some(vm_id);
    c.memory = k.memory;
    c.cores = k.cores;
    c.disk_size = k.disk;
    if k.tags {
        c.tags = vec!["web".into()];
    }
    c.features.nesting = k.nesting;
    if k.domain {
        c.dns.domain = Some("example.test".into());
    }
    if k.stopped {
        c.state = DesiredState::Stopped;
    }
    if k.template {
        c.template = "debian".into();
    }
    c.unprivileged = k.unprivileged;
    c.protection = k.protection;
    if let Some(gib) = k.mount_gib {
        c.mount_points = vec![MountPoint::Volume {
            datastore_id: "local-lvm".into(),
            size_gib: gib,
            path: "/data".into(),
            backup: false,
            read_only: false,
            flags: Default::default(),
        }];
    }
    c
}

/// The controller's record of what a node reports, from the spec form.
fn record(s: &SpecObserved) -> ObservedContainer {
    ObservedContainer {
        node: s.node.clone(),
        vm_id: s.vm_id,
        hostname: s.config.hostname.clone(),
        running: s.status == PowerState::Running,
        managed: Some(ManagedBy {
            fleet: "dev".into(),
            name: "web".into(),
        }),
        cores: s.config.cores,
        memory_mib: s.config.memory,
        swap_mib: s.config.swap,
        disk_gib: s.config.disk_size_gib.ceil() as u64,
        config: Some(s.config.clone()),
        ..Default::default()
    }
}

fn observed_of(c: &Container, running: bool) -> ObservedContainer {
    let vm_id = c.vm_id.unwrap_or_default();
    let mut s = SpecObserved::from_desired(
        "dev",
        c,
        vm_id,
        c.node.as_deref().unwrap_or_default(),
        if running {
            PowerState::Running
        } else {
            PowerState::Stopped
        },
        "local-lvm",
        |i| generated_mac(vm_id, i),
    );
    // PVE does not keep the template: the planner takes it from the applied spec.
    s.config.template = None;
    record(&s)
}

/// A perfect node: applies one plan action (the one an operation realises) to an observation.
fn node_applies(
    d: &DesiredContainer,
    o: &ObservedContainer,
    kind: ActionKind,
) -> ObservedContainer {
    let fallback = Some(&d.container);
    let spec = convert::spec_observed("dev", "web", o, fallback).expect("observed");
    let fleet = Fleet {
        name: "dev".into(),
        allow_privileged: true,
        templates: Default::default(),
        containers: [("web".to_string(), desired_container(d))].into(),
        hooks: vec![],
        spans: Default::default(),
    };
    let plan = Plan::new(
        "dev",
        vec![Action {
            container: "web".into(),
            vm_id: Some(o.vm_id),
            node: Some(o.node.clone()),
            kind,
        }],
    );
    let out = apply_to_observed(&plan, &fleet, &[spec], &SimOptions::default());
    let mut r = record(&out[0]);
    r.config.as_mut().expect("config").template = None;
    r
}

/// The operation kinds that realise `plan`'s actions, in order (seeding aside).
fn expected_ops(plan: &Plan) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut last_update = false;
    for a in &plan.actions {
        let is_update = matches!(
            a.kind,
            ActionKind::Update { .. } | ActionKind::Repair { .. }
        );
        match &a.kind {
            ActionKind::Create { .. } => out.push("create"),
            ActionKind::Replace { .. } => out.extend(["destroy", "create"]),
            ActionKind::Move { .. } => out.push("migrate"),
            ActionKind::Resize { .. } => out.push("resize"),
            ActionKind::Update { .. } | ActionKind::Repair { .. } => {
                if !last_update {
                    out.push("update");
                }
            }
            ActionKind::Start => out.push("start"),
            ActionKind::Stop => out.push("stop"),
            ActionKind::Destroy { .. } => out.push("destroy"),
        }
        last_update = is_update;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn operations_realise_exactly_the_plan_and_leave_it_empty(
        want in knobs(),
        in_file in prop_oneof![Just(true), Just(true), Just(true), Just(false)],
        want_node in prop_oneof![Just("n1"), Just("n2")],
        was in proptest::option::of(knobs()),
        seen in proptest::option::of((knobs(), any::<bool>(), prop_oneof![Just(1000u32), Just(1000), Just(1001)])),
        seen_node in prop_oneof![Just("n1"), Just("n1"), Just("n2")],
        template_ready in any::<bool>(),
    ) {
        let d = in_file.then(|| desired_of(build(&want, want_node, 1000)));
        // The applied record is of the container observed (or of one no node reports any more).
        let seen_vm = seen.as_ref().map(|s| s.2).unwrap_or(1000);
        let mut applied = was.as_ref().map(|k| applied_of(build(k, seen_node, seen_vm)));
        let mut observed = seen.as_ref().map(|(k, running, vm)| observed_of(&build(k, seen_node, *vm), *running));
        if d.is_none() && applied.is_none() && observed.is_none() {
            return Ok(());
        }
        let mut ready = template_ready;
        fn view<'a>(
            d: &'a Option<DesiredContainer>,
            applied: &'a Option<AppliedContainer>,
            observed: &'a Option<ObservedContainer>,
            ready: bool,
        ) -> View<'a> {
            View { desired: d.as_ref(), applied: applied.as_ref(), observed: observed.as_ref(), template_ready: ready, nodes: &NO_NODES }
        }
        let plan = match container_plan(&view(&d, &applied, &observed, ready)) {
            Ok(p) => p,
            Err(_) => {
                // Refused by the planner (protected, shrink): no operation either.
                prop_assert_eq!(next_operation(&view(&d, &applied, &observed, ready)), None);
                return Ok(());
            }
        };
        let mut ops: Vec<&'static str> = Vec::new();
        for _ in 0..12 {
            let Some(next) = next_operation(&view(&d, &applied, &observed, ready)) else { break };
            match next.kind {
                OperationKind::SeedTemplate { .. } => {
                    ready = true;
                    continue;
                }
                _ => ops.push(next.kind.name()),
            }
            let d = d.as_ref();
            match &next.kind {
                OperationKind::Create { container, .. } => {
                    let d = d.expect("create needs desired");
                    prop_assert_eq!(next.node.as_str(), d.node.as_str());
                    let mut c = (**container).clone();
                    c.node = Some(d.node.clone());
                    c.vm_id = Some(d.vm_id);
                    observed = Some(observed_of(&c, c.state.is_running()));
                    applied = Some(applied_of(c));
                }
                OperationKind::Destroy => {
                    let o = observed.take().expect("destroy needs an observed container");
                    prop_assert_eq!((next.node.as_str(), next.vm_id), (o.node.as_str(), o.vm_id));
                    if applied.as_ref().is_some_and(|a| a.node == o.node && a.vm_id == o.vm_id) {
                        applied = None;
                    }
                }
                OperationKind::Migrate { target, restart } => {
                    let o = observed.as_mut().expect("migrate needs an observed container");
                    prop_assert_eq!(*restart, o.running);
                    if let Some(a) = applied.as_mut().filter(|a| a.node == o.node && a.vm_id == o.vm_id) {
                        a.node = target.clone();
                        a.container.node = Some(target.clone());
                    }
                    o.node = target.clone();
                }
                OperationKind::Resize { disk, disk_gib } => {
                    let o = observed.clone().expect("resize");
                    let kind = ActionKind::Resize { disk: disk.clone(), from_gib: 0.0, to_gib: *disk_gib as f64 };
                    observed = Some(node_applies(d.expect("resize"), &o, kind));
                }
                OperationKind::Update { changes, container, .. } => {
                    let d = d.expect("update");
                    let o = observed.clone().expect("update");
                    let kind = ActionKind::Update { changes: changes.clone(), restart_required: false };
                    observed = Some(node_applies(d, &o, kind));
                    let mut c = (**container).clone();
                    c.node = Some(o.node.clone());
                    c.vm_id = Some(o.vm_id);
                    applied = Some(applied_of(c));
                }
                OperationKind::Start => observed.as_mut().expect("start").running = true,
                OperationKind::Stop => observed.as_mut().expect("stop").running = false,
                OperationKind::SeedTemplate { .. } | OperationKind::Snapshot(_) => unreachable!(),
            }
        }
        prop_assert_eq!(&ops, &expected_ops(&plan), "plan: {:?}", plan.actions);
        let after = container_plan(&view(&d, &applied, &observed, ready));
        prop_assert!(after.as_ref().is_ok_and(|p| p.is_empty()), "after {:?}: {:?}", ops, after);
    }
}
