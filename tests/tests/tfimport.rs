//! Moving over from Terraform (issue 14, item 1): the PRD's dev environment as Terraform made it (the same
//! vm_ids, MACs and options, created with `pct` on dev mode's simulated node, unmarked), its state file, then
//! `pxctl import terraform --state`, then `pxctl plan` against those nodes. With fleet.yaml's `adopt: true`
//! (when this build has it) the plan adopts both (updates writing the mark, nothing else); without it, the plan
//! refuses the taken vm_ids until the `pct set --description` lines the import writes are run, then shows no
//! change. Either way a submit keeps the same containers (vm_ids, MACs), and a changed memory plans exactly that.

// Test code: it starts the programs under test and the tools around them.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use pxfleet_tests::dev::{pxctl, start_dev, stop_dev};
use pxfleet_tests::{workspace_root, Binaries};

fn pve(data: &Path, node: &str, tool: &str, args: &[&str]) -> String {
    let env: BTreeMap<String, String> = [(
        "PVESIM_STATE".to_string(),
        data.join(format!("nodes/{node}/sim")).display().to_string(),
    )]
    .into();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let out = pxfleet_pvesim::run(tool, &args, &env);
    assert_eq!(out.code, 0, "{tool} {args:?}: {}", out.stderr);
    out.stdout
}

/// What the bpg provider made for one entry of lxc_configs (modules/lxc/main.tf), as `pct create` options.
/// One lxc_configs entry: vm_id, name, cores, memory, disk, address, MAC.
type Entry<'a> = (u32, &'a str, u32, u32, u32, &'a str, &'a str);

fn terraform_made(data: &Path, (vm_id, name, cores, memory, disk, ip, mac): Entry<'_>) {
    let template = format!(
        "local:vztmpl/{}",
        pxfleet_controller::dev::DEFAULT_TEMPLATES[0]
    );
    pve(
        data,
        "mk33",
        "pct",
        &[
            "create",
            &vm_id.to_string(),
            &template,
            "--hostname",
            name,
            "--cores",
            &cores.to_string(),
            "--cpuunits",
            "1024",
            "--memory",
            &memory.to_string(),
            "--swap",
            "0",
            "--rootfs",
            &format!("local-zfs:{disk}"),
            "--net0",
            &format!("name=veth0,bridge=vmbr0,hwaddr={mac},ip={ip},gw=192.168.7.1"),
            "--features",
            "nesting=1,fuse=0,keyctl=0",
            "--unprivileged",
            "1",
            "--onboot",
            "1",
            "--startup",
            "order=3,up=60,down=60",
            "--description",
            &format!("Managed by Terraform — {name}"),
            "--ostype",
            "ubuntu",
        ],
    );
    pve(data, "mk33", "pct", &["start", &vm_id.to_string()]);
}

const STATE: &str = r#"{"version": 4, "terraform_version": "1.9.8", "serial": 7, "lineage": "x", "outputs": {},
 "resources": [{"module": "module.dev_lxcs", "mode": "managed", "type": "proxmox_virtual_environment_container",
  "name": "lxc", "instances": [
   {"index_key": "dev-nextcloud", "attributes": {"vm_id": 2100, "node_name": "mk33",
    "network_interface": [{"name": "veth0", "bridge": "vmbr0", "mac_address": "BC:24:11:AA:21:00"}]}},
   {"index_key": "dev-vaultwarden", "attributes": {"vm_id": 2101, "node_name": "mk33",
    "network_interface": [{"name": "veth0", "bridge": "vmbr0", "mac_address": "BC:24:11:AA:21:01"}]}}]}]}"#;

