//! Identities and certificates as people use them, against a real controller and real agents (pvesim nodes):
//! `pxctl user request|issue|list|revoke` end to end with real certificates, handshake and join-token
//! refusals that say who refused, why and what to do, node certificates that renew themselves, a node that
//! was offline past its certificate's expiry, and a server certificate reissued with new names.

// Test code: it starts the programs under test and the tools around them.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use pxfleet_tests::{fleet_yaml, wait_until, Cluster, ClusterOptions, HarnessError};
use pxfleet_tls::{Bundle, BundlePaths, Ca, CertInfo, Identity, Role};

fn small_fleet(name: &str) -> String {
    fleet_yaml(name, "  x-1: {node: mk33, memory: 512, disk_size: 4}\n")
}

/// `pxctl --config CONFIG ARGS`.
async fn pxctl_as(c: &Cluster, config: &Path, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    c.pxctl(&all).await
}

/// A pxctl config with explicit files (for the refusal cases).
fn write_config(dir: &Path, name: &str, url: &str, paths: &BundlePaths, extra: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "controller = \"{url}\"\nca = {:?}\ncert = {:?}\nkey = {:?}\n{extra}",
            paths.ca, paths.cert, paths.key
        ),
    )
    .unwrap();
    path
}

/// The CA with its key, read from the controller's data directory.
fn controller_ca(c: &Cluster) -> Ca {
    let pki = c.controller_dir.join("pki");
    Ca::from_pem(
        &std::fs::read_to_string(pki.join("ca.pem")).unwrap(),
        &std::fs::read_to_string(pki.join("ca.key")).unwrap(),
    )
    .unwrap()
}

