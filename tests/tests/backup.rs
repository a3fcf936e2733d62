//! Issue 14 item 5 on pvesim nodes: a `seed: all_nodes` template lands on every node, also one added later,
//! whether or not a container is placed there; `pxcontroller backup` / `restore` give back the same fleets,
//! revisions, containers and operations through the API, and refuse a data dir a running controller holds.

use std::time::Duration;

use pxfleet_tests::{run_command, v1 as pb, wait_until, Cluster, ClusterOptions, TEST_SSH_KEY};

const ALPINE: &str = "alpine-3.22-default_20250617_amd64.tar.xz";
const UP: Duration = Duration::from_secs(120);

fn fleet() -> String {
    format!(
        "fleet: seeded\n\
         defaults:\n  \
           template: deb13\n  \
           datastore_id: local-lvm\n  \
           bridge: vmbr0\n  \
           ip_address: dhcp\n  \
           ssh_public_keys: [\"{TEST_SSH_KEY}\"]\n\
         templates:\n  \
           deb13: {{pveam: debian-13-standard_13.6-1_amd64.tar.zst}}\n  \
           alp: {{pveam: {ALPINE}, seed: all_nodes}}\n\
         containers:\n  \
           a: {{node: mk33, memory: 512, disk_size: 4, password: s3cret-pass}}\n"
    )
}

fn has_alpine(c: &Cluster, node: &str) -> Result<(), String> {
    let out = c.pve(node, "pveam", &["list", "local"]);
    if out.code == 0 && out.stdout.contains(ALPINE) {
        Ok(())
    } else {
        Err(format!("{node}: {} {}", out.stdout, out.stderr))
    }
}

/// What a user compares after a restore: history, containers, operations.
async fn state(c: &Cluster) -> (Vec<(u64, String)>, Vec<String>, Vec<String>) {
    let mut api = c.api().await.unwrap();
    let h = api
        .history(pb::HistoryRequest {
            fleet: "seeded".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let revs = h
        .revisions
        .iter()
        .map(|r| (r.revision, r.summary.clone()))
        .collect();
    let cs = c
        .containers("seeded")
        .await
        .unwrap()
        .iter()
        .map(|c| format!("{} {} {}", c.name, c.node, c.vm_id))
        .collect();
    let ops = c
        .operations("seeded")
        .await
        .unwrap()
        .iter()
        .map(|o| {
            format!(
                "{} {} {} {} {:?} {:?}",
                o.op_id, o.node, o.container, o.reason, o.kind, o.state
            )
        })
        .collect();
    (revs, cs, ops)
}

async fn pxcontroller(c: &Cluster, args: &[&str]) -> Result<String, String> {
    let mut argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    argv.extend(["--config".into(), c.controller_config.display().to_string()]);
    run_command(&c.bins.pxcontroller, &argv, &[])
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_nodes_templates_are_seeded_everywhere_and_backup_restore_gives_the_same_state() {
    let mut c = Cluster::start_with(ClusterOptions {
        nodes: 2,
        ..ClusterOptions::default()
    })
    .await
    .expect("cluster");
    for n in ["mk33", "mk34"] {
        assert!(
            has_alpine(&c, n).is_err(),
            "{n} starts without the template"
        );
    }
    let r = c.submit(&fleet()).await.unwrap();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    c.wait_running("seeded", &["a"], UP).await;
    // mk34 has no container, and gets the template all the same
    for n in ["mk33", "mk34"] {
        wait_until(&format!("{ALPINE} on {n}"), UP, || async {
            has_alpine(&c, n)
        })
        .await;
    }
    // a node that joins later gets it too
    c.add_node("mk35").await.unwrap();
    wait_until(&format!("{ALPINE} on mk35"), UP, || async {
        has_alpine(&c, "mk35")
    })
    .await;
    // ... and the seed operations are in the fleet's history, one per node (the file can be on the node a moment
    // before the agent's result reaches the controller: wait for the results)
    let seeded = || async {
        let ops = c.operations("seeded").await.unwrap();
        let mut seeded: Vec<String> = ops
            .iter()
            .filter(|o| o.container.is_empty() && o.state == pb::OperationState::Succeeded as i32)
            .map(|o| o.node.clone())
            .collect();
        seeded.sort();
        (seeded, ops)
    };
    wait_until("a succeeded seed operation on each node", UP, || async {
        let (nodes, _) = seeded().await;
        if nodes.len() >= 3 {
            Ok(())
        } else {
            Err(format!("succeeded seeds on {nodes:?}"))
        }
    })
    .await;
    let (nodes, ops) = seeded().await;
    assert_eq!(nodes, ["mk33", "mk34", "mk35"], "{ops:#?}");

    // backup and restore refuse the data dir while the controller runs
    let file = c.dir.path().join("state.pxbackup");
    let f = file.display().to_string();
    let err = pxcontroller(&c, &["backup", "--out", &f])
        .await
        .unwrap_err();
    assert!(err.contains("in use by another pxcontroller"), "{err}");
    let before = state(&c).await;
    // an online backup of the running controller, through the API (admin)
    let online = c.dir.path().join("online.pxbackup");
    let o = online.display().to_string();
    let (code, out, err) = c.pxctl(&["backup", "--out", &o]).await;
    assert_eq!(code, 0, "pxctl backup: {out}\n{err}");
    assert!(out.contains("sha256"), "{out}");
    c.stop_controller().await;
    let out = pxcontroller(&c, &["backup", "--out", &f]).await.unwrap();
    assert!(out.contains("sha256"), "{out}");
    // a fresh store: the old one moved aside, the backup restored in its place
    let db = c.controller_dir.join("db");
    std::fs::rename(&db, c.controller_dir.join("db.before")).unwrap();
    let out = pxcontroller(&c, &["restore", "--from", &f]).await.unwrap();
    assert!(out.contains("restored"), "{out}");
    let err = pxcontroller(&c, &["restore", "--from", &f])
        .await
        .unwrap_err();
    assert!(err.contains("--force"), "{err}");
    // a damaged file is refused, naming why
    let bad = c.dir.path().join("bad.pxbackup");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&bad, &bytes).unwrap();
    let b = bad.display().to_string();
    let err = pxcontroller(&c, &["restore", "--force", "--from", &b])
        .await
        .unwrap_err();
    assert!(err.contains("is not a usable pxfleet backup"), "{err}");

    c.start_controller().await.unwrap();
    c.wait_nodes_ready(UP).await.unwrap();
    let after = state(&c).await;
    assert_eq!(before, after);
    assert_eq!(after.0.len(), 1);
    // the restored controller still has the container's secret (sealed with the same key) and runs it
    c.wait_running("seeded", &["a"], UP).await;
    let err = pxcontroller(&c, &["restore", "--force", "--from", &f])
        .await
        .unwrap_err();
    assert!(err.contains("in use by another pxcontroller"), "{err}");

    // the online backup restores to the same state as well
    c.stop_controller().await;
    let out = pxcontroller(&c, &["restore", "--force", "--from", &o])
        .await
        .unwrap();
    assert!(out.contains("restored"), "{out}");
    c.start_controller().await.unwrap();
    c.wait_nodes_ready(UP).await.unwrap();
    assert_eq!(state(&c).await, before);
}
