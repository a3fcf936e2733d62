//! bpg/proxmox parity (issue 10 item 13, part B): `env`, `entrypoint`, net0's `interface_name`, `host_managed` and a
//! `volume:` template, submitted through a real controller and agent to a pvesim node and checked there with
//! `pct config`; the plan is empty after the submit and after a day-2 change. Several `env` variables: written
//! into the config file, then one changed and one removed (with a restart).

use pxfleet_tests::day2::{pending, plan_is_empty, submit, UP};
use pxfleet_tests::{describe, v1 as pb, wait_until, Cluster, TEST_SSH_KEY};

const VOLUME: &str = "local:vztmpl/debian-13-standard_13.6-1_amd64.tar.zst";

fn fleet(name: &str, template: &str, containers: &str) -> String {
    format!(
        "fleet: {name}\n\
         defaults:\n  \
           template: vol\n  \
           datastore_id: local-lvm\n  \
           ssh_public_keys: [\"{TEST_SSH_KEY}\"]\n\
         templates:\n  \
           vol: {{volume: \"{template}\"}}\n\
         containers:\n{containers}"
    )
}

fn app(env: &str, host_managed: bool) -> String {
    format!(
        "  app:\n    node: mk33\n    vm_id: 2700\n    memory: 512\n    disk_size: 4\n    \
         env: {{APP_PORT: \"{env}\"}}\n    entrypoint: /sbin/init --app\n    interface_name: lan0\n    \
         host_managed: {host_managed}\n    extra_interfaces:\n      - {{name: wan0, bridge: vmbr0}}\n"
    )
}

/// One pvesim node (mk33) whose `local` storage already holds the template volume, put there outside pxfleet.
async fn cluster_with_template_volume() -> Cluster {
    let c = Cluster::start(1).await.expect("cluster");
    let out = c.pve(
        "mk33",
        "pveam",
        &[
            "download",
            "local",
            "debian-13-standard_13.6-1_amd64.tar.zst",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_fields_named_interfaces_and_a_volume_template_reach_the_node() {
    let c = cluster_with_template_volume().await;

    let yaml = fleet("bpg", VOLUME, &app("8080", true));
    let plan = c.plan(&yaml).await.unwrap();
    for shown in [
        "\"env\"",
        "\"entrypoint\"",
        "\"interface_name\"",
        "\"host_managed\"",
    ] {
        assert!(
            plan.plan_json.contains(shown),
            "{shown}: {}",
            plan.plan_json
        );
    }
    let path = submit(&c, "bpg.yaml", &yaml).await;
    c.wait_running("bpg", &["app"], UP).await;
    let cfg = c.pct_config("mk33", 2700);
    assert_eq!(
        cfg.get("env").map(String::as_str),
        Some("APP_PORT=8080"),
        "{cfg:?}"
    );
    assert_eq!(
        cfg.get("entrypoint").map(String::as_str),
        Some("/sbin/init --app")
    );
    let net0 = &cfg["net0"];
    assert!(
        net0.starts_with("name=lan0,bridge=vmbr0,host-managed=1,"),
        "{net0}"
    );
    assert!(cfg["net1"].starts_with("name=wan0,"), "{}", cfg["net1"]);
    assert!(!cfg["net1"].contains("host-managed"), "{}", cfg["net1"]);
    plan_is_empty(&c, &path).await;

    // Day 2: another value (applied at a restart: PVE reads env at start) and host_managed off (hot-plugged).
    let path = submit(&c, "bpg.yaml", &fleet("bpg", VOLUME, &app("9090", false))).await;
    wait_until("env 9090 applied, host-managed off", UP, || async {
        let cfg = c.pct_config("mk33", 2700);
        let p = pending(&c, "mk33", 2700);
        match (cfg.get("env"), cfg.get("net0")) {
            (Some(e), Some(n))
                if e == "APP_PORT=9090" && !n.contains("host-managed") && p.is_empty() =>
            {
                Ok(())
            }
            other => Err(format!("{other:?} pending {p:?}")),
        }
    })
    .await;
    c.wait_running("bpg", &["app"], UP).await;
    plan_is_empty(&c, &path).await;

    // A volume that is not on the node: nothing is downloaded, the container fails naming it.
    let missing = "local:vztmpl/debian-13-missing_13.0-1_amd64.tar.zst";
    let yaml = fleet(
        "miss",
        missing,
        "  gone: {node: mk33, vm_id: 2701, memory: 512, disk_size: 4}\n",
    );
    let path = c.write_fleet("miss.yaml", &yaml);
    let (code, out, err) = c
        .pxctl(&["submit", path.to_str().unwrap(), "-y", "--timeout", "60s"])
        .await;
    assert_ne!(code, 0, "submit succeeded without the volume: {out}\n{err}");
    wait_until("gone failed naming the volume", UP, || async {
        let cs = c.containers("miss").await.map_err(|e| e.to_string())?;
        match cs.iter().find(|x| x.name == "gone") {
            Some(x)
                if x.state == pb::ContainerState::Failed as i32
                    && x.last_error.contains(missing)
                    && x.last_error.contains("is not on this node") =>
            {
                Ok(())
            }
            _ => Err(describe(&cs)),
        }
    })
    .await;
    assert!(!c.vmids_on("mk33").contains(&2701));
}

fn envs(vars: &str) -> String {
    format!(
        "  envs:\n    node: mk33\n    vm_id: 2710\n    memory: 512\n    disk_size: 4\n    env:\n{vars}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_env_variables_are_written_changed_and_removed() {
    let c = cluster_with_template_volume().await;

    let three = "      APP_PORT: \"8080\"\n      DB_URL: \"postgres://db:5432/app?sslmode=require\"\n      MODE: prod\n";
    let path = submit(&c, "envs.yaml", &fleet("envs", VOLUME, &envs(three))).await;
    c.wait_running("envs", &["envs"], UP).await;
    // PVE shows env as one NUL-separated value; all three are there.
    let cfg = c.pct_config("mk33", 2710);
    assert_eq!(
        cfg.get("env").map(String::as_str),
        Some("APP_PORT=8080\0DB_URL=postgres://db:5432/app?sslmode=require\0MODE=prod"),
        "{cfg:?}"
    );
    plan_is_empty(&c, &path).await;

    let started = c.runtime("mk33", 2710).expect("runtime")["started"].clone();
    // `started` has a resolution of one second: let it tick, so that the restart shows as a new value.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;

    // Day 2: APP_PORT changed, MODE removed; applied at a restart (PVE reads env at start).
    let two =
        "      APP_PORT: \"9090\"\n      DB_URL: \"postgres://db:5432/app?sslmode=require\"\n";
    let next = fleet("envs", VOLUME, &envs(two));
    let plan = c.plan(&next).await.unwrap();
    assert!(
        plan.plan_json.contains("\"restart_required\": true"),
        "{}",
        plan.plan_json
    );
    let path = submit(&c, "envs.yaml", &next).await;
    wait_until("env replaced and the container restarted", UP, || async {
        let cfg = c.pct_config("mk33", 2710);
        let rt = c.runtime("mk33", 2710).expect("runtime");
        match cfg.get("env") {
            Some(e)
                if e == "APP_PORT=9090\0DB_URL=postgres://db:5432/app?sslmode=require"
                    && rt["started"] != started
                    && rt["running"] == true =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}; runtime {rt}")),
        }
    })
    .await;
    c.wait_running("envs", &["envs"], UP).await;
    plan_is_empty(&c, &path).await;
}
