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

/// A container using every key pxfleet manages (the property test's subject).
fn full_container(name: &str, vm_id: u32) -> String {
    format!(
        "  {name}:\n    node: mk33\n    vm_id: {vm_id}\n    memory: 512\n    swap: 256\n    cores: 2\n    \
         cpu_limit: 1.5\n    cpu_units: 200\n    disk_size: 4\n    start_on_boot: true\n    \
         tags: [Web, db]\n    description: \"first line ends in a space \\nmanaged-by: the ops team\\n\\nlast\"\n    \
         features: {{nesting: true, keyctl: true}}\n    \
         dns: {{servers: [192.0.2.53], domain: example.test}}\n    \
         startup: {{order: 2, up_delay: 5}}\n    \
         mtu: 1400\n    vlan_id: 10\n    firewall: true\n    rate_limit: 12.5\n    \
         env: {{APP_ENV: prod, GREETING: \"x y\"}}\n    \
         mount_points:\n      \
           - {{datastore_id: local-lvm, size: 1, path: /data, backup: true, mount_options: [noatime]}}\n    \
         devices:\n      \
           - {{path: /dev/null, mode: \"0666\"}}\n    \
         idmap:\n      \
           - {{type: uid, container_id: 0, host_id: 200000, size: 65536}}\n      \
           - {{type: gid, container_id: 0, host_id: 200000, size: 65536}}\n"
    )
}

/// A change made by hand: a `pct set` (its arguments after the vm_id, `{mac}` standing for net0's MAC) or an
/// edit of the container's config file (for `lxc.*` lines, which no PVE tool writes).
#[derive(Clone, Copy)]
enum Edit {
    Set(&'static [&'static str]),
    File(fn(&str) -> String),
}

