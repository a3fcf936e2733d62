//! pxctl's commands against the real controller library on 127.0.0.1:0 with real mutual TLS (`init` into a
//! tempdir, the pxctl config it writes read through pxctl's own config resolution), with one fake agent that
//! answers every operation with success: plan, saved plans, submit with progress, get, output, history,
//! describe, tokens, cordon, destroy, and a viewer refused.

use std::collections::BTreeSet;
use std::time::Duration;

use pxfleet_cli::args::Cli;
use pxfleet_cli::config::{self, Overrides};
use pxfleet_cli::term::{Io, Scripted};
use pxfleet_cli::{CliError, Client};
use pxfleet_controller::test_harness::TestController;
use pxfleet_proto::v1 as pb;
use pxfleet_proto::v1::agent_service_client::AgentServiceClient;
use pxfleet_tls::{Bundle, BundlePaths, Role};
use tokio::sync::mpsc;

use clap::Parser;

/// The in-process controller of [`pxfleet_controller::test_harness`] with the pxctl clients these tests use.
struct Env(TestController);

impl std::ops::Deref for Env {
    type Target = TestController;
    fn deref(&self) -> &TestController {
        &self.0
    }
}

async fn start() -> Env {
    Env(TestController::start_with(pxfleet_controller::test_harness::fast_reconciler).await)
}

impl Env {
    /// The admin client, configured the way a user would: `init`'s pxctl.toml, the URL as a flag.
    async fn admin(&self) -> Client {
        let settings = config::resolve(
            &Overrides {
                config: Some(self.dir.path().join("admin/pxctl.toml")),
                controller: Some(self.url.clone()),
                ..Default::default()
            },
            &|_| None,
            None,
        )
        .unwrap();
        Client::connect(&settings).await.unwrap()
    }

    /// A client with a freshly issued certificate of `role`.
    async fn user(&self, name: &str, role: Role) -> Client {
        let paths = BundlePaths::in_dir(&self.dir.path().join(name), name);
        self.issue_user(name, role).await.write(&paths).unwrap();
        let settings = config::resolve(
            &Overrides {
                controller: Some(self.url.clone()),
                ca: Some(paths.ca),
                cert: Some(paths.cert),
                key: Some(paths.key),
                ..Default::default()
            },
            &|_| None,
            None,
        )
        .unwrap();
        Client::connect(&settings).await.unwrap()
    }
}

