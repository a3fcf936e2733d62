//! Large fleets on `pxcontroller dev`, as a new user tries them (issue 9): a 300-container submit used to hang
//! for good (the agents' journal deadlocked in sled's `flush_async` once about ten operations arrived at once,
//! and every create stayed `dispatched`). Here 300 containers over 3 nodes converge, and so does a second
//! fleet submitted while the first is still in flight; afterwards the plans are empty and every node is ready.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use pxfleet_tests::dev::{pxctl, pxctl_within, start_dev, stop_dev};
use pxfleet_tests::Binaries;

/// Generous: a debug build on a loaded 2-core CI machine. A hang is what this test catches, not slowness.
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(1200);

fn write_fleet(path: &Path, fleet: &str, prefix: &str, count: usize) {
    let mut text = format!(
        "fleet: {fleet}\n\
         defaults: {{template: d13, memory: 64, disk_size: 1}}\n\
         templates:\n  d13: {{pveam: debian-13-standard_13.6-1_amd64.tar.zst}}\n\
         containers:\n"
    );
    for i in 0..count {
        text.push_str(&format!("  {prefix}{i:04}: {{}}\n"));
    }
    std::fs::write(path, text).unwrap();
}

fn rows(json: &str) -> Vec<serde_json::Value> {
    serde_json::from_str::<serde_json::Value>(json)
        .unwrap_or_else(|e| panic!("get containers -o json: {e}: {json}"))
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_containers_and_a_second_submit_in_flight_converge() {
    let bins = Binaries::locate().expect("binaries");
    let tmp = tempfile::Builder::new()
        .prefix("pxfleet-scale-")
        .tempdir()
        .unwrap();
    let big = tmp.path().join("big.yaml");
    let second = tmp.path().join("second.yaml");
    write_fleet(&big, "big", "c", 300);
    write_fleet(&second, "second", "s", 30);
    let data = tmp.path().join("dev");
    let err_log = tmp.path().join("dev.err");
    let (dev, config) = start_dev(&bins, &data, &err_log, 3).await;
    let big_s = big.to_str().unwrap().to_string();
    let second_s = second.to_str().unwrap().to_string();

    let first = {
        let (bins, config, big_s) = (bins.clone(), config.clone(), big_s.clone());
        tokio::spawn(async move {
            pxctl_within(&bins, &config, &["submit", &big_s, "-y"], SUBMIT_TIMEOUT).await
        })
    };
    // The second submit goes in while the first is in flight: some of `big` running, not all.
    let mut in_flight = false;
    for _ in 0..1200 {
        let (code, out, _) = pxctl(&bins, &config, &["get", "containers", "-o", "json"]).await;
        if code == 0 {
            let r = rows(&out);
            let running = r.iter().filter(|r| r["status"] == "running").count();
            if running > 0 && running < 300 {
                in_flight = true;
                break;
            }
            if running == 300 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        in_flight,
        "never saw the first submit half-way (the test did not overlap the submits)"
    );
    let (code, out, err) =
        pxctl_within(&bins, &config, &["submit", &second_s, "-y"], SUBMIT_TIMEOUT).await;
    assert_eq!(code, 0, "second submit: {out}\n{err}");
    assert!(out.contains("30 running, 0 failed"), "{out}");
    let (code, out, err) = first.await.unwrap();
    assert_eq!(code, 0, "first submit: {out}\n{err}");
    assert!(out.contains("300 running, 0 failed"), "{out}");

    let (code, out, err) = pxctl(&bins, &config, &["get", "containers", "-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let all = rows(&out);
    assert_eq!(all.len(), 330);
    assert!(
        all.iter().all(|r| r["status"] == "running"),
        "not all running: {:?}",
        all.iter()
            .filter(|r| r["status"] != "running")
            .collect::<Vec<_>>()
    );
    let vm_ids: BTreeSet<u64> = all.iter().filter_map(|r| r["vm_id"].as_u64()).collect();
    assert_eq!(vm_ids.len(), 330, "every container has its own vm_id");
    let nodes: BTreeSet<&str> = all.iter().filter_map(|r| r["node"].as_str()).collect();
    assert_eq!(nodes.len(), 3, "spread over the three nodes: {nodes:?}");
    for file in [&big_s, &second_s] {
        let (code, out, err) = pxctl(&bins, &config, &["plan", file, "--detailed-exitcode"]).await;
        assert_eq!(code, 0, "plan of {file} after submit: {out}\n{err}");
    }
    let (code, out, err) = pxctl(&bins, &config, &["get", "nodes", "-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let nodes: serde_json::Value = serde_json::from_str(&out).unwrap();
    for n in nodes.as_array().unwrap() {
        assert_eq!(n["status"], "ready", "{n}");
    }
    stop_dev(dev, &data, &err_log).await;
}
