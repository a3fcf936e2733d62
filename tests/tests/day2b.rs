//! Day-2 lifecycle, second part (issue 10): protection, failed applies that converge once fixed, restart policy,
//! adopt. Real controller, real agents, pvesim nodes.

use std::time::Duration;

use pxfleet_tests::day2::{create_by_hand, pending, plan_is_empty, submit, UP};
use pxfleet_tests::{describe, fleet_yaml, v1 as pb, wait_until, Cluster};

fn revisions(v: serde_json::Value) -> usize {
    v.as_array().map(Vec::len).unwrap_or_default()
}

/// Waits until container `name` of `fleet` shows `state`.
async fn wait_state(c: &Cluster, fleet: &str, name: &str, state: pb::ContainerState) {
    wait_until(&format!("{name} {state:?}"), UP, || async {
        let cs = c.containers(fleet).await.map_err(|e| e.to_string())?;
        match cs.iter().find(|x| x.name == name) {
            Some(x) if x.state == state as i32 => Ok(()),
            _ => Err(describe(&cs)),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protected_container_left_out_of_the_file_refuses_the_whole_submit() {
    let c = Cluster::start(1).await.expect("cluster");
    let both = fleet_yaml(
        "prot",
        "  keep: {vm_id: 1800, memory: 512, disk_size: 4, protection: true}\n  \
         web: {vm_id: 1801, memory: 512, disk_size: 4}\n",
    );
    submit(&c, "prot.yaml", &both).await;
    c.wait_running("prot", &["keep", "web"], UP).await;
    let before = revisions(c.pxctl_json(&["history", "--fleet", "prot"]).await);

    // keep left out, web grown: refused as a whole, naming keep and what to do.
    let without = fleet_yaml("prot", "  web: {vm_id: 1801, memory: 1024, disk_size: 4}\n");
    let path = c.write_fleet("prot.yaml", &without);
    let path = path.to_str().unwrap();
    let (code, out, err) = c.pxctl(&["submit", path, "-y"]).await;
    assert_ne!(code, 0, "submit accepted: {out}\n{err}");
    let text = format!("{out}\n{err}");
    assert!(text.contains("keep"), "{text}");
    assert!(text.contains("protection: true"), "{text}");
    let (code, _, err) = c.pxctl(&["plan", path]).await;
    assert_ne!(code, 0);
    assert!(err.contains("keep") && err.contains("protection"), "{err}");

    // Nothing of it was applied: no revision, web's memory unchanged, keep still there.
    assert_eq!(
        revisions(c.pxctl_json(&["history", "--fleet", "prot"]).await),
        before
    );
    tokio::time::sleep(Duration::from_millis(600)).await; // a few reconcile passes
    assert_eq!(
        c.pct_config("mk33", 1801).get("memory").map(String::as_str),
        Some("512")
    );
    assert!(c.vmids_on("mk33").contains(&1800));
    let ops = c.operations("prot").await.unwrap();
    assert!(
        !ops.iter()
            .any(|o| o.kind == pb::OperationKind::Destroy as i32
                || o.kind == pb::OperationKind::Update as i32),
        "{ops:?}"
    );

    // Unprotected first, then removed: accepted.
    let unprotect = both.replace("protection: true", "protection: false");
    submit(&c, "prot.yaml", &unprotect).await;
    wait_until("keep unprotected", UP, || async {
        let cfg = c.pct_config("mk33", 1800);
        match cfg.get("protection").map(String::as_str) {
            None | Some("0") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let path = submit(&c, "prot.yaml", &without).await;
    wait_until("keep destroyed", UP, || async {
        if c.vmids_on("mk33").contains(&1800) {
            Err("still there".to_string())
        } else {
            Ok(())
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
}

/// Submits fleet `fleet` (file `FLEET.yaml`) with container `a` (vm_id `vm_id`) and `b` (the next vm_id) made from
/// an appliance that does not exist: the submit fails and `b` ends failed for good. Returns the file's text.
async fn submit_bad_template(c: &Cluster, fleet: &str, vm_id: u32) -> String {
    let bad = fleet_yaml(
        fleet,
        &format!(
            "  a: {{vm_id: {vm_id}, memory: 512, disk_size: 4}}\n  \
             b: {{vm_id: {}, memory: 512, disk_size: 4, template: nope}}\n",
            vm_id + 1
        ),
    )
    .replace(
        "templates:\n",
        "templates:\n  nope: {pveam: no-such-appliance_1.0_amd64.tar.zst}\n",
    );
    let path = c.write_fleet(&format!("{fleet}.yaml"), &bad);
    let path = path.to_str().unwrap().to_string();
    let (code, out, err) = c.pxctl(&["submit", &path, "-y", "--timeout", "60s"]).await;
    assert_ne!(code, 0, "a bad template succeeded: {out}\n{err}");
    wait_state(c, fleet, "b", pb::ContainerState::Failed).await;
    bad
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_apply_converges_once_fixed_or_retried() {
    let c = Cluster::start(1).await.expect("cluster");
    let node = &c.nodes[0];
    // Every create fails on the node: the container ends failed after its attempts.
    std::fs::write(
        node.sim.join("faults.toml"),
        "[fail_creates]\ncount = 1000\nmessage = \"no room on the node (simulated)\"\n",
    )
    .unwrap();
    let yaml = fleet_yaml("fix", "  a: {vm_id: 1900, memory: 512, disk_size: 4}\n");
    let path = c.write_fleet("fix.yaml", &yaml);
    let path = path.to_str().unwrap().to_string();
    let (code, out, err) = c.pxctl(&["submit", &path, "-y", "--timeout", "60s"]).await;
    assert_ne!(
        code, 0,
        "submit succeeded although creates fail: {out}\n{err}"
    );
    wait_state(&c, "fix", "a", pb::ContainerState::Failed).await;
    let before = revisions(c.pxctl_json(&["history", "--fleet", "fix"]).await);

    // The cause goes away; the same file with --retry-failed: a new revision, retried, running.
    std::fs::remove_file(node.sim.join("faults.toml")).unwrap();
    let _ = std::fs::remove_file(node.sim.join("faults-fired.json"));
    let (code, out, err) = c.pxctl(&["submit", &path, "-y", "--retry-failed"]).await;
    assert_eq!(code, 0, "retry: {out}\n{err}\n{}", c.logs());
    c.wait_running("fix", &["a"], UP).await;
    assert_eq!(
        revisions(c.pxctl_json(&["history", "--fleet", "fix"]).await),
        before + 1
    );
    plan_is_empty(&c, &path).await;

    // A bad template (no such appliance): fails for good; fixed in the file and resubmitted: converges, no
    // manual cleanup.
    let bad = submit_bad_template(&c, "fix", 1900).await;
    let fixed = bad.replace("template: nope", "template: deb13");
    let path = submit(&c, "fix.yaml", &fixed).await;
    c.wait_running("fix", &["a", "b"], UP).await;
    plan_is_empty(&c, &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopt_takes_an_existing_container_under_management_where_it_is() {
    let c = Cluster::start(1).await.expect("cluster");
    // Made by hand: no pxfleet mark, 256 MiB.
    create_by_hand(
        &c,
        "mk33",
        2000,
        &[
            "--hostname",
            "legacy",
            "--memory",
            "256",
            "--swap",
            "512",
            "--rootfs",
            "local-lvm:4",
            "--unprivileged",
            "1",
            "--net0",
            "name=eth0,bridge=vmbr0,ip=dhcp,type=veth",
        ],
    );
    assert_eq!(c.pve("mk33", "pct", &["start", "2000"]).code, 0);
    let before = c.pct_config("mk33", 2000);
    let mac = |cfg: &std::collections::BTreeMap<String, String>| {
        cfg.get("net0")
            .and_then(|n| n.split(',').find_map(|p| p.strip_prefix("hwaddr=")))
            .map(str::to_string)
    };
    let mac_before = mac(&before).expect("PVE generated a MAC");

    // Without adopt: the vm_id is someone else's.
    let plain = fleet_yaml(
        "ad",
        "  legacy: {node: mk33, vm_id: 2000, memory: 512, disk_size: 4}\n",
    );
    wait_until(
        "the hand-made container is reported running and holds vm_id 2000",
        UP,
        || async {
            let plan = c.plan(&plain).await.map_err(|e| e.to_string())?;
            // Observed running too: it was created stopped and then started, and an observation taken in
            // between would make the adopt plan below start it.
            let v = c.pxctl_json(&["get", "unmanaged", "--node", "mk33"]).await;
            let running = v.as_array().is_some_and(|rows| {
                rows.iter()
                    .any(|r| r["vm_id"] == 2000 && r["state"] == "running")
            });
            if running && plan.diagnostics.iter().any(|d| d.message.contains("2000")) {
                Ok(())
            } else {
                Err(format!("{:?}", plan.diagnostics))
            }
        },
    )
    .await;

    // adopt: true: the plan adopts it and shows the one difference, no create.
    let yaml = fleet_yaml(
        "ad",
        "  legacy: {node: mk33, vm_id: 2000, adopt: true, memory: 512, disk_size: 4}\n",
    );
    let path = c.write_fleet("ad.yaml", &yaml);
    let path = path.to_str().unwrap().to_string();
    let (code, text, err) = c.pxctl(&["plan", &path]).await;
    assert_eq!(code, 0, "{text}\n{err}");
    assert!(text.contains("adopted"), "{text}");
    assert!(text.contains("memory"), "{text}");
    assert!(
        !text.contains("to create") || text.contains("0 to create"),
        "{text}"
    );
    let plan = c.plan(&yaml).await.unwrap();
    assert!(plan.diagnostics.is_empty(), "{:?}", plan.diagnostics);
    let json: serde_json::Value = serde_json::from_str(&plan.plan_json).unwrap();
    let actions: Vec<&str> = json["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["update"], "{}", plan.plan_json);
    assert!(
        !plan.plan_json.contains("mac_address"),
        "{}",
        plan.plan_json
    );

    submit(&c, "ad.yaml", &yaml).await;
    c.wait_running("ad", &["legacy"], UP).await;
    let after = c.pct_config("mk33", 2000);
    assert!(
        after
            .get("description")
            .is_some_and(|d| d.contains("fleet=ad") && d.contains("name=legacy")),
        "{after:?}"
    );
    assert_eq!(after.get("memory").map(String::as_str), Some("512"));
    assert_eq!(
        mac(&after).as_deref(),
        Some(mac_before.as_str()),
        "MAC kept"
    );
    assert_eq!(c.vmids_on("mk33"), vec![2000]);
    let ops = c.operations("ad").await.unwrap();
    assert!(
        ops.iter()
            .all(|o| o.kind == pb::OperationKind::Update as i32),
        "{ops:?}"
    );
    plan_is_empty(&c, &path).await;

    // Something that cannot change in place is refused, not a replacement of the adopted container.
    create_by_hand(
        &c,
        "mk33",
        2001,
        &[
            "--hostname",
            "priv",
            "--rootfs",
            "local-lvm:4",
            "--unprivileged",
            "0",
        ],
    );
    let yaml2 = yaml.replace(
        "containers:\n",
        "allow_privileged: false\ncontainers:\n  priv: {node: mk33, vm_id: 2001, adopt: true, disk_size: 4}\n",
    );
    wait_until(
        "adopting a privileged container as unprivileged is refused",
        UP,
        || async {
            let plan = c.plan(&yaml2).await.map_err(|e| e.to_string())?;
            let msgs: Vec<String> = plan.diagnostics.iter().map(|d| d.message.clone()).collect();
            if msgs.iter().any(|m| {
                m.contains("priv") && m.contains("cannot be adopted") && m.contains("unprivileged")
            }) {
                Ok(())
            } else {
                Err(format!("{msgs:?}"))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_migrates_every_unpinned_container_off_respecting_anti_affinity() {
    let c = Cluster::start(3).await.expect("cluster");
    let web = "labels: {app: web}, constraints: {anti_affinity: [app]}";
    let body = |extra: &str| {
        fleet_yaml(
            "dr",
            &format!(
                "  a: {{vm_id: 2100, memory: 512, disk_size: 4, {web}}}\n  \
                 b: {{vm_id: 2101, memory: 512, disk_size: 4, {web}}}\n{extra}"
            ),
        )
    };
    submit(&c, "dr.yaml", &body("")).await;
    let cs = c.wait_running("dr", &["a", "b"], UP).await;
    let node_of =
        |cs: &[pb::ContainerInfo], n: &str| cs.iter().find(|x| x.name == n).unwrap().node.clone();
    let (na, nb) = (node_of(&cs, "a"), node_of(&cs, "b"));
    assert_ne!(na, nb, "anti-affinity: {}", describe(&cs));
    // p is pinned to a's node by the file: the drain leaves it and says why.
    let path = submit(
        &c,
        "dr.yaml",
        &body(&format!(
            "  p: {{node: {na}, vm_id: 2102, memory: 512, disk_size: 4}}\n"
        )),
    )
    .await;
    c.wait_running("dr", &["a", "b", "p"], UP).await;
    let mac = |node: &str| {
        c.pct_config(node, 2100)
            .get("net0")
            .cloned()
            .unwrap_or_default()
    };
    let mac_before = mac(&na);

    let (code, out, err) = c.pxctl(&["node", "drain", &na]).await;
    assert_eq!(code, 1, "p stays, so exit 1: {out}\n{err}\n{}", c.logs());
    assert!(out.contains("dr/p stays") && out.contains("pins"), "{out}");
    assert!(out.contains("dr/a (vm_id 2100) -> "), "{out}");
    assert!(out.contains("1 moved, 0 failed, 1 staying"), "{out}");
    // a went to the third node (b's node is excluded by anti-affinity), same vm_id and MAC, by migrate.
    let third: String = pxfleet_tests::node_names(3)
        .into_iter()
        .find(|n| *n != na && *n != nb)
        .unwrap();
    let cs = c.wait_running("dr", &["a", "b", "p"], UP).await;
    assert_eq!(node_of(&cs, "a"), third, "{}", describe(&cs));
    assert!(c.vmids_on(&third).contains(&2100));
    assert!(!c.vmids_on(&na).contains(&2100));
    assert_eq!(mac(&third), mac_before);
    let ops = c.operations("dr").await.unwrap();
    assert!(
        ops.iter()
            .any(|o| o.kind == pb::OperationKind::Migrate as i32 && o.container == "a"),
        "{ops:?}"
    );
    assert!(
        !ops.iter()
            .any(|o| o.kind == pb::OperationKind::Destroy as i32),
        "{ops:?}"
    );
    // The node stays cordoned; the file's plan is empty (a keeps its new node); uncordon works.
    let nodes = c.nodes_info().await.unwrap();
    let info = nodes.iter().find(|n| n.name == na).unwrap();
    assert_eq!(info.status, pb::NodeStatus::Cordoned as i32, "{info:?}");
    plan_is_empty(&c, &path).await;
    let (code, _, err) = c.pxctl(&["node", "uncordon", &na]).await;
    assert_eq!(code, 0, "{err}");
    let nodes = c.nodes_info().await.unwrap();
    let info = nodes.iter().find(|n| n.name == na).unwrap();
    assert_eq!(info.status, pb::NodeStatus::Ready as i32, "{info:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_policy_never_leaves_changes_pending_and_says_so() {
    let c = Cluster::start(1).await.expect("cluster");
    let body = |domain: &str| {
        fleet_yaml(
            "rp",
            &format!(
                "  app: {{node: mk33, vm_id: 2200, memory: 512, disk_size: 4, restart_policy: never, \
                 dns: {{domain: {domain}}}}}\n"
            ),
        )
    };
    let path = submit(&c, "rp.yaml", &body("a.example.org")).await;
    c.wait_running("rp", &["app"], UP).await;
    plan_is_empty(&c, &path).await;
    let started = c.runtime("mk33", 2200).unwrap()["started"].clone();
    tokio::time::sleep(Duration::from_millis(1100)).await; // `started` ticks in seconds

    // The plan says the change waits for the next restart, and announces no restart.
    let next = body("b.example.org");
    let path = c.write_fleet("rp.yaml", &next);
    let path = path.to_str().unwrap().to_string();
    let (code, text, err) = c.pxctl(&["plan", &path]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("pending until the next restart (restart_policy: never)"),
        "{text}"
    );
    let plan = c.plan(&next).await.unwrap();
    assert!(
        plan.plan_json.contains("\"restart_required\": false"),
        "{}",
        plan.plan_json
    );
    let (code, out, err) = c.pxctl(&["submit", &path, "-y"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    // Applied with pct set, left pending, not restarted; `pxctl get containers` says so.
    wait_until("pending and shown", UP, || async {
        let p = pending(&c, "mk33", 2200);
        let (_, table, _) = c.pxctl(&["get", "containers", "--fleet", "rp"]).await;
        if p.iter().any(|l| l.contains("searchdomain"))
            && table.contains("pending restart: dns.domain")
        {
            Ok(())
        } else {
            Err(format!("pending {p:?}\n{table}"))
        }
    })
    .await;
    assert_eq!(
        c.runtime("mk33", 2200).unwrap()["started"],
        started,
        "restarted"
    );
    let json = c.pxctl_json(&["get", "containers", "--fleet", "rp"]).await;
    assert_eq!(json[0]["pending_restart"][0], "dns.domain", "{json}");
    // Nothing else to do: the plan is empty (the pending value counts, as PVE shows it).
    plan_is_empty(&c, &path).await;
    // pxctl restart applies it.
    let (code, out, err) = c.pxctl(&["restart", "rp"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    wait_until("applied by the restart", UP, || async {
        let p = pending(&c, "mk33", 2200);
        let (_, table, _) = c.pxctl(&["get", "containers", "--fleet", "rp"]).await;
        if p.is_empty() && !table.contains("pending restart") && table.contains("running") {
            Ok(())
        } else {
            Err(format!("pending {p:?}\n{table}"))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_report_shows_drift_and_leaves_it_repair_puts_it_back() {
    let c = Cluster::start(1).await.expect("cluster");
    let body = |policy: &str| {
        fleet_yaml(
            "df",
            "  app: {node: mk33, vm_id: 2300, memory: 512, disk_size: 4}\n",
        )
        .replace("fleet: df\n", &format!("fleet: df\ndrift: {policy}\n"))
    };
    let path = submit(&c, "df.yaml", &body("report")).await;
    c.wait_running("df", &["app"], UP).await;
    plan_is_empty(&c, &path).await;

    // Changed behind pxfleet's back: marked drifted, reported by the plan, not repaired.
    let out = c.pve("mk33", "pct", &["set", "2300", "--memory", "1024"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    wait_until("drift shown", UP, || async {
        let (_, table, _) = c.pxctl(&["get", "containers", "--fleet", "df"]).await;
        let (code, text, _) = c.pxctl(&["plan", &path, "--detailed-exitcode"]).await;
        if table.contains("running (drifted)")
            && code == 0
            && text.contains("drifted: memory is 1024 (applied: 512)")
        {
            Ok(())
        } else {
            Err(format!("{table}\nexit {code}: {text}"))
        }
    })
    .await;
    let ops = c.operations("df").await.unwrap();
    assert!(
        !ops.iter()
            .any(|o| o.kind == pb::OperationKind::Update as i32),
        "{ops:?}"
    );
    assert_eq!(
        c.pct_config("mk33", 2300).get("memory").map(String::as_str),
        Some("1024")
    );

    // drift: repair: the submit's plan repairs it.
    let path = submit(&c, "df.yaml", &body("repair")).await;
    wait_until("repaired", UP, || async {
        let cfg = c.pct_config("mk33", 2300);
        if cfg.get("memory").map(String::as_str) == Some("512") {
            Ok(())
        } else {
            Err(format!("{cfg:?}"))
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_changes_are_hot_plugged_and_extra_interfaces_come_and_go() {
    let c = Cluster::start(1).await.expect("cluster");
    let body = |net0: &str, extra: &str| {
        fleet_yaml(
            "nw",
            &format!(
                "  app: {{node: mk33, vm_id: 2400, memory: 512, disk_size: 4{net0}{extra}}}\n"
            ),
        )
    };
    let path = submit(&c, "nw.yaml", &body("", "")).await;
    c.wait_running("nw", &["app"], UP).await;
    let mac0 = c.pct_config("mk33", 2400).get("net0").cloned().unwrap();
    let started = c.runtime("mk33", 2400).unwrap()["started"].clone();
    tokio::time::sleep(Duration::from_millis(1100)).await; // `started` ticks in seconds

    // An extra interface and an MTU on net0: live, the plan announces no restart.
    let next = body(
        ", mtu: 1400",
        ", extra_interfaces: [{name: eth1, bridge: vmbr0, ip_address: 10.9.0.5/24}]",
    );
    let plan = c.plan(&next).await.unwrap();
    assert!(
        plan.plan_json.contains("\"restart_required\": false")
            && plan.plan_json.contains("extra_interfaces[0].bridge"),
        "{}",
        plan.plan_json
    );
    let (code, text, _) = c
        .pxctl(&["plan", c.write_fleet("nw.yaml", &next).to_str().unwrap()])
        .await;
    assert_eq!(code, 0);
    assert!(!text.contains("restart"), "{text}");
    submit(&c, "nw.yaml", &next).await;
    wait_until("net1 added, net0 mtu set", UP, || async {
        let cfg = c.pct_config("mk33", 2400);
        let ok = cfg
            .get("net1")
            .is_some_and(|n| n.contains("ip=10.9.0.5/24"))
            && cfg.get("net0").is_some_and(|n| n.contains("mtu=1400"));
        if ok {
            Ok(())
        } else {
            Err(format!("{cfg:?}"))
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
    // The MAC of net0 is kept; nothing pending, no restart.
    let cfg = c.pct_config("mk33", 2400);
    let hw = |n: &str| {
        n.split(',')
            .find(|p| p.starts_with("hwaddr="))
            .map(str::to_string)
    };
    assert_eq!(hw(&cfg["net0"]), hw(&mac0));
    assert!(pending(&c, "mk33", 2400).is_empty());
    assert_eq!(c.runtime("mk33", 2400).unwrap()["started"], started);

    // Removed again: net1 goes, still without a restart.
    submit(&c, "nw.yaml", &body(", mtu: 1400", "")).await;
    wait_until("net1 removed", UP, || async {
        let cfg = c.pct_config("mk33", 2400);
        if cfg.contains_key("net1") {
            Err(format!("{cfg:?}"))
        } else {
            Ok(())
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
    assert!(pending(&c, "mk33", 2400).is_empty());
    assert_eq!(c.runtime("mk33", 2400).unwrap()["started"], started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ostype_is_set_at_create_and_changed_in_place() {
    let c = Cluster::start(1).await.expect("cluster");
    let body = |os: &str| {
        fleet_yaml(
            "os",
            &format!("  app: {{node: mk33, vm_id: 2500, memory: 512, disk_size: 4{os}}}\n"),
        )
    };
    // Not given: PVE's detection stands and is never compared.
    let path = submit(&c, "os.yaml", &body("")).await;
    c.wait_running("os", &["app"], UP).await;
    assert_eq!(
        c.pct_config("mk33", 2500).get("ostype").map(String::as_str),
        Some("debian")
    );
    plan_is_empty(&c, &path).await;
    // Given: the plan shows the change (a restart: PVE applies it at the next start), the node gets it.
    let next = body(", ostype: unmanaged");
    let plan = c.plan(&next).await.unwrap();
    assert!(
        plan.plan_json.contains("\"field\": \"ostype\""),
        "{}",
        plan.plan_json
    );
    let path = submit(&c, "os.yaml", &next).await;
    wait_until("ostype unmanaged", UP, || async {
        let cfg = c.pct_config("mk33", 2500);
        match cfg.get("ostype").map(String::as_str) {
            Some("unmanaged") if pending(&c, "mk33", 2500).is_empty() => Ok(()),
            other => Err(format!("{other:?} pending {:?}", pending(&c, "mk33", 2500))),
        }
    })
    .await;
    c.wait_running("os", &["app"], UP).await;
    plan_is_empty(&c, &path).await;
    // A value PVE does not know: refused at the field.
    let plan = c.plan(&body(", ostype: windows")).await.unwrap();
    assert!(
        plan.diagnostics
            .iter()
            .any(|d| d.field.ends_with("ostype") && d.message.contains("windows")),
        "{:?}",
        plan.diagnostics
    );
}

/// A container whose create failed before anything existed on the node, then removed from the file: the
/// submit records the revision and succeeds, the container is gone from `get containers`, the plan is empty.
/// (It stayed `failed`, the submit exited 1 with an empty plan and no revision: no way out but by hand.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_failed_before_it_existed_goes_when_the_file_drops_it() {
    let c = Cluster::start(1).await.expect("cluster");
    submit_bad_template(&c, "gone", 1950).await;
    let before = revisions(c.pxctl_json(&["history", "--fleet", "gone"]).await);

    let without = fleet_yaml("gone", "  a: {vm_id: 1950, memory: 512, disk_size: 4}\n");
    let path = c.write_fleet("gone.yaml", &without);
    let path = path.to_str().unwrap().to_string();
    let (code, out, err) = c.pxctl(&["submit", &path, "-y", "--timeout", "60s"]).await;
    assert_eq!(code, 0, "{out}\n{err}\n{}", c.logs());
    assert_eq!(
        revisions(c.pxctl_json(&["history", "--fleet", "gone"]).await),
        before + 1
    );
    let names: Vec<String> = c
        .containers("gone")
        .await
        .unwrap()
        .into_iter()
        .map(|x| x.name)
        .collect();
    assert_eq!(names, ["a"]);
    plan_is_empty(&c, &path).await;
}
