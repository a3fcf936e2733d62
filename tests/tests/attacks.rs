//! The attack suite of issue 24: each trust boundary attacked by the weakest role that should be refused, on
//! real processes (controller, agents, pvesim nodes, pxctl). Each test asserts the refusal, that its message
//! says what is wrong and what to do, and that nothing changed. docs/security.md lists what each role may do.

use std::time::Duration;

use pxfleet_proto::v1::fleet_service_client::FleetServiceClient;
use pxfleet_tests::{v1 as pb, Cluster};
use pxfleet_tls::Role;
use tonic::transport::Channel;
use tonic::Code;

/// Submits `yaml` as `file`; the controller answers (a refusal of the file comes back as diagnostics).
async fn submit(
    api: &mut FleetServiceClient<Channel>,
    file: &str,
    yaml: String,
) -> pb::SubmitResponse {
    api.submit(pb::SubmitRequest {
        file_name: file.into(),
        source: yaml,
        ..Default::default()
    })
    .await
    .expect("a submit answer")
    .into_inner()
}

/// Item 5: a join token made without `--node` enrols new nodes only. Under the name of a node already enrolled
/// and connected it is refused (it would take over that node's identity and stream), the token is not used
/// up, the node stays connected, and a new name still enrols with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbound_join_token_cannot_enrol_as_an_enrolled_node() {
    let c = Cluster::start(1).await.expect("cluster");
    let dir = c.dir.path().join("attack");
    let token = c.join_token("", 600).await.unwrap();

    let err = c
        .join("mk33", &dir.join("evil"), &token.token)
        .await
        .expect_err("an unbound token enrolled as mk33");
    let text = err.to_string();
    assert!(text.contains("node mk33 is already enrolled"), "{text}");
    assert!(
        text.contains("pxctl node token create --node mk33"),
        "{text}"
    );
    assert!(!dir.join("evil/node.pem").exists());

    // mk33's own agent keeps its stream.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let nodes = c.nodes_info().await.unwrap();
    let mk33 = nodes.iter().find(|n| n.name == "mk33").unwrap();
    assert_eq!(mk33.status, pb::NodeStatus::Ready as i32, "{mk33:?}");

    // The token was not used up by the refusal: it enrols a new node.
    c.join("mk95", &dir.join("new"), &token.token)
        .await
        .expect("an unbound token enrols a new node");
    assert!(dir.join("new/node.pem").exists());
}

