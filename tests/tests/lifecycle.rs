//! Fleet lifecycle against a real controller, real agents and pvesim nodes: the PRD dev fleet through pxctl,
//! in-place updates, replacement, destruction, no-op resubmits, spreading, and vm_id conflicts.

use std::collections::BTreeMap;
use std::time::Duration;

use pxfleet_tests::{describe, fleet_yaml, v1 as pb, wait_until, Cluster};

const UP: Duration = Duration::from_secs(120);

fn kinds(ops: &[pb::OperationInfo], container: &str) -> Vec<pb::OperationKind> {
    ops.iter()
        .filter(|o| o.container == container)
        .map(|o| pb::OperationKind::try_from(o.kind).unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prd_dev_fleet_comes_up_running_with_addresses_and_resubmit_changes_nothing() {
    let c = Cluster::start(3).await.expect("cluster");
    let (code, out, err) = c.pxctl(&["submit", "examples/dev/fleet.yaml", "-y"]).await;
    assert_eq!(code, 0, "pxctl submit: {out}\n{err}\n{}", c.logs());

    let rows = wait_until("pxctl get containers: both running", UP, || async {
        let v = c.pxctl_json(&["get", "containers"]).await;
        let rows = v.as_array().cloned().unwrap_or_default();
        if rows.len() == 2 && rows.iter().all(|r| r["status"] == "running") {
            Ok(rows)
        } else {
            Err(v.to_string())
        }
    })
    .await;
    let by_name: BTreeMap<String, serde_json::Value> = rows
        .into_iter()
        .map(|r| (r["name"].as_str().unwrap().to_string(), r))
        .collect();
    let web = &by_name["dev-nextcloud"];
    assert_eq!(web["node"], "mk33");
    assert_eq!(web["vm_id"], 2100);
    assert_eq!(web["ipv4"], "192.168.7.100");
    let vault = &by_name["dev-vaultwarden"];
    assert_eq!(vault["node"], "mk33");
    assert_eq!(vault["vm_id"], 2101);
    assert_eq!(vault["ipv4"], "192.168.7.101");
    // What PVE itself holds on mk33.
    let cfg = c.pct_config("mk33", 2100);
    assert_eq!(cfg.get("memory").map(String::as_str), Some("4096"));
    assert_eq!(
        cfg.get("hostname").map(String::as_str),
        Some("dev-nextcloud")
    );
    assert_eq!(c.runtime("mk33", 2100).unwrap()["running"], true);

    // The check: nothing left to do.
    let (code, out, err) = c
        .pxctl(&["plan", "examples/dev/fleet.yaml", "--detailed-exitcode"])
        .await;
    assert_eq!(
        code, 0,
        "plan --detailed-exitcode after convergence: {out}\n{err}"
    );

    // Unchanged resubmit: an empty plan and no operations.
    let ops_before = c.operations("dev").await.unwrap().len();
    let source =
        std::fs::read_to_string(pxfleet_tests::workspace_root().join("examples/dev/fleet.yaml"))
            .unwrap();
    let key =
        std::fs::read_to_string(pxfleet_tests::workspace_root().join("examples/dev/keys/ops.pub"))
            .unwrap();
    let mut api = c.api().await.unwrap();
    let plan = api
        .plan(pb::PlanRequest {
            file_name: "examples/dev/fleet.yaml".into(),
            source: source.clone(),
            files: [("examples/dev/keys/ops.pub".to_string(), key.clone())].into(),
            destroy: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(plan.diagnostics.is_empty(), "{:?}", plan.diagnostics);
    assert!(
        !plan.has_changes,
        "plan of the unchanged file: {}",
        plan.plan_json
    );
    let (code, out, err) = c.pxctl(&["submit", "examples/dev/fleet.yaml", "-y"]).await;
    assert_eq!(code, 0, "resubmit: {out}\n{err}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ops_after = c.operations("dev").await.unwrap();
    assert_eq!(
        ops_after.len(),
        ops_before,
        "a no-op resubmit created operations: {ops_after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_updates_in_place_template_replaces_removal_destroys() {
    let c = Cluster::start(2).await.expect("cluster");
    let body = |mem_a: u32, tmpl_b: &str, with_c: bool| {
        let mut s = format!(
            "  app-a: {{node: mk33, vm_id: 3001, memory: {mem_a}, disk_size: 4}}\n  \
               app-b: {{node: mk33, vm_id: 3002, memory: 512, disk_size: 4, template: {tmpl_b}}}\n"
        );
        if with_c {
            s.push_str("  app-c: {node: mk34, vm_id: 3003, memory: 512, disk_size: 4}\n");
        }
        fleet_yaml("life", &s)
    };
    let r = c.submit(&body(512, "deb13", true)).await.unwrap();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    c.wait_running("life", &["app-a", "app-b", "app-c"], UP)
        .await;
    let a_started = c.runtime("mk33", 3001).unwrap()["started"].clone();
    let b_started = c.runtime("mk33", 3002).unwrap()["started"].clone();
    // `started` ticks in seconds: a replacement within the same second would look like no restart
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let ops_before = c.operations("life").await.unwrap().len();

    // memory 512 -> 1024 on app-a: updated in place, not restarted.
    let r = c.submit(&body(1024, "deb13", true)).await.unwrap();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    wait_until("app-a memory 1024 in PVE", UP, || async {
        let cfg = c.pct_config("mk33", 3001);
        match cfg.get("memory") {
            Some(m) if m == "1024" => Ok(()),
            other => Err(format!("memory {other:?}")),
        }
    })
    .await;
    c.wait_running("life", &["app-a", "app-b", "app-c"], UP)
        .await;
    let rt = c.runtime("mk33", 3001).unwrap();
    assert_eq!(rt["running"], true);
    assert_eq!(
        rt["started"], a_started,
        "app-a was restarted by a memory change"
    );
    let ops = c.operations("life").await.unwrap();
    assert!(ops.len() > ops_before, "no operation for the memory change");
    let a_kinds = kinds(&ops, "app-a");
    assert!(a_kinds.contains(&pb::OperationKind::Update), "{a_kinds:?}");
    assert!(
        !a_kinds.contains(&pb::OperationKind::Destroy),
        "{a_kinds:?}"
    );

    // template of app-b changed: replaced (destroyed and created again from the new template).
    let r = c.submit(&body(1024, "ubu24", true)).await.unwrap();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    let cs = wait_until("app-b on the new template", UP, || async {
        let cs = c.containers("life").await.map_err(|e| e.to_string())?;
        let b = cs.iter().find(|x| x.name == "app-b").cloned();
        match b {
            Some(b) if b.template.contains("ubu24") || b.template.contains("ubuntu-24.04") => {
                if b.state == pb::ContainerState::Running as i32 && !b.drifted {
                    Ok(cs)
                } else {
                    Err(describe(&cs))
                }
            }
            _ => Err(describe(&cs)),
        }
    })
    .await;
    assert_eq!(cs.iter().find(|x| x.name == "app-b").unwrap().vm_id, 3002);
    let ops = c.operations("life").await.unwrap();
    let why = ops
        .iter()
        .find(|o| o.container == "app-b" && o.kind == pb::OperationKind::Destroy as i32)
        .map(|o| o.reason.clone())
        .unwrap_or_default();
    assert!(
        why.contains("template") && why.contains("replace"),
        "destroy of app-b because {why:?}"
    );
    let b_kinds = kinds(&ops, "app-b");
    assert!(b_kinds.contains(&pb::OperationKind::Destroy), "{b_kinds:?}");
    assert!(
        b_kinds
            .iter()
            .filter(|k| **k == pb::OperationKind::Create)
            .count()
            >= 2,
        "{b_kinds:?}"
    );
    assert_ne!(
        c.runtime("mk33", 3002).unwrap()["started"],
        b_started,
        "app-b was not recreated"
    );
    assert_eq!(c.vmids_on("mk33").iter().filter(|v| **v == 3002).count(), 1);

    // app-c left the file: destroyed on mk34.
    assert!(c.vmids_on("mk34").contains(&3003));
    let r = c.submit(&body(1024, "ubu24", false)).await.unwrap();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    wait_until("app-c destroyed", UP, || async {
        let cs = c.containers("life").await.map_err(|e| e.to_string())?;
        let on_node = c.vmids_on("mk34");
        if !cs.iter().any(|x| x.name == "app-c") && !on_node.contains(&3003) {
            Ok(())
        } else {
            Err(format!("{} / mk34 has {on_node:?}", describe(&cs)))
        }
    })
    .await;
    c.wait_running("life", &["app-a", "app-b"], UP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_unplaced_containers_spread_over_three_nodes() {
    let c = Cluster::start(3).await.expect("cluster");
    let mut body = String::new();
    for i in 1..=6 {
        body.push_str(&format!("  w-{i}: {{memory: 512, disk_size: 4}}\n"));
    }
    let r = c.submit(&fleet_yaml("spread", &body)).await.unwrap();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    let names: Vec<String> = (1..=6).map(|i| format!("w-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let cs = c.wait_running("spread", &refs, UP).await;
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for x in &cs {
        *per_node.entry(x.node.clone()).or_default() += 1;
    }
    assert_eq!(
        per_node,
        [
            ("mk33".to_string(), 2),
            ("mk34".to_string(), 2),
            ("mk35".to_string(), 2)
        ]
        .into(),
        "{}",
        describe(&cs)
    );
    // Where PVE says they are agrees, and every vm_id is unique fleet-wide.
    let mut all: Vec<u32> = Vec::new();
    for n in ["mk33", "mk34", "mk35"] {
        let on = c.vmids_on(n);
        assert_eq!(on.len(), 2, "{n}: {on:?}");
        all.extend(on);
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm_id_taken_by_an_unmanaged_container_is_refused_at_plan() {
    let c = Cluster::start(2).await.expect("cluster");
    // Someone made CT 4100 on mk34 by hand.
    let out = c.pve(
        "mk34",
        "pveam",
        &[
            "download",
            "local",
            "debian-13-standard_13.6-1_amd64.tar.zst",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = c.pve(
        "mk34",
        "pct",
        &[
            "create",
            "4100",
            "local:vztmpl/debian-13-standard_13.6-1_amd64.tar.zst",
            "--rootfs",
            "local-lvm:4",
            "--hostname",
            "handmade",
        ],
    );
    assert_eq!(out.code, 0, "pct create: {}", out.stderr);
    let yaml = fleet_yaml(
        "clash",
        "  mine: {node: mk33, vm_id: 4100, memory: 512, disk_size: 4}\n",
    );
    let plan = wait_until("plan refuses vm_id 4100", UP, || async {
        let p = c.plan(&yaml).await.map_err(|e| e.to_string())?;
        if p.diagnostics.iter().any(|d| d.message.contains("4100")) {
            Ok(p)
        } else {
            Err(format!("{:?} {}", p.diagnostics, p.plan_json))
        }
    })
    .await;
    let d = plan
        .diagnostics
        .iter()
        .find(|d| d.message.contains("4100"))
        .unwrap();
    assert_eq!(d.severity, pb::Severity::Error as i32, "{d:?}");
    assert!(d.line > 0, "diagnostic without a position: {d:?}");
    assert!(
        plan.plan_json.is_empty() || !plan.has_changes,
        "{}",
        plan.plan_json
    );
    // Submitting is refused too, and nothing is stored or created.
    let r = c.submit(&yaml).await.unwrap();
    assert_eq!(r.revision, 0, "a refused submission was stored");
    assert!(!r.diagnostics.is_empty());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(c.containers("clash").await.unwrap().is_empty());
    assert_eq!(c.vmids_on("mk33"), Vec::<u32>::new());
    // The hand-made container is untouched.
    assert_eq!(
        c.pct_config("mk34", 4100)
            .get("hostname")
            .map(String::as_str),
        Some("handmade")
    );
}

/// The `hwaddr=` of `netN` in a `pct config`.
fn hwaddr(cfg: &BTreeMap<String, String>, net: &str) -> String {
    cfg.get(net)
        .and_then(|v| v.split(',').find_map(|kv| kv.strip_prefix("hwaddr=")))
        .unwrap_or_default()
        .to_uppercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_then_submit_gives_the_same_vm_ids_and_macs() {
    let c = Cluster::start(1).await.expect("cluster");
    let yaml = fleet_yaml(
        "again",
        "  web: {memory: 512, disk_size: 4, ip_address: 10.9.0.5/24, gateway: 10.9.0.1, \
           extra_interfaces: [{bridge: vmbr0, ip_address: dhcp}]}\n  \
         db: {memory: 512, disk_size: 4}\n",
    );
    let path = c.write_fleet("again", &yaml);
    let path = path.to_str().unwrap();
    // the plan already names the MACs
    let plan = c.plan(&yaml).await.unwrap();
    assert!(plan.diagnostics.is_empty(), "{:?}", plan.diagnostics);
    let (code, out, err) = c.pxctl(&["submit", path, "-y"]).await;
    assert_eq!(code, 0, "pxctl submit: {out}\n{err}\n{}", c.logs());
    let first = c.wait_running("again", &["web", "db"], UP).await;
    let seen = |cs: &[pb::ContainerInfo]| {
        cs.iter()
            .map(|x| {
                let cfg = c.pct_config(&x.node, x.vm_id);
                let macs = vec![hwaddr(&cfg, "net0"), hwaddr(&cfg, "net1")];
                (x.name.clone(), (x.node.clone(), x.vm_id, macs))
            })
            .collect::<BTreeMap<_, _>>()
    };
    let before = seen(&first);
    let all: Vec<&String> = before
        .values()
        .flat_map(|(_, _, m)| m.iter())
        .filter(|m| !m.is_empty())
        .collect();
    assert_eq!(all.len(), 3, "{before:?}");
    for m in &all {
        assert!(m.starts_with("BC:24:11:"), "{before:?}");
        assert!(plan.plan_json.contains(m.as_str()), "{m} not in the plan");
    }

    let (code, out, err) = c.pxctl(&["destroy", "again", "-y"]).await;
    assert_eq!(code, 0, "pxctl destroy: {out}\n{err}\n{}", c.logs());
    wait_until("both destroyed on the node", UP, || async {
        let on = c.vmids_on("mk33");
        let cs = c.containers("again").await.map_err(|e| e.to_string())?;
        if on.is_empty() && cs.is_empty() {
            Ok(())
        } else {
            Err(format!("{} / mk33 has {on:?}", describe(&cs)))
        }
    })
    .await;

    let (code, out, err) = c.pxctl(&["submit", path, "-y"]).await;
    assert_eq!(code, 0, "pxctl resubmit: {out}\n{err}\n{}", c.logs());
    let second = c.wait_running("again", &["web", "db"], UP).await;
    assert_eq!(seen(&second), before, "recreated differently");
}
