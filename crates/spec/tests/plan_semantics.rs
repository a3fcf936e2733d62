//! What the planner decides, scenario by scenario, as a user reading `pxctl plan` would check it.

mod plan_support;

use plan_support::*;
use pxfleet_spec::model::*;
use pxfleet_spec::observed::{ManagedMark, PowerState};
use pxfleet_spec::plan::*;
use pxfleet_spec::render;

fn kinds(p: &Plan) -> Vec<(String, &'static str)> {
    p.actions
        .iter()
        .map(|a| (a.container.clone(), a.kind.verb()))
        .collect()
}

fn one<'a>(p: &'a Plan, name: &str, verb: &str) -> &'a Action {
    let found: Vec<&Action> = p
        .actions
        .iter()
        .filter(|a| a.container == name && a.kind.verb() == verb)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one {verb} of {name} in {:?}",
        kinds(p)
    );
    found[0]
}

#[test]
fn offline_plan_creates_everything_in_startup_order() {
    let mut db = container("db", Some(101));
    db.startup = Some(Startup {
        order: Some(1),
        up_delay: Some(30),
        down_delay: None,
    });
    let mut web = container("web", None);
    web.node = None;
    web.startup = Some(Startup {
        order: Some(2),
        ..Startup::default()
    });
    let cache = container("cache", Some(103));
    let f = fleet("dev", vec![web, db, cache]);
    let p = plan(&f, None, &[]).unwrap();
    assert_eq!(
        kinds(&p),
        vec![
            ("db".into(), "create"),
            ("web".into(), "create"),
            ("cache".into(), "create")
        ],
        "ordered by startup.order, unordered last"
    );
    assert_eq!(p.summary.create, 3);
    let web = one(&p, "web", "create");
    assert_eq!((web.vm_id, web.node.as_deref()), (None, None));
    let ActionKind::Create { attributes, reason } = &web.kind else {
        unreachable!()
    };
    assert_eq!(*reason, CreateReason::New);
    let vm_id = attributes.iter().find(|a| a.field == "vm_id").unwrap();
    assert!(vm_id.known_after_apply);
    let text = render::text::render(&p, false);
    assert!(text.contains("vm_id and node known after apply"), "{text}");
    assert!(
        text.contains("+ vm_id            = (known after apply)"),
        "{text}"
    );
}

#[test]
fn a_fleet_planned_against_itself_has_no_changes() {
    let f = fleet("dev", vec![container("a", Some(100)), container("b", None)]);
    let obs = observe(&f, PowerState::Running);
    let p = plan(&f, Some(&f), &obs).unwrap();
    assert!(p.is_empty(), "{:?}", p.actions);
    assert!(render::text::render(&p, false).starts_with("No changes."));
}

#[test]
fn live_and_restart_needed_changes_follow_the_hotplug_rules() {
    let applied = fleet("dev", vec![container("a", Some(100))]);
    let obs = observe(&applied, PowerState::Running);
    let mut want = container("a", Some(100));
    want.memory = 2048;
    want.features.keyctl = true;
    want.dns.servers = vec!["1.1.1.1".parse().unwrap()];
    let desired = fleet("dev", vec![want]);
    let p = plan(&desired, Some(&applied), &obs).unwrap();
    let ActionKind::Update {
        changes,
        restart_required,
    } = &one(&p, "a", "update").kind
    else {
        unreachable!()
    };
    assert!(*restart_required);
    let live = |f: &str| changes.iter().find(|c| c.field == f).unwrap().live;
    assert!(live("memory"), "memory is a cgroup change");
    assert!(
        !live("features.keyctl"),
        "features are pending until restart"
    );
    assert!(!live("dns.servers"));
    let text = render::text::render(&p, false);
    assert!(
        text.contains("~ memory          = 1024 -> 2048\n"),
        "{text}"
    );
    assert!(
        text.contains("~ features.keyctl = false -> true # restart needed"),
        "{text}"
    );

    // The same changes on a stopped container apply at once, and it gets started.
    let stopped = observe(&applied, PowerState::Stopped);
    let p = plan(&desired, Some(&applied), &stopped).unwrap();
    assert_eq!(
        kinds(&p),
        vec![("a".into(), "update"), ("a".into(), "start")]
    );
    let ActionKind::Update {
        changes,
        restart_required,
    } = &p.actions[0].kind
    else {
        unreachable!()
    };
    assert!(!restart_required && changes.iter().all(|c| c.live));
}

