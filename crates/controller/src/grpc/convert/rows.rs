//! Rows of the listings that are no operation of an agent's: hook runs and results, audit records, containers
//! without pxfleet's mark, certificates.

use pxfleet_proto::v1 as pb;

use crate::hooks::runs::HookRun;
use crate::model::ObservedContainer;

/// A hook run as a row of `GetOperations` (kind `hook`).
pub fn hook_run_info(run: &HookRun) -> pb::OperationInfo {
    let r = &run.result;
    let state = match r.status.as_str() {
        "succeeded" => pb::OperationState::Succeeded,
        "failed" => pb::OperationState::Failed,
        _ => pb::OperationState::Running,
    };
    let message = match r.status.as_str() {
        "retrying" => format!(
            "attempt {}/{} failed, will retry",
            r.attempts, r.max_attempts
        ),
        "running" => format!("attempt {}/{}", r.attempts.max(1), r.max_attempts),
        _ => r.detail.clone(),
    };
    pb::OperationInfo {
        op_id: run.id(),
        fleet: r.fleet.clone(),
        container: r.container.clone(),
        vm_id: run.vm_id,
        node: run.node.clone(),
        kind: pb::OperationKind::Hook as i32,
        state: state as i32,
        attempts: r.attempts,
        created_unix_ms: run.started_ms,
        updated_unix_ms: r.last_attempt_ms,
        deadline_unix_ms: 0,
        message,
        error: r.error.clone(),
        reason: format!("hook {} on {}", r.hook, r.event),
        snapshots: Vec::new(),
    }
}

/// A hook's last result for `describe container`.
pub fn hook_result_pb(r: &crate::hooks::HookResult) -> pb::HookResult {
    pb::HookResult {
        hook: r.hook.clone(),
        event: r.event.as_str().into(),
        status: r.status.clone(),
        attempts: r.attempts,
        max_attempts: r.max_attempts,
        last_attempt_unix_ms: r.last_attempt_ms,
        error: r.error.clone(),
        detail: r.detail.clone(),
    }
}

/// An audit entry as `GetAudit` lists it.
pub fn audit_record_pb(e: crate::model::AuditEntry) -> pb::AuditRecord {
    pb::AuditRecord {
        unix_ms: e.time_ms as i64,
        actor: e.actor,
        action: e.action,
        target: e.target,
        detail: e.detail,
    }
}

/// A container without pxfleet's mark as `GetUnmanaged` lists it (its configuration in fleet terms as JSON, what
/// `pxctl adopt` writes into the file).
pub fn unmanaged_pb(o: &ObservedContainer) -> pb::UnmanagedContainer {
    pb::UnmanagedContainer {
        node: o.node.clone(),
        vm_id: o.vm_id,
        hostname: o.hostname.clone(),
        running: o.running,
        lock: o.lock.clone().unwrap_or_default(),
        config_json: o
            .config
            .as_ref()
            .and_then(|c| serde_json::to_string(c).ok())
            .unwrap_or_default(),
    }
}

/// One row of `pxctl user list`.
pub fn certificate_info(rec: &crate::store::SerialRecord) -> pb::CertificateInfo {
    let identity = pxfleet_tls::Identity::parse(&rec.subject).ok();
    let (kind, name, role, fleets) = match &identity {
        Some(pxfleet_tls::Identity::Node(n)) => ("node", n.clone(), String::new(), Vec::new()),
        Some(pxfleet_tls::Identity::User { name, role, fleets }) => (
            "user",
            name.clone(),
            match role {
                pxfleet_tls::Role::Admin => "admin",
                pxfleet_tls::Role::Operator => "operator",
                pxfleet_tls::Role::Viewer => "viewer",
            }
            .to_string(),
            fleets.clone(),
        ),
        None => ("", String::new(), String::new(), Vec::new()),
    };
    pb::CertificateInfo {
        serial: rec.serial.clone(),
        identity: rec.subject.clone(),
        kind: kind.into(),
        name,
        role,
        fleets,
        issued_unix_ms: rec.issued_ms as i64,
        not_after_unix_ms: rec.not_after_ms as i64,
        revoked: rec.revoked,
    }
}
