//! Tests of the in-memory node: a container's life as PVE answers it, templates, the config lock.

use super::*;

/// A node with `latency` and config locks (the benchmark's), its template cache holding `t.tar.zst`.
fn node(latency: Duration, dir: &tempfile::TempDir) -> Arc<MemNode> {
    std::fs::write(dir.path().join("t.tar.zst"), b"t").unwrap();
    MemNode::new(MemNodeOptions {
        latency: Latency::uniform(latency),
        config_locks: true,
        pveam: false,
        ..MemNodeOptions::new("sim0001", dir.path().to_path_buf())
    })
}

fn args(vmid: u32) -> CreateSpec {
    crate::pve_options::create_spec(&crate::pve_options::CreateArgs {
        vmid,
        ostemplate: "local:vztmpl/t.tar.zst".into(),
        options: vec![
            ("hostname".into(), "c1".into()),
            ("memory".into(), "64".into()),
            ("rootfs".into(), "local-lvm:1".into()),
            ("net0".into(), "name=eth0,bridge=vmbr0,ip=dhcp".into()),
        ],
        ssh_public_keys: vec![],
    })
    .expect("valid options")
}

#[tokio::test]
async fn create_start_destroy_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let n = node(Duration::ZERO, &dir);
    n.create(&args(1000), None).await.unwrap();
    let cfg = n.config(1000).await.unwrap().unwrap();
    assert_eq!(cfg.raw["rootfs"], "local-lvm:vm-1000-disk-0,size=1G");
    assert_eq!(cfg.hwaddr(0), Some("BC:24:11:00:03:E8"), "{cfg:?}");
    assert!(n.interfaces(1000).await.unwrap().is_none());
    n.start(1000).await.unwrap();
    assert_eq!(n.counts(), (1, 1));
    let ifs = n.interfaces(1000).await.unwrap().unwrap();
    assert_eq!(ifs[1].addresses, vec!["10.0.3.232/8".to_string()]);
    assert_eq!(ifs[1].hwaddr, "bc:24:11:00:03:e8");
    let facts = n.facts().await.unwrap();
    assert_eq!(facts.memory_free_bytes, NODE_MEMORY_BYTES - (64 << 20));
    assert_eq!(facts.storages[1].used_bytes, 1 << 30);
    assert_eq!(facts.templates[0].volid, "local:vztmpl/t.tar.zst");
    assert!(n
        .destroy(1000, true)
        .await
        .unwrap_err()
        .to_string()
        .contains("running"));
    n.stop(1000).await.unwrap();
    n.destroy(1000, true).await.unwrap();
    assert_eq!(n.counts(), (0, 0));
    assert!(n.create(&args(1000), None).await.is_ok());
    assert!(n
        .create(&args(1000), None)
        .await
        .unwrap_err()
        .to_string()
        .contains("already exists"));
}

#[tokio::test]
async fn unknown_template_is_refused_and_pveam_only_when_it_downloads() {
    let dir = tempfile::tempdir().unwrap();
    let n = node(Duration::ZERO, &dir);
    let mut a = args(1001);
    a.template = "local:vztmpl/other.tar.zst".into();
    assert!(n
        .create(&a, None)
        .await
        .unwrap_err()
        .to_string()
        .contains("does not exist"));
    assert!(n
        .pveam_download("local", "other.tar.zst")
        .await
        .unwrap_err()
        .to_string()
        .contains("pre-seeded"));
    let downloads = MemNode::new(MemNodeOptions::new("pve1", dir.path().to_path_buf()));
    downloads
        .pveam_download("local", "other.tar.zst")
        .await
        .unwrap();
    assert!(n.create(&a, None).await.is_ok());
}

#[tokio::test]
async fn the_vmid_lock_serialises_work_on_one_container() {
    let dir = tempfile::tempdir().unwrap();
    let n = node(Duration::from_millis(100), &dir);
    n.create(&args(1002), None).await.unwrap();
    // The start takes the lock first; the stop must wait for it, so the container ends stopped. Without
    // the lock the stop would run at once and the slow start would leave it running.
    let (a, b) = tokio::join!(n.start(1002), n.stop(1002));
    a.unwrap();
    b.unwrap();
    assert_eq!(n.counts(), (1, 0));
}

#[tokio::test]
async fn without_config_locks_slow_calls_overlap_and_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.tar.zst"), b"t").unwrap();
    let n = MemNode::new(MemNodeOptions {
        latency: Latency::uniform(Duration::from_millis(100)),
        ..MemNodeOptions::new("pve1", dir.path().to_path_buf())
    });
    let (x, y) = (args(1003), args(1004));
    let (a, b) = tokio::join!(n.create(&x, None), n.create(&y, None));
    a.unwrap();
    b.unwrap();
    assert_eq!(n.state.lock().unwrap().max_running, 2);
    assert_eq!(n.calls("create"), 2);
}