#[test]
fn disks_grow_and_never_shrink() {
    let applied = fleet("dev", vec![container("a", Some(100))]);
    let obs = observe(&applied, PowerState::Running);
    let mut grown = container("a", Some(100));
    grown.disk_size = 16;
    let p = plan(&fleet("dev", vec![grown]), Some(&applied), &obs).unwrap();
    assert_eq!(
        one(&p, "a", "resize").kind,
        ActionKind::Resize {
            disk: "rootfs".into(),
            from_gib: 8.0,
            to_gib: 16.0
        }
    );

    let mut shrunk = container("a", Some(100));
    shrunk.disk_size = 4;
    let err = plan(&fleet("dev", vec![shrunk]), Some(&applied), &obs).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("container a (vm_id 100 on pve1): disk_size would shrink from 8 GiB to 4 GiB"),
        "{msg}"
    );
}

#[test]
fn replacement_names_the_field_and_protection_refuses_it() {
    let applied = fleet("dev", vec![container("a", Some(100))]);
    let obs = observe(&applied, PowerState::Running);
    let mut want = container("a", Some(100));
    want.template = "ubuntu-25.04".into();
    want.memory = 4096;
    let desired = fleet("dev", vec![want]);
    let p = plan(&desired, Some(&applied), &obs).unwrap();
    assert_eq!(
        kinds(&p),
        vec![("a".into(), "replace")],
        "a replacement carries the other changes"
    );
    let ActionKind::Replace { reasons, .. } = &p.actions[0].kind else {
        unreachable!()
    };
    assert_eq!(
        reasons.iter().map(|r| r.field.as_str()).collect::<Vec<_>>(),
        vec!["template"]
    );
    let text = render::text::render(&p, false);
    assert!(text.contains("-/+ container \"a\" {"), "{text}");
    assert!(
        text.contains("~ template = \"debian-13\" -> \"ubuntu-25.04\" # forces replacement"),
        "{text}"
    );

    let mut protected_obs = obs.clone();
    protected_obs[0].config.protection = true;
    let err = plan(&desired, Some(&applied), &protected_obs).unwrap_err();
    assert!(
        matches!(&err.problems[0], PlanProblem::Protected { container, .. } if container == "a")
    );
    assert!(
        err.to_string()
            .contains("replaced because template changed"),
        "{err}"
    );
}

#[test]
fn removal_destroys_first_unless_protected() {
    let mut b = container("b", Some(101));
    b.startup = Some(Startup {
        order: Some(1),
        ..Startup::default()
    });
    let applied = fleet("dev", vec![container("a", Some(100)), b.clone()]);
    let obs = observe(&applied, PowerState::Running);
    // a leaves the file; c is new and takes a's vm_id; b is updated.
    b.cores = Some(4);
    let desired = fleet("dev", vec![b, container("c", Some(100))]);
    let p = plan(&desired, Some(&applied), &obs).unwrap();
    assert_eq!(
        kinds(&p),
        vec![
            ("a".into(), "destroy"),
            ("b".into(), "update"),
            ("c".into(), "create")
        ]
    );
    assert_eq!(
        p.actions[0].kind,
        ActionKind::Destroy {
            reason: DestroyReason::RemovedFromFile
        }
    );

    let mut protected_obs = obs.clone();
    protected_obs
        .iter_mut()
        .find(|o| o.vm_id == 100)
        .unwrap()
        .config
        .protection = true;
    let err = plan(&desired, Some(&applied), &protected_obs).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("container a (vm_id 100 on pve1) has `protection: true`"),
        "{msg}"
    );
    assert!(
        msg.contains("vm_id 100 is already used by container a of fleet dev"),
        "{msg}"
    );
}

#[test]
fn node_change_is_a_move() {
    let applied = fleet("dev", vec![container("a", Some(100))]);
    let obs = observe(&applied, PowerState::Running);
    let mut want = container("a", Some(100));
    want.node = Some("pve2".into());
    let p = plan(&fleet("dev", vec![want]), Some(&applied), &obs).unwrap();
    assert_eq!(
        one(&p, "a", "move").kind,
        ActionKind::Move {
            from: "pve1".into(),
            to: "pve2".into()
        }
    );
    assert_eq!(p.actions.len(), 1);
}

/// pve1 and pve2 in cluster A (pve2 without the datastore `fast`), pve3 in cluster B, solo standalone.
fn nodes() -> Nodes {
    pxfleet_spec::world::MemoryWorld::default()
        .with_node(
            "pve1",
            &[("local-lvm", &["rootdir"]), ("fast", &["rootdir"])],
            &["vmbr0"],
        )
        .with_node("pve2", &[("local-lvm", &["rootdir"])], &["vmbr0"])
        .with_node(
            "pve3",
            &[("local-lvm", &["rootdir"]), ("fast", &["rootdir"])],
            &["vmbr0"],
        )
        .with_node("solo", &[("local-lvm", &["rootdir"])], &["vmbr0"])
        .in_cluster("pve1", "A")
        .in_cluster("pve2", "A")
        .in_cluster("pve3", "B")
        .nodes
}

