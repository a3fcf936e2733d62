//! The operation history of hooks: every run of a hook (one per hook, event and container lifetime, updated
//! at each attempt) is kept in the store's `hook_runs` tree, ordered by the time it started, and listed by
//! `GetOperations` (`pxctl get operations`) next to the operations the agents ran, as kind `hook`. Unlike the
//! per-container results that `pxctl describe container` shows (cleared when a container starts a new life or
//! is destroyed), runs stay for [`KEEP_MS`], at most [`MAX_RUNS`] of them, so that a destroyed hook's run can
//! still be looked up after the container is gone.

use pxfleet_spec::hooks::HookContext;
use serde::{Deserialize, Serialize};

use crate::hooks::HookResult;
use crate::model::Millis;
use crate::state::State;
use crate::store::StoreError;

/// How long a finished run stays in the history (the same week as finished operations).
pub const KEEP_MS: u64 = 7 * 24 * 3_600_000;
/// Most runs kept; beyond this the oldest go first.
pub const MAX_RUNS: usize = 50_000;

/// One run of one hook for one container event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookRun {
    pub node: String,
    pub vm_id: u32,
    pub started_ms: i64,
    pub result: HookResult,
}

impl HookRun {
    /// Still attempting (the first attempt, or waiting for a retry).
    pub fn is_active(&self) -> bool {
        matches!(self.result.status.as_str(), "running" | "retrying")
    }

    /// A stable id for the listing: `hook-<start ms>-<fleet>-<container>-<hook>-<event>`.
    pub fn id(&self) -> String {
        let r = &self.result;
        format!(
            "hook-{}-{}-{}-{}-{}",
            self.started_ms, r.fleet, r.container, r.hook, r.event
        )
    }
}

fn key(started_ms: i64, r: &HookResult) -> Vec<u8> {
    let mut k = (started_ms.max(0) as u64).to_be_bytes().to_vec();
    k.extend_from_slice(
        format!("{}\0{}\0{}\0{}", r.fleet, r.container, r.hook, r.event).as_bytes(),
    );
    k
}

/// Records (or updates) a run. A failure to store is logged, never fatal: hooks never fail a container.
pub fn record(state: &State, cx: &HookContext, started_ms: i64, r: &HookResult) {
    let run = HookRun {
        node: cx.node.clone(),
        vm_id: cx.vm_id,
        started_ms,
        result: r.clone(),
    };
    let stored = state.store.hook_runs_tree().and_then(|t| {
        let v = serde_json::to_vec(&run).unwrap_or_default();
        Ok(t.insert(key(started_ms, r), v)?)
    });
    if let Err(e) = stored {
        tracing::warn!(error = %e, hook = %r.hook, "hook run not recorded in the history");
    }
}

/// Drops runs that started before `now - KEEP_MS` and, beyond [`MAX_RUNS`], the oldest. Returns how many.
pub fn prune(state: &State, now: Millis) -> Result<usize, StoreError> {
    let tree = state.store.hook_runs_tree()?;
    let cutoff = now.saturating_sub(KEEP_MS).to_be_bytes();
    let mut old: Vec<sled::IVec> = tree
        .range(..cutoff.as_slice())
        .keys()
        .collect::<Result<_, _>>()?;
    let len = tree.len();
    if len.saturating_sub(old.len()) > MAX_RUNS {
        let extra = len - old.len() - MAX_RUNS;
        let more: Vec<sled::IVec> = tree
            .range(cutoff.as_slice()..)
            .keys()
            .take(extra)
            .collect::<Result<_, _>>()?;
        old.extend(more);
    }
    for k in &old {
        tree.remove(k)?;
    }
    Ok(old.len())
}

/// How far back a run may still be attempting: past this, `active_only` listings stop reading (a hook's
/// attempts, retries and DHCP wait end within minutes).
const ACTIVE_WITHIN_MS: i64 = 24 * 3_600_000;

/// The newest `limit` runs (all when 0), in the order they started, optionally only one fleet's, one node's, or
/// those still attempting. Reads from the newest run back, so a listing costs what it returns, not the history.
pub fn list(
    state: &State,
    fleet: &str,
    node: &str,
    active_only: bool,
    limit: usize,
) -> Result<Vec<HookRun>, StoreError> {
    let tree = state.store.hook_runs_tree()?;
    let oldest_active = state.now_ms() as i64 - ACTIVE_WITHIN_MS;
    let mut out = Vec::new();
    for kv in tree.iter().rev() {
        if limit > 0 && out.len() >= limit {
            break;
        }
        let (_, v) = kv?;
        let Ok(run) = serde_json::from_slice::<HookRun>(&v) else {
            continue;
        };
        if active_only && run.started_ms < oldest_active {
            break;
        }
        if (fleet.is_empty() || run.result.fleet == fleet)
            && (node.is_empty() || run.node == node)
            && (!active_only || run.is_active())
        {
            out.push(run);
        }
    }
    out.reverse();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pxfleet_proto::v1 as pb;
    use pxfleet_spec::hooks::HookEvent;

    fn test_state() -> std::sync::Arc<State> {
        let store = crate::store::Store::temporary().unwrap();
        let ca = pxfleet_tls::Ca::generate("test").unwrap();
        State::new(
            crate::Config::default(),
            store,
            ca,
            Default::default(),
            pxfleet_common::Clock::system(),
        )
    }

    fn result(container: &str, status: &str) -> HookResult {
        HookResult {
            fleet: "f".into(),
            container: container.into(),
            hook: "dns".into(),
            event: HookEvent::Ready,
            status: status.into(),
            attempts: 1,
            max_attempts: 3,
            last_attempt_ms: 0,
            error: String::new(),
            detail: "HTTP 200".into(),
        }
    }

    fn cx(container: &str) -> HookContext {
        HookContext {
            fleet: "f".into(),
            name: container.into(),
            node: "n1".into(),
            vm_id: 100,
            ..Default::default()
        }
    }

    #[test]
    fn runs_are_updated_in_place_listed_in_start_order_and_pruned_by_age() {
        let state = test_state();
        record(&state, &cx("b"), 2_000, &result("b", "running"));
        record(&state, &cx("a"), 1_000, &result("a", "succeeded"));
        record(&state, &cx("b"), 2_000, &result("b", "failed"));
        let runs = list(&state, "", "", false, 0).unwrap();
        let names: Vec<(&str, &str)> = runs
            .iter()
            .map(|r| (r.result.container.as_str(), r.result.status.as_str()))
            .collect();
        assert_eq!(names, [("a", "succeeded"), ("b", "failed")]);
        assert!(list(&state, "", "", true, 0).unwrap().is_empty());
        let newest = list(&state, "", "", false, 1).unwrap();
        assert_eq!(newest.len(), 1);
        assert_eq!(newest[0].result.container, "b");
        assert!(list(&state, "other", "", false, 0).unwrap().is_empty());
        let row = crate::grpc::convert::hook_run_info(&runs[1]);
        assert_eq!(row.kind, pb::OperationKind::Hook as i32);
        assert_eq!(row.state, pb::OperationState::Failed as i32);
        assert_eq!(row.reason, "hook dns on ready");

        assert_eq!(prune(&state, 1_500 + KEEP_MS).unwrap(), 1);
        let left = list(&state, "", "", false, 0).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].result.container, "b");
    }
}