/// Runs one pxctl command line; returns (exit status or error, stdout, stderr).
async fn pxctl(
    client: &mut Client,
    args: &[&str],
    answer: Option<bool>,
) -> (Result<u8, CliError>, String, String) {
    let cli = Cli::try_parse_from(std::iter::once("pxctl").chain(args.iter().copied())).unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut confirm = Scripted(answer);
    let code = {
        let mut io = Io {
            out: &mut out,
            err: &mut err,
            colour: false,
            confirm: &mut confirm,
        };
        pxfleet_cli::run(client, &cli.command, &mut io).await
    };
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

fn inventory(node: &str) -> pb::Inventory {
    pb::Inventory {
        node: node.into(),
        pve_version: "9.0.3".into(),
        cores: 8,
        memory_total_bytes: 16 << 30,
        memory_free_bytes: 12 << 30,
        storages: vec![
            pb::Storage {
                id: "local-lvm".into(),
                content: vec!["rootdir".into(), "images".into()],
                total_bytes: 100 << 30,
                avail_bytes: 80 << 30,
                active: true,
                enabled: true,
                ..Default::default()
            },
            pb::Storage {
                id: "local".into(),
                content: vec!["vztmpl".into()],
                total_bytes: 50 << 30,
                avail_bytes: 40 << 30,
                active: true,
                enabled: true,
                ..Default::default()
            },
        ],
        bridges: vec![pb::Bridge {
            name: "vmbr0".into(),
            active: true,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn msg(m: pb::agent_message::Msg) -> pb::AgentMessage {
    pb::AgentMessage { msg: Some(m) }
}

/// Enrols `node` with a token made by `pxctl node token create -o json`, connects, and answers every
/// operation with success (a create or update reports the container running with its static address).
async fn fake_agent(env: &Env, admin: &mut Client, node: &str) {
    let (code, out, _) = pxctl(
        admin,
        &[
            "node", "token", "create", "--ttl", "5m", "--node", node, "-o", "json",
        ],
        None,
    )
    .await;
    assert_eq!(code.unwrap(), 0);
    let token: serde_json::Value = serde_json::from_str(&out).unwrap();
    let token = token["token"].as_str().unwrap().to_string();
    assert!(token.starts_with("pxf1."), "{token}");
    // The table form prints the token alone on stdout and, on stderr, the exact command to run on the node.
    let (code, out, err) = pxctl(
        admin,
        &["node", "token", "create", "--ttl", "5m", "--node", node],
        None,
    )
    .await;
    assert_eq!(code.unwrap(), 0);
    let shown = out.trim();
    assert!(shown.starts_with("pxf1."), "{out}");
    assert!(
        err.contains(&format!(
            "pxagent join --controller {} --token {shown} --node {node}",
            env.url
        )),
        "{err}"
    );
    let ca_pem = std::fs::read_to_string(env.dir.path().join("pki/ca.pem")).unwrap();
    let anon = pxfleet_tls::connect(
        &env.url,
        pxfleet_tls::anonymous_client_config(&ca_pem).unwrap(),
    )
    .await
    .unwrap();
    let kc = pxfleet_tls::generate_key_and_csr(node).unwrap();
    let resp = AgentServiceClient::new(anon)
        .enroll(pb::EnrollRequest {
            token,
            node: node.into(),
            csr_pem: kc.csr_pem,
        })
        .await
        .unwrap()
        .into_inner();
    let bundle = Bundle {
        ca_pem: resp.ca_pem,
        cert_pem: resp.cert_pem,
        key_pem: kc.key_pem,
    };
    let channel = pxfleet_tls::connect(&env.url, pxfleet_tls::client_config(&bundle).unwrap())
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(64);
    tx.send(msg(pb::agent_message::Msg::Hello(pb::Hello {
        node: node.into(),
        agent_version: "test".into(),
        protocol_version: 1,
        inventory: Some(inventory(node)),
        operations: vec![],
    })))
    .await
    .unwrap();
    let mut stream = AgentServiceClient::new(channel)
        .connect(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let node = node.to_string();
    tokio::spawn(async move {
        while let Ok(Some(m)) = stream.message().await {
            let Some(pb::controller_message::Msg::Operation(op)) = m.msg else {
                continue;
            };
            let spec = match &op.kind {
                Some(pb::operation::Kind::Create(c)) => c.spec.clone(),
                Some(pb::operation::Kind::Update(u)) => u.spec.clone(),
                _ => None,
            };
            let container = spec.map(|spec| pb::ObservedContainer {
                vm_id: spec.vm_id,
                power: pb::PowerState::Running as i32,
                managed: true,
                addresses: spec
                    .interfaces
                    .iter()
                    .filter_map(|i| i.ipv4.as_ref().map(|a| a.address.clone()))
                    .filter(|a| !a.is_empty())
                    .collect(),
                config: Some(pb::ContainerSpec {
                    password: None,
                    ..spec
                }),
                node: node.clone(),
                ..Default::default()
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            let update = pb::OperationUpdate {
                op_id: op.op_id.clone(),
                state: pb::OperationState::Succeeded as i32,
                vm_id: op.vm_id,
                container,
                ..Default::default()
            };
            if tx
                .send(msg(pb::agent_message::Msg::OperationUpdate(update)))
                .await
                .is_err()
            {
                break;
            }
        }
    });
}

const FLEET: &str = "fleet: dev
defaults:
  ssh_public_keys: [\"file:keys/ops.pub\"]
  datastore_id: local-lvm
  template: ubuntu
templates:
  ubuntu:
    url: http://192.0.2.1:1/ubuntu.tar.xz
    sha256: 3b1f00000000000000000000000000000000000000000000000000000000abcd
containers:
  web:
    memory: 1024
    ip_address: 10.0.0.5/24
    gateway: 10.0.0.1
  db:
    memory: 2048
    ip_address: 10.0.0.6/24
    gateway: 10.0.0.1
";
const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ops@example\n";

fn write_fleet(dir: &std::path::Path, text: &str) -> String {
    std::fs::create_dir_all(dir.join("keys")).unwrap();
    std::fs::write(dir.join("keys/ops.pub"), KEY).unwrap();
    let p = dir.join("fleet.yaml");
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_submit_get_output_destroy_against_the_real_controller() {
    let env = start().await;
    let mut admin = env.admin().await;
    let work = tempfile::tempdir().unwrap();
    let fleet = write_fleet(work.path(), FLEET);

    // No nodes yet: an empty JSON array; a table says how to enrol.
    let (code, out, _) = pxctl(&mut admin, &["get", "nodes", "-o", "json"], None).await;
    assert_eq!((code.unwrap(), out.as_str()), (0, "[]\n"));
    let (_, out, _) = pxctl(&mut admin, &["get", "nodes"], None).await;
    assert!(out.starts_with("No nodes."), "{out}");

    fake_agent(&env, &mut admin, "n1").await;
    let (_, out, _) = pxctl(&mut admin, &["get", "nodes", "-o", "json"], None).await;
    let nodes: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(nodes[0]["name"], "n1");
    assert_eq!(nodes[0]["status"], "ready");
    assert_eq!(nodes[0]["cores"], 8);
    assert_eq!(nodes[0]["memory_mib"], 16384);
    assert_eq!(nodes[0]["memory_free_mib"], 12288);
    assert_eq!(nodes[0]["containers"], 0);

    // A bad fleet: the controller's diagnostics with file:line:column, exit via error.
    let bad_path = work.path().join("bad.yaml");
    std::fs::write(&bad_path, FLEET.replace("memory: 1024", "memory: 8")).unwrap();
    let (code, _, err) = pxctl(&mut admin, &["plan", bad_path.to_str().unwrap()], None).await;
    assert!(matches!(code, Err(CliError::Invalid { .. })), "{code:?}");
    assert!(
        err.contains("bad.yaml:12:13: containers.web.memory:"),
        "{err}"
    );

    // Plan: two creates, exit 2 with --detailed-exitcode; saved for submit.
    let saved = work.path().join("plan.json");
    let (code, out, err) = pxctl(
        &mut admin,
        &[
            "plan",
            &fleet,
            "--detailed-exitcode",
            "--out",
            saved.to_str().unwrap(),
        ],
        None,
    )
    .await;
    assert_eq!(code.unwrap(), 2, "{err}");
    assert!(out.contains("# container \"web\""), "{out}");
    assert!(out.contains("Plan: 2 to create"), "{out}");
    assert!(err.contains("pxctl submit"), "{err}");
    let saved_text = std::fs::read_to_string(&saved).unwrap();
    assert!(
        !saved_text.contains("10.0.0.1\\ngateway"),
        "no fleet text in a saved plan"
    );

    // Submitting without -y where nobody can answer is refused, nothing changes.
    let (code, _, _) = pxctl(&mut admin, &["submit", &fleet], None).await;
    let e = code.unwrap_err().to_string();
    assert!(e.contains("pass -y"), "{e}");
    let (code, _, _) = pxctl(&mut admin, &["submit", &fleet], Some(false)).await;
    assert!(matches!(code, Err(CliError::NotConfirmed(_))));
    let (_, out, _) = pxctl(&mut admin, &["get", "fleets", "-o", "json"], None).await;
    assert_eq!(out, "[]\n");

    // Submit the saved plan: follows progress until both run.
    let (code, out, err) = pxctl(
        &mut admin,
        &["submit", saved.to_str().unwrap(), "-y", "--timeout", "60s"],
        None,
    )
    .await;
    assert_eq!(code.unwrap(), 0, "{out}\n{err}");
    assert!(out.contains("Submitted fleet dev revision 1"), "{out}");
    assert!(out.contains("-> running  10.0.0.5"), "{out}");
    assert!(out.contains("Fleet dev: 2 running, 0 failed"), "{out}");

    // The same saved plan again: the revision moved, refused.
    let (code, _, _) = pxctl(&mut admin, &["submit", saved.to_str().unwrap(), "-y"], None).await;
    let e = code.unwrap_err().to_string();
    assert!(e.contains("revision") || e.contains("plan again"), "{e}");

    // get containers -o json: the stable script format.
    let (_, out, _) = pxctl(&mut admin, &["get", "containers", "-o", "json"], None).await;
    let cs: serde_json::Value = serde_json::from_str(&out).unwrap();
    let cs = cs.as_array().unwrap();
    assert_eq!(cs.len(), 2);
    for c in cs {
        assert_eq!(c["fleet"], "dev");
        assert_eq!(c["status"], "running", "{c}");
        assert_eq!(c["node"], "n1");
        assert!(c["vm_id"].as_u64().unwrap() >= 1000);
        assert_eq!(c["error"], serde_json::Value::Null);
    }
    let web = cs.iter().find(|c| c["name"] == "web").unwrap();
    assert_eq!(
        (web["hostname"].as_str(), web["ipv4"].as_str()),
        (Some("web"), Some("10.0.0.5"))
    );
    let (_, yaml, _) = pxctl(
        &mut admin,
        &["get", "containers", "-o", "yaml", "--fleet", "dev"],
        None,
    )
    .await;
    assert!(yaml.contains("- fleet: dev\n  name: db\n"), "{yaml}");
    assert!(yaml.contains("  ipv4: \"10.0.0.5\"\n"), "{yaml}");

    // Nothing left to do: plan exits 0; submit -y says so and exits 0.
    let (code, out, _) = pxctl(&mut admin, &["plan", &fleet, "--detailed-exitcode"], None).await;
    assert_eq!(code.unwrap(), 0, "{out}");
    let (code, out, _) = pxctl(&mut admin, &["submit", &fleet, "-y"], None).await;
    assert_eq!(code.unwrap(), 0, "{out}");
    assert!(out.contains("Nothing to submit"), "{out}");

    // Outputs: passwords only with --show-sensitive.
    let (_, out, _) = pxctl(&mut admin, &["output", "-o", "json"], None).await;
    let o: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(o["web"]["ipv4"], "10.0.0.5");
    assert_eq!(o["web"]["node"], "n1");
    assert!(o["web"].get("password").is_none(), "{out}");
    let (_, table, _) = pxctl(&mut admin, &["output"], None).await;
    assert!(table.contains("(sensitive)"), "{table}");
    let (_, out, _) = pxctl(
        &mut admin,
        &["output", "-o", "json", "--show-sensitive"],
        None,
    )
    .await;
    let o: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(o["web"]["password"].as_str().unwrap().len() >= 16, "{out}");

    // History, describe, operations.
    let (_, out, _) = pxctl(&mut admin, &["history", "-o", "json"], None).await;
    let h: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(h[0]["revision"], 1);
    assert!(h[0]["author"].as_str().unwrap().contains("admin"), "{out}");
    let (_, out, _) = pxctl(&mut admin, &["describe", "container", "web"], None).await;
    assert!(out.contains("Fleet:      dev (revision 1)"), "{out}");
    assert!(out.contains("Status:     running"), "{out}");
    let (_, out, _) = pxctl(
        &mut admin,
        &["get", "operations", "-o", "json", "--fleet", "dev"],
        None,
    )
    .await;
    let ops: serde_json::Value = serde_json::from_str(&out).unwrap();
    let kinds: BTreeSet<&str> = ops
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["kind"].as_str())
        .collect();
    assert!(kinds.contains("create"), "{out}");

    // A viewer may read but not submit: one clear line.
    let mut viewer = env.user("vera", Role::Viewer).await;
    let (code, _, _) = pxctl(&mut viewer, &["get", "containers"], None).await;
    assert_eq!(code.unwrap(), 0);
    let (code, _, _) = pxctl(&mut viewer, &["submit", &fleet, "-y"], None).await;
    let e = code.unwrap_err().to_string();
    assert!(e.starts_with("permission denied: "), "{e}");

    // Cordon and uncordon.
    let (code, out, _) = pxctl(
        &mut admin,
        &["node", "cordon", "n1", "--reason", "disk swap"],
        None,
    )
    .await;
    assert_eq!(code.unwrap(), 0);
    assert!(out.contains("cordoned"), "{out}");
    let (code, out, _) = pxctl(&mut admin, &["node", "uncordon", "n1"], None).await;
    assert_eq!(code.unwrap(), 0);
    assert!(out.contains("ready"), "{out}");

    // Destroy one container: asks (declined), then with -y it goes.
    let (code, _, _) = pxctl(&mut admin, &["destroy", "dev", "db"], Some(false)).await;
    assert!(matches!(code, Err(CliError::NotConfirmed(_))));
    let (code, _, _) = pxctl(&mut admin, &["destroy", "dev", "nope", "-y"], None).await;
    assert!(code
        .unwrap_err()
        .to_string()
        .contains("has no container nope"));
    let (code, out, err) = pxctl(
        &mut admin,
        &["destroy", "dev", "db", "-y", "--timeout", "60s"],
        None,
    )
    .await;
    assert_eq!(code.unwrap(), 0, "{out}\n{err}");
    assert!(
        out.contains("db  running -> destroyed") || out.contains("-> destroyed"),
        "{out}"
    );
    let (_, out, _) = pxctl(&mut admin, &["get", "containers", "-o", "json"], None).await;
    let cs: serde_json::Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = cs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["web"], "{out}");
}
