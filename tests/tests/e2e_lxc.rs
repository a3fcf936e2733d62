//! End-to-end scenarios with real LXC containers (issue 5): a controller and two agents, each in its own network
//! namespace, pvesim nodes with the lxc backend, the testbed template served over HTTP on the bridge address,
//! and everything checked the way a user would: pxctl, ssh into the containers, pct/pvesm on the node, the
//! host's view of cgroups and uids. Root and LXC only: every scenario is `#[ignore]`d, scripts/e2e runs them with
//! `--ignored` (a missing prerequisite then fails). The scenarios run one at a time (they share the bridge's
//! addresses).
// test code driving separate processes: real time
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pxfleet_tests::breakdown::{parse_agent_log, report, AgentLog, Seen};
use pxfleet_tests::e2e::{require_lxc, ssh_with, E2e, E2eOptions, BULK_STORAGE, CLIENT_NS, NODES};
use pxfleet_tests::{v1 as pb, wait_until};

/// Upper bound for a fleet of a few containers to come up (create = extract a 50 MB template).
const UP: Duration = Duration::from_secs(100);
const SSH: Duration = Duration::from_secs(30);

/// One scenario at a time in this binary, whatever --test-threads says.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn fleet(e: &E2e, name: &str, extra_top: &str, body: &str) -> String {
    format!(
        "fleet: {name}\n{extra_top}\
         templates:\n  \
           tb: {{url: \"{}\", sha256: {}}}\n\
         defaults:\n  \
           template: tb\n  \
           datastore_id: local\n  \
           bridge: vmbr0\n  \
           memory: 256\n  \
           swap: 0\n  \
           disk_size: 1\n  \
           ssh_public_keys: [\"{}\"]\n\
         containers:\n{body}",
        e.template_url, e.testbed.sha256, e.pubkey
    )
}

fn ip_of(c: &pb::ContainerInfo) -> String {
    let a = c
        .addresses
        .iter()
        .find(|a| a.contains('.'))
        .unwrap_or_else(|| panic!("{} has no IPv4 address: {:?}", c.name, c.addresses));
    a.split('/').next().unwrap_or(a).to_string()
}

fn by_name(cs: &[pb::ContainerInfo]) -> BTreeMap<String, pb::ContainerInfo> {
    cs.iter().map(|c| (c.name.clone(), c.clone())).collect()
}

async fn submit(e: &E2e, file: &str, yaml: &str) {
    let path = e.write_fleet(file, yaml);
    let o = e
        .pxctl(&["submit", path.to_str().unwrap(), "-y", "--timeout", "5m"])
        .await;
    assert!(
        o.ok(),
        "pxctl submit {file} exited {}\nstdout: {}\nstderr: {}\n{}",
        o.code,
        o.stdout,
        o.stderr,
        e.logs()
    );
}

async fn start(parallelism: usize) -> (tokio::sync::MutexGuard<'static, ()>, E2e) {
    require_lxc();
    let guard = SERIAL.lock().await;
    let e = E2e::start(E2eOptions { parallelism })
        .await
        .unwrap_or_else(|err| panic!("e2e cluster: {err}"));
    (guard, e)
}

/// PRD 1: a static and a DHCP container through `pxctl submit`; ssh into both; the DHCP container's reported
/// address is the one ssh reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and LXC (scripts/e2e runs it)"]
async fn prd1_submit_static_and_dhcp_then_ssh_into_both() {
    let (_g, e) = start(4).await;
    let yaml = fleet(
        &e,
        "prd1",
        "",
        "  web:\n    node: pxe1\n    ip_address: 10.77.0.20/24\n    gateway: 10.77.0.1\n\
         \x20 dyn:\n    node: pxe2\n    ip_address: dhcp\n",
    );
    submit(&e, "prd1.yaml", &yaml).await;
    let cs = by_name(&e.wait_running("prd1", &["web", "dyn"], UP).await);
    assert_eq!(ip_of(&cs["web"]), "10.77.0.20");
    let web = e.ssh_wait("10.77.0.20", "hostname", SSH).await;
    assert_eq!(
        web.trim(),
        "web",
        "ssh to the static address reached another host"
    );
    let dyn_ip = ip_of(&cs["dyn"]);
    assert!(
        e.testbed.in_dhcp_range(&dyn_ip),
        "dyn reported {dyn_ip}, outside the DHCP range"
    );
    let seen = e
        .ssh_wait(&dyn_ip, "hostname; ip -4 -o addr show dev eth0", SSH)
        .await;
    let mut lines = seen.lines();
    assert_eq!(lines.next(), Some("dyn"), "ssh {dyn_ip}: {seen}");
    assert!(
        lines.any(|l| l.contains(&format!(" {dyn_ip}/"))),
        "the address ssh reached is not eth0's: {seen}"
    );
    assert!(e.ssh(&dyn_ip, "true").await.is_some());
    assert!(e.ssh("10.77.0.20", "true").await.is_some());
}

/// The files in `node`'s `local` template cache.
fn template_cache(e: &E2e, node: &str) -> Vec<String> {
    let dir = e.node(node).sim.join("storage/local/template/cache");
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .filter_map(|d| d.ok().map(|d| d.file_name().to_string_lossy().into_owned()))
        .collect();
    v.sort();
    v
}

