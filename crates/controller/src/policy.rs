//! Policies as code. The fleet's `policies:` (Rego, sent by pxctl with the fleet like `file:` SSH keys) are
//! evaluated against the fleet and the plan document at plan and at submit: a denial refuses the submit before
//! anything is stored, so nothing is applied. An admin's policies (`pxctl policy add`, kept in the store) are
//! evaluated on every submit (and its plan), destroy, start, stop and restart, whatever the file says and
//! whoever asks, with the action and the caller in their input.

use pxfleet_policy::{evaluate, Level, Policy, PolicyError};
use pxfleet_spec::plan::Plan;
use pxfleet_spec::{Diagnostic, Fleet, MemFiles};
use pxfleet_tls::Identity;

use crate::error::{Error, Result};
use crate::model::AuditEntry;
use crate::state::State;
use crate::store::AdminPolicy;

/// What the fleet's policies found: the policies evaluated and their findings (warnings and denials).
pub use pxfleet_policy::Outcome as PolicyReport;

/// `None` when the fleet names no policy.
pub fn check(
    file_name: &str,
    source: &str,
    files: &MemFiles,
    fleet: &Fleet,
    plan: &Plan,
) -> std::result::Result<Option<PolicyReport>, Vec<Diagnostic>> {
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

/// The name an admin policy has in findings and denials: `admin:NAME`, apart from the fleet's own files.
pub fn admin_path(name: &str) -> String {
    format!("admin:{name}")
}

/// The largest admin policy accepted (a Rego module is a few KiB).
pub const MAX_ADMIN_POLICY_BYTES: usize = 256 * 1024;

/// What an admin policy is asked about: `input.action` (submit, destroy, start, stop, restart; an adopt is a
/// submit whose plan has `adopt` actions), `input.user`, `input.fleet` (the fleet as it would be stored; for a
/// destroy, as it is), `input.plan` and `input.containers` (the containers the action names; every one of
/// the fleet for a submit).
pub struct AdminRequest<'a> {
    pub action: &'a str,
    pub user: &'a Identity,
    pub fleet: &'a Fleet,
    pub plan: &'a Plan,
    pub containers: Vec<String>,
}

fn user_json(id: &Identity) -> serde_json::Value {
    match id {
        Identity::User { name, role, fleets } => serde_json::json!({
            "identity": id.uri(), "kind": "user", "name": name, "role": role.as_str(), "fleets": fleets,
        }),
        Identity::Node(name) => {
            serde_json::json!({"identity": id.uri(), "kind": "node", "name": name, "role": "node", "fleets": []})
        }
    }
}

fn admin_input(r: &AdminRequest<'_>) -> serde_json::Value {
    let mut v = pxfleet_policy::input(
        serde_json::to_value(r.fleet).unwrap_or_default(),
        serde_json::from_str(&pxfleet_spec::render::json::render(r.plan)).unwrap_or_default(),
    );
    if let Some(m) = v.as_object_mut() {
        m.insert("action".into(), r.action.into());
        m.insert("user".into(), user_json(r.user));
        m.insert("containers".into(), r.containers.clone().into());
    }
    v
}

fn as_policies(installed: &[AdminPolicy]) -> Vec<Policy> {
    installed
        .iter()
        .map(|p| Policy {
            path: admin_path(&p.name),
            source: p.source.clone(),
        })
        .collect()
}

/// The admin's policies on `r`: `None` when none is installed. A policy that fails to evaluate refuses the
/// action (a guard rail that cannot be read is not passed silently) and says an admin must fix it.
pub fn admin_check(state: &State, r: &AdminRequest<'_>) -> Result<Option<PolicyReport>> {
    let installed = state.store.policies()?;
    if installed.is_empty() {
        return Ok(None);
    }
    evaluate(&as_policies(&installed), &admin_input(r))
        .map(Some)
        .map_err(|e| {
            Error::FailedPrecondition(format!(
                "{e}; an admin must fix or remove the policy (`pxctl policy add NAME FILE`, `pxctl policy remove NAME`)"
            ))
        })
}