/// Undoes bash's `$'...'` quoting of the `pct set` lines the import writes.
fn unquote(s: &str) -> String {
    let inner = s
        .strip_prefix("$'")
        .and_then(|s| s.strip_suffix('\''))
        .expect("$'...'");
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some(o) => out.push(o),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Plans until `done(plan JSON or error text)` holds (the agents report hand-made changes on their next
/// observation), at most two minutes; returns the last (exit code, stdout, stderr).
async fn plan_until(
    bins: &Binaries,
    config: &Path,
    fleet: &str,
    done: impl Fn(i32, &str, &str) -> bool,
) -> (i32, String, String) {
    let mut last = (0, String::new(), String::new());
    for _ in 0..120 {
        last = pxctl(bins, config, &["plan", fleet, "-o", "json"]).await;
        if done(last.0, &last.1, &last.2) {
            return last;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("the plan never got there: {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_imported_prd_dev_environment_takes_over_terraforms_containers_without_recreating_them()
{
    let bins = Binaries::locate().expect("binaries");
    let tmp = tempfile::Builder::new()
        .prefix("pxfleet-tfimport-")
        .tempdir()
        .unwrap();
    let data = tmp.path().join("dev");
    let err_log = tmp.path().join("dev.err");
    let (dev, config) = start_dev(&bins, &data, &err_log, 1).await;

    // Terraform's containers, already running on mk33 (not marked as pxfleet's).
    terraform_made(
        &data,
        (
            2100,
            "dev-nextcloud",
            4,
            4096,
            16,
            "192.168.7.100/24",
            "BC:24:11:AA:21:00",
        ),
    );
    terraform_made(
        &data,
        (
            2101,
            "dev-vaultwarden",
            2,
            2048,
            8,
            "192.168.7.101/24",
            "BC:24:11:AA:21:01",
        ),
    );
    let state = tmp.path().join("terraform.tfstate.json");
    std::fs::write(&state, STATE).unwrap();

    // The import, as a user runs it (the PRD's files, copied verbatim under crates/cli/tests/fixtures).
    let dir = workspace_root().join("crates/cli/tests/fixtures/prd-terraform/environments/dev");
    let out = tokio::process::Command::new(&bins.pxctl)
        .args(["import", "terraform"])
        .arg(&dir)
        .arg("--state")
        .arg(&state)
        .output()
        .await
        .unwrap();
    let yaml = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("proxxmox_node"), "{stderr}");
    let fleet = tmp.path().join("fleet.yaml");
    std::fs::write(&fleet, &yaml).unwrap();
    let fleet = fleet.to_str().unwrap();

    if yaml.contains("    adopt: true\n") {
        // This build has fleet.yaml's `adopt: true` (the import then uses it): the plan takes both over where
        // they are, as updates that write pxfleet's mark; never a create, replace or destroy.
        let (code, out, err) = plan_until(&bins, &config, fleet, |code, _, _| code == 0).await;
        assert_eq!(code, 0, "{err}");
        let plan: serde_json::Value = serde_json::from_str(&out).unwrap();
        for kind in ["create", "replace", "destroy", "move", "resize", "start"] {
            assert_eq!(plan["summary"][kind], 0, "{kind}: {out}");
        }
        let actions = plan["actions"].as_array().unwrap();
        assert_eq!(actions.len(), 2, "{out}");
        for a in actions {
            assert_eq!(a["action"], "update", "{out}");
            let fields: Vec<&str> = a["changes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["field"].as_str().unwrap())
                .collect();
            assert!(fields.contains(&"managed_by"), "{out}");
            // Each difference explained: the mark (managed_by, and the `pxfleet` tag and description line it
            // adds); nothing of what Terraform set differs.
            for f in &fields {
                assert!(
                    matches!(*f, "managed_by" | "tags" | "description"),
                    "unexpected change of {f}: {out}"
                );
            }
        }
    } else {
        // Unmarked, Terraform's containers hold the vm_ids: the plan refuses instead of creating duplicates.
        let (code, _, err) = plan_until(&bins, &config, fleet, |code, _, err| {
            code != 0 && err.contains("2100")
        })
        .await;
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("vm_id 2100 is already taken"), "{err}");

        // The takeover the import's header spells out (until `pxctl adopt` exists): mark each container.
        let marks: Vec<(String, String)> = yaml
            .lines()
            .filter_map(|l| l.strip_prefix("#   pct set "))
            .map(|l| {
                let (id, rest) = l.split_once(" --description ").unwrap();
                (id.to_string(), unquote(rest))
            })
            .collect();
        assert_eq!(marks.len(), 2, "{yaml}");
        for (id, description) in &marks {
            pve(
                &data,
                "mk33",
                "pct",
                &["set", id, "--description", description],
            );
        }

        // Now the plan takes them over: no create, replace or destroy; only the differences explained below.
        let (code, out, err) = plan_until(&bins, &config, fleet, |code, out, _| {
            code == 0 && out.contains("\"create\": 0")
        })
        .await;
        assert_eq!(code, 0, "{err}");
        let plan: serde_json::Value = serde_json::from_str(&out).unwrap();
        let s = &plan["summary"];
        for kind in ["create", "replace", "destroy", "move", "resize", "start"] {
            assert_eq!(s[kind], 0, "{kind}: {out}");
        }
        // Nothing to change: the file describes what Terraform made (net0's name veth0 imported as
        // `interface_name: veth0`).
        assert_eq!(plan["actions"], serde_json::json!([]), "{out}");
        let (code, _, err) = pxctl(&bins, &config, &["plan", fleet, "--detailed-exitcode"]).await;
        assert_eq!(code, 0, "{err}");
    }

    // Submitted, the fleet keeps Terraform's containers: same vm_ids, same MACs, nothing created.
    let (code, out, err) = pxctl(&bins, &config, &["submit", fleet, "-y"]).await;
    assert_eq!(code, 0, "submit: {out}\n{err}");
    let list = pve(&data, "mk33", "pct", &["list"]);
    let ids: Vec<&str> = list
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(ids, ["2100", "2101"], "{list}");
    let conf = pve(&data, "mk33", "pct", &["config", "2100"]);
    assert!(conf.contains("hwaddr=BC:24:11:AA:21:00"), "{conf}");
    let (code, _, err) = pxctl(&bins, &config, &["plan", fleet, "--detailed-exitcode"]).await;
    assert_eq!(code, 0, "{err}");

    // The comparison is real: the same file with more memory for one container plans exactly that update.
    let bigger = tmp.path().join("bigger.yaml");
    std::fs::write(&bigger, yaml.replacen("memory: 4096", "memory: 8192", 1)).unwrap();
    let (code, out, err) = pxctl(
        &bins,
        &config,
        &["plan", bigger.to_str().unwrap(), "-o", "json"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let plan: serde_json::Value = serde_json::from_str(&out).unwrap();
    let actions = plan["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 1, "{out}");
    assert_eq!(actions[0]["action"], "update", "{out}");
    assert_eq!(actions[0]["container"], "dev-nextcloud", "{out}");
    assert_eq!(actions[0]["changes"][0]["field"], "memory", "{out}");
    stop_dev(dev, &data, &err_log).await;
}