/// Changes to every key pxfleet manages that differ from the file, as an operator could make them on the node.
const CHANGES: &[(&str, Edit)] = &[
    ("memory", Edit::Set(&["--memory", "768"])),
    ("swap", Edit::Set(&["--swap", "128"])),
    ("cores", Edit::Set(&["--cores", "1"])),
    ("cpulimit", Edit::Set(&["--cpulimit", "0.5"])),
    ("cpuunits", Edit::Set(&["--cpuunits", "300"])),
    ("hostname", Edit::Set(&["--hostname", "renamed"])),
    ("onboot", Edit::Set(&["--onboot", "0"])),
    ("protection", Edit::Set(&["--protection", "1"])),
    ("startup", Edit::Set(&["--startup", "order=9"])),
    ("tags added", Edit::Set(&["--tags", "db;pxfleet;web;extra"])),
    ("tags removed", Edit::Set(&["--tags", "pxfleet;web"])),
    (
        "description: trailing space removed",
        Edit::Set(&[
            "--description",
            "managed-by: pxfleet fleet=pk name={name}\nfirst line ends in a space\nmanaged-by: the ops team\n\nlast\n",
        ]),
    ),
    (
        "description: the user's managed-by line changed",
        Edit::Set(&[
            "--description",
            "managed-by: pxfleet fleet=pk name={name}\nfirst line ends in a space \nmanaged-by: the dev team\n\nlast\n",
        ]),
    ),
    (
        "description: empty line removed",
        Edit::Set(&[
            "--description",
            "managed-by: pxfleet fleet=pk name={name}\nfirst line ends in a space \nmanaged-by: the ops team\nlast\n",
        ]),
    ),
    ("nesting off", Edit::Set(&["--features", "keyctl=1,nesting=0"])),
    ("fuse on", Edit::Set(&["--features", "fuse=1,keyctl=1,nesting=1"])),
    ("mount=nfs", Edit::Set(&["--features", "keyctl=1,mount=nfs,nesting=1"])),
    ("features deleted", Edit::Set(&["--delete", "features"])),
    ("nameserver", Edit::Set(&["--nameserver", "192.0.2.54"])),
    ("searchdomain", Edit::Set(&["--searchdomain", "other.test"])),
    ("nameserver deleted", Edit::Set(&["--delete", "nameserver"])),
    (
        "net0 firewall off",
        Edit::Set(&["--net0", "name=eth0,bridge=vmbr0,firewall=0,hwaddr={mac},ip=dhcp,mtu=1400,rate=12.5,tag=10,type=veth"]),
    ),
    (
        "net0 mtu",
        Edit::Set(&["--net0", "name=eth0,bridge=vmbr0,firewall=1,hwaddr={mac},ip=dhcp,mtu=1500,rate=12.5,tag=10,type=veth"]),
    ),
    (
        "net0 rate and vlan",
        Edit::Set(&["--net0", "name=eth0,bridge=vmbr0,firewall=1,hwaddr={mac},ip=dhcp,mtu=1400,rate=20,tag=11,type=veth"]),
    ),
    (
        "mp0 backup off",
        Edit::Set(&["--mp0", "local-lvm:vm-{vmid}-disk-1,mp=/data,backup=0,mountoptions=noatime,size=1G"]),
    ),
    (
        "mp0 mount options",
        Edit::Set(&["--mp0", "local-lvm:vm-{vmid}-disk-1,mp=/data,backup=1,mountoptions=noatime;nodev,size=1G"]),
    ),
    (
        "mp0 read-only",
        Edit::Set(&["--mp0", "local-lvm:vm-{vmid}-disk-1,mp=/data,backup=1,mountoptions=noatime,ro=1,size=1G"]),
    ),
    ("dev0 mode", Edit::Set(&["--dev0", "path=/dev/null,mode=0600"])),
    ("dev0 deleted", Edit::Set(&["--delete", "dev0"])),
    ("dev1 added", Edit::Set(&["--dev1", "path=/dev/zero"])),
    (
        "env value",
        Edit::File(|f| f.replace("GREETING=x y", "GREETING=hello")),
    ),
    (
        "env removed",
        Edit::File(|f| f.replace("lxc.environment.runtime: APP_ENV=prod\n", "")),
    ),
    (
        "env added",
        Edit::File(|f| {
            f.replace(
                "lxc.idmap: u",
                "lxc.environment.runtime: EXTRA=1\nlxc.idmap: u",
            )
        }),
    ),
    (
        "idmap moved",
        Edit::File(|f| f.replace(" 0 200000 65536", " 0 300000 65536")),
    ),
    (
        "idmap line removed",
        Edit::File(|f| f.replace("lxc.idmap: g 0 200000 65536\n", "")),
    ),
];

/// Changes PVE stores differently but that mean what the file says (case and order of tags, order of features
/// and of a mount point's options, a lower-case MAC, trailing empty lines of the description, a value set to
/// what it is): not drift, never repaired.
const SAME: &[(&str, Edit)] = &[
    ("tags case and order", Edit::Set(&["--tags", "Web;DB;pxfleet"])),
    ("features order", Edit::Set(&["--features", "nesting=1,keyctl=1"])),
    (
        "description trailing empty lines",
        Edit::Set(&[
            "--description",
            "managed-by: pxfleet fleet=pk name={name}\nfirst line ends in a space \nmanaged-by: the ops team\n\nlast\n\n\n",
        ]),
    ),
    ("memory as it is", Edit::Set(&["--memory", "512"])),
    (
        "net0 MAC lower case",
        Edit::Set(&["--net0", "name=eth0,bridge=vmbr0,firewall=1,hwaddr={mac_lower},ip=dhcp,mtu=1400,rate=12.5,tag=10,type=veth"]),
    ),
    (
        "mp0 options reordered",
        Edit::Set(&["--mp0", "local-lvm:vm-{vmid}-disk-1,size=1G,mountoptions=noatime,backup=1,mp=/data"]),
    ),
];

/// xorshift64*: the property test's choices, reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

