//! Reading the audit trail (`FleetService.GetAudit`, `pxctl audit`). Every state-changing call and every read of
//! secrets writes an [`AuditEntry`] (who, what, to what, when) into the store's `audit` tree: submits, destroys,
//! start/stop/restart, `output --show-sensitive`, join tokens, enrolments, cordons, user certificates issued and
//! certificates revoked. Only admins may read it: it names every identity and what each did on every fleet.

use crate::model::AuditEntry;
use crate::store::{Store, StoreError};

/// The most entries one call returns when the request gives no limit.
pub const DEFAULT_LIMIT: usize = 1000;

/// Actions whose target is a node or a certificate, never a fleet (so `--fleet` never shows them, even when a
/// node and a fleet share a name).
const NOT_FLEET_ACTIONS: &[&str] = &[
    "create_join_token",
    "enroll",
    "cordon",
    "uncordon",
    "issue_user_certificate",
    "revoke_certificate",
];

/// Whether `e` is about fleet `fleet`.
pub fn is_about_fleet(e: &AuditEntry, fleet: &str) -> bool {
    e.target == fleet
        && !NOT_FLEET_ACTIONS.contains(&e.action.as_str())
        && !e.action.contains("cert")
        && !e.action.contains("token")
}

/// The entries since `since_ms` (Unix ms), about `fleet` when not empty, oldest first: at most `limit` (0: the
/// default [`DEFAULT_LIMIT`]), the newest.
pub fn entries(
    store: &Store,
    fleet: &str,
    since_ms: u64,
    limit: usize,
) -> Result<Vec<AuditEntry>, StoreError> {
    let mut all: Vec<AuditEntry> = store
        .audit_log()?
        .into_iter()
        .filter(|e| e.time_ms >= since_ms)
        .filter(|e| fleet.is_empty() || is_about_fleet(e, fleet))
        .collect();
    let limit = if limit == 0 { DEFAULT_LIMIT } else { limit };
    if all.len() > limit {
        all.drain(..all.len() - limit);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(t: u64, action: &str, target: &str) -> AuditEntry {
        AuditEntry {
            time_ms: t,
            actor: "pxfleet://user/admin?role=admin".into(),
            action: action.into(),
            target: target.into(),
            detail: String::new(),
        }
    }

    #[test]
    fn filters_by_fleet_time_and_limit_oldest_first() {
        let s = Store::temporary().unwrap();
        for e in [
            entry(1, "submit", "dev"),
            entry(2, "cordon", "dev"),
            entry(3, "output_sensitive", "dev"),
            entry(4, "submit", "prod"),
            entry(5, "stop", "dev"),
        ] {
            s.audit(&e).unwrap();
        }
        let got = |fleet: &str, since: u64, limit: usize| {
            entries(&s, fleet, since, limit)
                .unwrap()
                .into_iter()
                .map(|e| format!("{}:{}", e.time_ms, e.action))
                .collect::<Vec<_>>()
        };
        assert_eq!(got("", 0, 0).len(), 5);
        // the node dev's cordon is not about the fleet dev
        assert_eq!(
            got("dev", 0, 0),
            vec!["1:submit", "3:output_sensitive", "5:stop"]
        );
        assert_eq!(got("dev", 3, 0), vec!["3:output_sensitive", "5:stop"]);
        assert_eq!(got("", 0, 2), vec!["4:submit", "5:stop"]);
    }
}
