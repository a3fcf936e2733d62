//! The example policies (examples/policies/*.rego) against fleets that pass and fleets that break each rule.

use pxfleet_policy::{evaluate, Level, Policy};
use serde_json::{json, Value};

fn examples() -> Vec<Policy> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies");
    let mut out: Vec<Policy> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rego"))
        .map(|p| Policy {
            path: p.file_name().unwrap().to_string_lossy().into_owned(),
            source: std::fs::read_to_string(&p).unwrap(),
        })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(
        out.len(),
        4,
        "{:?}",
        out.iter().map(|p| &p.path).collect::<Vec<_>>()
    );
    out
}

fn container(memory: u64, unprivileged: bool, datastore: &str, tags: &[&str]) -> Value {
    json!({"memory": memory, "unprivileged": unprivileged, "datastore_id": datastore, "tags": tags,
           "mount_points": []})
}

fn input(name: &str, containers: Value) -> Value {
    json!({"fleet": {"name": name, "containers": containers}, "plan": {"actions": []}})
}

fn denials(out: &pxfleet_policy::Outcome) -> Vec<(String, String, Option<String>)> {
    out.denials()
        .iter()
        .map(|f| (f.policy.clone(), f.rule.clone(), f.container.clone()))
        .collect()
}

#[test]
fn a_fleet_within_every_policy_passes() {
    let out = evaluate(
        &examples(),
        &input(
            "dev",
            json!({"web": container(2048, true, "local-zfs", &["dev", "web"])}),
        ),
    )
    .unwrap();
    assert_eq!(out.policies.len(), 4);
    assert!(out.findings.is_empty(), "{:?}", out.findings);
}

#[test]
fn each_policy_denies_what_it_is_for_and_names_the_container() {
    let out = evaluate(
        &examples(),
        &input(
            "dev",
            json!({
                "root": container(1024, false, "local-zfs", &["dev", "x"]),
                "big": container(12288, true, "local-zfs", &["dev", "x"]),
                "nfs": container(1024, true, "nfs-share", &["dev", "x"]),
                "bare": container(1024, true, "local-lvm", &["web"]),
            }),
        ),
    )
    .unwrap();
    let d = denials(&out);
    let has = |policy: &str, rule: &str, c: Option<&str>| {
        d.iter()
            .any(|(p, r, n)| p == policy && r == rule && n.as_deref() == c)
    };
    assert!(
        has("no-privileged.rego", "deny_privileged", Some("root")),
        "{d:?}"
    );
    assert!(
        has("memory-ceiling.rego", "deny_memory", Some("big")),
        "{d:?}"
    );
    assert!(
        has("allowed-datastores.rego", "deny_datastore", Some("nfs")),
        "{d:?}"
    );
    assert!(
        has("required-tags.rego", "deny_tags", Some("bare")),
        "{d:?}"
    );
    assert_eq!(d.len(), 4, "{d:?}");
    // The ceiling depends on the fleet: 12 GiB is fine in prod.
    let out = evaluate(
        &examples(),
        &input(
            "prod",
            json!({"big": container(12288, true, "local-zfs", &["prod", "db"])}),
        ),
    )
    .unwrap();
    assert!(!out.denied(), "{:?}", out.findings);
    // A container with only the fleet tag gets a warning, not a denial.
    let out = evaluate(
        &examples(),
        &input(
            "dev",
            json!({"a": container(512, true, "local-zfs", &["dev"])}),
        ),
    )
    .unwrap();
    assert!(!out.denied());
    assert!(out
        .findings
        .iter()
        .any(|f| f.level == Level::Warn && f.rule == "warn_tags"));
}

#[test]
fn the_fleet_total_has_a_ceiling_too() {
    let containers: serde_json::Map<String, Value> = (0..3)
        .map(|i| {
            (
                format!("c{i}"),
                container(8000, true, "local-zfs", &["dev", "x"]),
            )
        })
        .collect();
    let out = evaluate(&examples(), &input("dev", Value::Object(containers))).unwrap();
    let d = denials(&out);
    assert!(
        d.iter()
            .any(|(p, r, c)| p == "memory-ceiling.rego" && r == "deny_fleet_memory" && c.is_none()),
        "{d:?}"
    );
}
