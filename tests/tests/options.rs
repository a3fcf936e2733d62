//! Container options of issue 34, each through its lifecycle on a pvesim node with the real controller and agent:
//! set at create, changed in place (with the restart PVE needs, announced by the plan), left alone when the file
//! stops giving it, and an empty plan after every submit.

use pxfleet_tests::day2::{pending, plan_is_empty, submit, UP};
use pxfleet_tests::{fleet_yaml, wait_until, Cluster};

const SYS: u32 = 2610;

fn has(c: &Cluster, vmid: u32, want: &[(&str, &str)]) -> Result<(), String> {
    let cfg = c.pct_config("mk33", vmid);
    match want
        .iter()
        .find(|(k, v)| cfg.get(*k).map(String::as_str) != Some(*v))
    {
        None if pending(c, "mk33", vmid).is_empty() => Ok(()),
        None => Err(format!("pending: {:?}", pending(c, "mk33", vmid))),
        Some((k, v)) => Err(format!("{k}: want {v}, config has {:?}", cfg.get(*k))),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arch_timezone_and_console_are_created_changed_with_a_restart_and_left_alone_when_dropped()
{
    let c = Cluster::start(1).await.expect("cluster");
    let body = |extra: &str| {
        fleet_yaml(
            "sys",
            &format!("  s: {{node: mk33, vm_id: {SYS}, memory: 512, disk_size: 4{extra}}}\n"),
        )
    };
    let first = ", arch: amd64, timezone: Europe/Berlin, console: {enabled: false, tty_count: 4, type: shell}";
    let path = submit(&c, "sys.yaml", &body(first)).await;
    c.wait_running("sys", &["s"], UP).await;
    has(
        &c,
        SYS,
        &[
            ("arch", "amd64"),
            ("timezone", "Europe/Berlin"),
            ("console", "0"),
            ("tty", "4"),
            ("cmode", "shell"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    plan_is_empty(&c, &path).await;
    let boots = c.runtime("mk33", SYS).unwrap()["boots"].clone();
    assert_eq!(boots, 1, "created and started once");

    // A change PVE applies at the next start: the plan says so, the agent restarts the container.
    let second =
        ", arch: amd64, timezone: UTC, console: {enabled: true, tty_count: 2, type: console}";
    let (code, out, err) = c
        .pxctl(&[
            "plan",
            c.write_fleet("sys2.yaml", &body(second)).to_str().unwrap(),
        ])
        .await;
    assert_eq!(code, 0, "{out}\n{err}");
    for field in [
        "timezone",
        "console.enabled",
        "console.tty_count",
        "console.type",
    ] {
        assert!(out.contains(field), "{field} in the plan:\n{out}");
    }
    assert!(
        out.contains("restart"),
        "the plan announces the restart:\n{out}"
    );
    assert!(
        !out.contains("arch"),
        "an unchanged arch is not in the plan:\n{out}"
    );
    let path = submit(&c, "sys.yaml", &body(second)).await;
    wait_until("second values in effect", UP, || async {
        has(
            &c,
            SYS,
            &[
                ("timezone", "UTC"),
                ("console", "1"),
                ("tty", "2"),
                ("cmode", "console"),
            ],
        )
    })
    .await;
    c.wait_running("sys", &["s"], UP).await;
    plan_is_empty(&c, &path).await;
    assert_eq!(
        c.runtime("mk33", SYS).unwrap()["boots"],
        2,
        "restarted once to apply them"
    );

    // Dropped from the file: not compared, so nothing changes on the node.
    let path = submit(&c, "sys.yaml", &body("")).await;
    plan_is_empty(&c, &path).await;
    has(
        &c,
        SYS,
        &[("arch", "amd64"), ("timezone", "UTC"), ("cmode", "console")],
    )
    .unwrap();

    // A value PVE refuses is refused at its field, before anything runs.
    let plan = c.plan(&body(", timezone: Europe/Atlantis")).await.unwrap();
    assert!(
        plan.diagnostics
            .iter()
            .any(|d| d.field.ends_with("timezone") && d.message.contains("Atlantis")),
        "{:?}",
        plan.diagnostics
    );
}

const NET: u32 = 2611;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_down_and_trunks_are_created_and_changed_live() {
    let c = Cluster::start(1).await.expect("cluster");
    let body = |net0: &str, net1: &str| {
        fleet_yaml(
            "nets",
            &format!(
                "  n:\n    node: mk33\n    vm_id: {NET}\n    memory: 512\n    disk_size: 4\n{net0}    \
                 extra_interfaces:\n      - {{name: eth1, bridge: vmbr0, ip_address: dhcp{net1}}}\n"
            ),
        )
    };
    let path = submit(
        &c,
        "nets.yaml",
        &body("    trunks: [10, 20]\n", ", link_down: true"),
    )
    .await;
    c.wait_running("nets", &["n"], UP).await;
    let cfg = c.pct_config("mk33", NET);
    assert!(cfg["net0"].contains(",trunks=10;20"), "{cfg:?}");
    assert!(cfg["net1"].contains(",link_down=1"), "{cfg:?}");
    plan_is_empty(&c, &path).await;
    let ct = c.containers("nets").await.unwrap().remove(0);
    assert_eq!(
        ct.addresses.len(),
        1,
        "the interface that is down got no DHCP lease: {:?}",
        ct.addresses
    );

    // Interfaces change on a running container without a restart.
    let next = body("    trunks: [30]\n", "");
    let (code, out, err) = c
        .pxctl(&["plan", c.write_fleet("nets2.yaml", &next).to_str().unwrap()])
        .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("trunks") && out.contains("link_down"), "{out}");
    assert!(!out.contains("restart"), "interfaces change live:\n{out}");
    let path = submit(&c, "nets.yaml", &next).await;
    wait_until("trunks 30, link up", UP, || async {
        let cfg = c.pct_config("mk33", NET);
        if cfg["net0"].contains(",trunks=30") && !cfg["net1"].contains("link_down=1") {
            Ok(())
        } else {
            Err(format!("{cfg:?}"))
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
    assert_eq!(c.runtime("mk33", NET).unwrap()["boots"], 1, "no restart");
    // Dropped: no trunks any more.
    let path = submit(&c, "nets.yaml", &body("", "")).await;
    wait_until("no trunks", UP, || async {
        let cfg = c.pct_config("mk33", NET);
        if cfg["net0"].contains("trunks") {
            Err(format!("{cfg:?}"))
        } else {
            Ok(())
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
}

const ROOT: u32 = 2612;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_disk_options_are_created_changed_with_a_restart_and_reset_when_dropped() {
    let c = Cluster::start(1).await.expect("cluster");
    let body = |rootfs: &str| {
        fleet_yaml(
            "root",
            &format!("  r: {{node: mk33, vm_id: {ROOT}, memory: 512, disk_size: 4{rootfs}}}\n"),
        )
    };
    let rootfs = |c: &Cluster| c.pct_config("mk33", ROOT)["rootfs"].clone();
    let path = submit(
        &c,
        "root.yaml",
        &body(", rootfs: {mount_options: [nodev, noatime], acl: true, replicate: false}"),
    )
    .await;
    c.wait_running("root", &["r"], UP).await;
    assert_eq!(
        rootfs(&c),
        format!("local-lvm:vm-{ROOT}-disk-0,acl=1,mountoptions=noatime;nodev,replicate=0,size=4G")
    );
    plan_is_empty(&c, &path).await;
    // pxctl output names the volume (what another container's `mount_points: [{volume: ...}]` would say)
    let out = c.pxctl_json(&["output", "--fleet", "root"]).await;
    assert_eq!(
        out["r"]["volumes"],
        serde_json::json!([{"disk": "rootfs", "path": "/", "volume": format!("local-lvm:vm-{ROOT}-disk-0"), "size_gib": 4.0}]),
        "{out}"
    );

    // Changed: applied at the next start, on the same volume, with its size kept.
    let next = body(", rootfs: {mount_options: [noatime], acl: false}");
    let (code, out, err) = c
        .pxctl(&["plan", c.write_fleet("root2.yaml", &next).to_str().unwrap()])
        .await;
    assert_eq!(code, 0, "{out}\n{err}");
    for f in [
        "rootfs.mount_options",
        "rootfs.acl",
        "rootfs.replicate",
        "restart",
    ] {
        assert!(out.contains(f), "{f} in the plan:\n{out}");
    }
    let path = submit(&c, "root.yaml", &next).await;
    let want = format!("local-lvm:vm-{ROOT}-disk-0,acl=0,mountoptions=noatime,size=4G");
    wait_until("new rootfs options in effect", UP, || async {
        let (now, p) = (rootfs(&c), pending(&c, "mk33", ROOT));
        if now == want && p.is_empty() {
            Ok(())
        } else {
            Err(format!("{now} pending {p:?}"))
        }
    })
    .await;
    c.wait_running("root", &["r"], UP).await;
    plan_is_empty(&c, &path).await;
    assert_eq!(c.runtime("mk33", ROOT).unwrap()["boots"], 2);

    // Dropped: PVE's defaults again (like a mount point's options).
    let path = submit(&c, "root.yaml", &body("")).await;
    let want = format!("local-lvm:vm-{ROOT}-disk-0,size=4G");
    wait_until("rootfs options gone", UP, || async {
        let now = rootfs(&c);
        if now == want && pending(&c, "mk33", ROOT).is_empty() {
            Ok(())
        } else {
            Err(now)
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_s_mknod_and_force_rw_sys_reach_the_node_and_go_again() {
    let c = Cluster::start(1).await.expect("cluster");
    let body = |features: &str| {
        fleet_yaml(
            "feat",
            &format!("  f: {{node: mk33, vm_id: 2613, memory: 512, disk_size: 4, features: {{nesting: true{features}}}}}\n"),
        )
    };
    // pxctl here is an admin's: no grant needed
    let path = submit(&c, "feat.yaml", &body(", mknod: true, force_rw_sys: true")).await;
    c.wait_running("feat", &["f"], UP).await;
    assert_eq!(
        c.pct_config("mk33", 2613)["features"],
        "force_rw_sys=1,mknod=1,nesting=1"
    );
    plan_is_empty(&c, &path).await;
    let path = submit(&c, "feat.yaml", &body("")).await;
    wait_until("mknod and force_rw_sys gone", UP, || async {
        let f = c.pct_config("mk33", 2613)["features"].clone();
        if f == "nesting=1" && pending(&c, "mk33", 2613).is_empty() {
            Ok(())
        } else {
            Err(f)
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_s_hookscript_is_set_changed_live_and_removed() {
    use std::os::unix::fs::PermissionsExt;
    let c = Cluster::start(1).await.expect("cluster");
    for name in ["a.sh", "b.sh"] {
        let out = c.pve(
            "mk33",
            "pvesm",
            &["path", &format!("local:snippets/{name}")],
        );
        assert_eq!(out.code, 0, "{}", out.stderr);
        let file = std::path::PathBuf::from(out.stdout.trim());
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let body = |hook: &str| {
        fleet_yaml(
            "hook",
            &format!("  h: {{node: mk33, vm_id: 2614, memory: 512, disk_size: 4{hook}}}\n"),
        )
    };
    let hookscript = |c: &Cluster| c.pct_config("mk33", 2614).get("hookscript").cloned();
    let path = submit(
        &c,
        "hook.yaml",
        &body(", hookscript: \"local:snippets/a.sh\""),
    )
    .await;
    c.wait_running("hook", &["h"], UP).await;
    assert_eq!(hookscript(&c).as_deref(), Some("local:snippets/a.sh"));
    plan_is_empty(&c, &path).await;
    let path = submit(
        &c,
        "hook.yaml",
        &body(", hookscript: \"local:snippets/b.sh\""),
    )
    .await;
    wait_until("hook script b", UP, || async {
        match hookscript(&c) {
            Some(h) if h == "local:snippets/b.sh" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
    assert_eq!(c.runtime("mk33", 2614).unwrap()["boots"], 1, "applied live");
    // left out: the node's hook script goes
    let path = submit(&c, "hook.yaml", &body("")).await;
    wait_until("no hook script", UP, || async {
        match hookscript(&c) {
            None => Ok(()),
            Some(h) => Err(h),
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_and_entrypoint_given_empty_are_removed_left_out_are_left_alone() {
    let c = Cluster::start(1).await.expect("cluster");
    let body = |extra: &str| {
        fleet_yaml(
            "rt",
            &format!("  e: {{node: mk33, vm_id: 2615, memory: 512, disk_size: 4{extra}}}\n"),
        )
    };
    let path = submit(
        &c,
        "rt.yaml",
        &body(", env: {APP: blue, MODE: x}, entrypoint: \"/sbin/init --log\""),
    )
    .await;
    c.wait_running("rt", &["e"], UP).await;
    let cfg = c.pct_config("mk33", 2615);
    assert_eq!(
        cfg.get("entrypoint").map(String::as_str),
        Some("/sbin/init --log")
    );
    assert!(cfg.contains_key("env"), "{cfg:?}");
    plan_is_empty(&c, &path).await;
    // Left out: not compared, the node keeps them.
    let path = submit(&c, "rt.yaml", &body("")).await;
    plan_is_empty(&c, &path).await;
    assert!(c.pct_config("mk33", 2615).contains_key("env"));
    // Given empty: none, so they are removed (at the next start, which the plan announces).
    let next = body(", env: {}, entrypoint: \"\"");
    let (code, out, err) = c
        .pxctl(&["plan", c.write_fleet("rt2.yaml", &next).to_str().unwrap()])
        .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("env") && out.contains("entrypoint") && out.contains("restart"),
        "{out}"
    );
    let path = submit(&c, "rt.yaml", &next).await;
    wait_until("env and entrypoint removed", UP, || async {
        let cfg = c.pct_config("mk33", 2615);
        if cfg.contains_key("env")
            || cfg.contains_key("entrypoint")
            || !pending(&c, "mk33", 2615).is_empty()
        {
            Err(format!("{cfg:?}"))
        } else {
            Ok(())
        }
    })
    .await;
    c.wait_running("rt", &["e"], UP).await;
    plan_is_empty(&c, &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_point_s_keepattrs_is_created_and_changed_with_a_restart() {
    let c = Cluster::start(1).await.expect("cluster");
    let body = |opts: &str| {
        fleet_yaml(
            "mpx",
            &format!(
                "  m:\n    node: mk33\n    vm_id: 2616\n    memory: 512\n    disk_size: 4\n    \
                 mount_points:\n      - {{datastore_id: local-lvm, size: 1, path: /data{opts}}}\n"
            ),
        )
    };
    let mp0 = |c: &Cluster| c.pct_config("mk33", 2616)["mp0"].clone();
    let path = submit(&c, "mpx.yaml", &body(", keepattrs: true")).await;
    c.wait_running("mpx", &["m"], UP).await;
    assert_eq!(
        mp0(&c),
        "local-lvm:vm-2616-disk-1,mp=/data,keepattrs=1,size=1G"
    );
    plan_is_empty(&c, &path).await;
    let path = submit(&c, "mpx.yaml", &body("")).await;
    wait_until("keepattrs off", UP, || async {
        let now = mp0(&c);
        if now == "local-lvm:vm-2616-disk-1,mp=/data,size=1G"
            && pending(&c, "mk33", 2616).is_empty()
        {
            Ok(())
        } else {
            Err(now)
        }
    })
    .await;
    c.wait_running("mpx", &["m"], UP).await;
    plan_is_empty(&c, &path).await;
    assert_eq!(
        c.runtime("mk33", 2616).unwrap()["boots"],
        2,
        "restarted to apply it"
    );
}

/// A mount point's own `idmap` (PVE 9.2): refused at plan time on a node that reports an older PVE, naming the
/// field and the node's version; on a 9.2 node created, changed with the restart it needs, and removed, with an
/// empty plan after each submit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_point_s_idmap_needs_pve_9_2_and_goes_through_its_lifecycle_there() {
    let mut c = Cluster::start(0).await.expect("cluster");
    c.add_node_with("mk33", &pxfleet_tests::NodeSetup::default())
        .await
        .unwrap();
    c.add_node_with(
        "mk34",
        &pxfleet_tests::NodeSetup {
            overrides: "pve_version = \"9.2.0\"\n".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let body = |node: &str, opts: &str| {
        fleet_yaml(
            "mpi",
            &format!(
                "  m:\n    node: {node}\n    vm_id: 2617\n    memory: 512\n    disk_size: 4\n    \
                 mount_points:\n      - {{datastore_id: local-lvm, size: 1, path: /data{opts}}}\n"
            ),
        )
    };
    let mapped = ", idmap: [{type: uid, container_id: 1000, disk_id: 1000, size: 1}]";
    wait_until("mk33 reports its version", UP, || async {
        let nodes = c.pxctl_json(&["get", "nodes"]).await;
        let ok = nodes
            .as_array()
            .is_some_and(|ns| ns.iter().all(|n| n["pve_version"] != ""));
        if ok {
            Ok(())
        } else {
            Err(nodes.to_string())
        }
    })
    .await;
    let (code, out, err) = c
        .pxctl(&[
            "plan",
            c.write_fleet("old.yaml", &body("mk33", mapped))
                .to_str()
                .unwrap(),
        ])
        .await;
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("containers.m.mount_points.0.idmap")
            && err.contains("node mk33 runs PVE 9.1.2; a mount point's idmap needs PVE 9.2"),
        "{err}"
    );

    let mp0 = |c: &Cluster| c.pct_config("mk34", 2617)["mp0"].clone();
    let path = submit(&c, "mpi.yaml", &body("mk34", mapped)).await;
    c.wait_running("mpi", &["m"], UP).await;
    assert_eq!(
        mp0(&c),
        "local-lvm:vm-2617-disk-1,mp=/data,idmap=u:1000:1000:1,size=1G"
    );
    plan_is_empty(&c, &path).await;
    let path = submit(&c, "mpi.yaml", &body("mk34", ", idmap: passthrough")).await;
    wait_until("idmap passthrough", UP, || async {
        let now = mp0(&c);
        if now == "local-lvm:vm-2617-disk-1,mp=/data,idmap=passthrough,size=1G"
            && pending(&c, "mk34", 2617).is_empty()
        {
            Ok(())
        } else {
            Err(now)
        }
    })
    .await;
    c.wait_running("mpi", &["m"], UP).await;
    plan_is_empty(&c, &path).await;
    let path = submit(&c, "mpi.yaml", &body("mk34", "")).await;
    wait_until("idmap removed", UP, || async {
        let now = mp0(&c);
        if now == "local-lvm:vm-2617-disk-1,mp=/data,size=1G"
            && pending(&c, "mk34", 2617).is_empty()
        {
            Ok(())
        } else {
            Err(now)
        }
    })
    .await;
    c.wait_running("mpi", &["m"], UP).await;
    plan_is_empty(&c, &path).await;
}

/// A mount path relative to the container's root (`mnt/local`, as bpg's acceptance tests write it): PVE takes it as
/// written, so pxfleet passes it as written, and the plan is empty afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_mount_path_reaches_the_node_as_written() {
    let c = Cluster::start(1).await.expect("cluster");
    let yaml = fleet_yaml(
        "rel",
        "  r:\n    node: mk33\n    vm_id: 2618\n    mount_points:\n      - {datastore_id: local-lvm, size: 1, path: mnt/local}\n",
    );
    let path = submit(&c, "rel.yaml", &yaml).await;
    c.wait_running("rel", &["r"], UP).await;
    assert_eq!(
        c.pct_config("mk33", 2618)["mp0"],
        "local-lvm:vm-2618-disk-1,mp=mnt/local,size=1G"
    );
    plan_is_empty(&c, &path).await;
}

/// `pool` (bpg `pool_id`): a container is created into an existing PVE pool (`pct create --pool`), moved to
/// another by a submit (`pvesh set /pools --allow-move`), left where it is when the file stops giving one, and a
/// pool that does not exist fails the create with PVE's words; an empty plan after each submit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_is_joined_at_create_changed_and_left_alone_when_dropped() {
    let c = Cluster::start(1).await.expect("cluster");
    for pool in ["web", "db"] {
        let o = c.pve("mk33", "pvesh", &["create", "/pools", "--poolid", pool]);
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
    let pool_of = |c: &Cluster, vmid: u64| {
        let o = c.pve(
            "mk33",
            "pvesh",
            &[
                "get",
                "/cluster/resources",
                "--type",
                "vm",
                "--output-format",
                "json",
            ],
        );
        let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("json");
        v.as_array()
            .and_then(|a| a.iter().find(|e| e["vmid"] == vmid).cloned())
            .and_then(|e| e["pool"].as_str().map(String::from))
    };
    let body = |extra: &str| {
        fleet_yaml(
            "pl",
            &format!("  p: {{node: mk33, vm_id: 2619, memory: 512, disk_size: 4{extra}}}\n"),
        )
    };
    let path = submit(&c, "pl.yaml", &body(", pool: web")).await;
    c.wait_running("pl", &["p"], UP).await;
    assert_eq!(pool_of(&c, 2619).as_deref(), Some("web"));
    plan_is_empty(&c, &path).await;

    let path = submit(&c, "pl.yaml", &body(", pool: db")).await;
    wait_until("moved to db", UP, || async {
        match pool_of(&c, 2619) {
            Some(p) if p == "db" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
    assert_eq!(
        c.runtime("mk33", 2619).unwrap()["boots"],
        1,
        "no restart for a pool"
    );

    // Left out: not compared, the container stays in its pool.
    let path = submit(&c, "pl.yaml", &body("")).await;
    plan_is_empty(&c, &path).await;
    assert_eq!(pool_of(&c, 2619).as_deref(), Some("db"));

    // A pool PVE does not have: the create fails with its error.
    let yaml = fleet_yaml(
        "pl2",
        "  q: {node: mk33, vm_id: 2620, memory: 512, disk_size: 4, pool: nosuch}\n",
    );
    let p2 = c.write_fleet("pl2.yaml", &yaml);
    let (code, out, err) = c
        .pxctl(&["submit", p2.to_str().unwrap(), "-y", "--timeout", "60s"])
        .await;
    assert_ne!(code, 0, "{out}\n{err}");
    let cs = c.containers("pl2").await.unwrap();
    assert!(
        cs[0].last_error.contains("pool 'nosuch' does not exist"),
        "{cs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_are_taken_listed_rolled_back_and_deleted_and_a_rollback_is_repaired_to_the_file()
{
    use pxfleet_tests::v1 as pb;
    let c = Cluster::start(1).await.expect("cluster");
    let vmid = 2621;
    let body = |memory: u32| {
        fleet_yaml(
            "sn",
            &format!("  s: {{node: mk33, vm_id: {vmid}, memory: {memory}, disk_size: 4}}\n"),
        )
    };
    submit(&c, "sn.yaml", &body(512)).await;
    c.wait_running("sn", &["s"], UP).await;

    let (code, out, err) = c
        .pxctl(&[
            "snapshot",
            "create",
            "sn",
            "s",
            "before",
            "--description",
            "memory 512",
        ])
        .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("Snapshot before taken."), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("before") && l.contains("memory 512")),
        "{out}"
    );
    let o = c.pve("mk33", "pct", &["listsnapshot", &vmid.to_string()]);
    assert!(o.stdout.contains("before"), "{}", o.stdout);

    // The file moves on; the snapshot keeps the old memory.
    let path = submit(&c, "sn.yaml", &body(1024)).await;
    wait_until("memory 1024", UP, || async {
        has(&c, vmid, &[("memory", "1024")])
    })
    .await;
    plan_is_empty(&c, &path).await;
    let boots = c.runtime("mk33", vmid).unwrap()["boots"].as_u64().unwrap();

    // A rollback of a running container: PVE stops it, pxfleet starts it again; the old memory comes back with
    // the snapshot and is repaired to the file by the next pass, without a destroy.
    let (code, out, err) = c
        .pxctl(&["snapshot", "rollback", "sn", "s", "before", "-y"])
        .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("Rolled back to snapshot before"), "{out}");
    wait_until("repaired to the file after the rollback", UP, || async {
        has(&c, vmid, &[("memory", "1024")])
    })
    .await;
    c.wait_running("sn", &["s"], UP).await;
    assert!(c.runtime("mk33", vmid).unwrap()["boots"].as_u64().unwrap() > boots);
    plan_is_empty(&c, &path).await;
    let ops = c.pxctl_json(&["get", "operations", "--fleet", "sn"]).await;
    let kinds: Vec<String> = ops
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            format!(
                "{} {}",
                o["kind"].as_str().unwrap(),
                o["reason"].as_str().unwrap()
            )
        })
        .collect();
    let after_rollback = kinds
        .iter()
        .skip_while(|k| !k.starts_with("snapshot snapshot rollback"))
        .collect::<Vec<_>>();
    assert!(
        after_rollback
            .iter()
            .any(|k| k.starts_with("update") && k.contains("memory")),
        "the snapshot's memory was repaired by an update: {kinds:#?}"
    );

    // A second snapshot is a child of the first; the JSON list says so.
    let (code, out, err) = c.pxctl(&["snapshot", "create", "sn", "s", "after"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = c
        .pxctl(&["snapshot", "list", "sn", "s", "-o", "json"])
        .await;
    assert_eq!(code, 0, "{out}\n{err}");
    let list: serde_json::Value = serde_json::from_str(&out).expect(&out);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["before", "after"], "{out}");
    assert_eq!(list[1]["parent"], "before", "{out}");
    assert!(list[0]["taken"].is_string(), "{out}");

    let (code, out, err) = c.pxctl(&["snapshot", "delete", "sn", "s", "before"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("Snapshot before deleted."), "{out}");
    let o = c.pve("mk33", "pct", &["listsnapshot", &vmid.to_string()]);
    assert!(
        !o.stdout.contains("before") && o.stdout.contains("after"),
        "{}",
        o.stdout
    );

    // Refused with a clear word, nothing queued: a bad name, a container the fleet does not have, a rollback to a
    // snapshot PVE does not have (failed on the node, with PVE's error).
    let (code, _, err) = c.pxctl(&["snapshot", "create", "sn", "s", "1st"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("snapshot name `1st`"), "{err}");
    let (code, _, err) = c.pxctl(&["snapshot", "create", "sn", "nope", "x1"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("fleet sn has no container nope"), "{err}");
    let (code, _, err) = c
        .pxctl(&["snapshot", "rollback", "sn", "s", "gone", "-y"])
        .await;
    assert_ne!(code, 0);
    assert!(err.contains("snapshot rollback of s failed"), "{err}");
    // A failed snapshot operation is not the container's state: it stays running, with no error.
    let cs = c.containers("sn").await.unwrap();
    assert_eq!(cs[0].last_error, "", "{cs:?}");
    plan_is_empty(&c, &path).await;

    // Role boundaries: a viewer lists but may not take, roll back or delete; an operator of another fleet neither.
    let viewer = c
        .issue_user("vera", pxfleet_tls::Role::Viewer)
        .await
        .unwrap();
    let other = c
        .issue_user_for("otto", pxfleet_tls::Role::Operator, &["elsewhere"])
        .await
        .unwrap();
    for who in [&viewer, &other] {
        let mut api = c.api_as(who).await.unwrap();
        for action in [
            pb::SnapshotAction::Create,
            pb::SnapshotAction::Rollback,
            pb::SnapshotAction::Delete,
        ] {
            let e = api
                .snapshot(pb::SnapshotRequest {
                    fleet: "sn".into(),
                    container: "s".into(),
                    action: action as i32,
                    name: "after".into(),
                    description: String::new(),
                })
                .await
                .unwrap_err();
            assert_eq!(e.code(), tonic::Code::PermissionDenied, "{action:?}: {e:?}");
        }
    }
    let mut api = c.api_as(&viewer).await.unwrap();
    api.snapshot(pb::SnapshotRequest {
        fleet: "sn".into(),
        container: "s".into(),
        action: pb::SnapshotAction::List as i32,
        ..Default::default()
    })
    .await
    .expect("a viewer lists snapshots");
    let o = c.pve("mk33", "pct", &["listsnapshot", &vmid.to_string()]);
    assert!(o.stdout.contains("after"), "nothing deleted: {}", o.stdout);
    let (code, out, err) = c.pxctl(&["audit"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("snapshot_create") && out.contains("snapshot_rollback"),
        "{out}"
    );
}