/// Peak resident memory of process `pid` in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A fleet file of under 700 bytes whose aliases expand to 29 MB (and, one level more, to 260 MB).
fn alias_bomb() -> String {
    let mut s = format!("fleet: bomb\na0: &a0 \"{}\"\n", "x".repeat(400));
    for i in 1..6 {
        let refs = vec![format!("*a{}", i - 1); 9].join(", ");
        s.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    s
}

/// Item 4: a viewer's fleet file is refused before it is parsed; an operator's YAML alias bomb is refused by
/// the parser with its position, after at most a few MiB; sixteen bombs at once leave the controller's peak
/// memory within bounds (they took it from 18 MB to 2.4 GB before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yaml_alias_bomb_costs_the_controller_a_few_mib_and_a_viewers_file_is_not_read() {
    let c = Cluster::start(1).await.expect("cluster");
    let bomb = alias_bomb();
    assert!(bomb.len() < 700, "{}", bomb.len());
    let req = |yaml: &str| pb::PlanRequest {
        file_name: "bomb.yaml".into(),
        source: yaml.into(),
        ..Default::default()
    };

    let viewer = c.issue_user("vic", Role::Viewer).await.unwrap();
    let mut api = c.api_as(&viewer).await.unwrap();
    let e = api.plan(req(&bomb)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("a viewer reads only"), "{e:?}");
    let e = api
        .submit(pb::SubmitRequest {
            file_name: "bomb.yaml".into(),
            source: bomb.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");

    let pid = c.controller_pid().expect("the controller runs");
    let before = peak_rss_kib(pid);
    let operator = c.issue_user("otto", Role::Operator).await.unwrap();
    let mut calls = Vec::new();
    for _ in 0..16 {
        let api = c.api_as(&operator).await.unwrap();
        let r = req(&bomb);
        calls.push(tokio::spawn(async move {
            let mut api = api;
            api.plan(r).await
        }));
    }
    for call in calls {
        let answer = call.await.unwrap().expect("a plan answer").into_inner();
        let d = answer
            .diagnostics
            .iter()
            .find(|d| {
                d.message
                    .contains("aliases of this document expand to more than")
            })
            .unwrap_or_else(|| panic!("{:?}", answer.diagnostics));
        assert_eq!(d.file, "bomb.yaml", "{d:?}");
        assert!(d.line > 0, "{d:?}");
        assert!(answer.plan_json.is_empty());
    }
    let grew_mib = peak_rss_kib(pid).saturating_sub(before) / 1024;
    println!("controller peak RSS grew by {grew_mib} MiB for 16 alias bombs");
    assert!(
        grew_mib < 96,
        "16 alias bombs raised the controller's peak memory by {grew_mib} MiB"
    );
    // nothing was stored
    assert!(c
        .pxctl_json(&["get", "fleets"])
        .await
        .to_string()
        .find("bomb")
        .is_none());
}

/// Item 3: a revoked certificate is cut off on connections opened before the revoke: the next call on the same
/// connection is refused with the reason, a Watch stream opened before ends with it, and a node's agent stream
/// is closed (the node goes down and its reconnection is refused), all within 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_certificate_is_cut_off_on_connections_opened_before() {
    let c = Cluster::start(1).await.expect("cluster");
    let operator = c.issue_user("olga", Role::Operator).await.unwrap();
    let serial = pxfleet_tls::CertInfo::from_pem(&operator.cert_pem)
        .unwrap()
        .serial
        .as_str()
        .to_string();
    // One connection, opened and used before the revoke.
    let mut api = c.api_as(&operator).await.unwrap();
    api.get_fleets(pb::GetFleetsRequest::default())
        .await
        .expect("the operator reads");
    let mut watch = api
        .watch(pb::WatchRequest::default())
        .await
        .expect("a watch opens")
        .into_inner();

    let mut admin = c.api().await.unwrap();
    admin
        .revoke_certificate(pb::RevokeCertificateRequest {
            serial: serial.clone(),
            reason: "attack test".into(),
        })
        .await
        .unwrap();

    let e = api
        .submit(pb::SubmitRequest {
            file_name: "f.yaml".into(),
            source: pxfleet_tests::fleet_yaml(
                "rv",
                "  x: {node: mk33, memory: 512, disk_size: 4}\n",
            ),
            ..Default::default()
        })
        .await
        .expect_err("a revoked certificate submitted on its open connection");
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(
        e.message()
            .contains(&format!("(serial {serial}) was revoked")),
        "{e:?}"
    );
    assert!(e.message().contains("ask an admin"), "{e:?}");
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match watch.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => return None,
                Err(e) => return Some(e),
            }
        }
    })
    .await
    .expect("the watch stream still runs 5 s after the revoke");
    let e = ended.expect("the watch ended without saying why");
    assert!(e.message().contains("was revoked"), "{e:?}");
    // nothing was made
    assert!(c.vmids_on("mk33").is_empty());

    // A node: its stream is closed, it goes down and stays down.
    let node_cert = c.node("mk33").bundle().unwrap();
    let node_serial = pxfleet_tls::CertInfo::from_pem(&node_cert.cert_pem)
        .unwrap()
        .serial
        .as_str()
        .to_string();
    admin
        .revoke_certificate(pb::RevokeCertificateRequest {
            serial: node_serial,
            reason: "attack test".into(),
        })
        .await
        .unwrap();
    pxfleet_tests::wait_until("mk33 cut off", Duration::from_secs(5), || async {
        let nodes = c.nodes_info().await.map_err(|e| e.to_string())?;
        let n = nodes.iter().find(|n| n.name == "mk33").unwrap();
        if n.status == pb::NodeStatus::Ready as i32 {
            Err(format!("{n:?}"))
        } else {
            Ok(())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let nodes = c.nodes_info().await.unwrap();
    let n = nodes.iter().find(|n| n.name == "mk33").unwrap();
    assert_ne!(n.status, pb::NodeStatus::Ready as i32, "{n:?}");
}

/// Item 3: a certificate made with the controller's CA key outside the controller (an admin one, say, by
/// whoever read `ca.key`) is signed by the right CA but was never issued, so never recorded: refused on every
/// call, with the reason, and it changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_minted_with_the_ca_key_but_never_issued_is_refused() {
    let c = Cluster::start(1).await.expect("cluster");
    let pki = c.controller_dir.join("pki");
    let ca = pxfleet_tls::Ca::from_pem(
        &std::fs::read_to_string(pki.join("ca.pem")).unwrap(),
        &std::fs::read_to_string(pki.join("ca.key")).unwrap(),
    )
    .unwrap();
    let minted = ca
        .issue_client(
            &pxfleet_tls::Identity::user("mallory", Role::Admin, &[]).unwrap(),
            pxfleet_tls::DEFAULT_CLIENT_VALIDITY,
        )
        .unwrap()
        .into_bundle(ca.cert_pem());
    let mut api = c.api_as(&minted).await.unwrap();
    let e = api
        .get_nodes(pb::GetNodesRequest {})
        .await
        .expect_err("a minted admin certificate read the nodes");
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(
        e.message().contains("was not issued by this controller"),
        "{e:?}"
    );
    let e = api
        .create_join_token(pb::CreateJoinTokenRequest {
            ttl_seconds: 600,
            node: "evil".into(),
        })
        .await
        .expect_err("a minted admin certificate made a join token");
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    // nothing was made: no token, no certificate besides those the controller issued
    let audit = c.pxctl_json(&["audit"]).await.to_string();
    assert!(!audit.contains("evil"), "{audit}");
    // the real admin, and a user the controller issues, still work
    let viewer = c.issue_user("vera", Role::Viewer).await.unwrap();
    c.api_as(&viewer)
        .await
        .unwrap()
        .get_nodes(pb::GetNodesRequest {})
        .await
        .expect("an issued viewer reads");
}

/// Item 7: text from users reaches other users' terminals escaped: an operator's file name and description
/// carrying terminal escape sequences (a retitle, a screen clear) print as `\u{1b}...` in `pxctl history` and
/// `describe`, never as control characters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_from_users_are_printed_escaped() {
    let c = Cluster::start(1).await.expect("cluster");
    let operator = c.issue_user("otto", Role::Operator).await.unwrap();
    let yaml = pxfleet_tests::fleet_yaml(
        "esc",
        "  x: {node: mk33, vm_id: 2900, memory: 512, disk_size: 4, description: \"hi\\e[2J\\e]0;pwned\\a\"}\n",
    );
    let r = c
        .api_as(&operator)
        .await
        .unwrap()
        .submit(pb::SubmitRequest {
            file_name: "evil\u{1b}]0;pwned\u{7}\u{1b}[2J.yaml".into(),
            source: yaml,
            ..Default::default()
        })
        .await
        .expect("the submit is accepted")
        .into_inner();
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    c.wait_running("esc", &["x"], Duration::from_secs(120))
        .await;
    for args in [
        vec!["history", "--fleet", "esc"],
        vec!["describe", "container", "x", "--fleet", "esc"],
        vec!["get", "containers", "--fleet", "esc"],
    ] {
        let (code, out, err) = c.pxctl(&args).await;
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(
            !out.chars()
                .chain(err.chars())
                .any(|ch| ch.is_control() && ch != '\n'),
            "{args:?} printed a control character: {out:?}"
        );
        if args[0] == "history" {
            assert!(out.contains("evil\\u{1b}]0;pwned\\u{7}"), "{out}");
        }
    }
}

