//! Failures: an agent killed in the middle of an operation, the controller killed and restarted, a node that
//! stops heartbeating and comes back. Everything must converge with nothing created twice.
// test code driving separate processes: real time
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use pxfleet_tests::{describe, fleet_yaml, v1 as pb, wait_until, Cluster, ClusterOptions};

const UP: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_killed_mid_operation_and_restarted_converges_without_duplicates() {
    let mut c = Cluster::start_with(ClusterOptions {
        nodes: 2,
        create_latency_ms: 3000,
        ..ClusterOptions::default()
    })
    .await
    .expect("cluster");
    let yaml = fleet_yaml(
        "crash",
        "  k-1: {node: mk33, vm_id: 5001, memory: 512, disk_size: 4}\n  \
           k-2: {node: mk33, vm_id: 5002, memory: 512, disk_size: 4}\n",
    );
    let r = c.submit(&yaml).await.unwrap();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    // Wait until a create is under way on mk33 (pvesim holds `lock: create` for 3 s), then kill the agent.
    wait_until(
        "a create running on mk33",
        Duration::from_secs(60),
        || async {
            let ops = c.operations("crash").await.map_err(|e| e.to_string())?;
            let on = c.vmids_on("mk33");
            if ops.iter().any(|o| {
                o.kind == pb::OperationKind::Create as i32
                    && o.state == pb::OperationState::Running as i32
            }) && !on.is_empty()
            {
                Ok(())
            } else {
                Err(format!(
                    "ops {:?}, mk33 has {on:?}",
                    ops.iter().map(|o| (o.kind, o.state)).collect::<Vec<_>>()
                ))
            }
        },
    )
    .await;
    c.kill_agent("mk33").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.start_agent("mk33").unwrap();

    let cs = c.wait_running("crash", &["k-1", "k-2"], UP).await;
    let mut on = c.vmids_on("mk33");
    on.sort();
    assert_eq!(on, vec![5001, 5002], "mk33 holds {on:?}\n{}", c.logs());
    assert!(c.vmids_on("mk34").is_empty());
    for x in &cs {
        assert_eq!(x.node, "mk33");
        let cfg = c.pct_config("mk33", x.vm_id);
        assert!(
            !cfg.contains_key("lock"),
            "CT {} still locked: {cfg:?}",
            x.vm_id
        );
    }
    // Settled: a plan of the same file has nothing to do.
    let plan = c.plan(&yaml).await.unwrap();
    assert!(!plan.has_changes, "{}", plan.plan_json);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_killed_and_restarted_keeps_state_and_converges() {
    let mut c = Cluster::start(2).await.expect("cluster");
    let v1 = fleet_yaml(
        "keep",
        "  s-1: {node: mk33, memory: 512, disk_size: 4}\n  s-2: {node: mk34, memory: 512, disk_size: 4}\n",
    );
    let r = c.submit(&v1).await.unwrap();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    let before = c.wait_running("keep", &["s-1", "s-2"], UP).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    c.kill_controller().await;
    c.start_controller().await.expect("controller restarts");
    c.wait_nodes_ready(Duration::from_secs(30))
        .await
        .expect("agents reconnect");
    let after = c.wait_running("keep", &["s-1", "s-2"], UP).await;
    for b in &before {
        let a = after.iter().find(|a| a.name == b.name).unwrap();
        assert_eq!(
            (a.vm_id, &a.node, &a.addresses),
            (b.vm_id, &b.node, &b.addresses),
            "{}",
            describe(&after)
        );
    }
    let mut api = c.api().await.unwrap();
    let history = api
        .history(pb::HistoryRequest {
            fleet: "keep".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(history.revisions.len(), 1, "{:?}", history.revisions);

    // It still acts: a change after the restart converges.
    let v2 = fleet_yaml(
        "keep",
        "  s-1: {node: mk33, memory: 768, disk_size: 4}\n  s-2: {node: mk34, memory: 512, disk_size: 4}\n  \
           s-3: {node: mk34, memory: 512, disk_size: 4}\n",
    );
    let r = c.submit(&v2).await.unwrap();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    assert_eq!(r.revision, 2);
    let cs = c.wait_running("keep", &["s-1", "s-2", "s-3"], UP).await;
    let s1 = cs.iter().find(|x| x.name == "s-1").unwrap();
    assert_eq!(
        c.pct_config("mk33", s1.vm_id)
            .get("memory")
            .map(String::as_str),
        Some("768")
    );
    let mut ids: Vec<u32> = cs.iter().map(|x| x.vm_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "vm_ids reused: {}", describe(&cs));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_node_is_down_within_30s_and_gets_its_operations_when_back() {
    let mut c = Cluster::start(2).await.expect("cluster");
    let v1 = fleet_yaml(
        "away",
        "  n-1: {node: mk34, vm_id: 6001, memory: 512, disk_size: 4}\n",
    );
    c.submit(&v1).await.unwrap();
    c.wait_running("away", &["n-1"], UP).await;

    c.kill_agent("mk34").await;
    let stopped = Instant::now();
    // When the controller answered "down": measured at the start of the request that saw it.
    let took = wait_until("mk34 down", Duration::from_secs(40), || async {
        let asked = stopped.elapsed();
        let nodes = c.nodes_info().await.map_err(|e| e.to_string())?;
        match nodes.iter().find(|n| n.name == "mk34") {
            Some(n) if n.status == pb::NodeStatus::Down as i32 => Ok(asked),
            other => Err(format!("{:?}", other.map(|n| n.status))),
        }
    })
    .await;
    assert!(
        took <= Duration::from_millis(30_500),
        "mk34 reported down only {took:?} after it stopped"
    );
    let mk33 = c.nodes_info().await.unwrap();
    assert!(mk33
        .iter()
        .any(|n| n.name == "mk33" && n.status == pb::NodeStatus::Ready as i32));

    // Changes for the absent node wait for it.
    let v2 = fleet_yaml(
        "away",
        "  n-1: {node: mk34, vm_id: 6001, memory: 1024, disk_size: 4}\n  \
           n-2: {node: mk34, vm_id: 6002, memory: 512, disk_size: 4}\n",
    );
    let r = c.submit(&v2).await.unwrap();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        c.vmids_on("mk34"),
        vec![6001],
        "something ran on a stopped node"
    );
    assert_eq!(
        c.pct_config("mk34", 6001).get("memory").map(String::as_str),
        Some("512")
    );

    c.start_agent("mk34").unwrap();
    c.wait_nodes_ready(Duration::from_secs(30))
        .await
        .expect("mk34 back");
    c.wait_running("away", &["n-1", "n-2"], UP).await;
    assert_eq!(
        c.pct_config("mk34", 6001).get("memory").map(String::as_str),
        Some("1024")
    );
    let mut on = c.vmids_on("mk34");
    on.sort();
    assert_eq!(on, vec![6001, 6002]);
}
