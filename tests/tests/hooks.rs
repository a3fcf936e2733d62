//! fleet.yaml `hooks:` against a real controller, agent and pvesim node: an HTTP server started by the test on
//! 127.0.0.1 receives the ready and destroyed calls (the Technitium example's shape) with the container's
//! values; a server answering 500 shows the retries and the error in `pxctl describe container`; a secret
//! missing on the controller refuses the plan with the field's line.

use std::time::Duration;

use pxfleet_tests::hookserver::{requests, server};
use pxfleet_tests::{describe, fleet_yaml, v1 as pb, wait_until, Cluster};

const UP: Duration = Duration::from_secs(120);
const TOKEN: &str = "tok-Secr3t-value";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_and_destroyed_hooks_call_the_server_and_failures_are_retried_and_described() {
    let (port, seen) = server().await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("dns.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let tf = token_file.display();
    let out_file = dir.path().join("cmd.out");
    let out = out_file.display();
    let late_prefix = dir.path().join("late");
    let late = late_prefix.display();
    let c = Cluster::start(1).await.expect("cluster");
    let yaml = format!(
        "{}hooks:\n  dns-add:\n    on: ready\n    containers: [web]\n    http:\n      url: \"http://127.0.0.1:{port}/api/zones/records/add?token=${{file:{tf}}}&domain=${{hostname}}.lan&type=A&ipAddress=${{ipv4}}\"\n      success_contains: '\"status\":\"ok\"'\n      headers: {{X-Api-Key: \"${{file:{tf}}}\"}}\n      body: {{name: \"${{name}}\", hostname: \"${{hostname}}\", fleet: \"${{fleet}}\", node: \"${{node}}\", vm_id: \"${{vm_id}}\", ipv4: \"${{ipv4}}\", ipv6: \"${{ipv6}}\"}}\n  dns-delete:\n    on: destroyed\n    containers: [web]\n    http: {{method: POST, url: \"http://127.0.0.1:{port}/api/zones/records/delete?token=${{file:{tf}}}&domain=${{hostname}}.lan&type=A&ipAddress=${{ipv4}}\"}}\n  note:\n    on: ready\n    containers: [web]\n    command: [/bin/sh, -c, 'echo \"$PXFLEET_NAME $PXFLEET_VM_ID $PXFLEET_EVENT $1\" > {out}', sh, \"${{ipv4}}\"]\n  late-ready:\n    on: ready\n    containers: [late]\n    command: [/usr/bin/touch, \"{late}-${{vm_id}}\"]\n  broken:\n    on: ready\n    containers: [other]\n    retries: 2\n    http: {{url: \"http://127.0.0.1:{port}/fail?token=${{file:{tf}}}\"}}\n",
        fleet_yaml(
            "hk",
            "  web: {node: mk33, hostname: www, ip_address: 10.20.0.10/24, gateway: 10.20.0.1, ipv6: \"fd00::10/64\"}\n  other: {node: mk33}\n  late: {node: mk33, state: stopped}\n"
        )
    );
    let r = c.submit(&yaml).await.expect("submit");
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    wait_until("web and other running, late stopped", UP, || async {
        let cs = c.containers("hk").await.map_err(|e| e.to_string())?;
        let st = |n: &str| cs.iter().find(|x| x.name == n).map(|x| x.state);
        let (run, stop) = (
            Some(pb::ContainerState::Running as i32),
            Some(pb::ContainerState::Stopped as i32),
        );
        if cs.len() == 3 && st("web") == run && st("other") == run && st("late") == stop {
            Ok(())
        } else {
            Err(describe(&cs))
        }
    })
    .await;
    let web = c
        .containers("hk")
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.name == "web")
        .unwrap();

    // ready: the add call, with the values filled in and the secret read from the file.
    let add = wait_until("the ready hook's request", UP, || async {
        requests(&seen, "/api/zones/records/add")
            .pop()
            .ok_or_else(|| format!("{:?}", seen.lock().unwrap()))
    })
    .await;
    assert_eq!(add.method, "POST", "a body makes it a POST");
    assert_eq!(
        add.uri,
        format!("/api/zones/records/add?token={TOKEN}&domain=www.lan&type=A&ipAddress=10.20.0.10")
    );
    assert_eq!(add.api_key, TOKEN);
    let body: serde_json::Value = serde_json::from_str(&add.body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"name": "web", "hostname": "www", "fleet": "hk", "node": "mk33",
            "vm_id": web.vm_id.to_string(), "ipv4": "10.20.0.10", "ipv6": "fd00::10"})
    );
    // The command hook: argv filled in, the values also in its environment.
    let written = wait_until("the command hook's file", UP, || async {
        std::fs::read_to_string(&out_file).map_err(|e| e.to_string())
    })
    .await;
    assert_eq!(written, format!("web {} ready 10.20.0.10\n", web.vm_id));
    let hooks = wait_until("both hooks of web described as succeeded", UP, || async {
        let d = c
            .pxctl_json(&["describe", "container", "web", "--fleet", "hk"])
            .await;
        let hooks = d["hooks"].as_array().cloned().unwrap_or_default();
        if hooks.len() == 2 && hooks.iter().all(|h| h["status"] == "succeeded") {
            Ok(hooks)
        } else {
            Err(d.to_string())
        }
    })
    .await;
    assert_eq!(hooks[0]["hook"], "dns-add");
    assert_eq!(hooks[0]["detail"], "HTTP 200");
    assert_eq!(hooks[1]["hook"], "note");
    assert_eq!(hooks[1]["detail"], "exit status 0");

    // The failing hook: 1 + 2 retries, then failed, with the server's answer but never the token.
    let failed = wait_until("the broken hook failed for good", UP, || async {
        let d = c
            .pxctl_json(&["describe", "container", "other", "--fleet", "hk"])
            .await;
        match d["hooks"].get(0) {
            Some(h) if h["status"] == "failed" => Ok(h.clone()),
            _ => Err(d.to_string()),
        }
    })
    .await;
    assert_eq!(failed["hook"], "broken");
    assert_eq!(failed["event"], "ready");
    assert_eq!(failed["attempts"], "3/3");
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.starts_with("HTTP 500 Internal Server Error: boom for /fail?token=***"),
        "{error}"
    );
    assert!(!error.contains(TOKEN));
    assert_eq!(requests(&seen, "/fail").len(), 3);
    let (code, text, _) = c
        .pxctl(&["describe", "container", "other", "--fleet", "hk"])
        .await;
    assert_eq!(code, 0);
    assert!(
        text.contains("Hooks:") && text.contains("broken") && text.contains("3/3"),
        "{text}"
    );
    // The failed hook did not fail the container.
    let other = c
        .containers("hk")
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.name == "other")
        .unwrap();
    assert!(other.last_error.is_empty(), "{other:?}");
    assert!(!c.logs().contains(TOKEN), "a secret reached a log");

    // A container created stopped is ready when it is started (by a resubmit with `state: running`).
    let r = c
        .submit(&yaml.replace("state: stopped", "state: running"))
        .await
        .expect("resubmit");
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    c.wait_running("hk", &["late", "other", "web"], UP).await;
    let late_ct = c
        .containers("hk")
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.name == "late")
        .unwrap();
    let marker = format!("{late}-{}", late_ct.vm_id);
    wait_until("the late container's ready hook", UP, || async {
        std::path::Path::new(&marker)
            .exists()
            .then_some(())
            .ok_or_else(|| format!("{marker} missing"))
    })
    .await;

    // destroyed: the delete call with the container's last values.
    let (code, out, err) = c.pxctl(&["destroy", "hk", "-y"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let del = wait_until("the destroyed hook's request", UP, || async {
        requests(&seen, "/api/zones/records/delete")
            .pop()
            .ok_or_else(|| format!("{:?}", seen.lock().unwrap()))
    })
    .await;
    assert_eq!(del.method, "POST");
    assert_eq!(
        del.uri,
        format!(
            "/api/zones/records/delete?token={TOKEN}&domain=www.lan&type=A&ipAddress=10.20.0.10"
        )
    );
    assert_eq!(
        requests(&seen, "/api/zones/records/add").len(),
        1,
        "ready ran once"
    );

    // The operation history keeps every run, also after the containers are gone: `get operations` lists them
    // as kind `hook`, with the outcome, the attempts and the error.
    let runs = wait_until("the hook runs in the operation history", UP, || async {
        let ops = c.pxctl_json(&["get", "operations", "--fleet", "hk"]).await;
        let runs: Vec<serde_json::Value> = ops
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|o| o["kind"] == "hook")
            .collect();
        let deleted = runs
            .iter()
            .any(|o| o["reason"] == "hook dns-delete on destroyed" && o["state"] == "succeeded");
        if deleted {
            Ok(runs)
        } else {
            Err(ops.to_string())
        }
    })
    .await;
    let run = |reason: &str, container: &str| {
        runs.iter()
            .find(|o| o["reason"] == reason && o["container"] == container)
            .unwrap_or_else(|| panic!("no run {reason} for {container} in {runs:?}"))
            .clone()
    };
    let add_run = run("hook dns-add on ready", "web");
    assert_eq!(add_run["state"], "succeeded");
    assert_eq!(add_run["message"], "HTTP 200");
    assert_eq!(add_run["vm_id"], web.vm_id);
    assert_eq!(add_run["node"], "mk33");
    let broken_run = run("hook broken on ready", "other");
    assert_eq!(broken_run["state"], "failed");
    assert_eq!(broken_run["attempts"], 3);
    let error = broken_run["error"].as_str().unwrap();
    assert!(error.starts_with("HTTP 500"), "{error}");
    assert!(!error.contains(TOKEN), "{error}");
    assert_eq!(run("hook note on ready", "web")["state"], "succeeded");
    let (code, text, _) = c.pxctl(&["get", "operations", "--fleet", "hk"]).await;
    assert_eq!(code, 0);
    assert!(
        text.lines()
            .any(|l| l.contains("other") && l.contains("hook") && l.contains("failed")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_missing_on_the_controller_refuses_the_plan_at_its_line() {
    let c = Cluster::start(1).await.expect("cluster");
    let yaml = format!(
        "{}hooks:\n  dns:\n    on: ready\n    http: {{url: \"http://127.0.0.1:9/x?token=${{env:PXFLEET_HOOKS_TEST_NEVER_SET}}\"}}\n",
        fleet_yaml("hk2", "  a: {node: mk33}\n")
    );
    let p = c.plan(&yaml).await.expect("plan");
    let d = p
        .diagnostics
        .iter()
        .find(|d| d.field == "hooks.dns.http.url")
        .unwrap_or_else(|| panic!("{:?}", p.diagnostics));
    assert!(
        d.message.starts_with(
            "environment variable PXFLEET_HOOKS_TEST_NEVER_SET is not set on the controller"
        ),
        "{d:?}"
    );
    assert_eq!(
        d.line,
        yaml.lines()
            .position(|l| l.contains("PXFLEET_HOOKS_TEST"))
            .unwrap() as u32
            + 1
    );
}
