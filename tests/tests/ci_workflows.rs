//! Review in pull requests (issue 14, item 3): the `plan` and `apply` steps of examples/ci's GitHub and Gitea
//! workflows, read from the workflow files (not copied) and run with bash as the runner would, against dev
//! mode: the plan step writes the markdown comment and the saved plan, the apply step submits exactly that
//! plan, and it is refused when the fleet moved in between (another submit).

// Test code: it starts the programs under test and the tools around them.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use pxfleet_spec::yaml::{self, Node, Value};
use pxfleet_tests::dev::{pxctl, start_dev, stop_dev};
use pxfleet_tests::{workspace_root, Binaries};

fn get<'a>(n: &'a Node, key: &str) -> Option<&'a Node> {
    match &n.value {
        Value::Map(es) => es.iter().find(|e| e.key == key).map(|e| &e.value),
        _ => None,
    }
}

fn text(n: &Node) -> Option<&str> {
    match &n.value {
        Value::Scalar { text, .. } => Some(text),
        _ => None,
    }
}

/// The `run:` script of the step with `id: STEP` in job `JOB` of a workflow file.
fn step_script(workflow: &Path, job: &str, step: &str) -> String {
    let src = std::fs::read_to_string(workflow).unwrap();
    let mut diags = Vec::new();
    let root = yaml::parse(&workflow.display().to_string(), &src, &mut diags)
        .unwrap_or_else(|| panic!("{} does not parse: {diags:?}", workflow.display()));
    let steps = get(&root, "jobs")
        .and_then(|j| get(j, job))
        .and_then(|j| get(j, "steps"))
        .unwrap_or_else(|| panic!("{}: no jobs.{job}.steps", workflow.display()));
    let Value::Seq(steps) = &steps.value else {
        panic!("steps is not a list")
    };
    steps
        .iter()
        .find(|s| get(s, "id").and_then(text) == Some(step))
        .and_then(|s| get(s, "run"))
        .and_then(text)
        .unwrap_or_else(|| panic!("{}: no step with id {step} and a run:", workflow.display()))
        .to_string()
}

/// Runs a step's script as the runner does (`bash -e`), in `dir`, with pxctl on PATH and dev mode's config.
async fn run_step(bins: &Binaries, config: &Path, dir: &Path, script: &str) -> (i32, String) {
    let path = format!(
        "{}:{}",
        bins.pxctl.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new("bash")
            .args(["-e", "-c", script])
            .current_dir(dir)
            .env("PATH", path)
            .env("FLEET_FILE", "fleet.yaml")
            .env("PXCTL_CONFIG", config)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the step finishes")
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn fleet(name: &str, vm_id: u32, memory: u32, cores: u32) -> String {
    format!(
        "fleet: {name}
containers:
  web:
    hostname: {name}-web
    node: mk33
    vm_id: {vm_id}
    memory: {memory}
    cores: {cores}
    template_url: https://cloud-images.ubuntu.com/releases/25.04/release/ubuntu-25.04-server-cloudimg-amd64-root.tar.xz
"
    )
}

async fn memory_of(bins: &Binaries, config: &Path, fleet: &str) -> u64 {
    let (code, out, err) = pxctl(
        bins,
        config,
        &["get", "containers", "--fleet", fleet, "-o", "json"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    rows[0]["memory_mib"]
        .as_u64()
        .or_else(|| rows[0]["memory"].as_u64())
        .unwrap_or_else(|| panic!("no memory in {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workflows_plan_comment_and_apply_the_saved_plan_refused_when_the_fleet_moved() {
    let bins = Binaries::locate().expect("binaries");
    let tmp = tempfile::Builder::new()
        .prefix("pxfleet-ci-")
        .tempdir()
        .unwrap();
    let data = tmp.path().join("dev");
    let err_log = tmp.path().join("dev.err");
    let (dev, config) = start_dev(&bins, &data, &err_log, 1).await;

    let root = workspace_root().join("examples/ci");
    for (i, (kind, file)) in [
        ("github", "github/pxfleet.yml"),
        ("gitea", "gitea/pxfleet.yaml"),
    ]
    .into_iter()
    .enumerate()
    {
        let wf = root.join(file);
        let plan = step_script(&wf, "plan", "plan");
        let apply = step_script(&wf, "apply", "apply");
        let name = format!("ci-{kind}");
        let vm_id = 3000 + i as u32;
        let repo = tmp.path().join(kind);
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::write(repo.join("fleet.yaml"), fleet(&name, vm_id, 1024, 1)).unwrap();

        // The pull request: the plan step writes the comment and the saved plan.
        let (code, out) = run_step(&bins, &config, &repo, &plan).await;
        assert_eq!(code, 0, "{kind} plan step: {out}");
        let comment = std::fs::read_to_string(repo.join("comment.md")).unwrap();
        assert!(
            comment.contains("#### pxfleet plan: `fleet.yaml`"),
            "{comment}"
        );
        assert!(comment.contains("web"), "{comment}");
        assert!(comment.contains("/pxfleet apply"), "{comment}");
        assert!(repo.join("plan.json").is_file());

        // Merged: the apply step submits the saved plan.
        let (code, out) = run_step(&bins, &config, &repo, &apply).await;
        assert_eq!(code, 0, "{kind} apply step: {out}");
        let log = std::fs::read_to_string(repo.join("apply.log")).unwrap();
        assert!(
            log.contains(&format!("Submitted fleet {name} revision 1")),
            "{log}"
        );
        assert_eq!(memory_of(&bins, &config, &name).await, 1024);

        // A second pull request is planned, then the fleet moves (someone submits another change) before it
        // is applied: the saved plan is refused and its change is not made.
        std::fs::write(repo.join("fleet.yaml"), fleet(&name, vm_id, 2048, 1)).unwrap();
        let (code, out) = run_step(&bins, &config, &repo, &plan).await;
        assert_eq!(code, 0, "{kind} plan step: {out}");
        let comment = std::fs::read_to_string(repo.join("comment.md")).unwrap();
        assert!(comment.contains("2048"), "{comment}");
        let other = tmp.path().join(format!("{kind}-other.yaml"));
        std::fs::write(&other, fleet(&name, vm_id, 1024, 2)).unwrap();
        let (code, out, err) =
            pxctl(&bins, &config, &["submit", other.to_str().unwrap(), "-y"]).await;
        assert_eq!(code, 0, "{out}\n{err}");
        let (code, out) = run_step(&bins, &config, &repo, &apply).await;
        assert_ne!(
            code, 0,
            "{kind}: the saved plan was applied although the fleet moved: {out}"
        );
        let log = std::fs::read_to_string(repo.join("apply.log")).unwrap();
        assert!(
            log.contains("revision") && log.contains(&name),
            "{kind}: the refusal should say the fleet's revision moved: {log}"
        );
        assert_eq!(memory_of(&bins, &config, &name).await, 1024, "{log}");
    }
    stop_dev(dev, &data, &err_log).await;
}
