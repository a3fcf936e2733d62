//! The fleet's `policies:` (Rego, sent by pxctl with the fleet like `file:` SSH keys) evaluated against the
//! fleet and the plan document, at plan and at submit: a denial refuses the submit before anything is stored,
//! so nothing is applied.

use pxfleet_policy::{evaluate, Level, Policy, PolicyError};
use pxfleet_spec::plan::Plan;
use pxfleet_spec::{Diagnostic, Fleet, MemFiles};

/// What the fleet's policies found: the policies evaluated and their findings (warnings and denials).
pub use pxfleet_policy::Outcome as PolicyReport;

/// `None` when the fleet names no policy.
pub fn check(
    file_name: &str,
    source: &str,
    files: &MemFiles,
    fleet: &Fleet,
    plan: &Plan,
) -> Result<Option<PolicyReport>, Vec<Diagnostic>> {
    let name = if file_name.is_empty() {
        "fleet.yaml"
    } else {
        file_name
    };
    let policies = pxfleet_spec::read_policies(name, source, files).map_err(|d| d.0)?;
    if policies.is_empty() {
        return Ok(None);
    }
    let input = pxfleet_policy::input(
        serde_json::to_value(fleet).unwrap_or_default(),
        serde_json::from_str(&pxfleet_spec::render::json::render(plan)).unwrap_or_default(),
    );
    let list: Vec<Policy> = policies
        .iter()
        .map(|p| Policy {
            path: p.path.clone(),
            source: p.source.clone(),
        })
        .collect();
    match evaluate(&list, &input) {
        Ok(out) => Ok(Some(out)),
        Err(e) => {
            let (file, line, column) = match &e {
                PolicyError::Invalid {
                    policy,
                    line,
                    column,
                    ..
                } => (policy.clone(), *line, *column),
                PolicyError::Eval { policy, .. } => (policy.clone(), 0, 0),
            };
            // Also say where the fleet names the policy.
            let named = policies
                .iter()
                .find(|p| p.path == file)
                .map(|p| format!(" (named at {name}:{}:{})", p.line, p.column))
                .unwrap_or_default();
            let message = match &e {
                PolicyError::Invalid { message, .. } => {
                    format!("policy does not compile: {message}{named}")
                }
                PolicyError::Eval { message, .. } => {
                    format!("policy evaluation failed: {message}{named}")
                }
            };
            Err(vec![Diagnostic {
                file,
                line,
                column,
                path: "policies".into(),
                message,
                hint: None,
            }])
        }
    }
}

/// Denials as diagnostics (the submit's refusal): each names the policy, the rule and the container.
pub fn denials(report: &PolicyReport) -> Vec<Diagnostic> {
    report
        .findings
        .iter()
        .filter(|f| f.level == Level::Deny)
        .map(|f| {
            let container = f.container.as_deref().unwrap_or_default();
            Diagnostic {
                file: f.policy.clone(),
                line: 0,
                column: 0,
                path: if container.is_empty() {
                    "policies".into()
                } else {
                    format!("containers.{container}")
                },
                message: format!(
                    "denied by policy {} (rule {}){}: {}",
                    f.policy,
                    f.rule,
                    if container.is_empty() {
                        String::new()
                    } else {
                        format!(", container {container}")
                    },
                    f.message
                ),
                hint: None,
            }
        })
        .collect()
}