/// `a` on pve1 with a volume mount point on `fast`, moved to `to`: the plan with `nodes` known.
fn moved_to(to: &str, protection: bool) -> Result<Plan, PlanError> {
    let mut a = container("a", Some(100));
    a.mount_points = vec![MountPoint::Volume {
        datastore_id: "fast".into(),
        size_gib: 2,
        path: "/data".into(),
        backup: false,
        read_only: false,
        flags: Default::default(),
    }];
    let applied = fleet("dev", vec![a.clone()]);
    let mut obs = observe(&applied, PowerState::Running);
    obs[0].config.protection = protection;
    a.node = Some(to.into());
    a.protection = protection;
    plan_on(&fleet("dev", vec![a]), Some(&applied), &obs, &nodes())
}

#[test]
fn a_move_that_cannot_migrate_is_a_replacement_that_says_why() {
    // Within cluster A to a node without `fast`, then to cluster B, then to a standalone node.
    for (to, why) in [
        ("pve2", "datastore fast is not on pve2"),
        (
            "pve3",
            "pve3 is in cluster B, not A: pct migrate cannot cross clusters",
        ),
        (
            "solo",
            "solo is a standalone node, not in cluster A: pct migrate cannot cross clusters",
        ),
    ] {
        let p = moved_to(to, false).unwrap();
        assert_eq!(kinds(&p), vec![("a".into(), "replace")], "to {to}");
        let a = &p.actions[0];
        assert_eq!(a.node.as_deref(), Some("pve1"), "destroyed where it is");
        let ActionKind::Replace {
            reasons,
            attributes,
        } = &a.kind
        else {
            unreachable!()
        };
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        assert_eq!(reasons[0].field, "node");
        assert_eq!(reasons[0].from, Some(serde_json::json!("pve1")));
        assert_eq!(reasons[0].to, Some(serde_json::json!(to)));
        assert_eq!(reasons[0].why.as_deref(), Some(why));
        assert!(
            attributes
                .iter()
                .any(|x| x.field == "node" && x.value == Some(serde_json::json!(to))),
            "created on {to}: {attributes:?}"
        );
        // The plan a user reads says so before anything happens, in text, markdown and JSON.
        let text = render::text::render(&p, false);
        assert!(
            text.contains(&format!(
                "~ node = \"pve1\" -> \"{to}\" # forces replacement: {why}"
            )),
            "{text}"
        );
        let md = render::markdown::render(&p);
        assert!(md.contains(why), "{md}");
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["actions"][0]["reasons"][0]["why"], why, "{json}");
        // Protected: refused, naming why, nothing planned.
        let err = moved_to(to, true).unwrap_err();
        assert!(
            matches!(&err.problems[0], PlanProblem::Protected { container, .. } if container == "a"),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains(&format!("replaced because node changed ({why})")),
            "{err}"
        );
    }
}

#[test]
fn a_move_within_the_cluster_with_the_datastores_migrates() {
    // Without the mount point on `fast`, pve2 has everything a needs.
    let applied = fleet("dev", vec![container("a", Some(100))]);
    let obs = observe(&applied, PowerState::Stopped);
    let mut want = container("a", Some(100));
    want.node = Some("pve2".into());
    want.state = DesiredState::Stopped;
    let p = plan_on(&fleet("dev", vec![want]), Some(&applied), &obs, &nodes()).unwrap();
    assert_eq!(kinds(&p), vec![("a".into(), "move")]);
    // Nodes the planner knows nothing of are not second-guessed.
    let mut want = container("a", Some(100));
    want.node = Some("pve9".into());
    let p = plan_on(&fleet("dev", vec![want]), Some(&applied), &obs, &nodes()).unwrap();
    assert_eq!(one(&p, "a", "move").node.as_deref(), Some("pve1"));
}

#[test]
fn drift_is_repaired_and_deletions_are_recreated() {
    let f = fleet(
        "dev",
        vec![container("a", Some(100)), container("b", Some(101))],
    );
    let mut obs = observe(&f, PowerState::Running);
    obs[0].config.memory = 512; // changed by hand with pct set
    obs[0].config.tags = vec!["manual".into()];
    obs.remove(1); // b deleted by hand
    let p = plan(&f, Some(&f), &obs).unwrap();
    assert_eq!(
        kinds(&p),
        vec![("a".into(), "repair"), ("b".into(), "create")]
    );
    let ActionKind::Repair { drift, .. } = &p.actions[0].kind else {
        unreachable!()
    };
    assert_eq!(
        drift.iter().map(|c| c.field.as_str()).collect::<Vec<_>>(),
        vec!["memory", "tags"]
    );
    assert!(matches!(
        p.actions[1].kind,
        ActionKind::Create {
            reason: CreateReason::Missing,
            ..
        }
    ));
    // Without an applied spec the same difference is an ordinary update.
    let p = plan(&f, None, &obs).unwrap();
    assert_eq!(
        kinds(&p),
        vec![("a".into(), "update"), ("b".into(), "create")]
    );
}

