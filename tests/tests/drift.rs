//! Drift repair that always ends (issue 28): a change made by hand to a key the listing does not show is seen
//! and put back; descriptions PVE keeps as they are written (a line ending in a space, a line of the user's
//! own starting with `managed-by:`, empty lines) are not repaired forever; a repair that does not hold stops
//! and says why in `pxctl get`, `describe` and the plan. Real controller, real agents, pvesim nodes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pxfleet_tests::day2::{plan_is_empty, submit, UP};
use pxfleet_tests::{fleet_yaml, v1 as pb, wait_until, Cluster};

/// Operations of `kind` for container `name` of `fleet`.
async fn ops_of(c: &Cluster, fleet: &str, name: &str, kind: pb::OperationKind) -> usize {
    c.operations(fleet)
        .await
        .unwrap()
        .iter()
        .filter(|o| o.container == name && o.kind == kind as i32)
        .count()
}

/// Every operation of `fleet`, as `container kind state reason` lines (for assertion messages).
async fn op_lines(c: &Cluster, fleet: &str) -> String {
    c.operations(fleet)
        .await
        .unwrap()
        .iter()
        .map(|o| {
            format!(
                "{} {} {} {} {}",
                o.container, o.kind, o.state, o.reason, o.error
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Several passes of the agent (observe_secs = 1) and of the reconciler (200 ms).
const PASSES: Duration = Duration::from_secs(4);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feature_set_by_hand_is_put_back_and_pves_descriptions_are_not_repaired_forever() {
    let c = Cluster::start(1).await.expect("cluster");
    // YAML escapes: a line ending in a space, the user's own `managed-by:` line (and a mark-like one), an
    // empty line inside and trailing newlines.
    let description = r#""ends in a space \nmanaged-by: the ops team\nmanaged-by: pxfleet fleet=x name=y\n\n  indented after an empty line\n\n\n""#;
    let yaml = fleet_yaml(
        "dr",
        &format!(
            "  a: {{node: mk33, vm_id: 2500, memory: 512, disk_size: 4, description: {description}}}\n  \
             b: {{node: mk33, vm_id: 2501, memory: 512, disk_size: 4, tags: [Web, db]}}\n"
        ),
    );
    let path = submit(&c, "dr.yaml", &yaml).await;
    c.wait_running("dr", &["a", "b"], UP).await;
    plan_is_empty(&c, &path).await;

    // PVE keeps the description as written: nothing to repair, now or after several passes.
    let stored = c.pct_config("mk33", 2500)["description"].clone();
    assert!(
        stored.contains("ends in a space %0Amanaged-by%3A the ops team%0A"),
        "{stored}"
    );
    tokio::time::sleep(PASSES).await;
    assert_eq!(
        ops_of(&c, "dr", "a", pb::OperationKind::Update).await,
        0,
        "{}",
        op_lines(&c, "dr").await
    );
    plan_is_empty(&c, &path).await;

    // nesting turned on by hand on the running container (pending until its next start, as PVE keeps it):
    // seen although the node's listing does not show features, and put back.
    let out = c.pve("mk33", "pct", &["set", "2501", "--features", "nesting=1"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    wait_until("nesting put back", Duration::from_secs(30), || async {
        let cfg = c.pct_config("mk33", 2501);
        let updates = ops_of(&c, "dr", "b", pb::OperationKind::Update).await;
        if updates >= 1 && !cfg.get("features").is_some_and(|f| f.contains("nesting=1")) {
            Ok(())
        } else {
            Err(format!("{cfg:?}\n{}", op_lines(&c, "dr").await))
        }
    })
    .await;
    let reason = c
        .operations("dr")
        .await
        .unwrap()
        .into_iter()
        .find(|o| o.container == "b" && o.kind == pb::OperationKind::Update as i32)
        .unwrap()
        .reason;
    assert!(
        reason.contains("repair: features.nesting true -> false"),
        "{reason}"
    );
    plan_is_empty(&c, &path).await;
    let updates = ops_of(&c, "dr", "b", pb::OperationKind::Update).await;
    tokio::time::sleep(PASSES).await;
    assert_eq!(
        ops_of(&c, "dr", "b", pb::OperationKind::Update).await,
        updates,
        "a repair that held is not made again: {}",
        op_lines(&c, "dr").await
    );
    assert_eq!(
        ops_of(&c, "dr", "a", pb::OperationKind::Update).await,
        0,
        "{}",
        op_lines(&c, "dr").await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_that_does_not_hold_stops_and_says_why_until_the_next_submit() {
    let c = Arc::new(Cluster::start(1).await.expect("cluster"));
    let yaml = fleet_yaml(
        "nh",
        "  app: {node: mk33, vm_id: 2600, memory: 512, disk_size: 4}\n",
    );
    let path = submit(&c, "nh.yaml", &yaml).await;
    c.wait_running("nh", &["app"], UP).await;
    plan_is_empty(&c, &path).await;

    // Something on the node puts memory back to 1024 whenever pxfleet repairs it.
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (c, stop) = (c.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let cfg = c.pct_config("mk33", 2600);
                if cfg.get("memory").map(String::as_str) != Some("1024") {
                    let _ = c.pve("mk33", "pct", &["set", "2600", "--memory", "1024"]);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let wanted = "drift: repair does not hold (memory: wanted 512, node has 1024)";
    wait_until("the repair stops", UP, || async {
        let cs = c.containers("nh").await.map_err(|e| e.to_string())?;
        match cs.iter().find(|x| x.name == "app") {
            Some(x) if x.last_error.contains(wanted) => Ok(()),
            other => Err(format!("{other:?}\n{}", op_lines(&c, "nh").await)),
        }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();

    // It stopped after three successful repairs and makes no more.
    let updates = ops_of(&c, "nh", "app", pb::OperationKind::Update).await;
    tokio::time::sleep(PASSES).await;
    assert_eq!(
        ops_of(&c, "nh", "app", pb::OperationKind::Update).await,
        updates,
        "{}",
        op_lines(&c, "nh").await
    );
    let succeeded = c
        .operations("nh")
        .await
        .unwrap()
        .iter()
        .filter(|o| {
            o.kind == pb::OperationKind::Update as i32
                && o.state == pb::OperationState::Succeeded as i32
        })
        .count();
    assert_eq!(succeeded, 3, "{}", op_lines(&c, "nh").await);
    assert_eq!(
        c.pct_config("mk33", 2600).get("memory").map(String::as_str),
        Some("1024")
    );

    // Said where a user looks: get, describe, and the plan (which still lists the repair).
    let (_, table, _) = c.pxctl(&["get", "containers", "--fleet", "nh"]).await;
    assert!(table.contains("drift: repair does not hold"), "{table}");
    let (_, text, err) = c
        .pxctl(&["describe", "container", "app", "--fleet", "nh"])
        .await;
    assert!(text.contains(wanted), "{text}\n{err}");
    let (code, text, err) = c.pxctl(&["plan", &path, "--detailed-exitcode"]).await;
    assert_eq!(code, 2, "{text}\n{err}");
    assert!(
        text.contains("container app: drift: repair does not hold"),
        "{text}"
    );

    // The cause gone, a submit repairs it again and the plan is empty.
    let (code, out, err) = c.pxctl(&["submit", &path, "-y", "--retry-failed"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    wait_until("memory repaired", UP, || async {
        match c.pct_config("mk33", 2600).get("memory").map(String::as_str) {
            Some("512") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
}