/// PRD 2: three containers share a template, downloaded once per node; a wrong sha256 fails its containers
/// with both digests and leaves no partial file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and LXC (scripts/e2e runs it)"]
async fn prd2_shared_template_downloaded_once_per_node_and_wrong_sha256_fails_cleanly() {
    let (_g, e) = start(4).await;
    let good = e.testbed.template_name();
    let bad_name = "debian-12-pxfleet-tampered_12.0-1_amd64.tar.zst";
    let bad_url = e.http.add(bad_name, &e.testbed.template);
    let wrong = "ab".repeat(32);
    let yaml = fleet(
        &e,
        "prd2",
        "",
        "  s1: {node: pxe1, ip_address: 10.77.0.23/24, gateway: 10.77.0.1}\n\
             \x20 s2: {node: pxe1, ip_address: 10.77.0.24/24, gateway: 10.77.0.1}\n\
             \x20 s3: {node: pxe2, ip_address: 10.77.0.25/24, gateway: 10.77.0.1}\n\
             \x20 tampered: {node: pxe2, ip_address: 10.77.0.26/24, gateway: 10.77.0.1, template: bad}\n",
    )
    .replace(
        "templates:\n",
        &format!("templates:\n  bad: {{url: \"{bad_url}\", sha256: {wrong}}}\n"),
    );
    let path = e.write_fleet("prd2.yaml", &yaml);
    let o = e
        .pxctl(&["submit", path.to_str().unwrap(), "-y", "--timeout", "5m"])
        .await;
    assert_ne!(o.code, 0, "a failed container must fail the submit: {o:?}");
    let cs = wait_until("s1..s3 running, tampered failed", UP, || async {
        let cs = e.containers("prd2").await.map_err(|x| x.to_string())?;
        let m = by_name(&cs);
        let running = |n: &str| {
            m.get(n).is_some_and(|c| {
                c.state == pb::ContainerState::Running as i32 && !c.addresses.is_empty()
            })
        };
        let failed = m
            .get("tampered")
            .is_some_and(|c| c.state == pb::ContainerState::Failed as i32);
        if running("s1") && running("s2") && running("s3") && failed {
            Ok(m)
        } else {
            Err(pxfleet_tests::describe(&cs))
        }
    })
    .await;
    let err = &cs["tampered"].last_error;
    assert!(
        err.contains(&wrong) && err.contains(&e.testbed.sha256),
        "the error names the expected ({wrong}) and actual ({}) digests: {err}",
        e.testbed.sha256
    );
    for (name, _, ip) in NODES {
        assert_eq!(
            e.http.gets(ip, &good),
            1,
            "{good} downloads by {name}: {:?}",
            e.http.requests()
        );
        assert_eq!(
            template_cache(&e, name),
            vec![good.clone()],
            "{name}'s template cache"
        );
    }
    assert!(
        e.http.gets(NODES[1].2, bad_name) >= 1,
        "the tampered template was fetched"
    );
    for ip in ["10.77.0.23", "10.77.0.24", "10.77.0.25"] {
        assert!(e.ssh_wait(ip, "true", SSH).await.is_empty());
    }
    assert!(
        !e.vmids_on("pxe2").await.contains(&cs["tampered"].vm_id) || cs["tampered"].vm_id == 0,
        "no container was created from the tampered template"
    );
}

/// PRD 3: addresses and routes inside the containers match the fleet (static CIDR and gateway; a DHCP lease
/// from the bridge's range).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and LXC (scripts/e2e runs it)"]
async fn prd3_addresses_and_routes_inside_match_the_fleet() {
    let (_g, e) = start(4).await;
    let yaml = fleet(
        &e,
        "prd3",
        "",
        "  st: {node: pxe1, ip_address: 10.77.0.27/24, gateway: 10.77.0.1}\n\
         \x20 dh: {node: pxe2, ip_address: dhcp}\n",
    );
    submit(&e, "prd3.yaml", &yaml).await;
    let cs = by_name(&e.wait_running("prd3", &["st", "dh"], UP).await);
    let addr = e
        .ssh_wait("10.77.0.27", "ip -4 -o addr show dev eth0", SSH)
        .await;
    let words: Vec<&str> = addr.split_whitespace().collect();
    let inets: Vec<&str> = words
        .windows(2)
        .filter(|w| w[0] == "inet")
        .map(|w| w[1])
        .collect();
    assert_eq!(inets, ["10.77.0.27/24"], "static eth0: {addr}");
    let route = e.ssh_wait("10.77.0.27", "ip -4 route", SSH).await;
    assert!(
        route
            .lines()
            .any(|l| l.starts_with("default via 10.77.0.1 dev eth0")),
        "static default route: {route}"
    );
    assert!(
        route
            .lines()
            .any(|l| l.starts_with("10.77.0.0/24 dev eth0")),
        "static on-link route: {route}"
    );

    let ip = ip_of(&cs["dh"]);
    let addr = e.ssh_wait(&ip, "ip -4 -o addr show dev eth0", SSH).await;
    let inet = addr
        .split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let (lease, prefix) = inet.split_once('/').unwrap_or_default();
    assert_eq!(lease, ip, "the reported address is eth0's lease: {addr}");
    assert_eq!(prefix, "24", "{addr}");
    assert!(
        e.testbed.in_dhcp_range(lease),
        "{lease} is outside {}..{}",
        e.testbed.dhcp_first,
        e.testbed.dhcp_last
    );
    let route = e.ssh_wait(&ip, "ip -4 route", SSH).await;
    assert!(
        route
            .lines()
            .any(|l| l.starts_with("10.77.0.0/24 dev eth0")),
        "DHCP on-link route: {route}"
    );
    assert!(
        !route.contains("default"),
        "the testbed's dnsmasq offers no router, so no default route: {route}"
    );
}