/// Applies `edit` to container `name` (`vmid`) on mk33; a `pct set` PVE refuses fails the test.
fn apply(c: &Cluster, name: &str, vmid: u32, label: &str, edit: Edit) {
    match edit {
        Edit::Set(args) => {
            let mac = c.pct_config("mk33", vmid)["net0"]
                .split(',')
                .find_map(|kv| kv.strip_prefix("hwaddr="))
                .unwrap()
                .to_string();
            let vm = vmid.to_string();
            let args: Vec<String> = args
                .iter()
                .map(|a| {
                    a.replace("{mac}", &mac)
                        .replace("{mac_lower}", &mac.to_lowercase())
                        .replace("{vmid}", &vm)
                        .replace("{name}", name)
                })
                .collect();
            let mut argv = vec!["set", vm.as_str()];
            argv.extend(args.iter().map(String::as_str));
            let out = c.pve("mk33", "pct", &argv);
            assert_eq!(out.code, 0, "{label}: pct {argv:?}: {}", out.stderr);
        }
        Edit::File(f) => {
            let path = c
                .dir
                .path()
                .join(format!("cluster/nodes/mk33/lxc/{vmid}.conf"));
            let text = std::fs::read_to_string(&path).unwrap();
            let changed = f(&text);
            assert_ne!(changed, text, "{label}: the edit changed nothing");
            std::fs::write(&path, changed).unwrap();
        }
    }
}

fn config_text(c: &Cluster, vmid: u32) -> String {
    let out = c.pve("mk33", "pct", &["config", &vmid.to_string()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    out.stdout
}

/// The property of issue 28 over every managed key: whatever set of keys is changed by hand on running
/// containers, the change is repaired (the node's `pct config` is again what it was after the submit, line for
/// line), the plan is then empty, no container is left failed, and the next passes make no call to the node;
/// a change PVE stores differently but that means the same is never repaired. `PXFLEET_DRIFT_SEED` replays a
/// run (the seed is printed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_managed_key_changed_by_hand_is_repaired_once_and_then_left_alone() {
    const N: u32 = 6;
    let rounds: usize = std::env::var("PXFLEET_DRIFT_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let seed = std::env::var("PXFLEET_DRIFT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            use std::hash::{BuildHasher, Hasher};
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
                | 1
        });
    println!("PXFLEET_DRIFT_SEED={seed}");
    let mut rng = Rng(seed);
    let c = Cluster::start(1).await.expect("cluster");
    let cts: Vec<(String, u32)> = (0..N).map(|i| (format!("k{i}"), 2700 + i)).collect();
    let body: String = cts.iter().map(|(n, v)| full_container(n, *v)).collect();
    let path = submit(&c, "pk.yaml", &fleet_yaml("pk", &body)).await;
    let names: Vec<&str> = cts.iter().map(|(n, _)| n.as_str()).collect();
    c.wait_running("pk", &names, UP).await;
    plan_is_empty(&c, &path).await;
    let baseline: Vec<String> = cts.iter().map(|(_, v)| config_text(&c, *v)).collect();

    let settled = |what: String| {
        let (c, cts, baseline, path) = (&c, &cts, &baseline, &path);
        async move {
            wait_until(&what, UP, || async {
                for ((name, vmid), want) in cts.iter().zip(baseline) {
                    let now = config_text(c, *vmid);
                    if now != *want {
                        let (_, plan, _) = c.pxctl(&["plan", path]).await;
                        return Err(format!(
                            "{name}:\n{now}\nwanted:\n{want}\nplan: {plan}\n{}",
                            op_lines(c, "pk").await
                        ));
                    }
                }
                let (code, out, err) = c.pxctl(&["plan", path, "--detailed-exitcode"]).await;
                if code != 0 {
                    return Err(format!("plan exit {code}: {out}\n{err}"));
                }
                Ok(())
            })
            .await;
            let cs = c.containers("pk").await.unwrap();
            for x in &cs {
                assert!(
                    x.last_error.is_empty(),
                    "{what}: {} failed: {}",
                    x.name,
                    x.last_error
                );
            }
            let before = c.operations("pk").await.unwrap().len();
            tokio::time::sleep(PASSES).await;
            assert_eq!(
                c.operations("pk").await.unwrap().len(),
                before,
                "{what}: more operations after the repair: {}",
                op_lines(c, "pk").await
            );
        }
    };

    for round in 0..rounds {
        let mut made = Vec::new();
        for (name, vmid) in &cts {
            let mut picked: Vec<usize> = Vec::new();
            for _ in 0..1 + rng.below(3) {
                let i = rng.below(CHANGES.len());
                // one change per key in a round: two file edits of one key would undo each other's premise
                // (`idmap moved`, then `idmap line removed` finds no line to remove)
                let key = |i: usize| CHANGES[i].0.split([' ', ':']).next().unwrap_or("");
                if !picked.iter().any(|p| key(*p) == key(i)) {
                    picked.push(i);
                }
            }
            for i in picked {
                let (label, edit) = CHANGES[i];
                apply(&c, name, *vmid, label, edit);
                made.push(format!("{name}: {label}"));
            }
        }
        settled(format!("round {round} (seed {seed}): {made:?} repaired")).await;
    }

    // Every change once, so that no key is left out whatever the seed.
    let only = std::env::var("PXFLEET_DRIFT_ONLY").unwrap_or_default();
    for (k, (label, edit)) in CHANGES.iter().enumerate() {
        if !label.contains(only.as_str()) {
            continue;
        }
        let (name, vmid) = &cts[k % cts.len()];
        apply(&c, name, *vmid, label, *edit);
        if k % cts.len() == cts.len() - 1 || k == CHANGES.len() - 1 || !only.is_empty() {
            settled(format!("every change, up to {label}")).await;
        }
    }

    // Stored differently, meaning the same: no operation at all, the plan stays empty.
    let before = c.operations("pk").await.unwrap().len();
    for (k, (label, edit)) in SAME.iter().enumerate() {
        let (name, vmid) = &cts[k % cts.len()];
        apply(&c, name, *vmid, label, *edit);
    }
    tokio::time::sleep(PASSES).await;
    plan_is_empty(&c, &path).await;
    assert_eq!(
        c.operations("pk").await.unwrap().len(),
        before,
        "a change meaning the same was repaired: {}",
        op_lines(&c, "pk").await
    );
}

