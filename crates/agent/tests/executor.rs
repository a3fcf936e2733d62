//! The executor against an in-memory node: idempotency by op id, restart recovery, the managed
//! mark, bounded parallelism and one operation per vmid.

mod common;

use std::sync::Arc;
use std::time::Duration;

use pxfleet_agent::journal::OpState;
use pxfleet_agent::node::{ManagedMark, Secret};
use pxfleet_agent::ops::{
    CreateOp, Digest, OpKind, OpUpdate, Operation, TemplateSource, TemplateSpec,
};
use pxfleet_agent::pve_options::options_spec;
use pxfleet_agent::{Executor, ExecutorSettings, Journal, Seeder};

use pxfleet_agent::mem_node::MemNode;

fn mark(name: &str) -> ManagedMark {
    ManagedMark {
        fleet: "dev".into(),
        name: name.into(),
    }
}

fn create(id: &str, vmid: u32, name: &str) -> Operation {
    Operation {
        id: id.into(),
        kind: OpKind::Create(CreateOp {
            vmid,
            mark: mark(name),
            template: TemplateSpec {
                storage: "local".into(),
                file_name: "t.tar.zst".into(),
                source: TemplateSource::Existing,
            },
            options: options_spec(&[
                ("hostname".into(), name.into()),
                ("memory".into(), "512".into()),
                ("rootfs".into(), "local-zfs:4".into()),
                (
                    "net0".into(),
                    "name=eth0,bridge=vmbr0,ip=dhcp,type=veth".into(),
                ),
            ])
            .unwrap(),
            tags: vec!["web".into()],
            description: Some("Web server".into()),
            ssh_public_keys: vec![],
            password: Some(Secret("pw-123456".into())),
            start: true,
            make_template: false,
            wait_for: Default::default(),
            clone: None,
        }),
    }
}

/// A create of `name` as `vmid` cloned from `source` (full or linked), 1024 MiB, 8 GiB root disk, a fixed MAC.
fn clone_create(id: &str, vmid: u32, name: &str, source: u32, full: bool) -> Operation {
    let mut op = create(id, vmid, name);
    if let OpKind::Create(c) = &mut op.kind {
        c.options = options_spec(&[
            ("hostname".into(), name.into()),
            ("memory".into(), "1024".into()),
            ("cores".into(), "2".into()),
            ("rootfs".into(), "local-zfs:8".into()),
            (
                "net0".into(),
                "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:AA:BB:CC,ip=dhcp,type=veth".into(),
            ),
        ])
        .unwrap();
        c.password = None;
        c.template = TemplateSpec {
            storage: String::new(),
            file_name: String::new(),
            source: TemplateSource::Existing,
        };
        c.clone = Some(pxfleet_agent::ops::CloneFrom { source, full });
    }
    op
}

fn template_ct(r: &Rig) {
    r.node.insert(
        9000,
        "stopped",
        &[
            ("hostname", "base"),
            ("memory", "512"),
            ("rootfs", "local-zfs:base-9000-disk-0,size=4G"),
            (
                "net0",
                "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:23:28,ip=dhcp,type=veth",
            ),
            ("description", "golden image\n"),
            ("template", "1"),
        ],
    );
}