/// A user's whole path to access: request (key stays here), admin issue, a config that works.
async fn onboard(c: &Cluster, name: &str, issue_args: &[&str]) -> PathBuf {
    let dir = c.dir.path().join("users").join(name);
    let (code, out, err) = c
        .pxctl(&["user", "request", name, "--dir", dir.to_str().unwrap()])
        .await;
    assert_eq!(code, 0, "user request: {out}\n{err}");
    assert!(
        err.contains("pxctl user issue"),
        "request does not say what next: {err}"
    );
    let key = dir.join(format!("{name}.key"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", key.display());
    let csr = dir.join(format!("{name}.csr"));
    let mut args = vec!["user", "issue", csr.to_str().unwrap()];
    args.extend_from_slice(issue_args);
    let (code, out, err) = c.pxctl(&args).await;
    assert_eq!(code, 0, "user issue: {out}\n{err}");
    let config = dir.join(format!("{name}.pxctl.toml"));
    assert!(
        config.exists() && dir.join(format!("{name}.pem")).exists() && dir.join("ca.pem").exists()
    );
    // The key never travelled: the certificate the controller signed is for this key.
    let cert = std::fs::read_to_string(dir.join(format!("{name}.pem"))).unwrap();
    let bundle = Bundle {
        ca_pem: std::fs::read_to_string(dir.join("ca.pem")).unwrap(),
        cert_pem: cert,
        key_pem: std::fs::read_to_string(&key).unwrap(),
    };
    pxfleet_tls::client_config(&bundle).expect("certificate and local key belong together");
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_are_onboarded_with_pxctl_and_their_roles_hold() {
    let c = Cluster::start(1).await.expect("cluster");
    let alice = onboard(&c, "alice", &["--role", "operator", "--fleets", "dev"]).await;
    let vera = onboard(&c, "vera", &["--role", "viewer"]).await;

    // The operator changes its fleet...
    let dev = c.write_fleet("dev.yaml", &small_fleet("dev"));
    let (code, out, err) = pxctl_as(
        &c,
        &alice,
        &["submit", dev.to_str().unwrap(), "-y", "--no-wait"],
    )
    .await;
    assert_eq!(code, 0, "operator submit to its fleet: {out}\n{err}");
    // ...and no other, with a message that says so.
    let prod = c.write_fleet("prod.yaml", &small_fleet("prod"));
    let (code, out, err) = pxctl_as(
        &c,
        &alice,
        &["submit", prod.to_str().unwrap(), "-y", "--no-wait"],
    )
    .await;
    assert_ne!(code, 0, "operator submitted outside its fleets: {out}");
    assert!(
        err.contains("permission denied")
            && err.contains("pxfleet://user/alice")
            && err.contains("change fleet prod"),
        "unclear refusal: {err}"
    );
    assert!(c.containers("prod").await.unwrap().is_empty());
    // An operator is not an admin.
    let (code, _, err) = pxctl_as(&c, &alice, &["user", "list"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("permission denied"), "{err}");

    // The viewer reads, and may not write.
    let (code, out, err) = pxctl_as(&c, &vera, &["get", "fleets"]).await;
    assert_eq!(code, 0, "viewer read: {out}\n{err}");
    assert!(out.contains("dev"), "{out}");
    let (code, out, err) = pxctl_as(
        &c,
        &vera,
        &["submit", dev.to_str().unwrap(), "-y", "--no-wait"],
    )
    .await;
    assert_ne!(code, 0, "viewer submitted: {out}");
    assert!(
        err.contains("permission denied") && err.contains("role=viewer"),
        "{err}"
    );
    let (code, _, err) = pxctl_as(&c, &vera, &["destroy", "dev", "-y", "--no-wait"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("permission denied"), "{err}");

    // The admin sees who holds what.
    let list = c.pxctl_json(&["user", "list"]).await;
    let rows = list.as_array().unwrap();
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {list}"))
            .clone()
    };
    let a = row("alice");
    assert_eq!(
        (a["role"].as_str(), a["status"].as_str()),
        (Some("operator"), Some("valid"))
    );
    assert_eq!(a["fleets"], serde_json::json!(["dev"]));
    assert!(
        a["expires"].as_str().is_some_and(|e| e.starts_with('2')),
        "{a}"
    );
    assert_eq!(row("vera")["role"], "viewer");
    assert_eq!(row("admin")["role"], "admin");
    let alice_serial = a["serial"].as_str().unwrap().to_string();
    let on_disk =
        CertInfo::from_pem(&std::fs::read_to_string(alice.with_file_name("alice.pem")).unwrap())
            .unwrap();
    assert_eq!(on_disk.serial.as_str(), alice_serial);

    // Revoked by name: refused at the next connection, and told why.
    let (code, out, err) = c
        .pxctl(&["user", "revoke", "alice", "--reason", "left the team"])
        .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(out.trim(), alice_serial);
    let (code, out, err) = pxctl_as(&c, &alice, &["get", "fleets"]).await;
    assert_ne!(code, 0, "a revoked certificate still works: {out}");
    assert!(
        err.contains("controller refused")
            && err.contains("revoked")
            && err.contains("certificate_revoked"),
        "unclear: {err}"
    );
    assert!(!err.contains("operation was canceled"), "{err}");
    let list = c.pxctl_json(&["user", "list"]).await;
    let a = list
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "alice")
        .unwrap()
        .clone();
    assert_eq!(a["status"], "revoked");
    // Node certificates appear with --all.
    let all = c.pxctl_json(&["user", "list", "--all"]).await;
    assert!(
        all.as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "node" && r["name"] == "mk33"),
        "{all}"
    );
    // The viewer still works.
    let (code, _, err) = pxctl_as(&c, &vera, &["get", "nodes"]).await;
    assert_eq!(code, 0, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_refusals_say_who_refused_why_and_the_fix() {
    let c = Cluster::start(1).await.expect("cluster");
    let dir = c.dir.path().join("refusals");
    let admin = BundlePaths::in_dir(&c.controller_dir.join("admin"), "admin");

    // pxctl trusts another controller's CA.
    let other = Ca::generate("another controller").unwrap();
    let other_ca = dir.join("other-ca.pem");
    pxfleet_tls::write_file(&other_ca, other.cert_pem().as_bytes(), 0o644).unwrap();
    let cfg = write_config(
        &dir,
        "wrong-ca",
        &c.url,
        &BundlePaths {
            ca: other_ca,
            ..admin.clone()
        },
        "",
    );
    let (code, _, err) = pxctl_as(&c, &cfg, &["get", "nodes"]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("this client refused the controller's certificate")
            && err.contains("not signed by the CA this client trusts")
            && err.contains("`ca` file in your pxctl config"),
        "{err}"
    );

    // A client certificate from another controller.
    let foreign = other
        .issue_client(
            &Identity::user("admin", Role::Admin, &[]).unwrap(),
            Duration::from_secs(3600),
        )
        .unwrap()
        .into_bundle(&std::fs::read_to_string(&admin.ca).unwrap());
    let paths = BundlePaths::in_dir(&dir.join("foreign"), "admin");
    foreign.write(&paths).unwrap();
    let cfg = write_config(&dir, "foreign", &c.url, &paths, "");
    let (code, _, err) = pxctl_as(&c, &cfg, &["get", "nodes"]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("the controller refused this client's certificate")
            && err.contains("unknown_ca")
            && err.contains("another controller"),
        "{err}"
    );
    assert!(!err.contains("operation was canceled"), "{err}");

    // An expired client certificate.
    let ca = controller_ca(&c);
    let expired = ca
        .issue_client(
            &Identity::user("old", Role::Viewer, &[]).unwrap(),
            Duration::ZERO,
        )
        .unwrap()
        .into_bundle(ca.cert_pem());
    let paths = BundlePaths::in_dir(&dir.join("expired"), "old");
    expired.write(&paths).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let cfg = write_config(&dir, "expired", &c.url, &paths, "");
    let (code, _, err) = pxctl_as(&c, &cfg, &["get", "nodes"]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("controller refused")
            && err.contains("expired")
            && err.contains("certificate_expired")
            && err.contains("pxctl user request"),
        "{err}"
    );

    // A server name the certificate does not list.
    let cfg = write_config(
        &dir,
        "name",
        &c.url,
        &admin,
        "server_name = \"ctl.elsewhere.example\"\n",
    );
    let (code, _, err) = pxctl_as(&c, &cfg, &["get", "nodes"]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("not valid for the name ctl.elsewhere.example")
            && err.contains("127.0.0.1")
            && err.contains("reissue-server-cert"),
        "{err}"
    );
}

fn join_error(r: Result<String, HarnessError>, what: &str) -> String {
    match r {
        Ok(out) => panic!("{what} was accepted: {out}"),
        Err(HarnessError::Command { stderr, .. }) => {
            assert!(
                !stderr.contains("pxf1."),
                "{what}: the token leaked: {stderr}"
            );
            stderr
        }
        Err(e) => panic!("{what}: unexpected harness error {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_token_refusals_name_the_cause_and_the_fix() {
    let c = Cluster::start(1).await.expect("cluster");
    let dir = c.dir.path().to_path_buf();

    let token = c.join_token("mk90", 600).await.unwrap();
    c.join("mk90", &dir.join("first"), &token.token)
        .await
        .expect("a fresh token enrols");
    let err = join_error(
        c.join("mk90", &dir.join("again"), &token.token).await,
        "a used token",
    );
    assert!(
        err.contains("already used") && err.contains("pxctl node token create --node mk90"),
        "{err}"
    );

    let other = c.join_token("mk92", 600).await.unwrap();
    let err = join_error(
        c.join("mk93", &dir.join("wrong"), &other.token).await,
        "another node's token",
    );
    assert!(err.contains("is for node mk92, not mk93"), "{err}");

    // A token made by another controller: the pinned CA is not this controller's.
    let foreign_fp = Ca::generate("elsewhere").unwrap().fingerprint_sha256();
    let mut parts: Vec<&str> = other.token.split('.').collect();
    parts[3] = &foreign_fp;
    let err = join_error(
        c.join("mk92", &dir.join("foreign"), &parts.join(".")).await,
        "a foreign token",
    );
    assert!(
        err.contains("this client refused the controller")
            && err.contains("not the one that made the token"),
        "{err}"
    );

    let short = c.join_token("mk91", 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let err = join_error(
        c.join("mk91", &dir.join("late"), &short.token).await,
        "an expired token",
    );
    assert!(
        err.contains("expired at") && err.contains("pxctl node token create --node mk91"),
        "{err}"
    );
}

/// Restarts the controller with `[tls]` settings appended to its config.
async fn restart_with_tls(c: &mut Cluster, tls: &str) {
    c.stop_controller().await;
    let mut text = std::fs::read_to_string(&c.controller_config).unwrap();
    text.push_str(&format!("\n[tls]\n{tls}\n"));
    std::fs::write(&c.controller_config, text).unwrap();
    c.start_controller().await.expect("controller restarts");
}

fn serial_of(path: &Path) -> (String, time::OffsetDateTime) {
    let info = CertInfo::from_pem(&std::fs::read_to_string(path).unwrap()).unwrap();
    (info.serial.to_string(), info.not_after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_certificates_renew_themselves_before_expiry() {
    let mut c = Cluster::start_with(ClusterOptions {
        nodes: 0,
        ..ClusterOptions::default()
    })
    .await
    .expect("cluster");
    restart_with_tls(&mut c, "node_cert_validity_secs = 6").await;
    c.add_node("mk33").await.expect("node joins");
    c.wait_nodes_ready(Duration::from_secs(60)).await.unwrap();
    let pem = c.node("mk33").agent_dir.join("node.pem");
    let (first, first_expiry) = serial_of(&pem);

    // At two thirds of the lifetime the agent asks for a new certificate over its current one.
    let renewed = wait_until(
        "the node certificate renewed",
        Duration::from_secs(30),
        || async {
            let (serial, _) = serial_of(&pem);
            if serial != first {
                Ok(serial)
            } else {
                Err(format!("still serial {serial}"))
            }
        },
    )
    .await;
    // The agent logs the renewal once the new files are written: the file may be seen first.
    let log = c.node("mk33").log.clone();
    wait_until(
        "the agent logged the renewal",
        Duration::from_secs(10),
        || async {
            if tail_has(&log, "node certificate renewed") {
                Ok(())
            } else {
                Err(c.logs())
            }
        },
    )
    .await;

    // Past the first certificate's expiry, a restarted agent connects with the renewed one.
    let left = first_expiry - time::OffsetDateTime::now_utc() + time::Duration::milliseconds(1500);
    if left.is_positive() {
        tokio::time::sleep(Duration::try_from(left).unwrap()).await;
    }
    c.kill_agent("mk33").await;
    c.start_agent("mk33").unwrap();
    // The old connection's record may still say ready for a moment: wait for the new connection's serial.
    let serial = wait_until(
        "the restarted agent connected",
        Duration::from_secs(30),
        || async {
            let nodes = c.nodes_info().await.map_err(|e| e.to_string())?;
            let n = &nodes[0];
            if n.status == pxfleet_tests::v1::NodeStatus::Ready as i32
                && !n.cert_serial.is_empty()
                && n.cert_serial != first
            {
                Ok(n.cert_serial.clone())
            } else {
                Err(format!("{n:?}\n{}", c.logs()))
            }
        },
    )
    .await;
    assert_ne!(serial, first);
    let all = c.pxctl_json(&["user", "list", "--all"]).await;
    let node_certs: Vec<&serde_json::Value> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == "mk33")
        .collect();
    assert!(node_certs.len() >= 2, "{all}");
    assert!(
        node_certs.iter().any(|r| r["serial"] == renewed.as_str()),
        "{all}"
    );
}

fn tail_has(path: &Path, needle: &str) -> bool {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .contains(needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_offline_past_its_certificate_expiry_is_told_to_enrol_again() {
    let mut c = Cluster::start_with(ClusterOptions {
        nodes: 0,
        ..ClusterOptions::default()
    })
    .await
    .expect("cluster");
    restart_with_tls(&mut c, "node_cert_validity_secs = 2").await;
    let dir = c.dir.path().join("mk90");
    let token = c.join_token("mk90", 600).await.unwrap();
    c.join("mk90", &dir, &token.token).await.expect("enrols");
    let (_, expiry) = serial_of(&dir.join("node.pem"));
    // The node stays offline until its certificate has expired (validity is checked to the second, inclusive).
    let left = expiry - time::OffsetDateTime::now_utc() + time::Duration::milliseconds(1500);
    if left.is_positive() {
        tokio::time::sleep(Duration::try_from(left).unwrap()).await;
    }
    let log = c.dir.path().join("agent-mk90.log");
    let file = std::fs::File::create(&log).unwrap();
    let mut agent = tokio::process::Command::new(&c.bins.pxagent)
        .args(["run", "--config", dir.join("agent.toml").to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_until(
        "the agent logs the refusal",
        Duration::from_secs(30),
        || async {
            if tail_has(&log, "certificate_expired") {
                Ok(())
            } else {
                Err(std::fs::read_to_string(&log).unwrap_or_default())
            }
        },
    )
    .await;
    let _ = agent.kill().await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("the controller refused this client's certificate: it has expired")
            && text.contains("new token")
            && text.contains("pxctl node token create --node mk90"),
        "{text}"
    );
    // pxctl get nodes says the same.
    let nodes = c.pxctl_json(&["get", "nodes"]).await;
    let mk90 = nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "mk90")
        .unwrap_or_else(|| panic!("{nodes}"))
        .clone();
    assert_eq!(mk90["status"], "down");
    let reason = mk90["status_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("expired")
            && reason.contains("new join token")
            && reason.contains("--node mk90"),
        "{reason}"
    );
}

async fn pxcontroller(c: &Cluster, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    pxfleet_tests::run_command(&c.bins.pxcontroller, &args, &[])
        .await
        .expect("pxcontroller")
}

async fn wait_ready_with_serial(c: &Cluster, node: &str, want: impl Fn(&str) -> bool) -> String {
    wait_until("the node ready", Duration::from_secs(60), || async {
        let nodes = c.nodes_info().await.map_err(|e| e.to_string())?;
        match nodes.iter().find(|n| n.name == node) {
            Some(n)
                if n.status == pxfleet_tests::v1::NodeStatus::Ready as i32
                    && want(&n.cert_serial) =>
            {
                Ok(n.cert_serial.clone())
            }
            other => Err(format!("{other:?}\n{}", c.logs())),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_certificate_is_reissued_with_new_names_without_re_enrolling_nodes() {
    let mut c = Cluster::start(1).await.expect("cluster");
    let before = wait_ready_with_serial(&c, "mk33", |s| !s.is_empty()).await;
    let admin = BundlePaths::in_dir(&c.controller_dir.join("admin"), "admin");
    let dir = c.dir.path().join("reissue");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = write_config(
        &dir,
        "new-name",
        &c.url,
        &admin,
        "server_name = \"ctl.new.example\"\n",
    );
    let (code, _, err) = pxctl_as(&c, &cfg, &["get", "nodes"]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("not valid for the name ctl.new.example"),
        "{err}"
    );

    let config = c.controller_config.to_str().unwrap().to_string();
    let out = pxcontroller(
        &c,
        &[
            "reissue-server-cert",
            "--config",
            &config,
            "--san",
            "ctl.new.example",
        ],
    )
    .await;
    assert!(
        out.contains("ctl.new.example") && out.contains("restart"),
        "{out}"
    );
    c.stop_controller().await;
    c.start_controller().await.unwrap();

    let (code, out, err) = pxctl_as(&c, &cfg, &["get", "nodes"]).await;
    assert_eq!(code, 0, "the new name is not served: {out}\n{err}");
    // The node came back by itself with the certificate it had: no new token, no new enrolment.
    let after = wait_ready_with_serial(&c, "mk33", |s| !s.is_empty()).await;
    assert_eq!(after, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ca_is_rotated_with_an_overlap_and_the_old_one_dropped() {
    let mut c = Cluster::start(1).await.expect("cluster");
    let config = c.controller_config.to_str().unwrap().to_string();
    let old_serial = wait_ready_with_serial(&c, "mk33", |s| !s.is_empty()).await;
    let admin_paths = BundlePaths::in_dir(&c.controller_dir.join("admin"), "admin");
    let node_ca = c.node("mk33").agent_dir.join("ca.pem");

    // 1. prepare: the next CA; every client trusts both.
    pxcontroller(&c, &["rotate-ca", "prepare", "--config", &config]).await;
    let bundle = std::fs::read_to_string(c.controller_dir.join("pki/ca-bundle.pem")).unwrap();
    assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 2);
    for ca in [&node_ca, &admin_paths.ca] {
        std::fs::write(ca, &bundle).unwrap();
    }
    c.set_admin(Bundle::read(&admin_paths).unwrap());
    c.kill_agent("mk33").await;
    c.start_agent("mk33").unwrap();

    // 2. switch: the new CA signs; old certificates still accepted during the overlap.
    pxcontroller(&c, &["rotate-ca", "switch", "--config", &config]).await;
    restart_with_tls(&mut c, "extra_client_cas = [\"pki/ca-old.pem\"]").await;
    let (code, _, err) = c.pxctl(&["get", "nodes"]).await;
    assert_eq!(
        code, 0,
        "the old admin certificate during the overlap: {err}"
    );
    wait_ready_with_serial(&c, "mk33", |s| s == old_serial).await;

    // 3. renew the node and reissue the admin under the new CA.
    let agent_toml = c.node("mk33").agent_toml();
    let out = pxfleet_tests::run_command(
        &c.bins.pxagent,
        &[
            "renew".into(),
            "--config".into(),
            agent_toml.display().to_string(),
        ],
        &[],
    )
    .await
    .expect("pxagent renew");
    assert!(out.contains("renewed"), "{out}");
    c.kill_agent("mk33").await;
    c.start_agent("mk33").unwrap();
    let new_serial = wait_ready_with_serial(&c, "mk33", |s| !s.is_empty() && s != old_serial).await;
    let admin2 = onboard(&c, "admin2", &["--role", "admin"]).await;

    // 4. drop the old CA: its certificates are refused, the new ones work.
    c.stop_controller().await;
    let text = std::fs::read_to_string(&c.controller_config).unwrap();
    std::fs::write(
        &c.controller_config,
        text.replace("extra_client_cas = [\"pki/ca-old.pem\"]", ""),
    )
    .unwrap();
    let admin2_dir = admin2.parent().unwrap();
    c.set_admin(Bundle::read(&BundlePaths::in_dir(admin2_dir, "admin2")).unwrap());
    c.start_controller().await.unwrap();
    let (code, _, err) = c.pxctl(&["get", "nodes"]).await;
    assert_ne!(
        code, 0,
        "an old-CA certificate still works after the overlap"
    );
    assert!(err.contains("unknown_ca"), "{err}");
    let (code, out, err) = pxctl_as(&c, &admin2, &["get", "nodes"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        wait_ready_with_serial(&c, "mk33", |s| s == new_serial).await,
        new_serial
    );
    // New enrolments pin the new CA.
    let token = c.join_token("mk95", 600).await.unwrap();
    let fp = pxfleet_tls::fingerprint_of_pem(
        &std::fs::read_to_string(c.controller_dir.join("pki/ca.pem")).unwrap(),
    )
    .unwrap();
    assert_eq!(token.ca_fingerprint, fp);
    c.join("mk95", &c.dir.path().join("mk95"), &token.token)
        .await
        .expect("enrols under the new CA");
}
