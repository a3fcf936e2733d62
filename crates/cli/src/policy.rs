//! Showing the controller's policy results (`policies:` in fleet.yaml) under a plan: text, markdown (for the
//! pull-request comment), or on stderr next to JSON (whose stdout stays the plan document).

use pxfleet_proto::v1 as pb;

use crate::plan::OutputFormat;

/// Whether any finding denies.
pub fn denied(r: &pb::PolicyReport) -> bool {
    r.findings.iter().any(|f| f.deny)
}

fn line(f: &pb::PolicyFinding) -> String {
    let mut s = format!("{}: {}: ", f.policy, f.rule);
    if !f.container.is_empty() {
        s.push_str(&format!("container {}: ", f.container));
    }
    s.push_str(&f.message);
    s
}

/// The report as text or markdown.
pub fn render(r: &pb::PolicyReport, format: OutputFormat) -> String {
    let denies = r.findings.iter().filter(|f| f.deny).count();
    let warns = r.findings.len() - denies;
    let verdict = if denies > 0 {
        format!("DENIED ({denies} denial(s), {warns} warning(s)): submitting this fleet is refused")
    } else if warns > 0 {
        format!("passed with {warns} warning(s)")
    } else {
        "passed".to_string()
    };
    let mut out = String::new();
    match format {
        OutputFormat::Markdown => {
            out.push_str(&format!(
                "\n### Policies: {verdict}\n\nEvaluated: {}\n",
                r.policies
                    .iter()
                    .map(|p| format!("`{p}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            if !r.findings.is_empty() {
                out.push_str(
                    "\n| result | policy | rule | container | message |\n|---|---|---|---|---|\n",
                );
                for f in &r.findings {
                    out.push_str(&format!(
                        "| {} | `{}` | `{}` | {} | {} |\n",
                        if f.deny { "**deny**" } else { "warn" },
                        f.policy,
                        f.rule,
                        if f.container.is_empty() {
                            ""
                        } else {
                            &f.container
                        },
                        f.message.replace('|', "\\|")
                    ));
                }
            }
        }
        _ => {
            out.push_str(&format!(
                "\nPolicies ({}): {verdict}\n",
                r.policies.join(", ")
            ));
            for f in &r.findings {
                out.push_str(&format!(
                    "  {} {}\n",
                    if f.deny { "deny:" } else { "warn:" },
                    line(f)
                ));
            }
        }
    }
    out
}

/// Evaluates the policies `text` names (read through `files`) against `fleet` and `plan` in-process, as the
/// controller does: `pxctl plan --offline`. `Ok(None)` when the fleet names none; `Err` holds the error lines.
pub fn evaluate_local(
    file_name: &str,
    text: &str,
    files: &dyn pxfleet_spec::FileSource,
    fleet: &pxfleet_spec::Fleet,
    plan: &pxfleet_spec::plan::Plan,
) -> Result<Option<pb::PolicyReport>, Vec<String>> {
    let policies = pxfleet_spec::read_policies(file_name, text, files).map_err(|d| {
        d.to_string()
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    })?;
    if policies.is_empty() {
        return Ok(None);
    }
    let input = pxfleet_policy::input(
        serde_json::to_value(fleet).unwrap_or_default(),
        serde_json::from_str(&pxfleet_spec::render::json::render(plan)).unwrap_or_default(),
    );
    let list: Vec<pxfleet_policy::Policy> = policies
        .iter()
        .map(|p| pxfleet_policy::Policy {
            path: p.path.clone(),
            source: p.source.clone(),
        })
        .collect();
    let out = pxfleet_policy::evaluate(&list, &input).map_err(|e| vec![format!("{e}")])?;
    Ok(Some(pb::PolicyReport {
        policies: out.policies,
        findings: out
            .findings
            .into_iter()
            .map(|f| pb::PolicyFinding {
                deny: f.level == pxfleet_policy::Level::Deny,
                policy: f.policy,
                rule: f.rule,
                container: f.container.unwrap_or_default(),
                message: f.message,
            })
            .collect(),
    }))
}
