//! Hooks (fleet.yaml `hooks:`, docs/hooks.md): when a container becomes ready or is destroyed, the reconcile loop
//! queues a job here ([`on_created`], [`on_destroyed`]: no I/O but one store read, never an error); a worker
//! task ([`run`]) takes the jobs off the reconcile path, finds the fleet's hooks in its latest revision and
//! runs each one (an HTTP request or an argv command) with a deadline per attempt and retries with
//! exponential backoff. A hook that fails never touches the container's operation. Each attempt's result is
//! kept in the store's `hooks` tree (shown by `pxctl describe container`), recorded in the history of runs
//! ([`crate::hooks::runs`], listed by `pxctl get operations`) and sent as a fleet event (the API's `Watch`
//! stream).
//!
//! One attempt (HTTP or command) is [`attempt`]. Secrets (`${env:NAME}`, `${file:/path}`) are read when the hook runs; their values are never stored,
//! logged or sent in events: the URL of a request is never logged (it may carry a token), and a server's
//! answer quoted in an error has every secret value replaced by `***`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pxfleet_spec::hooks::{Hook, HookContext, HookEvent};
use pxfleet_spec::{Container, Ipv4Config, Ipv6Config};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

mod catalog;
pub mod runs;
pub use catalog::{HookCatalog, Protected};

use crate::model::Operation;
use crate::state::State;
use crate::store::StoreError;

/// Jobs waiting for the worker; beyond this, new ones are dropped (and logged).
pub const QUEUE: usize = 4096;
/// Hooks running at once.
pub const CONCURRENCY: usize = 16;
/// First wait before a retry; doubled each time, at most [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(500);
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long a ready hook waits for a DHCP container's first address to be observed.
pub const DHCP_WAIT: Duration = Duration::from_secs(120);
/// Most bytes of a server's answer or a command's stderr quoted in an error.
const QUOTE: usize = 300;

/// One container event to run the fleet's hooks for.
#[derive(Clone, Debug)]
pub struct Job {
    pub event: HookEvent,
    pub cx: HookContext,
    /// net0 is DHCP and no address was known yet: wait for an observation to report one.
    pub wait_for_ipv4: bool,
}

/// The queue between the reconcile loop and the worker.
pub struct Hooks {
    tx: mpsc::Sender<Job>,
    rx: Mutex<Option<mpsc::Receiver<Job>>>,
}

impl Default for Hooks {
    fn default() -> Self {
        Self::new()
    }
}

impl Hooks {
    pub fn new() -> Hooks {
        let (tx, rx) = mpsc::channel(QUEUE);
        Hooks {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }

    fn push(&self, job: Job) {
        if let Err(e) = self.tx.try_send(job) {
            let job = match e {
                mpsc::error::TrySendError::Full(j) | mpsc::error::TrySendError::Closed(j) => j,
            };
            tracing::warn!(fleet = %job.cx.fleet, container = %job.cx.name, event = %job.event,
                "hook queue full or closed: hooks for this event are skipped");
        }
    }
}

/// What one run of a hook did, as kept in the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookResult {
    pub fleet: String,
    pub container: String,
    pub hook: String,
    pub event: HookEvent,
    /// `running`, `retrying`, `succeeded`, `failed`.
    pub status: String,
    pub attempts: u32,
    pub max_attempts: u32,
    pub last_attempt_ms: i64,
    pub error: String,
    pub detail: String,
}

fn key(fleet: &str, container: &str) -> Vec<u8> {
    format!("{fleet}\0{container}\0").into_bytes()
}

/// The last result of every hook run for a container, by hook then event.
pub fn results(state: &State, fleet: &str, container: &str) -> Result<Vec<HookResult>, StoreError> {
    let tree = state.store.hooks_tree()?;
    let mut out = Vec::new();
    for kv in tree.scan_prefix(key(fleet, container)) {
        let (_, v) = kv?;
        if let Ok(r) = serde_json::from_slice::<HookResult>(&v) {
            out.push(r);
        }
    }
    Ok(out)
}

