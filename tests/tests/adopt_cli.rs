//! `pxctl adopt FILE --node N --vm-id ID`: a container made by hand is listed by `pxctl get unmanaged`, written
//! into the fleet file with its own values and `adopt: true`, and taken under management where it is: same
//! vm_id, same MAC, same memory, nothing recreated, and the plan is empty afterwards. Real controller, real
//! agents, pvesim nodes.

use pxfleet_tests::day2::{create_by_hand, plan_is_empty, UP};
use pxfleet_tests::{fleet_yaml, wait_until, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopt_writes_the_container_into_the_file_and_takes_it_over_unchanged() {
    let c = Cluster::start(1).await.expect("cluster");
    create_by_hand(
        &c,
        "mk33",
        2100,
        &[
            "--hostname",
            "legacy",
            "--memory",
            "256",
            "--swap",
            "128",
            "--cores",
            "2",
            "--rootfs",
            "local-lvm:3",
            "--unprivileged",
            "1",
            "--features",
            "nesting=1",
            "--tags",
            "old;web",
            "--net0",
            "name=eth0,bridge=vmbr0,ip=10.20.0.50/24,gw=10.20.0.1,type=veth",
        ],
    );
    assert_eq!(c.pve("mk33", "pct", &["start", "2100"]).code, 0);
    let before = c.pct_config("mk33", 2100);

    // A fleet that already runs one container of its own.
    let yaml = fleet_yaml("adc", "  web: {node: mk33}\n");
    let path = c.write_fleet("adc.yaml", &yaml);
    let path = path.to_str().unwrap().to_string();
    let (code, out, err) = c.pxctl(&["submit", &path, "-y"]).await;
    assert_eq!(code, 0, "{out}\n{err}");

    // Listed as unmanaged (not the fleet's own container).
    let listed = wait_until(
        "the hand-made container listed as unmanaged and running",
        UP,
        || async {
            let v = c.pxctl_json(&["get", "unmanaged", "--node", "mk33"]).await;
            let rows = v.as_array().cloned().unwrap_or_default();
            // Running: created stopped, then started, so an observation in between lists it stopped.
            if rows.len() == 1 && rows[0]["vm_id"] == 2100 && rows[0]["state"] == "running" {
                Ok(rows[0].clone())
            } else {
                Err(v.to_string())
            }
        },
    )
    .await;
    assert_eq!(listed["hostname"], "legacy");
    assert_eq!(listed["state"], "running");

    // A vm_id with no container: refused, the file untouched.
    let (code, _, err) = c
        .pxctl(&["adopt", &path, "--node", "mk33", "--vm-id", "2999", "-y"])
        .await;
    assert_ne!(code, 0);
    assert!(
        err.contains("no container 2999") && err.contains("2100 (legacy)"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), yaml);

    let (code, out, err) = c
        .pxctl(&["adopt", &path, "--node", "mk33", "--vm-id", "2100", "-y"])
        .await;
    assert_eq!(code, 0, "{out}\n{err}\n{}", c.logs());
    assert!(
        out.contains("Added container legacy (vm_id 2100 on mk33)"),
        "{out}"
    );
    assert!(out.contains("will be adopted"), "{out}");
    let written = std::fs::read_to_string(&path).unwrap();
    let entry = written
        .lines()
        .find(|l| l.trim_start().starts_with("legacy:"))
        .unwrap_or_else(|| panic!("no entry in {written}"));
    for part in [
        "vm_id: 2100",
        "node: mk33",
        "adopt: true",
        "memory: 256",
        "swap: 128",
        "cores: 2",
        "disk_size: 3",
        "ip_address: 10.20.0.50/24",
        "features: {nesting: true}",
    ] {
        assert!(entry.contains(part), "{part} missing in {entry}");
    }

    // Taken over where it is, nothing changed but the mark.
    let after = wait_until("the mark written", UP, || async {
        let cfg = c.pct_config("mk33", 2100);
        if cfg
            .get("description")
            .is_some_and(|d| d.contains("fleet=adc") && d.contains("name=legacy"))
        {
            Ok(cfg)
        } else {
            Err(format!("{cfg:?}"))
        }
    })
    .await;
    for key in ["memory", "swap", "cores", "net0", "rootfs", "features"] {
        assert_eq!(after.get(key), before.get(key), "{key} changed by adopting");
    }
    let mut vmids = c.vmids_on("mk33");
    vmids.sort();
    assert_eq!(vmids.len(), 2, "nothing created: {vmids:?}");
    assert!(vmids.contains(&2100));
    plan_is_empty(&c, &path).await;
    // No longer unmanaged.
    let v = c.pxctl_json(&["get", "unmanaged", "--node", "mk33"]).await;
    assert_eq!(v.as_array().map(Vec::len), Some(0), "{v}");
}