/// Item 6: a template URL pointing at the node itself or its link (PVE's API on loopback, a metadata service,
/// loopback written as a number) is refused at plan time with the template named, and nothing is seeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_urls_cannot_reach_the_nodes_own_services() {
    let c = Cluster::start(1).await.expect("cluster");
    let operator = c.issue_user("otto", Role::Operator).await.unwrap();
    let mut api = c.api_as(&operator).await.unwrap();
    for url in [
        "https://127.0.0.1:8006/api2/json/x.tar.xz",
        "http://169.254.169.254/latest/meta-data/x.tar.xz",
        "http://2130706433:8006/x.tar.xz",
        "http://[::1]:8006/x.tar.xz",
        "http://localhost/x.tar.xz",
    ] {
        let yaml = format!(
            "fleet: ssrf\ntemplates:\n  t: {{url: \"{url}\", sha256: {}}}\ncontainers:\n  \
             x: {{node: mk33, template: t, memory: 512, disk_size: 4, ip_address: dhcp}}\n",
            "ab".repeat(32)
        );
        let r = submit(&mut api, "ssrf.yaml", yaml).await;
        let d = r
            .diagnostics
            .iter()
            .find(|d| d.message.contains("template t:") && d.message.contains("is refused"))
            .unwrap_or_else(|| panic!("{url} accepted: {:?}", r.diagnostics));
        assert!(d.message.contains("[template_urls] hosts"), "{d:?}");
        assert_eq!(r.revision, 0, "{url}: a revision was stored");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let ops = c.operations("ssrf").await.unwrap_or_default();
    assert!(ops.is_empty(), "{ops:?}");
}