/// PRD 4: the rootfs volume lives on the datastore named in the fleet, for two datastores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and LXC (scripts/e2e runs it)"]
async fn prd4_rootfs_lives_on_the_named_datastore() {
    let (_g, e) = start(4).await;
    let yaml = fleet(
        &e,
        "prd4",
        "",
        &format!(
            "  onlocal: {{node: pxe1, ip_address: 10.77.0.28/24, gateway: 10.77.0.1, datastore_id: local}}\n\
             \x20 onbulk: {{node: pxe1, ip_address: 10.77.0.29/24, gateway: 10.77.0.1, datastore_id: {BULK_STORAGE}, disk_size: 2}}\n"
        ),
    );
    submit(&e, "prd4.yaml", &yaml).await;
    let cs = by_name(&e.wait_running("prd4", &["onlocal", "onbulk"], UP).await);
    for (name, store, ip, gib) in [
        ("onlocal", "local", "10.77.0.28", 1u64),
        ("onbulk", BULK_STORAGE, "10.77.0.29", 2),
    ] {
        let vmid = cs[name].vm_id;
        let volid = format!("{store}:{vmid}/vm-{vmid}-disk-0.raw");
        let rootfs = e.pct_config("pxe1", vmid).await["rootfs"].clone();
        assert!(
            rootfs.starts_with(&format!("{volid},")),
            "{name} rootfs: {rootfs}"
        );
        let list = e.pve("pxe1", "pvesm", &["list", store]).await;
        assert!(list.ok(), "pvesm list {store}: {}", list.stderr);
        assert!(
            list.stdout
                .lines()
                .any(|l| l.starts_with(&format!("{volid} "))),
            "pvesm list {store} shows {volid}: {}",
            list.stdout
        );
        let other = if store == "local" {
            BULK_STORAGE
        } else {
            "local"
        };
        let olist = e.pve("pxe1", "pvesm", &["list", other]).await;
        assert!(
            !olist.stdout.contains(&format!("vm-{vmid}-disk")),
            "{name}'s volume is not on {other}: {}",
            olist.stdout
        );
        let path = e.pve("pxe1", "pvesm", &["path", &volid]).await;
        let path = std::path::PathBuf::from(path.stdout.trim());
        let store_dir = e.node("pxe1").sim.join("storage").join(store);
        assert!(
            path.starts_with(&store_dir),
            "{} under {}",
            path.display(),
            store_dir.display()
        );
        let len = std::fs::metadata(&path)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
            .len();
        assert_eq!(len, gib << 30, "{} is the {gib} GiB volume", path.display());
        let df = e.ssh_wait(ip, "df -k --output=size / | tail -1", SSH).await;
        let kb: u64 = df.trim().parse().unwrap_or(0);
        assert!(
            kb > (gib << 20) * 85 / 100 && kb <= gib << 20,
            "{name}: / inside is the {gib} GiB volume, df says {kb} KiB"
        );
    }
}

/// PRD 5: a viewer's pxctl in another network namespace reads the same state, and may not change it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and LXC (scripts/e2e runs it)"]
async fn prd5_viewer_in_another_namespace_reads_the_same_state() {
    let (_g, e) = start(4).await;
    let yaml = fleet(
        &e,
        "prd5",
        "",
        "  v1: {node: pxe1, ip_address: 10.77.0.30/24, gateway: 10.77.0.1}\n\
         \x20 v2: {node: pxe2, ip_address: dhcp}\n",
    );
    submit(&e, "prd5.yaml", &yaml).await;
    e.wait_running("prd5", &["v1", "v2"], UP).await;
    let admin = e.pxctl(&["output", "--fleet", "prd5", "-o", "json"]).await;
    assert!(admin.ok(), "{admin:?}");
    let viewer_cfg = e
        .user_config("vera", pxfleet_tls::Role::Viewer)
        .await
        .expect("viewer certificate");
    let viewer = e
        .pxctl_in(
            CLIENT_NS.0,
            &viewer_cfg,
            &["output", "--fleet", "prd5", "-o", "json"],
        )
        .await;
    assert!(
        viewer.ok(),
        "viewer pxctl output from {}: {viewer:?}",
        CLIENT_NS.0
    );
    let a: serde_json::Value = serde_json::from_str(&admin.stdout).expect("admin JSON");
    let v: serde_json::Value = serde_json::from_str(&viewer.stdout).expect("viewer JSON");
    assert_eq!(a, v, "admin and viewer see the same outputs");
    assert!(v.to_string().contains("10.77.0.30"), "{v}");
    let gets = |out: &str| -> Vec<(String, String, u64)> {
        let v: serde_json::Value = serde_json::from_str(out).expect("JSON");
        let mut rows: Vec<(String, String, u64)> = v
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap_or_default().to_string(),
                    r["status"].as_str().unwrap_or_default().to_string(),
                    r["vm_id"].as_u64().unwrap_or_default(),
                )
            })
            .collect();
        rows.sort();
        rows
    };
    let ac = e
        .pxctl(&["get", "containers", "--fleet", "prd5", "-o", "json"])
        .await;
    let vc = e
        .pxctl_in(
            CLIENT_NS.0,
            &viewer_cfg,
            &["get", "containers", "--fleet", "prd5", "-o", "json"],
        )
        .await;
    assert!(vc.ok(), "{vc:?}");
    assert_eq!(gets(&ac.stdout), gets(&vc.stdout));
    assert_eq!(gets(&vc.stdout).len(), 2, "{}", vc.stdout);
    let refused = e
        .pxctl_in(CLIENT_NS.0, &viewer_cfg, &["destroy", "prd5", "-y"])
        .await;
    assert_ne!(refused.code, 0, "a viewer may not destroy: {refused:?}");
    assert!(
        refused.stderr.to_lowercase().contains("permission")
            || refused.stderr.to_lowercase().contains("viewer")
            || refused.stderr.to_lowercase().contains("denied"),
        "{refused:?}"
    );
    e.wait_running("prd5", &["v1", "v2"], Duration::from_secs(5))
        .await;
}