/// Refuses `r` when an admin policy denies it, naming each policy, rule and container.
pub fn admin_gate(state: &State, r: &AdminRequest<'_>) -> Result<()> {
    let Some(report) = admin_check(state, r)? else {
        return Ok(());
    };
    if !report.denied() {
        return Ok(());
    }
    let reasons: Vec<String> = denials(&report).into_iter().map(|d| d.message).collect();
    tracing::info!(fleet = %r.fleet.name, action = r.action, "refused by an admin policy");
    Err(Error::PermissionDenied(format!(
        "{} of fleet {} refused: {}",
        r.action,
        r.fleet.name,
        reasons.join("; ")
    )))
}

/// Adds the admin policies' findings to the fleet's own (`None` when neither has any policy).
pub fn merge(own: Option<PolicyReport>, admin: Option<PolicyReport>) -> Option<PolicyReport> {
    match (own, admin) {
        (Some(mut a), Some(b)) => {
            a.policies.extend(b.policies);
            a.findings.extend(b.findings);
            Some(a)
        }
        (a, b) => a.or(b),
    }
}

/// `pxctl policy add NAME FILE`: installs (or replaces) an admin policy once it compiles and evaluates on an
/// empty fleet; audit-logged.
pub async fn install(
    state: &State,
    by: Option<&Identity>,
    name: &str,
    source: &str,
) -> Result<AdminPolicy> {
    if !pxfleet_spec::syntax::is_fleet_name(name) {
        return Err(Error::InvalidArgument(format!(
            "{name:?} is not a policy name (lower-case letters, digits and '-', at most 63)"
        )));
    }
    if source.len() > MAX_ADMIN_POLICY_BYTES {
        return Err(Error::InvalidArgument(format!(
            "policy {name} is {} bytes; at most {MAX_ADMIN_POLICY_BYTES} are accepted",
            source.len()
        )));
    }
    let p = AdminPolicy {
        name: name.to_string(),
        source: source.to_string(),
        installed_by: crate::certs::actor(by),
        installed_ms: state.now_ms(),
    };
    let empty = Fleet {
        name: "check".into(),
        allow_privileged: false,
        templates: Default::default(),
        containers: Default::default(),
        hooks: vec![],
        spans: Default::default(),
    };
    let nobody = Identity::Node(String::new());
    let probe = AdminRequest {
        action: "submit",
        user: by.unwrap_or(&nobody),
        fleet: &empty,
        plan: &Plan::new("check", vec![]),
        containers: vec![],
    };
    evaluate(&as_policies(std::slice::from_ref(&p)), &admin_input(&probe))
        .map_err(|e| Error::InvalidArgument(format!("{e}; nothing was installed")))?;
    state.store.put_policy(&p)?;
    state.store.audit(&AuditEntry {
        time_ms: state.now_ms(),
        actor: p.installed_by.clone(),
        action: "install_policy".into(),
        target: admin_path(name),
        detail: format!("{} bytes, sha256 {}", source.len(), p.sha256()),
    })?;
    state.store.flush().await?;
    Ok(p)
}

/// `pxctl policy remove NAME`; audit-logged.
pub async fn remove(state: &State, by: Option<&Identity>, name: &str) -> Result<AdminPolicy> {
    let p = state.store.remove_policy(name)?.ok_or_else(|| {
        Error::NotFound(format!(
            "there is no policy {name}; `pxctl policy list` shows the installed ones"
        ))
    })?;
    state.store.audit(&AuditEntry {
        time_ms: state.now_ms(),
        actor: crate::certs::actor(by),
        action: "remove_policy".into(),
        target: admin_path(name),
        detail: String::new(),
    })?;
    state.store.flush().await?;
    Ok(p)
}