/// Item 1 (first step): an operator's fleet cannot run a command on the controller, nor read its files or
/// environment through a hook (`${file:<data dir>/pki/ca.key}` in a body, `${env:...}` in a URL): refused before
/// anything is read, at the field, and nothing is stored or sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_fleet_cannot_run_or_read_anything_on_the_controller() {
    let c = Cluster::start(1).await.expect("cluster");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let ca_key = c.controller_dir.join("pki/ca.key");
    let pwned = c.dir.path().join("pwned");
    let operator = c.issue_user("otto", Role::Operator).await.unwrap();
    let mut api = c.api_as(&operator).await.unwrap();
    let containers = "  x: {node: mk33, memory: 512, disk_size: 4}\n";
    for (hooks, field) in [
        (
            format!(
                "hooks:\n  h:\n    on: ready\n    command: [/bin/sh, -c, \"touch {}\"]\n",
                pwned.display()
            ),
            "hooks.h.command",
        ),
        (
            format!(
                "hooks:\n  h:\n    on: ready\n    http: {{url: \"http://127.0.0.1:{port}/x\", body: {{k: \"${{file:{}}}\"}}}}\n",
                ca_key.display()
            ),
            "hooks.h.http.body",
        ),
        (
            format!("hooks:\n  h:\n    on: ready\n    http: {{url: \"http://127.0.0.1:{port}/x?t=${{env:HOME}}\"}}\n"),
            "hooks.h.http.url",
        ),
    ] {
        let yaml = format!("{hooks}{}", pxfleet_tests::fleet_yaml("ops", containers));
        for plan in [true, false] {
            let diagnostics = if plan {
                api.plan(pb::PlanRequest {
                    file_name: "ops.yaml".into(),
                    source: yaml.clone(),
                    ..Default::default()
                })
                .await
                .expect("a plan answer")
                .into_inner()
                .diagnostics
            } else {
                let r = submit(&mut api, "ops.yaml", yaml.clone()).await;
                assert_eq!(r.revision, 0, "{field}: stored");
                r.diagnostics
            };
            let d = diagnostics
                .iter()
                .filter(|d| d.field == field)
                .find(|d| d.message.contains("only an admin may submit it"))
                .unwrap_or_else(|| panic!("{field} accepted: {diagnostics:?}"));
            assert!(d.line > 0, "{d:?}");
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!pwned.exists(), "a command ran on the controller");
    assert!(listener.accept().is_err(), "a hook called out");
    assert!(c.vmids_on("mk33").is_empty());
}

/// Item 2: host powers are not taken by an operator: a privileged container, a bind mount of the host's `/` or
/// `/etc/pve/priv`, `/dev/sda` or `/dev/mem` passed through, uid 0 mapped to host uid 0, and the features PVE
/// reserves for root@pam are each refused at their field, naming the grant an admin would give; nothing is
/// created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_cannot_give_a_container_powers_over_its_host() {
    let c = Cluster::start(1).await.expect("cluster");
    let operator = c.issue_user("otto", Role::Operator).await.unwrap();
    let mut api = c.api_as(&operator).await.unwrap();
    let cases = [
        ("unprivileged: false", "containers.x.unprivileged"),
        ("mount_points: [{host_path: /, path: /host}]", "containers.x.mount_points[0].host_path"),
        ("mount_points: [{host_path: /etc/pve/priv, path: /p}]", "containers.x.mount_points[0].host_path"),
        ("devices: [{path: /dev/sda}]", "containers.x.devices[0].path"),
        ("devices: [{path: /dev/mem}]", "containers.x.devices[0].path"),
        (
            "idmap: [{type: uid, container_id: 0, host_id: 0, size: 65536}, {type: gid, container_id: 0, host_id: 100000, size: 65536}]",
            "containers.x.idmap[0].host_id",
        ),
        ("features: {keyctl: true}", "containers.x.features.keyctl"),
        ("features: {mount: [nfs]}", "containers.x.features.mount"),
        ("features: {mknod: true}", "containers.x.features.mknod"),
        ("features: {force_rw_sys: true}", "containers.x.features.force_rw_sys"),
        // a script PVE runs as root on the node
        ("hookscript: \"local:snippets/hook.sh\"", "containers.x.hookscript"),
        // another container's disk (PVE asks for the owner's permission)
        ("mount_points: [{volume: \"local-lvm:vm-900-disk-1\", path: /stolen}]", "containers.x.mount_points[0].volume"),
    ];
    for (extra, field) in cases {
        let yaml = pxfleet_tests::fleet_yaml(
            "host",
            &format!("  x:\n    node: mk33\n    vm_id: 3100\n    memory: 512\n    disk_size: 4\n    {extra}\n"),
        )
        // the file's own consent is not the admin's
        .replacen("fleet: host\n", "fleet: host\nallow_privileged: true\n", 1);
        let r = submit(&mut api, "host.yaml", yaml).await;
        assert_eq!(r.revision, 0, "{extra}: stored");
        let d = r
            .diagnostics
            .iter()
            .find(|d| d.field == field)
            .unwrap_or_else(|| panic!("{extra}: {:?}", r.diagnostics));
        assert!(
            d.message.contains("fleet host has no grant for it"),
            "{d:?}"
        );
        assert!(d.message.contains("pxctl grant add host "), "{d:?}");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(c.vmids_on("mk33").is_empty());
    // a volume of the fleet's own container needs no grant
    let own = pxfleet_tests::fleet_yaml(
        "host",
        "  x: {node: mk33, vm_id: 3100, memory: 512, disk_size: 4, mount_points: [{volume: \"local-lvm:vm-3100-disk-1\", path: /mine}]}\n",
    );
    let r = submit(&mut api, "host.yaml", own).await;
    assert!(
        !r.diagnostics.iter().any(|d| d.message.contains("grant")),
        "{:?}",
        r.diagnostics
    );
    // nesting is an operator's to set, as in PVE
    let yaml = pxfleet_tests::fleet_yaml(
        "host",
        "  x: {node: mk33, vm_id: 3100, memory: 512, disk_size: 4, features: {nesting: true}}\n",
    );
    let r = submit(&mut api, "host.yaml", yaml).await;
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    assert!(r.revision > 0);
}