#[tokio::test]
async fn a_clone_create_clones_sets_grows_and_starts() {
    let r = rig(4, Duration::ZERO);
    template_ct(&r);
    let mut op = clone_create("c-1", 120, "app", 9000, false);
    if let OpKind::Create(c) = &mut op.kind {
        c.options.env = Some(
            [("A", "1"), ("B", "two words")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    }
    let u = r.exec.execute(op).await;
    let res = succeeded(&u);
    assert_eq!(res.message, "cloned");
    // env is no `pct set` option: written into the clone's config file like a create's.
    assert_eq!(r.node.calls("write_env 120"), 1);
    assert_eq!(r.node.calls("clone 9000 120"), 1);
    assert_eq!(r.node.calls("create"), 0, "no pct create for a clone");
    let (status, cfg) = r.node.get(120).unwrap();
    assert_eq!(status, "running");
    assert_eq!(cfg["memory"], "1024");
    assert_eq!(cfg["cores"], "2");
    assert_eq!(cfg["hostname"], "app");
    assert_eq!(cfg["env"], "A=1\0B=two words");
    assert!(
        cfg["net0"].contains("hwaddr=BC:24:11:AA:BB:CC"),
        "{}",
        cfg["net0"]
    );
    assert!(
        cfg["rootfs"].contains("size=8G"),
        "grown: {}",
        cfg["rootfs"]
    );
    assert!(!cfg.contains_key("template"));
    assert!(cfg["description"].starts_with("managed-by: pxfleet fleet=dev name=app\n"));
    assert!(cfg["tags"].contains("pxfleet"));
    // The template is left as it was.
    assert_eq!(r.node.get(9000).unwrap().1["memory"], "512");

    // A linked clone of a container that is no template fails with PVE's reason.
    r.node.insert(
        300,
        "stopped",
        &[
            ("hostname", "plain"),
            ("rootfs", "local-zfs:vm-300-disk-0,size=4G"),
        ],
    );
    let u = r
        .exec
        .execute(clone_create("c-2", 121, "b", 300, false))
        .await;
    assert!(failed(&u).contains("not a template"), "{u:?}");
    assert!(r.node.get(121).is_none());
}

#[tokio::test]
async fn a_rerun_after_the_clone_step_continues_without_cloning_again() {
    let r = rig(4, Duration::ZERO);
    template_ct(&r);
    // The first attempt cloned (with the mark, as the executor does) and the agent died before `pct set`.
    use pxfleet_agent::node::NodeApi;
    r.node
        .clone_ct(&pxfleet_agent::node::CloneSpec {
            source: 9000,
            vmid: 120,
            hostname: Some("app".into()),
            full: true,
            storage: Some("local-zfs".into()),
            description: Some(mark("app").description(Some("Web server"))),
        })
        .await
        .unwrap();
    assert_eq!(r.node.get(120).unwrap().1["memory"], "512");
    let u = r
        .exec
        .execute(clone_create("c-9", 120, "app", 9000, true))
        .await;
    assert_eq!(succeeded(&u).message, "cloned (continued)");
    assert_eq!(
        r.node.calls("clone"),
        1,
        "cloned once, by the first attempt"
    );
    let (status, cfg) = r.node.get(120).unwrap();
    assert_eq!(status, "running");
    assert_eq!(cfg["memory"], "1024");
    assert!(cfg["net0"].contains("hwaddr=BC:24:11:AA:BB:CC"));

    // Another fleet's container at the id is refused, never configured.
    let u = r
        .exec
        .execute(clone_create("c-10", 120, "other", 9000, true))
        .await;
    assert!(failed(&u).contains("not dev other"), "{u:?}");
}

fn settings(parallelism: usize) -> ExecutorSettings {
    ExecutorSettings {
        parallelism,
        address_wait: Duration::from_secs(2),
        address_poll: Duration::from_millis(20),
        ..ExecutorSettings::default()
    }
}

struct Rig {
    node: Arc<MemNode>,
    exec: Executor<MemNode>,
    _events: tokio::sync::mpsc::UnboundedReceiver<pxfleet_agent::Event>,
    tmpl: tempfile::TempDir,
    state: tempfile::TempDir,
}

fn rig(parallelism: usize, delay: Duration) -> Rig {
    let tmpl = tempfile::tempdir().unwrap();
    std::fs::write(tmpl.path().join("t.tar.zst"), b"t").unwrap();
    let state = tempfile::tempdir().unwrap();
    let node = common::fake_node(tmpl.path().to_path_buf(), delay);
    let journal = Journal::open(&state.path().join("journal")).unwrap();
    let (exec, events) = Executor::new(
        node.clone(),
        journal,
        Seeder::new(None),
        settings(parallelism),
    );
    Rig {
        node,
        exec,
        _events: events,
        tmpl,
        state,
    }
}

fn succeeded(u: &OpUpdate) -> &pxfleet_agent::ops::OpResult {
    match u {
        OpUpdate::Succeeded { result, .. } => result,
        other => panic!("expected success, got {other:?}"),
    }
}

fn failed(u: &OpUpdate) -> String {
    match u {
        OpUpdate::Failed { failure, .. } => failure.error.clone(),
        other => panic!("expected failure, got {other:?}"),
    }
}

#[tokio::test]
async fn create_marks_starts_and_reports_addresses_once() {
    let r = rig(4, Duration::ZERO);
    let u = r.exec.execute(create("op-1", 101, "dev-web")).await;
    let res = succeeded(&u);
    let ct = res.container.as_ref().expect("observed container");
    assert_eq!(ct.status, "running");
    assert_eq!(ct.managed, Some(mark("dev-web")));
    assert!(ct.tags.contains(&"pxfleet".to_string()) && ct.tags.contains(&"web".to_string()));
    // a DHCP lease the node derives from the vm_id (101)
    assert_eq!(ct.addresses, vec!["10.0.0.101/8".to_string()]);
    assert_eq!(
        ct.config.description.as_deref().unwrap(),
        "managed-by: pxfleet fleet=dev name=dev-web\nWeb server\n"
    );
    assert_eq!(
        r.node.state.lock().unwrap().passwords,
        vec!["pw-123456".to_string()]
    );

    // Re-sent: answered from the journal, nothing touched.
    let again = r.exec.execute(create("op-1", 101, "dev-web")).await;
    assert_eq!(succeeded(&again), res);
    assert_eq!(r.node.calls("create"), 1);
    assert_eq!(r.node.calls("start"), 1);

    // A new op id for the same container finds it already created.
    let u = r.exec.execute(create("op-2", 101, "dev-web")).await;
    assert_eq!(succeeded(&u).message, "already created");
    assert_eq!(r.node.calls("create"), 1);
}

#[tokio::test]
async fn restart_mid_create_cleans_up_and_the_resend_creates_once() {
    let r = rig(4, Duration::ZERO);
    // The agent died during pct create: the journal says running, the node holds `lock: create`.
    r.node.state.lock().unwrap().crash_next_create = true;
    let first = r.exec.execute(create("op-7", 107, "dev-db")).await;
    assert!(failed(&first).contains("killed"));
    // A failing create cleans up after itself...
    assert!(r.node.get(107).is_none());
    // ...and a kill leaves the lock; simulate that state with a running journal entry.
    r.node.insert(107, "stopped", &[("lock", "create")]);
    let op = create("op-8", 107, "dev-db");
    r.exec
        .journal()
        .record(&op, OpState::Running)
        .await
        .unwrap();
    drop(r.exec);

    // Restarted agent, same journal.
    let journal = Journal::open(&r.state.path().join("journal")).unwrap();
    let (exec, _ev) = Executor::new(r.node.clone(), journal, Seeder::new(None), settings(4));
    let interrupted = exec.recover().await.unwrap();
    assert_eq!(interrupted, vec!["op-8".to_string()]);
    assert!(r.node.get(107).is_none(), "half-created container removed");
    assert_eq!(
        exec.journal().get("op-8").unwrap().unwrap().state,
        OpState::Interrupted
    );
    let u = exec.execute(op).await;
    assert_eq!(succeeded(&u).message, "created");
    let (status, cfg) = r.node.get(107).unwrap();
    assert_eq!(status, "running");
    assert!(!cfg.contains_key("lock"));
    assert_eq!(
        r.node.calls("create 107"),
        2,
        "the crashed attempt and the redo"
    );
    drop(r.tmpl);
}

#[tokio::test]
async fn containers_without_the_mark_are_never_touched() {
    let r = rig(4, Duration::ZERO);
    r.node.insert(
        200,
        "running",
        &[("hostname", "legacy"), ("description", "hand made\n")],
    );
    let destroy = Operation {
        id: "d1".into(),
        kind: OpKind::Destroy {
            vmid: 200,
            expect: None,
            purge: false,
        },
    };
    assert!(failed(&r.exec.execute(destroy).await).contains("not managed by pxfleet"));
    let stop = Operation {
        id: "s1".into(),
        kind: OpKind::Stop {
            vmid: 200,
            expect: None,
            force: true,
            timeout_secs: 10,
        },
    };
    assert!(failed(&r.exec.execute(stop).await).contains("not managed"));
    let e = failed(&r.exec.execute(create("c1", 200, "dev-x")).await);
    assert!(
        e.contains("vm_id 200") && e.contains("does not manage"),
        "{e}"
    );
    assert_eq!(r.node.get(200).unwrap().0, "running");
    assert_eq!(
        r.node.calls("destroy") + r.node.calls("stop") + r.node.calls("create"),
        0
    );

    // Another fleet's container: refused with both names.
    r.node.insert(
        201,
        "stopped",
        &[("description", "managed-by: pxfleet fleet=prod name=db\n")],
    );
    let d = Operation {
        id: "d2".into(),
        kind: OpKind::Destroy {
            vmid: 201,
            expect: Some(mark("db")),
            purge: false,
        },
    };
    let e = failed(&r.exec.execute(d).await);
    assert!(e.contains("fleet prod") && e.contains("dev db"), "{e}");
}

#[tokio::test]
async fn destroy_stops_first_and_is_idempotent() {
    let r = rig(4, Duration::ZERO);
    succeeded(&r.exec.execute(create("c", 300, "dev-a")).await);
    let d = |id: &str| Operation {
        id: id.into(),
        kind: OpKind::Destroy {
            vmid: 300,
            expect: Some(mark("dev-a")),
            purge: false,
        },
    };
    assert_eq!(
        succeeded(&r.exec.execute(d("d1")).await).message,
        "destroyed"
    );
    assert!(r.node.get(300).is_none());
    assert_eq!(
        succeeded(&r.exec.execute(d("d2")).await).message,
        "already gone"
    );
    assert_eq!(r.node.calls("destroy"), 1);
}

#[tokio::test]
async fn update_and_resize_change_only_what_differs() {
    let r = rig(4, Duration::ZERO);
    succeeded(&r.exec.execute(create("c", 400, "dev-u")).await);
    let upd = Operation {
        id: "u1".into(),
        kind: OpKind::Update {
            vmid: 400,
            expect: Some(mark("dev-u")),
            desired: options_spec(&[
                ("hostname".into(), "dev-u".into()),
                ("memory".into(), "1024".into()),
                (
                    "net0".into(),
                    "name=eth0,bridge=vmbr0,ip=dhcp,type=veth".into(),
                ),
            ])
            .unwrap(),
            tags: vec!["web".into()],
            description: Some("Web server".into()),
            restart: false,
            adopt: false,
            make_template: false,
        },
    };
    succeeded(&r.exec.execute(upd).await);
    let (_, cfg) = r.node.get(400).unwrap();
    assert_eq!(cfg["memory"], "1024");
    assert!(
        cfg["net0"].contains("hwaddr=BC:24:11:00:01:90"),
        "MAC kept: {}",
        cfg["net0"]
    );
    assert_eq!(
        cfg["description"],
        "managed-by: pxfleet fleet=dev name=dev-u\nWeb server\n"
    );

    let resize = |id: &str, gib: u64| Operation {
        id: id.into(),
        kind: OpKind::Resize {
            vmid: 400,
            expect: None,
            disk: "rootfs".into(),
            size_gib: gib,
        },
    };
    assert_eq!(
        succeeded(&r.exec.execute(resize("r1", 8)).await).message,
        "resized"
    );
    assert!(r.node.get(400).unwrap().1["rootfs"].ends_with("size=8G"));
    assert_eq!(
        succeeded(&r.exec.execute(resize("r2", 8)).await).message,
        "already at that size"
    );
    assert!(failed(&r.exec.execute(resize("r3", 2)).await).contains("shrinking"));
    assert_eq!(r.node.calls("resize"), 1);
}

#[tokio::test]
async fn parallelism_is_bounded_and_one_op_per_vmid() {
    let r = rig(2, Duration::from_millis(100));
    let mut tasks = Vec::new();
    for i in 0..6u32 {
        let e = r.exec.clone();
        tasks.push(tokio::spawn(async move {
            e.execute(create(&format!("op-{i}"), 500 + i, &format!("dev-{i}")))
                .await
        }));
    }
    for t in tasks {
        succeeded(&t.await.unwrap());
    }
    assert_eq!(r.node.state.lock().unwrap().max_running, 2);

    // Two operations on one vmid never overlap: start + stop + start run in submission order.
    let r = rig(4, Duration::from_millis(50));
    succeeded(&r.exec.execute(create("c", 600, "dev-s")).await);
    r.node.state.lock().unwrap().max_running = 0;
    let stop = Operation {
        id: "s".into(),
        kind: OpKind::Stop {
            vmid: 600,
            expect: None,
            force: false,
            timeout_secs: 5,
        },
    };
    let start = |id: &str| Operation {
        id: id.into(),
        kind: OpKind::Start {
            vmid: 600,
            expect: None,
        },
    };
    let (a, b) = tokio::join!(r.exec.execute(stop), r.exec.execute(start("st")));
    succeeded(&a);
    succeeded(&b);
    let (c, d) = tokio::join!(r.exec.execute(start("st2")), r.exec.execute(start("st3")));
    succeeded(&c);
    succeeded(&d);
    assert_eq!(r.node.state.lock().unwrap().max_running, 1);
}

#[tokio::test]
async fn seed_template_mismatch_fails_with_both_digests() {
    let r = rig(4, Duration::ZERO);
    let srv = common::serve(b"payload".to_vec(), Duration::ZERO).await;
    let seed = |id: &str, hex: String| Operation {
        id: id.into(),
        kind: OpKind::SeedTemplate(TemplateSpec {
            storage: "local".into(),
            file_name: "u.tar.xz".into(),
            source: TemplateSource::Url {
                url: format!("{}/u.tar.xz", srv.url),
                digest: Some(Digest::Sha256(hex)),
            },
        }),
    };
    let e = failed(&r.exec.execute(seed("s1", "a".repeat(64))).await);
    assert!(
        e.contains(&"a".repeat(64)) && e.contains(&common::sha256_hex(b"payload")),
        "{e}"
    );
    assert!(!r.tmpl.path().join("u.tar.xz").exists());
    let u = r
        .exec
        .execute(seed("s2", common::sha256_hex(b"payload")))
        .await;
    assert_eq!(
        succeeded(&u).template_volid.as_deref(),
        Some("local:vztmpl/u.tar.xz")
    );
    assert_eq!(
        std::fs::read(r.tmpl.path().join("u.tar.xz")).unwrap(),
        b"payload"
    );

    let app = Operation {
        id: "a1".into(),
        kind: OpKind::SeedTemplate(TemplateSpec {
            storage: "local".into(),
            file_name: "debian-13-standard_13.1-2_amd64.tar.zst".into(),
            source: TemplateSource::Appliance,
        }),
    };
    succeeded(&r.exec.execute(app.clone()).await);
    succeeded(
        &r.exec
            .execute(Operation {
                id: "a2".into(),
                ..app
            })
            .await,
    );
    assert_eq!(r.node.calls("pveam"), 1);
}

#[tokio::test]
async fn a_volume_template_is_looked_for_never_downloaded() {
    let r = rig(4, Duration::ZERO);
    let op = |id: &str, file: &str| Operation {
        id: id.into(),
        kind: OpKind::SeedTemplate(TemplateSpec {
            storage: "local".into(),
            file_name: file.into(),
            source: TemplateSource::Volume,
        }),
    };
    let done = r.exec.execute(op("v1", "t.tar.zst")).await;
    assert_eq!(
        succeeded(&done).template_volid.as_deref(),
        Some("local:vztmpl/t.tar.zst")
    );
    let e = failed(&r.exec.execute(op("v2", "missing.tar.zst")).await);
    assert!(
        e.contains("local:vztmpl/missing.tar.zst is not on this node"),
        "{e}"
    );
    assert_eq!(r.node.calls("pveam"), 0, "nothing downloaded");
}

#[tokio::test]
async fn seed_template_without_checksum_reports_the_sha256() {
    let r = rig(4, Duration::ZERO);
    let srv = common::serve(b"unpinned payload".to_vec(), Duration::ZERO).await;
    let op = Operation {
        id: "s-unpinned".into(),
        kind: OpKind::SeedTemplate(TemplateSpec {
            storage: "local".into(),
            file_name: "v.tar.xz".into(),
            source: TemplateSource::Url {
                url: format!("{}/v.tar.xz", srv.url),
                digest: None,
            },
        }),
    };
    let u = r.exec.execute(op).await;
    let res = succeeded(&u);
    assert_eq!(res.template_volid.as_deref(), Some("local:vztmpl/v.tar.xz"));
    assert_eq!(
        res.template_sha256.as_deref(),
        Some(common::sha256_hex(b"unpinned payload").as_str())
    );
    assert_eq!(
        std::fs::read(r.tmpl.path().join("v.tar.xz")).unwrap(),
        b"unpinned payload"
    );
}

fn config_reads(node: &MemNode) -> usize {
    let n = node.calls("config ");
    node.state.lock().unwrap().calls.clear();
    n
}

/// A periodic pass over a node with many containers reads one listing and only the configurations that
/// moved (plus a tenth, in turn), not one `pct config` per container every pass; a change the listing shows
/// is seen at the next pass, one it does not show within ten passes.
#[tokio::test]
async fn observation_passes_read_only_what_moved() {
    let r = rig(4, Duration::ZERO);
    for vmid in 100..130 {
        let name = format!("ct{vmid}");
        r.node
            .insert(vmid, "stopped", &[("hostname", &name), ("memory", "512")]);
    }
    let first = r.exec.observe_pass().await.unwrap();
    assert_eq!(first.changed.len(), 30);
    assert_eq!(config_reads(&r.node), 30, "the first pass reads everything");
    let quiet = r.exec.observe_pass().await.unwrap();
    assert!(quiet.is_empty());
    assert_eq!(config_reads(&r.node), 3, "a tenth, in turn");

    // memory changed by hand: the listing shows it, so the next pass reads that one
    r.node
        .insert(105, "stopped", &[("hostname", "ct105"), ("memory", "1024")]);
    let d = r.exec.observe_pass().await.unwrap();
    assert_eq!(d.changed.len(), 1);
    assert_eq!(d.changed[0].config.memory, Some(1024));
    assert!(config_reads(&r.node) <= 4);

    // a key the listing does not show: seen within ten passes
    r.node.insert(
        117,
        "stopped",
        &[
            ("hostname", "ct117"),
            ("memory", "512"),
            ("features", "nesting=1"),
        ],
    );
    let mut seen = false;
    for _ in 0..10 {
        let d = r.exec.observe_pass().await.unwrap();
        if d.changed.iter().any(|c| c.vmid == 117) {
            seen = true;
            break;
        }
    }
    assert!(seen, "a change the listing does not show is read in turn");

    // a container gone is reported removed at the next pass
    r.node.state.lock().unwrap().cts.remove(&120);
    let d = r.exec.observe_pass().await.unwrap();
    assert_eq!(d.removed, vec![120]);
}

/// An update of `vmid` (`dev-u`) to the create's options plus `env`.
fn update_env(id: &str, vmid: u32, env: &[(&str, &str)], restart: bool) -> Operation {
    let mut desired = options_spec(&[
        ("hostname".into(), "dev-u".into()),
        ("memory".into(), "512".into()),
        (
            "net0".into(),
            "name=eth0,bridge=vmbr0,ip=dhcp,type=veth".into(),
        ),
    ])
    .unwrap();
    desired.env = Some(
        env.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    Operation {
        id: id.into(),
        kind: OpKind::Update {
            vmid,
            expect: Some(mark("dev-u")),
            desired,
            tags: vec!["web".into()],
            description: Some("Web server".into()),
            restart,
            adopt: false,
            make_template: false,
        },
    }
}

/// The observed container's env as the controller gets it (the read-back `ContainerSpec`).
fn read_back_env(u: &OpUpdate, vmid: u32) -> Vec<(String, String)> {
    let ct = succeeded(u).container.as_ref().expect("observed container");
    let spec = pxfleet_agent::convert::config_to_spec(vmid, &ct.config);
    let mut env: Vec<(String, String)> = spec.env.into_iter().collect();
    env.sort();
    env
}

fn pairs(env: &[(&str, &str)]) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn several_env_variables_are_written_on_create_and_replaced_on_update() {
    let r = rig(4, Duration::ZERO);
    let three = [
        ("APP_PORT", "8080"),
        ("DB_URL", "pg://db/app?x=1"),
        ("MODE", ""),
    ];
    let mut op = create("c", 410, "dev-u");
    if let OpKind::Create(c) = &mut op.kind {
        c.options.env = Some(
            three
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    }
    let u = r.exec.execute(op).await;
    // Written into the config file (one lxc.environment.runtime line each; the node shows `env` NUL-separated).
    assert_eq!(r.node.calls("write_env 410"), 1);
    assert_eq!(
        r.node.get(410).unwrap().1["env"],
        "APP_PORT=8080\0DB_URL=pg://db/app?x=1\0MODE="
    );
    assert_eq!(read_back_env(&u, 410), pairs(&three));

    // One changed, one removed: the whole set is replaced; the running container restarts to take it.
    let two = [("APP_PORT", "9090"), ("DB_URL", "pg://db/app?x=1")];
    let u = r.exec.execute(update_env("u1", 410, &two, true)).await;
    assert_eq!(succeeded(&u).message, "updated and restarted (env applied)");
    assert_eq!(
        r.node.get(410).unwrap().1["env"],
        "APP_PORT=9090\0DB_URL=pg://db/app?x=1"
    );
    assert_eq!(read_back_env(&u, 410), pairs(&two));
    // Not allowed to restart: written, and reported as waiting for the next start.
    let u = r.exec.execute(update_env("u2", 410, &three, false)).await;
    assert_eq!(
        succeeded(&u).message,
        "updated; pending until the next restart: env"
    );
    assert_eq!(read_back_env(&u, 410), pairs(&three));
    // The same set again: nothing to do.
    let u = r.exec.execute(update_env("u3", 410, &three, true)).await;
    assert_eq!(succeeded(&u).message, "nothing to change");
    assert_eq!(r.node.calls("write_env 410"), 3);
    // A bad value is refused naming the field, before the file is touched.
    let u = r
        .exec
        .execute(update_env("u4", 410, &[("A", "1\n2")], true))
        .await;
    assert!(failed(&u).contains("env.A"), "{}", failed(&u));
    assert_eq!(r.node.calls("write_env 410"), 3);
}

/// `state: template`: a create makes the container and then a template without ever starting it; an update of a
/// running container stops it and converts it in place (its disk kept); a re-run leaves a template as it is.
#[tokio::test]
async fn a_template_is_created_without_a_start_and_a_running_container_is_converted() {
    let r = rig(4, Duration::ZERO);
    let mut op = create("t-1", 9100, "dev-gold");
    if let OpKind::Create(c) = &mut op.kind {
        c.start = false;
        c.make_template = true;
    }
    assert_eq!(
        succeeded(&r.exec.execute(op.clone()).await).message,
        "created as a template"
    );
    let (status, cfg) = r.node.get(9100).unwrap();
    assert_eq!(status, "stopped");
    assert_eq!(cfg["template"], "1");
    assert_eq!(r.node.calls("start 9100"), 0, "a template is never started");
    assert_eq!(r.node.calls("template 9100"), 1);
    // The same create under a new id finds it made: no second `pct template` (PVE refuses one).
    op.id = "t-2".into();
    assert_eq!(
        succeeded(&r.exec.execute(op).await).message,
        "already created"
    );
    assert_eq!(r.node.calls("template 9100"), 1);

    succeeded(&r.exec.execute(create("c", 401, "dev-v")).await);
    let disk = r.node.get(401).unwrap().1["rootfs"].clone();
    let upd = Operation {
        id: "u-t".into(),
        kind: OpKind::Update {
            vmid: 401,
            expect: Some(mark("dev-v")),
            desired: options_spec(&[
                ("hostname".into(), "dev-v".into()),
                ("memory".into(), "2048".into()),
                (
                    "net0".into(),
                    "name=eth0,bridge=vmbr0,ip=dhcp,type=veth".into(),
                ),
            ])
            .unwrap(),
            tags: vec!["web".into()],
            description: Some("Web server".into()),
            restart: false,
            adopt: false,
            make_template: true,
        },
    };
    assert_eq!(
        succeeded(&r.exec.execute(upd).await).message,
        "updated and made a template"
    );
    let (status, cfg) = r.node.get(401).unwrap();
    assert_eq!(status, "stopped");
    assert_eq!(cfg["template"], "1");
    assert_eq!(cfg["memory"], "2048");
    assert_eq!(cfg["rootfs"], disk, "converted in place");
}

/// `wait_for_ip`: a create that asks for a family the container never gets fails after the address wait and says
/// which one and what it has; the container stays. One that asks for what comes is done with it.
#[tokio::test]
async fn wait_for_ip_fails_a_create_whose_family_never_comes() {
    let r = rig(4, Duration::ZERO);
    let mut op = create("w-1", 130, "dev-w6");
    if let OpKind::Create(c) = &mut op.kind {
        c.wait_for = pxfleet_agent::ops::WaitFor {
            ipv4: true,
            ipv6: true,
        };
    }
    let why = failed(&r.exec.execute(op).await);
    assert!(
        why.contains("has no IPv6 address after 2s (wait_for_ip)") && why.contains("10.0.0.130/8"),
        "{why}"
    );
    assert!(r.node.get(130).is_some(), "the container is kept");
    let mut op = create("w-2", 131, "dev-w4");
    if let OpKind::Create(c) = &mut op.kind {
        c.wait_for.ipv4 = true;
    }
    let res = r.exec.execute(op).await;
    let ct = succeeded(&res).container.as_ref().expect("observed");
    assert_eq!(ct.addresses, vec!["10.0.0.131/8".to_string()]);
}

/// A snapshot operation takes, lists, rolls back to and deletes a container's snapshots, answers with the list
/// after it, and a re-run (a new operation id after an agent restart) of one already done does not fail.
#[tokio::test]
async fn snapshot_operations_take_list_roll_back_and_delete() {
    use pxfleet_agent::ops::SnapshotAction;
    let r = rig(4, Duration::ZERO);
    succeeded(&r.exec.execute(create("c", 140, "dev-s")).await);
    let op = |id: &str, action: SnapshotAction, name: &str| Operation {
        id: id.into(),
        kind: OpKind::Snapshot {
            vmid: 140,
            expect: Some(mark("dev-s")),
            action,
            name: name.into(),
            description: Some("before the upgrade".into()),
            start: false,
        },
    };
    let names = |u: &OpUpdate| -> Vec<String> {
        succeeded(u)
            .snapshots
            .iter()
            .flatten()
            .map(|s| s.name.clone())
            .collect()
    };
    let u = r
        .exec
        .execute(op("s1", SnapshotAction::Create, "before"))
        .await;
    assert_eq!(succeeded(&u).message, "snapshot before taken");
    assert_eq!(names(&u), vec!["before"]);
    let u = r
        .exec
        .execute(op("s2", SnapshotAction::Create, "before"))
        .await;
    assert_eq!(succeeded(&u).message, "snapshot before already taken");
    assert_eq!(r.node.calls("snapshot 140 before"), 1);
    let u = r
        .exec
        .execute(op("s3", SnapshotAction::Create, "after"))
        .await;
    let list = succeeded(&u).snapshots.clone().unwrap();
    assert_eq!(list[1].parent.as_deref(), Some("before"));
    let u = r
        .exec
        .execute(op("s4", SnapshotAction::Rollback, "before"))
        .await;
    assert_eq!(succeeded(&u).message, "rolled back to before");
    assert_eq!(r.node.get(140).unwrap().0, "stopped", "a rollback stops it");
    let u = r
        .exec
        .execute(op("s5", SnapshotAction::Delete, "before"))
        .await;
    assert_eq!(names(&u), vec!["after"]);
    let u = r
        .exec
        .execute(op("s6", SnapshotAction::Delete, "before"))
        .await;
    assert_eq!(succeeded(&u).message, "snapshot before already deleted");
    let u = r.exec.execute(op("s7", SnapshotAction::List, "")).await;
    assert_eq!(succeeded(&u).message, "1 snapshot(s)");
    // Not the container the operation is meant for: refused.
    let mut wrong = op("s8", SnapshotAction::Create, "x1");
    if let OpKind::Snapshot { expect, .. } = &mut wrong.kind {
        *expect = Some(mark("dev-other"));
    }
    assert!(failed(&r.exec.execute(wrong).await).contains("refusing to touch it"));
}