/// What a user would compare after destroy + submit: (vm_id, hostname, address, authorized key, features).
async fn identity(e: &E2e, c: &pb::ContainerInfo) -> (u32, String, String, String, String) {
    let ip = ip_of(c);
    let keys = e
        .ssh_wait(&ip, "hostname; cat /root/.ssh/authorized_keys", SSH)
        .await;
    let features = e
        .pct_config(&c.node, c.vm_id)
        .await
        .get("features")
        .cloned()
        .unwrap_or_default();
    (c.vm_id, c.hostname.clone(), ip, keys, features)
}

/// The MAC the controller's plan of `yaml` shows for `container`'s net0 (allocated, not "known after apply").
async fn planned_mac(e: &E2e, file: &str, yaml: &str, container: &str) -> String {
    let plan = e
        .api()
        .await
        .expect("api")
        .plan(pb::PlanRequest {
            file_name: file.into(),
            source: yaml.into(),
            ..Default::default()
        })
        .await
        .expect("plan")
        .into_inner();
    assert!(plan.diagnostics.is_empty(), "{:?}", plan.diagnostics);
    let parsed = pxfleet_spec::render::json::parse(&plan.plan_json).expect("plan json");
    parsed
        .actions
        .iter()
        .filter(|a| a.container == container)
        .find_map(|a| match &a.kind {
            pxfleet_spec::plan::ActionKind::Create { attributes, .. } => attributes
                .iter()
                .find(|x| x.field == "mac_address")
                .and_then(|x| x.value.as_ref()?.as_str().map(String::from)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no mac_address for {container} in {}", plan.plan_json))
}

/// The `hwaddr=` of each named container's net0 in its node's `pct config` (upper case); each must be one the
/// controller allocated in PVE's prefix.
async fn net0_macs(
    e: &E2e,
    cs: &BTreeMap<String, pb::ContainerInfo>,
    names: &[&str],
) -> Vec<String> {
    let mut out = Vec::new();
    for n in names {
        let c = &cs[*n];
        let cfg = e.pct_config(&c.node, c.vm_id).await;
        let net0 = cfg.get("net0").cloned().unwrap_or_default();
        let mac = net0
            .split(',')
            .find_map(|kv| kv.strip_prefix("hwaddr="))
            .unwrap_or_default()
            .to_uppercase();
        assert!(mac.starts_with("BC:24:11:"), "{n}: net0 {net0}");
        out.push(mac);
    }
    out
}

/// PRD 6: destroy, then submit again: same vm_ids, hostnames, addresses, keys and features; ssh works again.
/// Neither pins `mac_address`: the controller allocated their MACs and gives them back at the recreate, so the
/// static one is reachable at once (no stale ARP entry on the host, lxc-testbed.md gotcha 3). The same MAC alone
/// does not bring a DHCP lease back: the container's DHCP client sends a client identifier with a DUID made at
/// first boot (`ff:<iaid>:00:01:00:01:<time>:<mac>`), new in a new rootfs, and dnsmasq keys leases on it (measured:
/// same MAC, .168 then .169). What stable MACs give is the usual fix without pinning anything in the file: reserve
/// the address for the MAC the plan shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and LXC (scripts/e2e runs it)"]
async fn prd6_destroy_then_submit_again_gives_the_same_containers() {
    let (_g, e) = start(4).await;
    let yaml = fleet(
        &e,
        "prd6",
        "",
        "  again-st: {node: pxe1, ip_address: 10.77.0.31/24, gateway: 10.77.0.1, features: {nesting: true}}\n\
         \x20 again-dh: {node: pxe2, ip_address: dhcp, features: {keyctl: true}}\n",
    );
    let mac_dh = planned_mac(&e, "prd6.yaml", &yaml, "again-dh").await;
    e.testbed
        .reserve(&mac_dh, "10.77.0.199")
        .expect("DHCP reservation");
    submit(&e, "prd6.yaml", &yaml).await;
    let names = ["again-st", "again-dh"];
    let first = by_name(&e.wait_running("prd6", &names, UP).await);
    let mut before = Vec::new();
    for n in names {
        before.push(identity(&e, &first[n]).await);
    }
    assert!(before[0].4.contains("nesting=1"), "{:?}", before[0]);
    assert!(before[1].4.contains("keyctl=1"), "{:?}", before[1]);
    assert_eq!(before[1].2, "10.77.0.199", "the reserved lease");
    let macs_before = net0_macs(&e, &first, &names).await;
    assert_eq!(macs_before[1], mac_dh.to_uppercase(), "the planned MAC");

    let o = e.pxctl(&["destroy", "prd6", "-y", "--timeout", "5m"]).await;
    assert!(o.ok(), "pxctl destroy: {o:?}\n{}", e.logs());
    for (n, _, _) in NODES {
        assert_eq!(
            e.vmids_on(n).await,
            Vec::<u32>::new(),
            "{n} is empty after destroy"
        );
    }
    for (_, _, ip, _, _) in &before {
        assert!(e.ssh(ip, "true").await.is_none(), "{ip} still answers");
    }

    submit(&e, "prd6.yaml", &yaml).await;
    let second = by_name(&e.wait_running("prd6", &names, UP).await);
    for (i, n) in names.iter().enumerate() {
        let t = Instant::now();
        let after = identity(&e, &second[*n]).await;
        assert_eq!(
            after, before[i],
            "{n}: (vm_id, hostname, address, keys, features)"
        );
        // with a new MAC on the same address, the host's stale ARP entry kept ssh away for 20 s and more
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{n}: ssh took {:?} after running",
            t.elapsed()
        );
    }
    assert_eq!(
        net0_macs(&e, &second, &names).await,
        macs_before,
        "the MACs in pct config"
    );
}

/// The memory cgroup directory of a host pid (v1 `memory` or the cgroup2 unified path), at the LXC payload level.
fn memory_limit_of(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        let v1 = ctrls.split(',').any(|c| c == "memory");
        if !(v1 || ctrls.is_empty()) {
            continue;
        }
        // up to the lxc.payload.NAME component: LXC sets the limits there
        let mut parts: Vec<&str> = Vec::new();
        for p in path.split('/').filter(|p| !p.is_empty()) {
            parts.push(p);
            if p.starts_with("lxc.payload") {
                break;
            }
        }
        let (base, file) = if v1 {
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes")
        } else {
            ("/sys/fs/cgroup", "memory.max")
        };
        let p = format!("{base}/{}/{file}", parts.join("/"));
        if let Ok(v) = std::fs::read_to_string(&p) {
            return v.trim().parse().ok();
        }
    }
    None
}

/// 7. A memory change on a running container changes its cgroup limit without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and LXC (scripts/e2e runs it)"]
async fn memory_change_reaches_the_cgroup_without_a_restart() {
    let (_g, e) = start(4).await;
    let body = |mem: u32| {
        format!(
            "  mem: {{node: pxe1, ip_address: 10.77.0.32/24, gateway: 10.77.0.1, memory: {mem}}}\n"
        )
    };
    submit(&e, "prd7.yaml", &fleet(&e, "prd7", "", &body(256))).await;
    let c = e.wait_running("prd7", &["mem"], UP).await.remove(0);
    let pid = e.init_pid("pxe1", c.vm_id).await.expect("running pid");
    assert_eq!(memory_limit_of(pid), Some(256 << 20), "cgroup limit before");
    let boot = e.ssh_wait("10.77.0.32", "stat -c %Y /proc/1", SSH).await;
    let up_before: u64 = e.pct_status("pxe1", c.vm_id).await["uptime"]
        .parse()
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_secs(2)).await;

    submit(&e, "prd7.yaml", &fleet(&e, "prd7", "", &body(384))).await;
    wait_until("cgroup limit 384 MiB", Duration::from_secs(60), || async {
        match memory_limit_of(pid) {
            Some(v) if v == 384 << 20 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(
        e.init_pid("pxe1", c.vm_id).await,
        Some(pid),
        "same init: no restart"
    );
    let st = e.pct_status("pxe1", c.vm_id).await;
    assert!(
        st["uptime"].parse::<u64>().unwrap_or(0) >= up_before + 2,
        "uptime kept going: {st:?} (was {up_before})"
    );
    assert_eq!(st["maxmem"], (384u64 << 20).to_string());
    assert_eq!(
        e.ssh_wait("10.77.0.32", "stat -c %Y /proc/1", SSH).await,
        boot,
        "PID 1 inside is the same process"
    );
    let ops = e.operations("prd7").await.expect("operations");
    assert!(
        ops.iter().all(|o| {
            let k = pb::OperationKind::try_from(o.kind).unwrap_or_default();
            !matches!(
                k,
                pb::OperationKind::Destroy | pb::OperationKind::Stop | pb::OperationKind::Start
            )
        }),
        "an in-place update: no stop, start or replacement: {ops:?}"
    );
}

/// 8. Unprivileged by default (container root = host uid 100000); privileged only with allow_privileged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and LXC (scripts/e2e runs it)"]
async fn unprivileged_by_default_privileged_only_when_allowed() {
    let (_g, e) = start(4).await;
    let refused = fleet(
        &e,
        "prd8",
        "",
        "  plain: {node: pxe1, ip_address: 10.77.0.33/24, gateway: 10.77.0.1}\n\
         \x20 root: {node: pxe2, ip_address: 10.77.0.34/24, gateway: 10.77.0.1, unprivileged: false}\n",
    );
    let path = e.write_fleet("prd8-refused.yaml", &refused);
    let o = e.pxctl(&["submit", path.to_str().unwrap(), "-y"]).await;
    assert_ne!(
        o.code, 0,
        "privileged without allow_privileged must be refused: {o:?}"
    );
    assert!(
        format!("{}{}", o.stdout, o.stderr).contains("allow_privileged"),
        "the error says what would be right: {o:?}"
    );
    assert!(
        e.containers("prd8").await.unwrap_or_default().is_empty(),
        "nothing was submitted"
    );

    let allowed = fleet(
        &e,
        "prd8",
        "allow_privileged: true\n",
        refused.split("containers:\n").nth(1).unwrap_or_default(),
    );
    submit(&e, "prd8.yaml", &allowed).await;
    let cs = by_name(&e.wait_running("prd8", &["plain", "root"], UP).await);
    for (name, node, ip, host_uid, map) in [
        (
            "plain",
            "pxe1",
            "10.77.0.33",
            100_000u32,
            ["0", "100000", "65536"],
        ),
        ("root", "pxe2", "10.77.0.34", 0, ["0", "0", "4294967295"]),
    ] {
        let pid = e.init_pid(node, cs[name].vm_id).await.expect("pid");
        use std::os::unix::fs::MetadataExt;
        let uid = std::fs::metadata(format!("/proc/{pid}"))
            .map(|m| m.uid())
            .unwrap_or(u32::MAX);
        assert_eq!(uid, host_uid, "{name}: host uid of the container's root");
        let inside = e.ssh_wait(ip, "id -u; cat /proc/self/uid_map", SSH).await;
        let words: Vec<&str> = inside.split_whitespace().collect();
        assert_eq!(words, ["0", map[0], map[1], map[2]], "{name}: {inside}");
        let unpriv = e
            .pct_config(node, cs[name].vm_id)
            .await
            .get("unprivileged")
            .cloned();
        assert_eq!(
            unpriv.as_deref() == Some("1"),
            host_uid != 0,
            "{name}: pct config unprivileged {unpriv:?}"
        );
    }
}

/// 9. Ten containers on two nodes at agent parallelism 4: all running, no lock errors, no duplicate. Prints the
/// wall time from `pxctl submit` to all ten SSH-ready (the benchmark figure, see scripts/e2e-bench) and where it
/// went, per container and node, from the agents' logs (`E2E_BENCH` lines, pxfleet_tests::breakdown).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and LXC (scripts/e2e runs it)"]
async fn ten_containers_on_two_nodes_at_parallelism_four() {
    let (_g, e) = start(4).await;
    let mut body = String::new();
    for i in 0..10 {
        body.push_str(&format!(
            "  ten-{i}: {{ip_address: 10.77.0.{}/24, gateway: 10.77.0.1}}\n",
            40 + i
        ));
    }
    let t0 = Instant::now();
    let t0_wall = time::OffsetDateTime::now_utc();
    // `pxctl submit -y` follows the fleet until every operation ended; meanwhile each container is tried over
    // ssh as soon as the controller reports it running (as a user watching `pxctl status` would), all in
    // parallel. The figure is the moment the last one answers.
    let yaml = fleet(&e, "ten", "", &body);
    let submitting = submit(&e, "ten.yaml", &yaml);
    let watching = async {
        let mut up_at: BTreeMap<String, f64> = BTreeMap::new();
        let mut ssh_tasks = tokio::task::JoinSet::new();
        loop {
            assert!(
                t0.elapsed() < Duration::from_secs(600),
                "ten containers not running after 600 s:\n{}",
                e.logs()
            );
            let cs = e.containers("ten").await.unwrap_or_default();
            for c in cs.iter().filter(|c| pxfleet_tests::api::is_up(c)) {
                if up_at.contains_key(&c.name) {
                    continue;
                }
                up_at.insert(c.name.clone(), t0.elapsed().as_secs_f64());
                let (key, name) = (e.key.clone(), c.name.clone());
                let ip = format!("10.77.0.{}", 40 + name[4..].parse::<u32>().expect("ten-N"));
                ssh_tasks.spawn(async move {
                    let deadline = Instant::now() + Duration::from_secs(60);
                    loop {
                        if let Some(hn) = ssh_with(&key, &ip, "hostname").await {
                            return (name, hn.trim().to_string(), t0.elapsed().as_secs_f64());
                        }
                        assert!(Instant::now() < deadline, "ssh {ip} ({name}) for 60 s");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                });
            }
            if up_at.len() == 10 && cs.len() == 10 {
                return (cs, up_at, ssh_tasks);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let ((), (cs, up_at, mut ssh_tasks)) = tokio::join!(submitting, watching);
    let mut ssh_at: BTreeMap<String, f64> = BTreeMap::new();
    while let Some(done) = ssh_tasks.join_next().await {
        let (name, hn, at) = done.expect("ssh task");
        assert_eq!(hn, name, "hostname over ssh");
        ssh_at.insert(name, at);
    }
    let secs = t0.elapsed().as_secs_f64();
    let wall = ssh_at.values().cloned().fold(0.0, f64::max);
    let seen: Vec<Seen> = cs
        .iter()
        .map(|c| Seen {
            name: c.name.clone(),
            node: c.node.clone(),
            vmid: c.vm_id,
            up: up_at[&c.name],
            ssh: ssh_at[&c.name],
        })
        .collect();
    let logs: BTreeMap<String, AgentLog> = e
        .nodes
        .iter()
        .map(|n| {
            let text = std::fs::read_to_string(&n.log).unwrap_or_default();
            (n.name.clone(), parse_agent_log(&text, t0_wall))
        })
        .collect();
    let table = report(wall, &seen, &logs);
    print!("{table}");
    println!("E2E_BENCH pxfleet_ten_ssh_ready_secs={wall:.1}");
    eprintln!("ten containers ssh-ready {wall:.1} s after pxctl submit (checked by {secs:.1} s)");
    if let Some(out) = std::env::var_os("PXFLEET_E2E_BENCH_OUT") {
        let text = format!("{table}pxfleet_ten_ssh_ready_secs={wall:.1}\n");
        std::fs::write(&out, text).expect("writing PXFLEET_E2E_BENCH_OUT");
    }
    // the logs the table was read from (scripts/e2e-bench keeps them)
    if let Some(dir) = std::env::var_os("PXFLEET_E2E_BENCH_LOGS") {
        let dir = std::path::Path::new(&dir);
        for n in &e.nodes {
            let _ = std::fs::copy(&n.log, dir.join(format!("agent-{}.log", n.name)));
        }
        let _ = std::fs::copy(&e.controller_log, dir.join("controller.log"));
    }

    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    let mut vmids: Vec<u32> = cs.iter().map(|c| c.vm_id).collect();
    for c in &cs {
        *per_node.entry(c.node.clone()).or_default() += 1;
    }
    vmids.sort();
    vmids.dedup();
    assert_eq!(
        vmids.len(),
        10,
        "ten distinct vm_ids: {}",
        pxfleet_tests::describe(&cs)
    );
    assert_eq!(per_node.len(), 2, "both nodes used: {per_node:?}");
    let mut on_nodes: Vec<u32> = Vec::new();
    for (n, _, _) in NODES {
        on_nodes.extend(e.vmids_on(n).await);
    }
    on_nodes.sort();
    assert_eq!(
        on_nodes, vmids,
        "pct list on both nodes: exactly the ten, once each"
    );
    let ops = e.operations("ten").await.expect("operations");
    for o in &ops {
        let text = format!("{} {}", o.error, o.message).to_lowercase();
        assert!(
            !text.contains("lock") && !text.contains("already exists"),
            "operation {} on {}: {text}",
            o.container,
            o.node
        );
        assert_ne!(o.state, pb::OperationState::Failed as i32, "{o:?}");
    }
    for n in &e.nodes {
        let log = std::fs::read_to_string(&n.log).unwrap_or_default();
        let bad: Vec<&str> = log
            .lines()
            .filter(|l| {
                l.contains("ERROR") || (l.contains("WARN") && l.to_lowercase().contains("lock"))
            })
            .collect();
        assert!(bad.is_empty(), "agent {}: {bad:#?}", n.name);
    }
}

/// The kinds of `fleet`'s operations, in order.
async fn op_kinds(e: &E2e, fleet: &str) -> Vec<pb::OperationKind> {
    e.operations(fleet)
        .await
        .expect("operations")
        .iter()
        .map(|o| pb::OperationKind::try_from(o.kind).unwrap_or_default())
        .collect()
}

/// The `hwaddr=` of net0 in `node`'s `pct config`.
async fn net0_mac(e: &E2e, node: &str, vmid: u32) -> String {
    let net0 = e
        .pct_config(node, vmid)
        .await
        .get("net0")
        .cloned()
        .unwrap_or_default();
    net0.split(',')
        .find_map(|kv| kv.strip_prefix("hwaddr="))
        .unwrap_or_else(|| panic!("no hwaddr in net0 {net0}"))
        .to_string()
}

/// Issue 10 item 2: changing `node` of a running container is `pct migrate --restart`: on the other node it has
/// the same vm_id, MAC and address, the files written inside (on its rootfs and on its volume mount point) are
/// still there, and ssh works; nothing is left on the first node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and LXC (scripts/e2e runs it)"]
async fn move_migrates_a_running_container_with_its_data() {
    let (_g, e) = start(4).await;
    let body = |node: &str| {
        format!(
            "  app: {{node: {node}, ip_address: 10.77.0.40/24, gateway: 10.77.0.1, \
             mount_points: [{{path: /data, size: 1, datastore_id: {BULK_STORAGE}}}]}}\n"
        )
    };
    submit(&e, "mv.yaml", &fleet(&e, "mv", "", &body("pxe1"))).await;
    let before = e.wait_running("mv", &["app"], UP).await.remove(0);
    assert_eq!(before.node, "pxe1");
    let wrote = e
        .ssh_wait(
            "10.77.0.40",
            "echo on-rootfs > /root/marker && echo on-volume > /data/marker && sync && hostname",
            SSH,
        )
        .await;
    assert_eq!(wrote.trim(), "app");
    let mac = net0_mac(&e, "pxe1", before.vm_id).await;

    let moved = fleet(&e, "mv", "", &body("pxe2"));
    let plan = e
        .pxctl(&["plan", e.write_fleet("mv2.yaml", &moved).to_str().unwrap()])
        .await;
    assert!(
        plan.stdout.contains("will be moved from pxe1 to pxe2"),
        "the plan shows a move: {}",
        plan.stdout
    );
    assert!(!plan.stdout.contains("replace"), "{}", plan.stdout);
    submit(&e, "mv.yaml", &moved).await;
    let after = wait_until("app running on pxe2", UP, || async {
        let cs = e.containers("mv").await.map_err(|x| x.to_string())?;
        match cs.first() {
            Some(c)
                if cs.len() == 1
                    && c.node == "pxe2"
                    && c.state == pb::ContainerState::Running as i32 =>
            {
                Ok(c.clone())
            }
            _ => Err(format!("{cs:?}")),
        }
    })
    .await;
    assert_eq!(after.vm_id, before.vm_id, "same vm_id");
    assert_eq!(net0_mac(&e, "pxe2", after.vm_id).await, mac, "same MAC");
    let seen = e
        .ssh_wait(
            "10.77.0.40",
            "hostname; cat /root/marker /data/marker; ip -4 -o addr show dev eth0",
            SSH,
        )
        .await;
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(&lines[..3], ["app", "on-rootfs", "on-volume"], "{seen}");
    assert!(lines[3].contains(" 10.77.0.40/24"), "same address: {seen}");
    assert!(e.vmids_on("pxe1").await.is_empty(), "nothing left on pxe1");
    assert_eq!(e.vmids_on("pxe2").await, vec![after.vm_id]);
    let kinds = op_kinds(&e, "mv").await;
    assert!(kinds.contains(&pb::OperationKind::Migrate), "{kinds:?}");
    assert!(
        !kinds.contains(&pb::OperationKind::Destroy)
            && kinds
                .iter()
                .filter(|k| **k == pb::OperationKind::Create)
                .count()
                == 1,
        "moved, not replaced: {kinds:?}"
    );
    let path = e.write_fleet("mv.yaml", &moved);
    let o = e
        .pxctl(&["plan", path.to_str().unwrap(), "--detailed-exitcode"])
        .await;
    assert_eq!(o.code, 0, "nothing left to change: {}", o.stdout);
}

/// The size of the file system mounted on `path` inside the container at `ip`, in KiB.
async fn fs_kib(e: &E2e, ip: &str, path: &str) -> u64 {
    let out = e
        .ssh_wait(ip, &format!("df -P -k {path} | tail -n 1"), SSH)
        .await;
    out.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("df {path}: {out}"))
}

/// Issue 10 item 4: a volume mount point is a file system of its own inside the container, and what is written to
/// it survives `pxctl restart`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and LXC (scripts/e2e runs it)"]
async fn volume_mount_point_keeps_its_data_across_a_restart() {
    let (_g, e) = start(4).await;
    let body = |size: u32| {
        format!(
            "  vol: {{node: pxe1, ip_address: 10.77.0.41/24, gateway: 10.77.0.1, \
             mount_points: [{{path: /srv/data, size: {size}, datastore_id: {BULK_STORAGE}}}]}}\n"
        )
    };
    submit(&e, "vol.yaml", &fleet(&e, "vol", "", &body(1))).await;
    let c = e.wait_running("vol", &["vol"], UP).await.remove(0);
    let ip = "10.77.0.41";
    // Its own file system (not the rootfs), about 1 GiB, writable by the container's root.
    let mounts = e.ssh_wait(ip, "stat -c %d / /srv/data", SSH).await;
    let devs: Vec<&str> = mounts.lines().collect();
    assert_eq!(devs.len(), 2, "{mounts}");
    assert_ne!(devs[0], devs[1], "/srv/data is a mount of its own");
    let small = fs_kib(&e, ip, "/srv/data").await;
    assert!(
        (800_000..=1_048_576).contains(&small),
        "1 GiB volume: {small} KiB"
    );
    e.ssh_wait(ip, "echo kept > /srv/data/f && sync", SSH).await;
    let pid = e.init_pid("pxe1", c.vm_id).await.expect("running");

    let o = e.pxctl(&["restart", "vol"]).await;
    assert!(o.ok(), "pxctl restart: {}\n{}", o.stdout, o.stderr);
    wait_until("restarted (a new init)", UP, || async {
        match e.init_pid("pxe1", c.vm_id).await {
            Some(p) if p != pid => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(e.ssh_wait(ip, "cat /srv/data/f", SSH).await.trim(), "kept");

    let kinds = op_kinds(&e, "vol").await;
    assert!(!kinds.contains(&pb::OperationKind::Destroy), "{kinds:?}");
    // Not here yet: growing it by a day-2 change. pvesim's online `resize2fs /dev/loopN` of a mounted mount point
    // volume fails on this host ("Permission denied to resize filesystem") while the rootfs's works; see the
    // pvesim README.
}