/// The agent watches the config files between its observation passes: with passes ten minutes apart, a
/// feature turned on by hand is still seen and put back within seconds (issue 28: not within 30 s before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_file_changed_by_hand_is_seen_before_the_next_observation_pass() {
    let mut c = Cluster::start(1).await.expect("cluster");
    let toml_path = c.node("mk33").agent_toml();
    let text = std::fs::read_to_string(&toml_path).unwrap();
    assert!(text.contains("observe_secs = 1\n"), "{text}");
    std::fs::write(
        &toml_path,
        text.replace("observe_secs = 1\n", "observe_secs = 600\n"),
    )
    .unwrap();
    c.kill_agent("mk33").await;
    c.start_agent("mk33").unwrap();
    let yaml = fleet_yaml(
        "cw",
        "  w: {node: mk33, vm_id: 2800, memory: 512, disk_size: 4}\n",
    );
    let path = submit(&c, "cw.yaml", &yaml).await;
    c.wait_running("cw", &["w"], UP).await;
    plan_is_empty(&c, &path).await;

    let out = c.pve("mk33", "pct", &["set", "2800", "--features", "nesting=1"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // Well before the agent's full resync (60 s) and its next pass (600 s).
    wait_until("nesting put back", Duration::from_secs(30), || async {
        let cfg = c.pct_config("mk33", 2800);
        if cfg.contains_key("features") {
            Err(format!("{cfg:?}\n{}", op_lines(&c, "cw").await))
        } else {
            Ok(())
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
}