fn put(state: &State, r: &HookResult) {
    let mut k = key(&r.fleet, &r.container);
    k.extend_from_slice(format!("{}\0{}", r.hook, r.event).as_bytes());
    let stored = state
        .store
        .hooks_tree()
        .and_then(|t| Ok(t.insert(k, serde_json::to_vec(r).unwrap_or_default())?));
    if let Err(e) = stored {
        tracing::warn!(error = %e, hook = %r.hook, "hook result not stored");
    }
}

/// Forgets a container's results: a new lifetime (ready) or its end (destroyed) starts a fresh record, so the
/// tree holds at most one lifetime per container name.
fn clear(state: &State, fleet: &str, container: &str) {
    let Ok(tree) = state.store.hooks_tree() else {
        return;
    };
    let keys: Vec<sled::IVec> = tree
        .scan_prefix(key(fleet, container))
        .keys()
        .filter_map(Result::ok)
        .collect();
    for k in keys {
        let _ = tree.remove(k);
    }
}

/// net0's addresses from the spec (static ones), without prefix length.
fn spec_addresses(c: &Container) -> (String, String, bool) {
    let Some(i) = c.interfaces.first() else {
        return (String::new(), String::new(), false);
    };
    let v4 = match &i.ipv4 {
        Ipv4Config::Static { addr, .. } => addr.addr().to_string(),
        _ => String::new(),
    };
    let v6 = match &i.ipv6 {
        Ipv6Config::Static { addr, .. } => addr.addr().to_string(),
        _ => String::new(),
    };
    (v4, v6, matches!(i.ipv4, Ipv4Config::Dhcp))
}

fn context(op: &Operation, c: &Container) -> (HookContext, bool) {
    let (ipv4, ipv6, dhcp) = spec_addresses(c);
    let cx = HookContext {
        fleet: op.fleet.clone(),
        name: op.container.clone(),
        hostname: c.hostname.clone(),
        node: op.node.clone(),
        vm_id: op.vm_id,
        ipv4,
        ipv6,
        params: Default::default(),
    };
    (cx, dhcp)
}

/// Called by the reconcile loop when a create succeeded: a container that runs is ready.
pub fn on_created(state: &State, op: &Operation, c: &Container) {
    if !c.state.is_running() {
        return;
    }
    let (mut cx, dhcp) = context(op, c);
    let mut wait_for_ipv4 = false;
    if dhcp {
        match observed_ipv4(state, &op.node, op.vm_id) {
            Some(a) => cx.ipv4 = a,
            None => wait_for_ipv4 = true,
        }
    }
    state.hooks.push(Job {
        event: HookEvent::Ready,
        cx,
        wait_for_ipv4,
    });
}

/// What was applied for the container `op` ran on, if it is still that container (same vm_id).
fn applied_for(state: &State, op: &Operation) -> Option<crate::model::AppliedContainer> {
    state
        .store
        .applied(&op.fleet, &op.container)
        .ok()
        .flatten()
        .filter(|a| a.vm_id == op.vm_id)
}

/// Called by the reconcile loop when a start succeeded (a stopped container set to `running`, or one started again
/// after it stopped outside pxfleet): it is ready again.
pub fn on_started(state: &State, op: &Operation) {
    if let Some(a) = applied_for(state, op) {
        let mut c = a.container;
        c.state = pxfleet_spec::DesiredState::Running;
        on_created(state, op, &c);
    }
}

/// Called by the reconcile loop when a destroy succeeded, before it forgets the container.
pub fn on_destroyed(state: &State, op: &Operation) {
    let applied = applied_for(state, op);
    let (mut cx, _) = match &applied {
        Some(a) => context(op, &a.container),
        None => (
            HookContext {
                fleet: op.fleet.clone(),
                name: op.container.clone(),
                hostname: op.container.clone(),
                node: op.node.clone(),
                vm_id: op.vm_id,
                ..Default::default()
            },
            false,
        ),
    };
    if cx.ipv4.is_empty() {
        cx.ipv4 = observed_ipv4(state, &op.node, op.vm_id).unwrap_or_default();
    }
    state.hooks.push(Job {
        event: HookEvent::Destroyed,
        cx,
        wait_for_ipv4: false,
    });
}