#[test]
fn unmanaged_and_foreign_containers_are_never_touched() {
    let f = fleet("dev", vec![container("a", Some(100))]);
    let mut obs = observe(&f, PowerState::Running);
    let other = fleet("prod", vec![container("a", Some(200))]);
    obs.extend(observe(&other, PowerState::Stopped));
    let mut stray = observe(
        &fleet("x", vec![container("stray", Some(300))]),
        PowerState::Stopped,
    );
    stray[0].managed = None;
    obs.extend(stray);
    let mut orphan = observe(
        &fleet("dev", vec![container("ghost", Some(400))]),
        PowerState::Running,
    );
    obs.append(&mut orphan);
    let p = plan(&f, Some(&f), &obs).unwrap();
    assert_eq!(kinds(&p), vec![("ghost".into(), "destroy")]);
    assert_eq!(
        p.actions[0].kind,
        ActionKind::Destroy {
            reason: DestroyReason::Orphaned
        }
    );

    // Taking the vm_id of an unmanaged container is refused.
    let g = fleet(
        "dev",
        vec![container("a", Some(100)), container("new", Some(300))],
    );
    let err = plan(&g, Some(&f), &obs).unwrap_err();
    assert!(
        err.to_string().contains("container new: vm_id 300 is already used by a container pxfleet does not manage on pve1"),
        "{err}"
    );
}

#[test]
fn duplicate_marks_keep_the_desired_vm_id() {
    let f = fleet("dev", vec![container("a", Some(100))]);
    let mut obs = observe(&f, PowerState::Running);
    let mut dup = obs[0].clone();
    dup.vm_id = 99;
    dup.managed = Some(ManagedMark {
        fleet: "dev".into(),
        name: "a".into(),
    });
    obs.push(dup);
    let p = plan(&f, Some(&f), &obs).unwrap();
    assert_eq!(kinds(&p), vec![("a".into(), "destroy")]);
    assert_eq!(p.actions[0].vm_id, Some(99));
}

#[test]
fn secrets_never_appear_in_any_rendering() {
    let secret = "correct-horse-battery-staple";
    let mut with_pw = container("a", Some(100));
    with_pw.password = Some(Secret::new(secret));
    let p = plan(&fleet("dev", vec![with_pw.clone()]), None, &[]).unwrap();
    let applied = fleet("dev", vec![container("a", Some(100))]);
    let obs = observe(&applied, PowerState::Running);
    let changed = plan(&fleet("dev", vec![with_pw]), Some(&applied), &obs).unwrap();
    let ActionKind::Update { changes, .. } = &changed.actions[0].kind else {
        panic!("{:?}", changed.actions)
    };
    assert!(changes[0].sensitive && changes[0].field == "password");
    for p in [&p, &changed] {
        for out in [
            render::text::render(p, false),
            render::text::render(p, true),
            render::markdown::render(p),
            render::json::render(p),
            format!("{p:?}"),
        ] {
            assert!(!out.contains(secret), "secret leaked into:\n{out}");
            assert!(
                out.contains("sensitive"),
                "the change is still shown:\n{out}"
            );
        }
    }
}

#[test]
fn interfaces_and_mount_points_diff_by_field() {
    let applied = fleet("dev", vec![container("a", Some(100))]);
    let obs = observe(&applied, PowerState::Running);
    let mut want = container("a", Some(100));
    want.interfaces[0] = static_iface("eth0", "192.168.7.10/24", "192.168.7.1");
    want.mount_points.push(MountPoint::Volume {
        datastore_id: "local-lvm".into(),
        size_gib: 32,
        path: "/srv".into(),
        backup: true,
        read_only: false,
        flags: Default::default(),
    });
    let p = plan(&fleet("dev", vec![want]), Some(&applied), &obs).unwrap();
    let ActionKind::Update {
        changes,
        restart_required,
    } = &one(&p, "a", "update").kind
    else {
        unreachable!()
    };
    let fields: Vec<&str> = changes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(
        fields,
        vec!["ip_address", "gateway", "mount_points[\"/srv\"]"]
    );
    assert!(!restart_required, "netN and a new mpN are hot-plugged");
    assert_eq!(changes[0].to, Some(serde_json::json!("192.168.7.10/24")));
}

#[test]
fn json_round_trips_and_names_its_schema() {
    let f = fleet("dev", vec![container("a", Some(100))]);
    let p = plan(&f, None, &[]).unwrap();
    let text = render::json::render(&p);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["actions"][0]["action"], "create");
    assert_eq!(render::json::parse(&text).unwrap(), p);
    let bumped = text.replace("\"schema_version\": 1", "\"schema_version\": 99");
    assert!(render::json::parse(&bumped)
        .unwrap_err()
        .to_string()
        .contains("schema_version 99"));
}