/// Item 2: grants are narrow, an admin's alone, audit-logged, and the plan tells. An admin grants fleet `media` a
/// bind mount below /srv/media and /dev/net/tun; an operator may then submit exactly those (the plan names the
/// grants), but not /srv/mediaX, /srv, /dev/sda, nor another fleet; the operator cannot grant itself anything;
/// once revoked, the next submit needing the grant is refused and the container made with it is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_powers_are_granted_narrowly_by_an_admin_and_shown_in_the_plan() {
    let c = Cluster::start(1).await.expect("cluster");
    let operator = c.issue_user("otto", Role::Operator).await.unwrap();
    let mut api = c.api_as(&operator).await.unwrap();
    // the operator cannot grant itself a power
    let e = api
        .grant_host_power(pb::GrantHostPowerRequest {
            fleet: "media".into(),
            power: "privileged".into(),
            reason: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let (code, out, err) = c
        .pxctl(&[
            "grant",
            "add",
            "media",
            "bind-mount:/srv/media",
            "device:/dev/net/tun",
            "--reason",
            "library",
        ])
        .await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = c
        .pxctl(&["grant", "add", "media", "bind-mount:/srv/../etc"])
        .await;
    assert_ne!(code, 0);
    assert!(err.contains("a power is one of"), "{err}");
    // anyone may read the grants
    let grants = api
        .list_grants(pb::ListGrantsRequest {
            fleet: "media".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .grants;
    let powers: Vec<&str> = grants.iter().map(|g| g.power.as_str()).collect();
    assert_eq!(powers, ["bind-mount:/srv/media", "device:/dev/net/tun"]);
    assert!(grants
        .iter()
        .all(|g| g.granted_by.contains("role=admin") && g.reason == "library"));
    let container = |extra: &str| {
        pxfleet_tests::fleet_yaml(
            "media",
            &format!("  x:\n    node: mk33\n    vm_id: 3200\n    memory: 512\n    disk_size: 4\n    {extra}\n"),
        )
    };
    for (extra, field) in [
        (
            "mount_points: [{host_path: /srv/mediaX, path: /m}]",
            "containers.x.mount_points[0].host_path",
        ),
        (
            "mount_points: [{host_path: /srv, path: /m}]",
            "containers.x.mount_points[0].host_path",
        ),
        (
            "devices: [{path: /dev/sda}]",
            "containers.x.devices[0].path",
        ),
        ("unprivileged: false", "containers.x.unprivileged"),
    ] {
        let r = submit(&mut api, "media.yaml", container(extra)).await;
        assert_eq!(r.revision, 0, "{extra}: stored");
        assert!(
            r.diagnostics.iter().any(|d| d.field == field),
            "{extra}: {:?}",
            r.diagnostics
        );
    }
    // another fleet has no grant
    let other =
        container("devices: [{path: /dev/net/tun}]").replace("fleet: media", "fleet: other");
    let r = submit(&mut api, "other.yaml", other).await;
    assert_eq!(r.revision, 0);
    assert!(
        r.diagnostics[0]
            .message
            .contains("pxctl grant add other device:/dev/net/tun"),
        "{:?}",
        r.diagnostics
    );
    // what was granted goes through, and the plan says so
    let granted = container("mount_points: [{host_path: /srv/media/films, path: /films}]\n    devices: [{path: /dev/net/tun}]");
    let plan = api
        .plan(pb::PlanRequest {
            file_name: "media.yaml".into(),
            source: granted.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(plan.diagnostics.is_empty(), "{:?}", plan.diagnostics);
    assert!(
        plan.plan_json.contains("container x runs with host powers: bind mount of the host's /srv/media/films (grant 1: bind-mount:/srv/media); passthrough of the host's device /dev/net/tun (grant 2: device:/dev/net/tun)"),
        "{}",
        plan.plan_json
    );
    let r = submit(&mut api, "media.yaml", granted.clone()).await;
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    assert!(r.revision > 0);
    c.wait_running("media", &["x"], Duration::from_secs(120))
        .await;
    let config = c.pct_config("mk33", 3200);
    assert!(
        config["mp0"].starts_with("/srv/media/films,mp=/films"),
        "{config:?}"
    );
    assert!(config["dev0"].contains("/dev/net/tun"), "{config:?}");
    // the audit trail has the grants; a revoke stops the next submit that needs the grant
    let actions = c.audit_actions("media").await;
    assert_eq!(
        actions.iter().filter(|a| *a == "grant").count(),
        2,
        "{actions:?}"
    );
    let (code, out, err) = c.pxctl(&["grant", "revoke", "2"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("revoked grant 2 of fleet media: device:/dev/net/tun"),
        "{out}"
    );
    let r = submit(
        &mut api,
        "media.yaml",
        granted.replace("memory: 512", "memory: 640"),
    )
    .await;
    assert_eq!(r.revision, 0);
    assert!(
        r.diagnostics
            .iter()
            .any(|d| d.field == "containers.x.devices[0].path"),
        "{:?}",
        r.diagnostics
    );
    let (_, out, _) = c.pxctl(&["grant", "list", "media"]).await;
    assert!(
        out.contains("bind-mount:/srv/media") && !out.contains("/dev/net/tun"),
        "{out}"
    );
    assert!(
        c.pct_config("mk33", 3200)["dev0"].contains("/dev/net/tun"),
        "the container was not touched"
    );
}

const GUARD: &str = r#"package guard

deny contains msg if {
  input.action == "destroy"
  input.user.role != "admin"
  some n in input.containers
  input.fleet.containers[n].labels.env == "prod"
  msg := sprintf("container %s is labelled env=prod: only an admin destroys it", [n])
}

deny contains {"msg": "no stops in fleet shop", "container": n} if {
  input.action == "stop"
  input.fleet.name == "shop"
  some n in input.containers
}

deny contains {"msg": "more than 4096 MiB of memory", "container": n} if {
  input.action == "submit"
  some n, c in input.fleet.containers
  c.memory > 4096
}
"#;

/// Item 2: an admin's policies hold whatever the fleet file says: installed by an admin only (and only when
/// they compile), evaluated on the plan and the submit (an operator's file without `policies:` is refused
/// by them), on destroy and on stop; nothing is changed by a refused call; the admin's own destroy passes the
/// rule that exempts admins; the installs are in the audit trail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_policies_hold_on_submit_destroy_and_stop_whatever_the_file_says() {
    let c = Cluster::start(1).await.expect("cluster");
    let operator = c.issue_user("otto", Role::Operator).await.unwrap();
    let mut api = c.api_as(&operator).await.unwrap();
    let e = api
        .install_policy(pb::InstallPolicyRequest {
            name: "mine".into(),
            source: "package mine\n".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.rego");
    std::fs::write(
        &broken,
        "package broken\n\ndeny contains msg if {\n  msg := \n}\n",
    )
    .unwrap();
    let (code, _, err) = c
        .pxctl(&["policy", "add", "broken", broken.to_str().unwrap()])
        .await;
    assert_ne!(code, 0);
    assert!(
        err.contains("admin:broken:") && err.contains("nothing was installed"),
        "{err}"
    );
    let guard = dir.path().join("guard.rego");
    std::fs::write(&guard, GUARD).unwrap();
    let (code, out, err) = c
        .pxctl(&["policy", "add", "guard", guard.to_str().unwrap()])
        .await;
    assert_eq!(code, 0, "{out}{err}");
    let listed = api
        .list_policies(pb::ListPoliciesRequest {})
        .await
        .unwrap()
        .into_inner()
        .policies;
    assert_eq!(
        listed.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["guard"]
    );

    let shop = |memory: u32| {
        pxfleet_tests::fleet_yaml(
            "shop",
            &format!("  x: {{node: mk33, vm_id: 3300, memory: {memory}, disk_size: 4, labels: {{env: prod}}}}\n"),
        )
    };
    // the plan shows the denial, the submit is refused by it, nothing is stored
    let plan = api
        .plan(pb::PlanRequest {
            file_name: "shop.yaml".into(),
            source: shop(8192),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let findings = plan.policy.expect("a policy report").findings;
    assert!(
        findings.iter().any(|f| f.deny
            && f.policy == "admin:guard"
            && f.container == "x"
            && f.message.contains("4096")),
        "{findings:?}"
    );
    let r = submit(&mut api, "shop.yaml", shop(8192)).await;
    assert_eq!(r.revision, 0);
    assert!(
        r.diagnostics
            .iter()
            .any(|d| d.message.contains("denied by policy admin:guard")),
        "{:?}",
        r.diagnostics
    );
    let r = submit(&mut api, "shop.yaml", shop(512)).await;
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    let revision = r.revision;
    c.wait_running("shop", &["x"], Duration::from_secs(120))
        .await;

    // the operator may neither destroy nor stop it
    let e = api
        .destroy(pb::DestroyRequest {
            fleet: "shop".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(
        e.message()
            .contains("container x is labelled env=prod: only an admin destroys it"),
        "{e:?}"
    );
    let e = api
        .set_power(pb::SetPowerRequest {
            fleet: "shop".into(),
            action: pb::PowerAction::Stop as i32,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("no stops in fleet shop"), "{e:?}");
    let (_, out, _) = c.pxctl(&["get", "fleets"]).await;
    assert!(out.contains("shop"), "{out}");
    let fleets = c.pxctl_json(&["get", "fleets"]).await;
    assert_eq!(fleets[0]["revision"].as_u64(), Some(revision), "{fleets}");
    assert_eq!(c.vmids_on("mk33"), vec![3300]);

    // an admin's destroy passes the rule that exempts admins
    let (code, out, err) = c.pxctl(&["destroy", "shop", "--yes"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let audit = c.pxctl_json(&["audit"]).await;
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["action"] == "install_policy" && e["target"] == "admin:guard"),
        "{audit}"
    );
}

/// Item 1: what runs on the controller is the admin's decision. An admin defines hook `notify` in the
/// controller's configuration (a header with a secret read from a file, a `${param:channel}`); an operator's fleet
/// uses it by name with a plain parameter: the server gets both, and the secret shows in no plan, revision or
/// operation the operator reads. An undefined hook, a missing or unknown parameter are refused at the field. No
/// `${file:}` reads the controller's data dir, an admin's neither: inline (also through a symlink) it is refused
/// at the field, in the configuration the controller does not start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_are_the_admins_used_by_name_and_nothing_reads_the_data_dir() {
    let (port, seen) = pxfleet_tests::hookserver::server().await;
    let mut c = Cluster::start(1).await.expect("cluster");
    const SECRET: &str = "s3cr3t-t0ken";
    let secret_file = c.dir.path().join("notify.token");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let ca_key = c.controller_dir.join("pki/ca.key");
    c.stop_controller().await;
    let base = std::fs::read_to_string(&c.controller_config).unwrap();
    let definition = |name: &str, file: &std::path::Path| {
        format!(
            "\n[hooks.{name}]\nretries = 0\n[hooks.{name}.http]\nurl = \"http://127.0.0.1:{port}/notify?channel=${{param:channel}}&name=${{name}}\"\nheaders = {{ X-Api-Key = \"${{file:{}}}\" }}\n",
            file.display()
        )
    };
    std::fs::write(
        &c.controller_config,
        format!("{base}{}", definition("leak", &ca_key)),
    )
    .unwrap();
    let e = c.start_controller().await.unwrap_err().to_string();
    assert!(
        e.contains("hooks.leak.http.headers.X-Api-Key") && e.contains("no hook may read"),
        "{e}"
    );
    std::fs::write(
        &c.controller_config,
        format!("{base}{}", definition("notify", &secret_file)),
    )
    .unwrap();
    c.start_controller().await.expect("the controller starts");
    c.wait_nodes_ready(Duration::from_secs(60)).await.unwrap();

    let operator = c.issue_user("otto", Role::Operator).await.unwrap();
    let mut api = c.api_as(&operator).await.unwrap();
    let fleet = |hook: &str| {
        format!(
            "hooks:\n  n:\n    on: ready\n{hook}{}",
            pxfleet_tests::fleet_yaml(
                "named",
                "  x: {node: mk33, vm_id: 3400, memory: 512, disk_size: 4}\n"
            )
        )
    };
    for (hook, field, says) in [
        (
            "    use: nope\n",
            "hooks.n.use",
            "defines no hook nope (it defines notify)",
        ),
        (
            "    use: notify\n",
            "hooks.n.params",
            "hook notify needs the parameter channel",
        ),
        (
            "    use: notify\n    params: {channel: ops, extra: x}\n",
            "hooks.n.params.extra",
            "hook notify has no parameter extra",
        ),
    ] {
        let r = submit(&mut api, "named.yaml", fleet(hook)).await;
        assert_eq!(r.revision, 0, "{hook}");
        assert!(
            r.diagnostics
                .iter()
                .any(|d| d.field == field && d.message.contains(says)),
            "{hook}: {:?}",
            r.diagnostics
        );
    }
    // an admin's inline hook may not read the data dir either, nor through a symlink to it
    let link = c.dir.path().join("innocent");
    std::os::unix::fs::symlink(c.controller_dir.join("pki"), &link).unwrap();
    for file in [ca_key.clone(), link.join("ca.key")] {
        let inline = format!(
            "    http: {{url: \"http://127.0.0.1:{port}/leak\", headers: {{X-Api-Key: \"${{file:{}}}\"}}}}\n",
            file.display()
        );
        let r = c.submit(&fleet(&inline)).await.unwrap();
        assert_eq!(r.revision, 0);
        assert!(
            r.diagnostics
                .iter()
                .any(|d| d.field == "hooks.n.http.headers.X-Api-Key"
                    && d.message.contains("the controller's own data")),
            "{:?}",
            r.diagnostics
        );
    }

    let r = submit(
        &mut api,
        "named.yaml",
        fleet("    use: notify\n    params: {channel: ops}\n"),
    )
    .await;
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    assert!(!r.plan_json.contains(SECRET));
    c.wait_running("named", &["x"], Duration::from_secs(120))
        .await;
    let got = pxfleet_tests::wait_until("the hook's request", Duration::from_secs(60), || async {
        pxfleet_tests::hookserver::requests(&seen, "/notify")
            .pop()
            .ok_or_else(|| "no request yet".to_string())
    })
    .await;
    assert_eq!(got.uri, "/notify?channel=ops&name=x");
    assert_eq!(got.api_key, SECRET);
    assert!(seen
        .lock()
        .unwrap()
        .iter()
        .all(|s| !s.uri.starts_with("/leak")));
    let ops = format!("{:?}", c.operations("named").await.unwrap());
    let (code, history, err) = c
        .pxctl(&["history", "--fleet", "named", "-o", "json"])
        .await;
    assert!(
        code == 0 && history.contains("named.yaml"),
        "{history}{err}"
    );
    assert!(
        !ops.contains(SECRET) && !history.contains(SECRET),
        "{ops}{history}"
    );
}

/// Item 1: the HTTP hooks an operator writes inline may not call the controller itself or its link (its metrics,
/// a metadata service), nor a host hidden behind a placeholder: refused at the URL at plan time, saying what to
/// do; a host elsewhere is accepted. An admin narrows the hosts with `[hook_urls]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_inline_hook_cannot_call_the_controller_or_its_link() {
    let c = Cluster::start(1).await.expect("cluster");
    let operator = c.issue_user("otto", Role::Operator).await.unwrap();
    let api = c.api_as(&operator).await.unwrap();
    let plan = |url: &str| {
        let yaml = format!(
            "hooks:\n  h:\n    on: ready\n    http: {{url: \"{url}\"}}\n{}",
            pxfleet_tests::fleet_yaml("calls", "  x: {node: mk33, memory: 512, disk_size: 4}\n")
        );
        let mut api = api.clone();
        async move {
            api.plan(pb::PlanRequest {
                file_name: "calls.yaml".into(),
                source: yaml,
                ..Default::default()
            })
            .await
            .expect("a plan answer")
            .into_inner()
            .diagnostics
        }
    };
    for (url, says) in [
        (
            "http://127.0.0.1:9090/metrics",
            "is the controller itself or its link",
        ),
        (
            "http://169.254.169.254/latest/meta-data/",
            "is the controller itself or its link",
        ),
        (
            "http://2130706433:8443/",
            "is the controller itself or its link",
        ),
        ("http://[::1]/", "is the controller itself or its link"),
        ("http://${hostname}.lan/x", "its host is a placeholder"),
    ] {
        let d = plan(url).await;
        assert!(
            d.iter().any(|d| d.field == "hooks.h.http.url"
                && d.message.contains(says)
                && d.message.contains("use: NAME")),
            "{url}: {d:?}"
        );
    }
    assert!(plan("http://192.0.2.10/dns?name=${hostname}")
        .await
        .is_empty());
}

/// Item 2: adopting a container made outside pxfleet hands its data and its destroy to the fleet (the
/// controller's own container, another team's): an operator's adopt is refused at the field naming the grant,
/// nothing is marked; with the admin's grant `adopt:VMID` it is adopted, and the fleet's later submits need no
/// grant for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_adopts_only_what_an_admin_granted() {
    let c = Cluster::start(1).await.expect("cluster");
    pxfleet_tests::day2::create_by_hand(
        &c,
        "mk33",
        2050,
        &[
            "--hostname",
            "theirs",
            "--memory",
            "512",
            "--rootfs",
            "local-lvm:4",
            "--unprivileged",
            "1",
        ],
    );
    let before = c.pct_config("mk33", 2050);
    let operator = c.issue_user("otto", Role::Operator).await.unwrap();
    let mut api = c.api_as(&operator).await.unwrap();
    let yaml = pxfleet_tests::fleet_yaml(
        "takeover",
        "  theirs: {node: mk33, vm_id: 2050, adopt: true, hostname: theirs, memory: 512, disk_size: 4, state: stopped}\n",
    );
    let r = submit(&mut api, "takeover.yaml", yaml.clone()).await;
    assert_eq!(r.revision, 0);
    let d = r
        .diagnostics
        .iter()
        .find(|d| d.field == "containers.theirs.adopt")
        .unwrap_or_else(|| panic!("{:?}", r.diagnostics));
    assert!(
        d.message.contains("pxctl grant add takeover adopt:2050"),
        "{d:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        c.pct_config("mk33", 2050),
        before,
        "the container was touched"
    );

    let (code, out, err) = c.pxctl(&["grant", "add", "takeover", "adopt:2050"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let r = submit(&mut api, "takeover.yaml", yaml.clone()).await;
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    assert!(r.revision > 0);
    pxfleet_tests::wait_until(
        "the container is adopted",
        Duration::from_secs(120),
        || async {
            let desc = c
                .pct_config("mk33", 2050)
                .get("description")
                .cloned()
                .unwrap_or_default();
            match desc.contains("takeover") {
                true => Ok(()),
                false => Err(desc),
            }
        },
    )
    .await;
    // once the fleet's, a resubmit needs no grant
    let (code, _, err) = c.pxctl(&["grant", "revoke", "1"]).await;
    assert_eq!(code, 0, "{err}");
    let r = submit(
        &mut api,
        "takeover.yaml",
        yaml.replace("memory: 512", "memory: 640"),
    )
    .await;
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
}
