//! Policy as code (issue 14, item 2) in dev mode: the example policies (examples/policies) named under
//! `policies:`; `pxctl plan` shows their results, the controller refuses a denied submit and nothing is
//! stored or applied, a broken policy is an error naming its file, line and column.

use std::path::Path;

use pxfleet_tests::dev::{pxctl, start_dev, stop_dev};
use pxfleet_tests::{workspace_root, Binaries};

const HEAD: &str = "fleet: dev
policies: [policies/no-privileged.rego, policies/memory-ceiling.rego, policies/allowed-datastores.rego, policies/required-tags.rego]
defaults:
  node: mk33
  datastore_id: local-zfs
  template_url: https://cloud-images.ubuntu.com/releases/25.04/release/ubuntu-25.04-server-cloudimg-amd64-root.tar.xz
  tags: [dev, app]
";

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_gate_plan_and_submit_and_a_denied_submit_changes_nothing() {
    let bins = Binaries::locate().expect("binaries");
    let tmp = tempfile::Builder::new()
        .prefix("pxfleet-policy-")
        .tempdir()
        .unwrap();
    let data = tmp.path().join("dev");
    let err_log = tmp.path().join("dev.err");
    let (dev, config) = start_dev(&bins, &data, &err_log, 1).await;
    let work = tmp.path().join("repo");
    std::fs::create_dir_all(work.join("policies")).unwrap();
    for e in std::fs::read_dir(workspace_root().join("examples/policies")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rego") {
            std::fs::copy(&p, work.join("policies").join(p.file_name().unwrap())).unwrap();
        }
    }

    // Denied: one container too big for the dev fleet, one privileged.
    let denied = write(
        &work,
        "denied.yaml",
        &format!(
            "{HEAD}allow_privileged: true\ncontainers:\n  big: {{memory: 12288}}\n  root: {{unprivileged: false}}\n"
        ),
    );
    let (code, out, err) = pxctl(&bins, &config, &["plan", &denied]).await;
    assert_eq!(code, 1, "a denied plan fails: {out}\n{err}");
    assert!(out.contains("Policies ("), "{out}");
    assert!(out.contains("DENIED"), "{out}");
    assert!(
        out.contains(
            "deny: policies/memory-ceiling.rego: deny_memory: container big: memory 12288 MiB"
        ),
        "{out}"
    );
    assert!(
        out.contains("deny: policies/no-privileged.rego: deny_privileged: container root"),
        "{out}"
    );
    let (code, out, err) = pxctl(&bins, &config, &["plan", &denied, "-o", "markdown"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(out.contains("### Policies: DENIED"), "{out}");
    assert!(
        out.contains("| **deny** | `policies/memory-ceiling.rego` | `deny_memory` | big |"),
        "{out}"
    );

    // The controller refuses the submit itself: nothing stored, nothing created.
    let (code, out, err) = pxctl(&bins, &config, &["submit", &denied, "-y"]).await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        err.contains(
            "denied by policy policies/memory-ceiling.rego (rule deny_memory), container big"
        ),
        "{err}"
    );
    assert!(
        err.contains(
            "denied by policy policies/no-privileged.rego (rule deny_privileged), container root"
        ),
        "{err}"
    );
    let (code, out, err) = pxctl(&bins, &config, &["get", "containers", "-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap(),
        serde_json::json!([]),
        "{out}"
    );
    let (_, out, _) = pxctl(&bins, &config, &["history", "dev"]).await;
    assert!(!out.contains("submit"), "no revision was stored: {out}");
    let env = [(
        "PVESIM_STATE".to_string(),
        data.join("nodes/mk33/sim").display().to_string(),
    )]
    .into();
    let list = pxfleet_pvesim::run("pct", &["list".into()], &env);
    assert_eq!(list.stdout.lines().count(), 0, "{}", list.stdout);

    // Allowed: the same fleet within the policies plans (results shown) and submits.
    let allowed = write(
        &work,
        "fleet.yaml",
        &format!(
            "{HEAD}containers:\n  web: {{memory: 2048}}\n  cache: {{memory: 1024, tags: [dev]}}\n"
        ),
    );
    let (code, out, err) = pxctl(&bins, &config, &["plan", &allowed]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("Policies (policies/no-privileged.rego, policies/memory-ceiling.rego, policies/allowed-datastores.rego, policies/required-tags.rego): passed with 1 warning(s)"), "{out}");
    assert!(
        out.contains("warn: policies/required-tags.rego: warn_tags: container cache"),
        "{out}"
    );
    let (code, out, err) = pxctl(&bins, &config, &["submit", &allowed, "-y"]).await;
    assert_eq!(code, 0, "{out}\n{err}");

    // A broken policy: a clear error with its file, line and column, and where the fleet names it.
    std::fs::write(
        work.join("policies/broken.rego"),
        "package broken\n\ndeny contains msg if {\n  msg := \n}\n",
    )
    .unwrap();
    let broken = write(
        &work,
        "broken.yaml",
        &format!(
            "{}containers:\n  web: {{memory: 2048}}\n",
            HEAD.replace(
                "policies/required-tags.rego]",
                "policies/required-tags.rego, policies/broken.rego]"
            )
        ),
    );
    let (code, out, err) = pxctl(&bins, &config, &["plan", &broken]).await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        err.contains("policies/broken.rego:4:7: policies: policy does not compile: expecting `}`"),
        "{err}"
    );
    assert!(err.contains("named at"), "{err}");
    stop_dev(dev, &data, &err_log).await;
}
