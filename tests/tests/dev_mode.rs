//! `pxcontroller dev`, the embedded default, as the README uses it: start it, submit the example with pxctl,
//! see every container running with node, vm_id and address, an empty plan; SIGTERM stops its agents too.

use pxfleet_tests::dev::{processes_mentioning, pxctl, start_dev, stop_dev};
use pxfleet_tests::{workspace_root, Binaries};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_mode_runs_the_main_job_stops_its_agents_and_restarts_on_its_state() {
    let bins = Binaries::locate().expect("binaries");
    let tmp = tempfile::Builder::new()
        .prefix("pxfleet-devmode-")
        .tempdir()
        .unwrap();
    let data = tmp.path().join("dev");
    let err_log = tmp.path().join("dev.err");
    let (dev, export) = start_dev(&bins, &data, &err_log, 2).await;
    assert_eq!(export, data.join("pxctl.toml"));
    let agents = processes_mentioning(data.to_str().unwrap());
    assert!(
        agents
            .iter()
            .filter(|c| c.contains("pxagent") && c.contains(" run "))
            .count()
            == 2,
        "{agents:#?}"
    );

    let (code, out, err) =
        pxctl(&bins, &export, &["submit", "examples/dev/fleet.yaml", "-y"]).await;
    assert_eq!(code, 0, "submit: {out}\n{err}");
    let (code, out, err) = pxctl(&bins, &export, &["get", "containers", "-o", "json"]).await;
    assert_eq!(code, 0, "get: {out}\n{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{out}");
    for r in rows {
        assert_eq!(r["status"], "running", "{r}");
        assert_eq!(r["node"], "mk33", "{r}");
        assert!(r["vm_id"].as_u64().is_some_and(|v| v >= 100), "{r}");
        assert!(
            r["ipv4"]
                .as_str()
                .is_some_and(|a| a.starts_with("192.168.7.")),
            "{r}"
        );
    }
    let (code, out, err) = pxctl(
        &bins,
        &export,
        &["plan", "examples/dev/fleet.yaml", "--detailed-exitcode"],
    )
    .await;
    assert_eq!(code, 0, "plan --detailed-exitcode: {out}\n{err}");

    // Dev mode does what a real node does with the options an agent writes into the config file itself
    // (env and idmap, issue 34): applied, shown by pct config, and the plan is empty after.
    let opts = tmp.path().join("opts.yaml");
    let example =
        std::fs::read_to_string(workspace_root().join("examples/dev/fleet.yaml")).unwrap();
    let template_url = example
        .lines()
        .find_map(|l| l.trim().strip_prefix("template_url: "))
        .expect("the example's template_url");
    std::fs::write(
        &opts,
        format!(
            "fleet: opts\ncontainers:\n  o:\n    node: mk33\n    vm_id: 2190\n    template_url: {template_url}\n    \
             datastore_id: local-zfs\n    memory: 256\n    disk_size: 2\n    env: {{APP_MODE: blue}}\n    idmap:\n      \
             - {{type: uid, container_id: 0, host_id: 200000, size: 65536}}\n      \
             - {{type: gid, container_id: 0, host_id: 200000, size: 65536}}\n"
        ),
    )
    .unwrap();
    let opts = opts.to_str().unwrap();
    let (code, out, err) = pxctl(&bins, &export, &["submit", opts, "-y"]).await;
    assert_eq!(code, 0, "submit env+idmap: {out}\n{err}");
    let env = [(
        "PVESIM_STATE".to_string(),
        data.join("nodes/mk33/sim").display().to_string(),
    )]
    .into();
    let config = pxfleet_pvesim::run("pct", &["config".into(), "2190".into()], &env);
    assert_eq!(config.code, 0, "{}", config.stderr);
    for line in [
        "env: APP_MODE=blue",
        "lxc.idmap: u 0 200000 65536",
        "lxc.idmap: g 0 200000 65536",
    ] {
        assert!(
            config.stdout.lines().any(|l| l == line),
            "{line:?} in pct config:\n{}",
            config.stdout
        );
    }
    let (code, out, err) = pxctl(&bins, &export, &["plan", opts, "--detailed-exitcode"]).await;
    assert_eq!(code, 0, "plan env+idmap: {out}\n{err}");
    let (code, out, err) = pxctl(&bins, &export, &["destroy", "opts", "-y"]).await;
    assert_eq!(code, 0, "destroy: {out}\n{err}");

    // Nothing was downloaded: the template in mk33's cache is still dev mode's placeholder.
    let template = pxfleet_controller::dev::DEFAULT_TEMPLATES[0];
    let where_ = pxfleet_pvesim::run(
        "pvesm",
        &["path".into(), format!("local:vztmpl/{template}")],
        &env,
    );
    assert_eq!(where_.code, 0, "{}", where_.stderr);
    let cached = std::fs::read(where_.stdout.trim()).unwrap();
    assert!(
        cached.starts_with(b"pxfleet dev placeholder"),
        "the template file was replaced ({} bytes): dev mode downloaded it",
        cached.len()
    );

    stop_dev(dev, &data, &err_log).await;

    // Started again on the same directory: same fleet, same containers, still nothing to change.
    let (dev, export2) = start_dev(&bins, &data, &err_log, 2).await;
    assert_eq!(export2, export);
    let (code, out, err) = pxctl(&bins, &export, &["get", "containers", "-o", "json"]).await;
    assert_eq!(code, 0, "get after restart: {out}\n{err}");
    let again: serde_json::Value = serde_json::from_str(&out).unwrap();
    let again = again.as_array().unwrap();
    assert_eq!(again.len(), 2, "{out}");
    for (a, b) in again.iter().zip(rows.iter()) {
        assert_eq!(
            (&a["name"], &a["vm_id"], &a["node"]),
            (&b["name"], &b["vm_id"], &b["node"])
        );
    }
    let (code, out, err) = pxctl(
        &bins,
        &export,
        &["plan", "examples/dev/fleet.yaml", "--detailed-exitcode"],
    )
    .await;
    assert_eq!(code, 0, "plan after restart: {out}\n{err}");
    stop_dev(dev, &data, &err_log).await;
}

#[test]
fn dev_mode_preseeds_the_example_fleets_template() {
    let root = workspace_root();
    let path = "examples/dev/fleet.yaml";
    let text = std::fs::read_to_string(root.join(path)).unwrap();
    let key = std::fs::read_to_string(root.join("examples/dev/keys/ops.pub")).unwrap();
    let files = pxfleet_spec::MemFiles::default().with("examples/dev/keys/ops.pub", key);
    let fleet = pxfleet_spec::parse_fleet(path, &text, &files).expect("the example parses");
    let preseeded = pxfleet_controller::dev::DEFAULT_TEMPLATES;
    for (name, t) in &fleet.templates {
        if let pxfleet_spec::TemplateSource::Url { url, .. } = &t.source {
            let file = pxfleet_spec::url_file_name(url);
            assert!(
                preseeded.contains(&file),
                "template {name} ({file}) of {path} is not pre-seeded by dev mode ({preseeded:?}): dev mode would try to download it"
            );
        }
    }
    assert!(!fleet.templates.is_empty());
}
