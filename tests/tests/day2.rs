//! Day-2 lifecycle against a real controller, real agents and pvesim nodes (issue 10): what the plan shows is
//! what happens, and after every successful submit `pxctl plan --detailed-exitcode` exits 0.

use std::time::Duration;

use pxfleet_tests::day2::{pending, plan_is_empty, submit, UP};
use pxfleet_tests::{describe, fleet_yaml, v1 as pb, wait_until, Cluster, NodeSetup};

/// `fleet_yaml` without the default `datastore_id`.
fn fleet_yaml_no_datastore(name: &str, containers: &str) -> String {
    fleet_yaml(name, containers).replace("  datastore_id: local-lvm\n", "")
}

fn failed_ops(ops: &[pb::OperationInfo]) -> Vec<String> {
    ops.iter()
        .filter(|o| !o.error.is_empty())
        .map(|o| format!("{} {}: {}", o.container, o.reason, o.error))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_without_datastore_gets_the_nodes_rootdir_storage() {
    let c = Cluster::start(2).await.expect("cluster");
    let yaml = fleet_yaml_no_datastore(
        "pin",
        "  app: {node: mk34, vm_id: 1002, memory: 512, disk_size: 4}\n",
    );
    // The plan names the storage the scheduler picks, not "(known after apply)".
    let plan = c.plan(&yaml).await.unwrap();
    assert!(plan.diagnostics.is_empty(), "{:?}", plan.diagnostics);
    assert!(
        plan.plan_json.contains("local-zfs"),
        "plan: {}",
        plan.plan_json
    );
    let path = submit(&c, "pin.yaml", &yaml).await;
    let cs = c.wait_running("pin", &["app"], UP).await;
    assert_eq!(cs[0].node, "mk34", "{}", describe(&cs));
    let cfg = c.pct_config("mk34", 1002);
    let rootfs = cfg.get("rootfs").cloned().unwrap_or_default();
    assert!(rootfs.starts_with("local-zfs:"), "rootfs {rootfs:?}");
    let ops = c.operations("pin").await.unwrap();
    assert!(failed_ops(&ops).is_empty(), "{:?}", failed_ops(&ops));
    plan_is_empty(&c, &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_point_grows_and_is_added_in_place() {
    let c = Cluster::start(1).await.expect("cluster");
    let body = |size: u32, extra: bool| {
        let mut mps = format!("{{path: /data, size: {size}, datastore_id: local-lvm}}");
        if extra {
            mps.push_str(", {path: /logs, size: 2, datastore_id: local-lvm}");
        }
        fleet_yaml(
            "mp",
            &format!(
                "  app: {{node: mk33, vm_id: 1200, memory: 512, disk_size: 4, mount_points: [{mps}]}}\n"
            ),
        )
    };
    let path = submit(&c, "mp.yaml", &body(4, false)).await;
    c.wait_running("mp", &["app"], UP).await;
    plan_is_empty(&c, &path).await;
    let mp0 = |cfg: &std::collections::BTreeMap<String, String>, key: &str| {
        cfg.get(key).cloned().unwrap_or_default()
    };
    assert!(
        mp0(&c.pct_config("mk33", 1200), "mp0").contains("size=4G"),
        "{:?}",
        c.pct_config("mk33", 1200)
    );

    // 4 -> 6: `pct resize 1200 mp0 6G`, then nothing left to do.
    let plan = c.plan(&body(6, false)).await.unwrap();
    assert!(plan.plan_json.contains("\"mp0\""), "{}", plan.plan_json);
    submit(&c, "mp.yaml", &body(6, false)).await;
    wait_until("mp0 at 6G", UP, || async {
        let v = mp0(&c.pct_config("mk33", 1200), "mp0");
        if v.contains("size=6G") {
            Ok(())
        } else {
            Err(v)
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
    let ops = c.operations("mp").await.unwrap();
    assert!(
        ops.iter()
            .any(|o| o.kind == pb::OperationKind::Resize as i32 && o.reason.contains("mp0")),
        "{ops:?}"
    );
    assert!(failed_ops(&ops).is_empty(), "{:?}", failed_ops(&ops));

    // A second mount point is hot-plugged into the running container.
    submit(&c, "mp.yaml", &body(6, true)).await;
    wait_until("mp1 /logs added", UP, || async {
        let v = mp0(&c.pct_config("mk33", 1200), "mp1");
        if v.contains("mp=/logs") {
            Ok(())
        } else {
            Err(format!("{:?}", c.pct_config("mk33", 1200)))
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
    let ops = c.operations("mp").await.unwrap();
    assert!(failed_ops(&ops).is_empty(), "{:?}", failed_ops(&ops));
    c.wait_running("mp", &["app"], UP).await;
}

/// `pct pending` lines that wait for the next start (`new k: v`, `del k: v`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_that_need_a_restart_are_applied_with_the_announced_restart() {
    let c = Cluster::start(1).await.expect("cluster");
    let body = |dns: &str, nesting: bool, logs: bool| {
        let mps = if logs {
            ", mount_points: [{path: /logs, size: 2, datastore_id: local-lvm}]"
        } else {
            ""
        };
        fleet_yaml(
            "rs",
            &format!(
                "  app: {{node: mk33, vm_id: 1300, memory: 512, disk_size: 4, dns: {dns}, \
                 features: {{nesting: {nesting}}}{mps}}}\n"
            ),
        )
    };
    let path = submit(&c, "rs.yaml", &body("{servers: [10.0.0.1]}", false, true)).await;
    c.wait_running("rs", &["app"], UP).await;
    plan_is_empty(&c, &path).await;
    let started = c.runtime("mk33", 1300).unwrap()["started"].clone();
    // `started` has a resolution of one second: let it tick, so a restart below always shows as a new value
    // (with a fast pipeline the restart came within the same second and the wait never saw it).
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;

    // dns servers + domain and nesting: PVE leaves them pending on a running container.
    let next = body(
        "{servers: [10.0.0.2], domain: lab.example.org}",
        true,
        false,
    );
    let plan = c.plan(&next).await.unwrap();
    assert!(
        plan.plan_json.contains("\"restart_required\": true"),
        "{}",
        plan.plan_json
    );
    submit(&c, "rs.yaml", &next).await;
    wait_until("applied with a restart", UP, || async {
        let cfg = c.pct_config("mk33", 1300);
        let rt = c.runtime("mk33", 1300).unwrap();
        let p = pending(&c, "mk33", 1300);
        if cfg.get("nameserver").map(String::as_str) == Some("10.0.0.2")
            && cfg.get("searchdomain").map(String::as_str) == Some("lab.example.org")
            && cfg.get("features").is_some_and(|f| f.contains("nesting=1"))
            && !cfg.contains_key("mp0")
            && p.is_empty()
            && rt["started"] != started
            && rt["running"] == true
        {
            Ok(())
        } else {
            Err(format!("{cfg:?} pending {p:?} runtime {rt}"))
        }
    })
    .await;
    // the removed mount point's volume is kept by PVE, detached
    let cfg = c.pct_config("mk33", 1300);
    assert!(
        cfg.get("unused0")
            .is_some_and(|v| v.contains("vm-1300-disk")),
        "{cfg:?}"
    );
    c.wait_running("rs", &["app"], UP).await;
    plan_is_empty(&c, &path).await;
    let ops = c.operations("rs").await.unwrap();
    assert!(failed_ops(&ops).is_empty(), "{:?}", failed_ops(&ops));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_set_by_hand_is_repaired_on_the_node() {
    let c = Cluster::start(1).await.expect("cluster");
    let yaml = fleet_yaml(
        "drift",
        "  app: {node: mk33, vm_id: 1400, memory: 512, disk_size: 4}\n",
    );
    let path = submit(&c, "drift.yaml", &yaml).await;
    c.wait_running("drift", &["app"], UP).await;
    plan_is_empty(&c, &path).await;

    let started = c.runtime("mk33", 1400).unwrap()["started"].clone();
    // Behind pxfleet's back: nesting on (pending: the container runs), memory changed (at once).
    let out = c.pve(
        "mk33",
        "pct",
        &["set", "1400", "--features", "nesting=1", "--memory", "768"],
    );
    assert_eq!(out.code, 0, "pct set: {}", out.stderr);
    wait_until("drift repaired on the node", UP, || async {
        let cfg = c.pct_config("mk33", 1400);
        let p = pending(&c, "mk33", 1400);
        let current = c
            .pve("mk33", "pct", &["config", "1400", "--current"])
            .stdout;
        if !cfg.contains_key("features")
            && !current.contains("nesting")
            && cfg.get("memory").map(String::as_str) == Some("512")
            && p.is_empty()
        {
            Ok(())
        } else {
            Err(format!("{cfg:?} pending {p:?}"))
        }
    })
    .await;
    c.wait_running("drift", &["app"], UP).await;
    plan_is_empty(&c, &path).await;
    // The pending change was dropped (`pct set --revert`): no restart was needed.
    assert_eq!(c.runtime("mk33", 1400).unwrap()["started"], started);
    // Converged: the reconciler stops issuing repairs.
    let n = c.operations("drift").await.unwrap().len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ops = c.operations("drift").await.unwrap();
    assert_eq!(ops.len(), n, "repairs keep coming: {ops:?}");
    assert!(failed_ops(&ops).is_empty(), "{:?}", failed_ops(&ops));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_moved_by_hand_is_adopted_where_it_is() {
    let c = Cluster::start(2).await.expect("cluster");
    let yaml = fleet_yaml("adopt", "  app: {memory: 512, disk_size: 4}\n");
    let path = submit(&c, "adopt.yaml", &yaml).await;
    let cs = c.wait_running("adopt", &["app"], UP).await;
    let (from, vm_id) = (cs[0].node.clone(), cs[0].vm_id);
    let to = if from == "mk33" { "mk34" } else { "mk33" };
    let net0 = c.pct_config(&from, vm_id)["net0"].clone();
    plan_is_empty(&c, &path).await;

    // Someone migrates it by hand.
    let out = c.pve(
        &from,
        "pct",
        &["migrate", &vm_id.to_string(), to, "--restart"],
    );
    assert_eq!(out.code, 0, "pct migrate: {}", out.stderr);
    let cs = wait_until("adopted on the new node", UP, || async {
        let cs = c.containers("adopt").await.map_err(|e| e.to_string())?;
        if cs.len() == 1
            && cs[0].node == to
            && cs[0].state == pb::ContainerState::Running as i32
            && !cs[0].drifted
        {
            Ok(cs)
        } else {
            Err(describe(&cs))
        }
    })
    .await;
    assert_eq!(cs[0].vm_id, vm_id);
    plan_is_empty(&c, &path).await;
    // Neither destroyed nor recreated: same vm_id and MAC on the new node, nothing left on the old one.
    assert_eq!(c.pct_config(to, vm_id)["net0"], net0);
    assert!(c.vmids_on(&from).is_empty(), "{:?}", c.vmids_on(&from));
    let ops = c.operations("adopt").await.unwrap();
    assert!(
        !ops.iter()
            .any(|o| o.kind == pb::OperationKind::Destroy as i32),
        "{ops:?}"
    );
    // (A recreate may be tried while the old node already reports it gone and the new one not yet: PVE
    // refuses it, the vm_id being taken in the cluster.)
    assert_eq!(
        ops.iter()
            .filter(|o| o.kind == pb::OperationKind::Create as i32
                && o.state == pb::OperationState::Succeeded as i32)
            .count(),
        1,
        "{ops:?}"
    );
    // A resubmit keeps it there.
    submit(&c, "adopt.yaml", &yaml).await;
    plan_is_empty(&c, &path).await;
    assert_eq!(c.containers("adopt").await.unwrap()[0].node, to);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_node_migrates_keeping_vm_id_mac_and_volumes() {
    let c = Cluster::start(2).await.expect("cluster");
    let body = |node: &str| {
        fleet_yaml(
            "mv",
            &format!(
                "  app: {{node: {node}, vm_id: 1500, memory: 512, disk_size: 4, \
                 mount_points: [{{path: /data, size: 2, datastore_id: local-lvm}}]}}\n"
            ),
        )
    };
    let path = submit(&c, "mv.yaml", &body("mk33")).await;
    c.wait_running("mv", &["app"], UP).await;
    plan_is_empty(&c, &path).await;
    let before = c.pct_config("mk33", 1500);

    let plan = c.plan(&body("mk34")).await.unwrap();
    assert!(plan.plan_json.contains("\"move\""), "{}", plan.plan_json);
    submit(&c, "mv.yaml", &body("mk34")).await;
    let cs = wait_until("running on mk34", UP, || async {
        let cs = c.containers("mv").await.map_err(|e| e.to_string())?;
        if cs.len() == 1
            && cs[0].node == "mk34"
            && cs[0].state == pb::ContainerState::Running as i32
            && !cs[0].drifted
        {
            Ok(cs)
        } else {
            Err(describe(&cs))
        }
    })
    .await;
    assert_eq!(cs[0].vm_id, 1500);
    plan_is_empty(&c, &path).await;
    // The same container: config (MAC, volumes) moved with it, nothing left behind.
    let after = c.pct_config("mk34", 1500);
    for k in ["net0", "rootfs", "mp0"] {
        assert_eq!(after.get(k), before.get(k), "{k}");
    }
    assert!(c.vmids_on("mk33").is_empty());
    let vols = c.pve("mk34", "pvesm", &["list", "local-lvm", "--vmid", "1500"]);
    assert!(
        vols.stdout.contains("vm-1500-disk-0") && vols.stdout.contains("vm-1500-disk-1"),
        "{}",
        vols.stdout
    );
    let ops = c.operations("mv").await.unwrap();
    assert!(
        ops.iter()
            .any(|o| o.kind == pb::OperationKind::Migrate as i32 && o.node == "mk33"),
        "{ops:?}"
    );
    assert!(
        !ops.iter()
            .any(|o| o.kind == pb::OperationKind::Destroy as i32
                || (o.kind == pb::OperationKind::Create as i32 && o.node == "mk34")),
        "{ops:?}"
    );
    assert!(failed_ops(&ops).is_empty(), "{:?}", failed_ops(&ops));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_pct_migrate_cannot_make_is_planned_and_done_as_a_replacement() {
    let mut c = Cluster::start(0).await.expect("cluster");
    let fast = "[[storage]]\nid = \"fast\"\ntype = \"dir\"\ncontent = [\"rootdir\", \"images\"]\n";
    let with_fast = NodeSetup {
        overrides: fast.into(),
        ..NodeSetup::default()
    };
    // mk33 and mk34 in one PVE cluster, only mk33 with the storage `fast`; mk35 in another cluster, with it.
    c.add_node_with("mk33", &with_fast).await.unwrap();
    c.add_node_with("mk34", &NodeSetup::default())
        .await
        .unwrap();
    c.add_node_with(
        "mk35",
        &NodeSetup {
            cluster: Some("far".into()),
            ..with_fast.clone()
        },
    )
    .await
    .unwrap();
    c.wait_nodes_ready(UP).await.unwrap();
    let body = |node: &str, datastore: &str| {
        fleet_yaml_no_datastore(
            "far",
            &format!(
                "  app: {{node: {node}, vm_id: 1700, memory: 512, disk_size: 4{datastore}}}\n"
            ),
        )
    };
    let path = submit(&c, "far.yaml", &body("mk33", ", datastore_id: fast")).await;
    c.wait_running("far", &["app"], UP).await;
    plan_is_empty(&c, &path).await;

    // PVE itself refuses both migrations, before touching the container.
    let out = c.pve("mk33", "pct", &["migrate", "1700", "mk34", "--restart"]);
    assert_ne!(out.code, 0, "{}", out.stdout);
    assert!(out.stderr.contains("migration aborted"), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("storage 'fast' is not available on node 'mk34'"),
        "{}",
        out.stdout
    );
    let out = c.pve("mk33", "pct", &["migrate", "1700", "mk35", "--restart"]);
    assert!(
        out.stderr.contains("no such cluster node 'mk35'"),
        "{}",
        out.stderr
    );
    assert_eq!(c.vmids_on("mk33"), vec![1700]);
    assert!(c
        .runtime("mk33", 1700)
        .is_some_and(|r| r["running"] == true));

    // To mk34 (no `fast` there): the plan is a replacement and says why, in JSON and in `pxctl plan`.
    let to_mk34 = body("mk34", "");
    let plan = c.plan(&to_mk34).await.unwrap();
    assert!(plan.diagnostics.is_empty(), "{:?}", plan.diagnostics);
    assert!(
        plan.plan_json.contains("\"action\": \"replace\"")
            && !plan.plan_json.contains("\"action\": \"move\""),
        "{}",
        plan.plan_json
    );
    assert!(
        plan.plan_json.contains("datastore fast is not on mk34"),
        "{}",
        plan.plan_json
    );
    let mk34_file = c.write_fleet("far-mk34.yaml", &to_mk34);
    let (code, out, err) = c
        .pxctl(&["plan", mk34_file.to_str().unwrap(), "--no-color"])
        .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("# forces replacement: datastore fast is not on mk34"),
        "{out}"
    );

    // To mk35 (another cluster): planned as a replacement, and done as one: destroyed on mk33, created on mk35.
    let to_mk35 = body("mk35", ", datastore_id: fast");
    let plan = c.plan(&to_mk35).await.unwrap();
    assert!(
        plan.plan_json
            .contains("mk35 is in cluster far, not pvesim: pct migrate cannot cross clusters"),
        "{}",
        plan.plan_json
    );
    submit(&c, "far.yaml", &to_mk35).await;
    let cs = wait_until("running on mk35", UP, || async {
        let cs = c.containers("far").await.map_err(|e| e.to_string())?;
        if cs.len() == 1
            && cs[0].node == "mk35"
            && cs[0].state == pb::ContainerState::Running as i32
        {
            Ok(cs)
        } else {
            Err(describe(&cs))
        }
    })
    .await;
    assert_eq!(cs[0].vm_id, 1700);
    plan_is_empty(&c, &path).await;
    assert!(c.vmids_on("mk33").is_empty());
    let ops = c.operations("far").await.unwrap();
    assert!(failed_ops(&ops).is_empty(), "{:?}", failed_ops(&ops));
    assert!(
        !ops.iter()
            .any(|o| o.kind == pb::OperationKind::Migrate as i32),
        "{ops:?}"
    );
    assert!(
        ops.iter()
            .any(|o| o.kind == pb::OperationKind::Destroy as i32
                && o.node == "mk33"
                && o.reason.contains("pct migrate cannot cross clusters")),
        "{ops:?}"
    );
    assert!(
        ops.iter()
            .any(|o| o.kind == pb::OperationKind::Create as i32 && o.node == "mk35"),
        "{ops:?}"
    );
}

/// The fleet's containers by name, once they match `want` (name -> (state, node)).
async fn wait_states(
    c: &Cluster,
    fleet: &str,
    want: &[(&str, pb::ContainerState, &str)],
) -> Vec<pb::ContainerInfo> {
    wait_until(&format!("{fleet}: {want:?}"), UP, || async {
        let cs = c.containers(fleet).await.map_err(|e| e.to_string())?;
        let ok = cs.len() == want.len()
            && want.iter().all(|(n, s, node)| {
                cs.iter()
                    .any(|x| x.name == *n && x.state == *s as i32 && x.node == *node && !x.drifted)
            });
        if ok {
            Ok(cs)
        } else {
            Err(describe(&cs))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_containers_stay_stopped_and_move_offline() {
    let c = Cluster::start(2).await.expect("cluster");
    let body = |state_a: &str, node_a: &str| {
        fleet_yaml(
            "pw",
            &format!(
                "  a: {{node: {node_a}, vm_id: 1600, memory: 512, disk_size: 4, state: {state_a}}}\n  \
                 b: {{node: mk33, vm_id: 1601, memory: 512, disk_size: 4}}\n"
            ),
        )
    };
    use pb::ContainerState::{Running, Stopped};
    // Created stopped, never started; the submit returns (the fleet settles with a stopped).
    let path = submit(&c, "pw.yaml", &body("stopped", "mk33")).await;
    wait_states(&c, "pw", &[("a", Stopped, "mk33"), ("b", Running, "mk33")]).await;
    let runs = |node: &str| c.runtime(node, 1600).is_some_and(|r| r["running"] == true);
    assert!(!runs("mk33"), "a was started");
    plan_is_empty(&c, &path).await;

    // Started by hand: stopped again (drift repair keeps the desired power state).
    let out = c.pve("mk33", "pct", &["start", "1600"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    wait_until("a stopped again", UP, || async {
        let rt = c.runtime("mk33", 1600).unwrap();
        if rt["running"] == false {
            Ok(())
        } else {
            Err(rt.to_string())
        }
    })
    .await;
    wait_states(&c, "pw", &[("a", Stopped, "mk33"), ("b", Running, "mk33")]).await;
    plan_is_empty(&c, &path).await;

    // Moved while stopped: an offline migrate, still stopped on mk34.
    submit(&c, "pw.yaml", &body("stopped", "mk34")).await;
    wait_states(&c, "pw", &[("a", Stopped, "mk34"), ("b", Running, "mk33")]).await;
    plan_is_empty(&c, &path).await;
    assert!(!runs("mk34"), "a was started on mk34");

    // state: running starts it.
    submit(&c, "pw.yaml", &body("running", "mk34")).await;
    wait_states(&c, "pw", &[("a", Running, "mk34"), ("b", Running, "mk33")]).await;
    plan_is_empty(&c, &path).await;
    let ops = c.operations("pw").await.unwrap();
    assert!(failed_ops(&ops).is_empty(), "{:?}", failed_ops(&ops));
    assert!(
        ops.iter()
            .any(|o| o.kind == pb::OperationKind::Migrate as i32),
        "{ops:?}"
    );
    assert!(
        !ops.iter()
            .any(|o| o.kind == pb::OperationKind::Destroy as i32),
        "{ops:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pxctl_stop_start_restart_record_revisions() {
    let c = Cluster::start(1).await.expect("cluster");
    let yaml = fleet_yaml(
        "pc",
        "  a: {vm_id: 1700, memory: 512, disk_size: 4}\n  b: {vm_id: 1701, memory: 512, disk_size: 4}\n",
    );
    submit(&c, "pc.yaml", &yaml).await;
    c.wait_running("pc", &["a", "b"], UP).await;
    use pb::ContainerState::{Running, Stopped};
    let revisions = |v: serde_json::Value| v.as_array().map(Vec::len).unwrap_or_default();
    let before = revisions(c.pxctl_json(&["history", "--fleet", "pc"]).await);

    let (code, out, err) = c.pxctl(&["stop", "pc", "a"]).await;
    assert_eq!(code, 0, "pxctl stop: {out}\n{err}\n{}", c.logs());
    wait_states(&c, "pc", &[("a", Stopped, "mk33"), ("b", Running, "mk33")]).await;
    assert!(c.runtime("mk33", 1700).unwrap()["running"] == false);
    assert_eq!(
        revisions(c.pxctl_json(&["history", "--fleet", "pc"]).await),
        before + 1
    );
    // Stays stopped: started by hand, stopped again.
    assert_eq!(c.pve("mk33", "pct", &["start", "1700"]).code, 0);
    wait_until("a stopped again", UP, || async {
        let rt = c.runtime("mk33", 1700).unwrap();
        if rt["running"] == false {
            Ok(())
        } else {
            Err(rt.to_string())
        }
    })
    .await;

    let (code, out, err) = c.pxctl(&["start", "pc"]).await;
    assert_eq!(code, 0, "pxctl start: {out}\n{err}");
    c.wait_running("pc", &["a", "b"], UP).await;

    let started = c.runtime("mk33", 1701).unwrap()["started"].clone();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await; // `started` ticks in seconds
    let (code, out, err) = c.pxctl(&["restart", "pc", "b"]).await;
    assert_eq!(code, 0, "pxctl restart: {out}\n{err}");
    wait_until("b restarted", UP, || async {
        let rt = c.runtime("mk33", 1701).unwrap();
        if rt["running"] == true && rt["started"] != started {
            Ok(())
        } else {
            Err(rt.to_string())
        }
    })
    .await;
    c.wait_running("pc", &["a", "b"], UP).await;
    assert_eq!(
        revisions(c.pxctl_json(&["history", "--fleet", "pc"]).await),
        before + 3
    );
    // The file (state running) matches again: nothing to do.
    let path = c.write_fleet("pc.yaml", &yaml);
    plan_is_empty(&c, path.to_str().unwrap()).await;
    // Unknown container: refused, naming it.
    let (code, _, err) = c.pxctl(&["stop", "pc", "nope"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("nope"), "{err}");
}