/// The first IPv4 address the node reported for the container at runtime.
fn observed_ipv4(state: &State, node: &str, vm_id: u32) -> Option<String> {
    let o = state.store.observed(node, vm_id).ok()??;
    o.addresses.iter().find_map(|a| {
        let a = a.split('/').next().unwrap_or(a);
        a.parse::<std::net::Ipv4Addr>()
            .ok()
            .filter(|ip| !ip.is_loopback())
            .map(|ip| ip.to_string())
    })
}

/// The fleet's hooks: those of its latest revision (a fleet destroyed with `pxctl destroy` keeps its last
/// submitted revision's hooks for the destroyed events). A fleet whose record says it has none
/// ([`crate::model::FleetRecord::has_hooks`]) has none, without reading a revision; otherwise revisions are read
/// one by one, newest first, and the answer is cached per fleet revision (`cache`), so a rollout of many
/// containers decodes a spec once.
fn fleet_hooks(
    state: &State,
    fleet: &str,
    cache: &mut HashMap<String, (u64, Arc<Vec<Hook>>)>,
) -> Arc<Vec<Hook>> {
    let latest = match state.store.fleet(fleet) {
        Ok(Some(f)) if f.has_hooks == Some(false) => {
            cache.remove(fleet);
            return Arc::default();
        }
        Ok(Some(f)) => f.revision,
        Ok(None) => state
            .store
            .revisions(fleet)
            .ok()
            .and_then(|rs| rs.iter().map(|r| r.revision).max())
            .unwrap_or(0),
        Err(e) => {
            tracing::warn!(fleet, error = %e, "hooks: fleet unreadable");
            return Arc::default();
        }
    };
    if let Some((rev, hooks)) = cache.get(fleet) {
        if *rev == latest {
            return hooks.clone();
        }
    }
    let mut hooks = Vec::new();
    let mut rev = latest;
    while rev > 0 {
        match state.store.revision(fleet, rev) {
            Ok(Some(r)) => {
                if let Some(h) = r.spec.get("hooks") {
                    hooks = serde_json::from_value(h.clone()).unwrap_or_default();
                    break;
                }
                if !r.file_name.is_empty() {
                    break; // submitted without hooks: none
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(fleet, revision = rev, error = %e, "hooks: revision unreadable");
                break;
            }
        }
        rev -= 1;
    }
    let hooks = Arc::new(hooks);
    cache.insert(fleet.to_owned(), (latest, hooks.clone()));
    hooks
}

/// The worker: runs queued hooks until `stop` resolves.
pub async fn run(state: Arc<State>, stop: impl std::future::Future<Output = ()>) {
    let Some(mut rx) = state
        .hooks
        .rx
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    else {
        return; // a worker already runs
    };
    let limit = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let mut cache = HashMap::new();
    let mut pruned_ms = 0;
    tokio::pin!(stop);
    loop {
        let job = tokio::select! {
            _ = &mut stop => return,
            j = rx.recv() => match j { Some(j) => j, None => return },
        };
        let now = state.now_ms();
        if now.saturating_sub(pruned_ms) > 3_600_000 {
            pruned_ms = now;
            if let Err(e) = crate::hooks::runs::prune(&state, now) {
                tracing::warn!(error = %e, "old hook runs not pruned");
            }
        }
        clear(&state, &job.cx.fleet, &job.cx.name);
        let hooks: Vec<Hook> = fleet_hooks(&state, &job.cx.fleet, &mut cache)
            .iter()
            .filter(|h| h.applies(&job.cx.name, job.event))
            .cloned()
            .collect();
        if hooks.is_empty() {
            continue;
        }
        let state = state.clone();
        let limit = limit.clone();
        tokio::spawn(async move {
            let mut job = job;
            if job.wait_for_ipv4 {
                job.cx.ipv4 = wait_for_ipv4(&state, &job.cx).await.unwrap_or_default();
            }
            let mut runs = Vec::new();
            for h in hooks {
                let (state, limit, job) = (state.clone(), limit.clone(), job.clone());
                runs.push(tokio::spawn(async move {
                    let Ok(_permit) = limit.acquire_owned().await else {
                        return;
                    };
                    run_hook(&state, &h, &job).await;
                }));
            }
            for r in runs {
                let _ = r.await;
            }
        });
    }
}

async fn wait_for_ipv4(state: &State, cx: &HookContext) -> Option<String> {
    let deadline = state.clock.instant() + DHCP_WAIT;
    loop {
        if let Some(a) = observed_ipv4(state, &cx.node, cx.vm_id) {
            return Some(a);
        }
        if state.clock.instant() >= deadline {
            tracing::warn!(fleet = %cx.fleet, container = %cx.name,
                "hooks: no IPv4 address observed for the DHCP container; running ready hooks without one");
            return None;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Runs one hook for one job: attempts, backoff, results and events. A hook used by name runs its definition
/// in the controller's configuration as it is now, with the fleet's params.
pub async fn run_hook(state: &State, h: &Hook, job: &Job) {
    let resolved = state.config.hook_catalog.resolve(h);
    let (h, job) = match &resolved {
        Ok((def, params)) => {
            let mut job = job.clone();
            job.cx.params = params.clone();
            (def, job)
        }
        Err(_) => (h, job.clone()),
    };
    let job = &job;
    let protected = Protected::of(&state.config);
    let max_attempts = if resolved.is_ok() { h.retries + 1 } else { 1 };
    let mut r = HookResult {
        fleet: job.cx.fleet.clone(),
        container: job.cx.name.clone(),
        hook: h.name.clone(),
        event: job.event,
        status: "running".into(),
        attempts: 0,
        max_attempts,
        last_attempt_ms: state.now_ms() as i64,
        error: String::new(),
        detail: String::new(),
    };
    let started_ms = r.last_attempt_ms;
    put(state, &r);
    crate::hooks::runs::record(state, &job.cx, started_ms, &r);
    let mut backoff = FIRST_BACKOFF;
    for attempt in 1..=max_attempts {
        r.attempts = attempt;
        r.last_attempt_ms = state.now_ms() as i64;
        let timeout = Duration::from_secs(h.timeout_secs);
        let once = async {
            match &resolved {
                Ok(_) => attempt_once(h, &job.cx, job.event, &protected).await,
                Err(e) => Err(e.clone()),
            }
        };
        let outcome = match tokio::time::timeout(timeout, once).await {
            Ok(o) => o,
            Err(_) => Err(format!("no answer within {}s (timeout)", h.timeout_secs)),
        };
        match outcome {
            Ok(detail) => {
                r.status = "succeeded".into();
                r.error.clear();
                r.detail = detail;
                tracing::info!(fleet = %r.fleet, container = %r.container, hook = %r.hook,
                    event = %r.event, attempt, detail = %r.detail, "hook succeeded");
            }
            Err(error) => {
                r.status = if attempt < max_attempts {
                    "retrying"
                } else {
                    "failed"
                }
                .into();
                r.error = error;
                r.detail.clear();
                tracing::warn!(fleet = %r.fleet, container = %r.container, hook = %r.hook,
                    event = %r.event, attempt, max_attempts, error = %r.error, "hook attempt failed");
            }
        }
        put(state, &r);
        crate::hooks::runs::record(state, &job.cx, started_ms, &r);
        emit(state, &job.cx, &r);
        if r.status != "retrying" {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

fn emit(state: &State, cx: &HookContext, r: &HookResult) {
    let message = match r.status.as_str() {
        "succeeded" => format!(
            "hook {} on {}: succeeded ({}), attempt {}/{}",
            r.hook, r.event, r.detail, r.attempts, r.max_attempts
        ),
        s => format!(
            "hook {} on {}: attempt {}/{} failed{}",
            r.hook,
            r.event,
            r.attempts,
            r.max_attempts,
            if s == "retrying" { ", will retry" } else { "" }
        ),
    };
    let _ = state.events.send(crate::model::FleetEvent {
        unix_ms: r.last_attempt_ms.max(0) as u64,
        fleet: cx.fleet.clone(),
        container: cx.name.clone(),
        vm_id: cx.vm_id,
        node: cx.node.clone(),
        message,
        error: r.error.clone(),
        ..Default::default()
    });
}

mod attempt;
use attempt::attempt_once;
pub use attempt::check_secrets;

/// What in `fleet` would run code on the controller or read its files or environment: a `command:` hook, a
/// `${file:...}` or `${env:...}` in an HTTP hook. Only an admin may submit those (an operator is not root on
/// the controller); one diagnostic per use, each saying so.
pub fn operator_refusals(file: &str, fleet: &pxfleet_spec::Fleet) -> Vec<pxfleet_spec::Diagnostic> {
    use pxfleet_spec::hooks::{HookAction, Placeholder};
    let mut out = Vec::new();
    let mut refuse = |path: String, what: String| {
        out.push(crate::authz::admin_only(
            file,
            fleet,
            path,
            format!("{what} runs on the controller, so only an admin may submit it (an operator is not root there)"),
            "ask an admin to submit the fleet, or use an HTTP hook without ${env:} and ${file:} (container values only)",
        ));
    };
    for h in &fleet.hooks {
        if let HookAction::Command { .. } = &h.action {
            refuse(
                format!("hooks.{}.command", h.name),
                format!("hook {}: a command", h.name),
            );
        }
        // a hook used by name has no templates here: its definition is the admin's
        let needed = h.placeholders();
        for (field, p) in needed {
            match p {
                Placeholder::Env(n) => refuse(
                    field,
                    format!(
                        "hook {}: ${{env:{n}}} (the controller's environment)",
                        h.name
                    ),
                ),
                Placeholder::File(f) => refuse(
                    field,
                    format!("hook {}: ${{file:{f}}} (a file of the controller)", h.name),
                ),
                Placeholder::Container(_) | Placeholder::Param(_) => {}
            }
        }
    }
    out
}

/// Where the inline HTTP hooks of an operator's fleet would send requests, checked against `[hook_urls]`: the
/// host must be written out (not a placeholder) and allowed (by default anything but the controller itself and
/// its link). One diagnostic per refused URL.
pub fn operator_hook_urls(
    file: &str,
    fleet: &pxfleet_spec::Fleet,
    policy: &crate::templates::UrlPolicy,
) -> Vec<pxfleet_spec::Diagnostic> {
    use pxfleet_spec::hooks::HookAction;
    let mut out = Vec::new();
    for h in &fleet.hooks {
        let HookAction::Http(http) = &h.action else {
            continue;
        };
        let after_scheme = http.url.split_once("://").map_or("", |(_, r)| r);
        let authority = after_scheme.split(['/', '?', '#']).next().unwrap_or("");
        let why = match authority.contains("${") {
            true => Some(
                "its host is a placeholder; an operator's hook names its host as it is, so the controller can \
                 check where it goes"
                    .to_string(),
            ),
            false => policy.refusal_as(&http.url, crate::templates::UrlUse::Hook),
        };
        if let Some(why) = why {
            let path = format!("hooks.{}.http.url", h.name);
            let mut d = pxfleet_spec::Diagnostic::new(
                file,
                fleet.spans.lookup(&path),
                path,
                format!("hook {}: the URL is refused: {why}", h.name),
            );
            d.hint = Some(
                "use a hook the admin defined (`use: NAME`), or ask an admin for the host under [hook_urls]"
                    .into(),
            );
            out.push(d);
        }
    }
    out
}

#[cfg(test)]
mod tests;
