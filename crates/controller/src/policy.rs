//! The fleet's `policies:` (Rego, sent by pxctl with the fleet like `file:` SSH keys) evaluated against the
//! fleet and the plan document, at plan and at submit: a denial refuses the submit before anything is stored,
//! so nothing is applied.

use pxfleet_policy::{evaluate, Level, Policy, PolicyError};
use pxfleet_proto::v1 as pb;
use pxfleet_spec::plan::Plan;
use pxfleet_spec::{Fleet, MemFiles};

/// `None` when the fleet names no policy.
pub fn check(
    file_name: &str,
    source: &str,
    files: &MemFiles,
    fleet: &Fleet,
    plan: &Plan,
) -> Result<Option<pb::PolicyReport>, Vec<pb::Diagnostic>> {
    let name = if file_name.is_empty() {
        "fleet.yaml"
    } else {
        file_name
    };
    let policies = pxfleet_spec::read_policies(name, source, files).map_err(|d| {
        d.iter()
            .map(crate::convert::diagnostic_pb)
            .collect::<Vec<_>>()
    })?;
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
        Ok(out) => Ok(Some(pb::PolicyReport {
            policies: out.policies,
            findings: out
                .findings
                .into_iter()
                .map(|f| pb::PolicyFinding {
                    deny: f.level == Level::Deny,
                    policy: f.policy,
                    rule: f.rule,
                    container: f.container.unwrap_or_default(),
                    message: f.message,
                })
                .collect(),
        })),
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
            Err(vec![pb::Diagnostic {
                severity: pb::Severity::Error as i32,
                message,
                file,
                line,
                column,
                field: "policies".into(),
            }])
        }
    }
}

/// Denials as diagnostics (the submit's refusal): each names the policy, the rule and the container.
pub fn denials(report: &pb::PolicyReport) -> Vec<pb::Diagnostic> {
    report
        .findings
        .iter()
        .filter(|f| f.deny)
        .map(|f| pb::Diagnostic {
            severity: pb::Severity::Error as i32,
            message: format!(
                "denied by policy {} (rule {}){}: {}",
                f.policy,
                f.rule,
                if f.container.is_empty() {
                    String::new()
                } else {
                    format!(", container {}", f.container)
                },
                f.message
            ),
            file: f.policy.clone(),
            line: 0,
            column: 0,
            field: if f.container.is_empty() {
                "policies".into()
            } else {
                format!("containers.{}", f.container)
            },
        })
        .collect()
}
