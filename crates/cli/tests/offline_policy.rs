//! `pxctl plan --offline` evaluates the fleet's `policies:` in-process, as the controller does: results under
//! the plan, exit 1 on a denial, a broken policy named with its FILE:LINE:COL.

use pxfleet_cli::plan::{run_text, OutputFormat, PlanOptions};
use pxfleet_spec::MemFiles;

fn examples() -> MemFiles {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies");
    let mut files = MemFiles::default();
    for name in ["no-privileged.rego", "memory-ceiling.rego"] {
        files = files.with(
            format!("ops/policies/{name}"),
            std::fs::read_to_string(dir.join(name)).unwrap(),
        );
    }
    files
}

fn plan(text: &str, files: &MemFiles, output: OutputFormat) -> (u8, String, String) {
    let opts = PlanOptions {
        file: "ops/fleet.yaml".into(),
        offline: true,
        output,
        detailed_exitcode: false,
        colour: false,
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_text(&opts, text, files, &mut out, &mut err).unwrap();
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

const HEAD: &str = "fleet: dev\npolicies: [policies/no-privileged.rego, policies/memory-ceiling.rego]\nallow_privileged: true\ntemplates:\n  deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}\ncontainers:\n";

#[test]
fn offline_plans_show_policy_results_and_fail_on_a_denial() {
    let (code, out, err) = plan(
        &format!("{HEAD}  web: {{template: deb, memory: 2048}}\n"),
        &examples(),
        OutputFormat::Text,
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(
            "Policies (policies/no-privileged.rego, policies/memory-ceiling.rego): passed"
        ),
        "{out}"
    );

    let (code, out, err) = plan(
        &format!("{HEAD}  web: {{template: deb, memory: 2048, unprivileged: false}}\n"),
        &examples(),
        OutputFormat::Markdown,
    );
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("| **deny** | `policies/no-privileged.rego` | `deny_privileged` | web |"),
        "{out}"
    );
    assert!(err.contains("denied by its policies"), "{err}");

    // -o json: stdout stays the plan document, the results go to stderr.
    let (code, out, err) = plan(
        &format!("{HEAD}  web: {{template: deb, memory: 9000}}\n"),
        &examples(),
        OutputFormat::Json,
    );
    assert_eq!(code, 1);
    serde_json::from_str::<serde_json::Value>(&out).expect("stdout is the plan JSON");
    assert!(
        err.contains("deny: policies/memory-ceiling.rego: deny_memory: container web"),
        "{err}"
    );
}

#[test]
fn a_broken_or_missing_policy_is_an_error_with_its_place() {
    let files = examples().with(
        "ops/policies/broken.rego",
        "package b\n\ndeny contains x if {\n  x := \n}\n",
    );
    let (code, _, err) = plan(
        "fleet: dev\npolicies: [policies/broken.rego]\ntemplates:\n  deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}\ncontainers:\n  web: {template: deb}\n",
        &files,
        OutputFormat::Text,
    );
    assert_eq!(code, 1);
    assert!(err.starts_with("policies/broken.rego:4:"), "{err}");
    let (code, _, err) = plan(
        "fleet: dev\npolicies: [policies/nope.rego]\ncontainers: {}\n",
        &files,
        OutputFormat::Text,
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("ops/fleet.yaml:2:12: policies.0: cannot read policy ops/policies/nope.rego"),
        "{err}"
    );
}
