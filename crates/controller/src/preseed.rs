//! Templates pre-seeded on every node (`templates: NAME: {seed: all_nodes}`): a small step of the reconcile
//! pass ([`crate::reconcile::pass`]) that plans a seed operation (the same `SeedTemplate` operation a create
//! waits for) for each such template on each ready node that lacks it, so a first create never waits for a
//! download; nodes that join later get it on the next pass.
//!
//! "Ready" is: connected, not cordoned. The seed operations are node-level: they carry the fleet's name but no
//! container, and are not part of a fleet's plan (seeding changes no container).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use pxfleet_spec::{Template, TemplateSeed};

use crate::model::{Millis, NodeRecord, OpState, Operation, OperationKind};
use crate::reconcile::decide::backoff_ms;
use crate::reconcile::emit;
use crate::state::State;
use crate::store::StoreError;
use crate::templates::template_ready_on;

/// The templates a fleet revision wants on all nodes, by (fleet, revision, updated_ms), so a pass decodes a
/// revision's spec once, not on every pass.
type Wanted = Arc<Vec<(String, Template)>>;

/// Per controller ([`State::preseed`]).
#[derive(Default)]
pub struct Cache(Mutex<BTreeMap<(String, u64, Millis), Wanted>>);

/// The `seed: all_nodes` templates of the head revision of every fleet: (fleet, template name, template).
pub fn wanted(state: &State) -> Result<Vec<(String, String, Template)>, StoreError> {
    let mut out = Vec::new();
    let fleets = state.store.fleets()?;
    let mut cache = state.preseed.0.lock().unwrap_or_else(|p| p.into_inner());
    // forget revisions that are no longer any fleet's head
    let heads: BTreeSet<(String, u64, Millis)> = fleets
        .iter()
        .map(|f| (f.name.clone(), f.revision, f.updated_ms))
        .collect();
    cache.retain(|k, _| heads.contains(k));
    for f in &fleets {
        let key = (f.name.clone(), f.revision, f.updated_ms);
        let list = match cache.get(&key) {
            Some(l) => l.clone(),
            None => {
                let part = state
                    .store
                    .revision_part::<TemplatesOf>(&f.name, f.revision);
                let list: Wanted = Arc::new(match part {
                    Ok(Some(r)) => seeded(r.spec.templates),
                    Ok(None) => Vec::new(),
                    // not the expected shape: read the whole revision
                    Err(_) => match state.store.revision(&f.name, f.revision)? {
                        Some(r) => templates_to_seed(&r.spec),
                        None => Vec::new(),
                    },
                });
                cache.insert(key, list.clone());
                list
            }
        };
        for (name, t) in list.iter() {
            out.push((f.name.clone(), name.clone(), t.clone()));
        }
    }
    Ok(out)
}

/// The templates of a stored revision's spec, its containers skipped.
#[derive(serde::Deserialize)]
struct TemplatesOf {
    spec: SpecTemplates,
}

#[derive(serde::Deserialize)]
struct SpecTemplates {
    #[serde(default)]
    templates: Option<serde_json::Value>,
}

/// The `seed: all_nodes` templates of a stored (normalised) spec. A spec whose templates do not decode (an
/// older format) wants none.
fn templates_to_seed(spec: &serde_json::Value) -> Vec<(String, Template)> {
    seeded(spec.get("templates").cloned())
}

/// The `seed: all_nodes` templates of a spec's `templates` (none when they do not decode).
fn seeded(templates: Option<serde_json::Value>) -> Vec<(String, Template)> {
    let Some(templates) = templates else {
        return Vec::new();
    };
    let Ok(templates) = serde_json::from_value::<BTreeMap<String, Template>>(templates) else {
        return Vec::new();
    };
    templates
        .into_iter()
        .filter(|(_, t)| t.seed == TemplateSeed::AllNodes)
        .collect()
}

/// Plans the missing seed operations of this pass. `active` holds the (node, template) pairs with a seed
/// already in flight (and receives the new ones); `ops` are all operations, in creation order; new operations
/// are stored, announced and appended to `planned` (for dispatch by the same pass).
pub fn plan(
    state: &State,
    nodes: &[NodeRecord],
    ops: &[Arc<Operation>],
    active: &mut BTreeSet<(String, String)>,
    now: Millis,
    planned: &mut Vec<Operation>,
) -> Result<(), StoreError> {
    let wanted = wanted(state)?;
    if wanted.is_empty() {
        return Ok(());
    }
    let rc = &state.config.reconciler;
    // the last node-level seed per (node, template), for retries with backoff
    let mut last: BTreeMap<(&str, &str), &Operation> = BTreeMap::new();
    for op in ops {
        if let OperationKind::SeedTemplate { name, .. } = &op.kind {
            if op.container.is_empty() {
                last.insert((op.node.as_str(), name.as_str()), op);
            }
        }
    }
    for n in nodes {
        if n.cordoned || !state.sessions.is_connected(&n.name) {
            continue;
        }
        for (fleet, name, t) in &wanted {
            if template_ready_on(n, name, t) || active.contains(&(n.name.clone(), name.clone())) {
                continue;
            }
            let (attempt, not_before) = match last.get(&(n.name.as_str(), name.as_str())) {
                Some(l) if l.state == OpState::Failed && l.kind_template() == Some(t) => {
                    if l.attempt >= rc.max_attempts {
                        continue; // failed for good until the template changes (or the op history is pruned)
                    }
                    let delay = backoff_ms(
                        l.attempt + 1,
                        rc.backoff_base_ms,
                        rc.backoff_max_ms,
                        rand::random::<f64>(),
                    );
                    (l.attempt + 1, l.finished_ms.unwrap_or(now) + delay)
                }
                _ => (1, now),
            };
            let kind = OperationKind::SeedTemplate {
                name: name.clone(),
                template: t.clone(),
            };
            let op = Operation {
                attempt,
                not_before_ms: not_before,
                reason: format!("template {name} is kept on every node (seed: all_nodes)"),
                ..Operation::pending(fleet, "", &n.name, 0, kind, now)
            };
            tracing::info!(op = %op.id, fleet = %op.fleet, node = %op.node, template = %name, attempt,
                "template pre-seed planned");
            state.store.put_op(&op)?;
            emit(state, &op, "planned");
            active.insert((n.name.clone(), name.clone()));
            planned.push(op);
        }
    }
    Ok(())
}

trait SeedOf {
    fn kind_template(&self) -> Option<&Template>;
}

impl SeedOf for Operation {
    fn kind_template(&self) -> Option<&Template> {
        match &self.kind {
            OperationKind::SeedTemplate { template, .. } => Some(template),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::pass;
    use crate::testutil::{
        node, on_update_pb, operations_sent, result, submit_dev, test_state, AgentRx,
    };
    use pxfleet_proto::v1 as pb;

    fn state() -> Arc<State> {
        test_state()
    }

    fn add_node(st: &State, name: &str, cordoned: bool) -> AgentRx {
        let mut n = node(name, 8000);
        n.last_seen_ms = st.now_ms();
        n.cordoned = cordoned;
        st.store.update_node(name, |r| *r = n.clone()).unwrap();
        st.sessions.register(name).1
    }

    /// A fleet with no containers and two templates, `deb` kept on all nodes, `alp` on demand.
    fn submit(st: &State) {
        let spec = serde_json::json!({
            "name": "dev",
            "templates": {
                "deb": {"source": {"kind": "pveam", "appliance": "debian-13-standard_13.1-2_amd64.tar.zst"},
                        "storage": "local", "seed": "all_nodes"},
                "alp": {"source": {"kind": "pveam", "appliance": "alpine-3.22-default_20250617_amd64.tar.xz"},
                        "storage": "local"},
            },
            "containers": {},
        });
        submit_dev(st, spec, vec![], Default::default());
    }

    fn seeds(rx: &mut AgentRx) -> Vec<pb::Operation> {
        let out = operations_sent(rx);
        for op in &out {
            assert!(
                matches!(op.kind, Some(pb::operation::Kind::SeedTemplate(_))),
                "{op:?}"
            );
        }
        out
    }

    fn finish(st: &State, node: &str, op: &pb::Operation, ok: bool) {
        let u = result(op, (!ok).then_some("pveam download failed: 404"));
        assert!(on_update_pb(st, node, &u).unwrap());
    }

    #[test]
    fn an_all_nodes_template_is_seeded_on_every_ready_node_and_on_nodes_that_join_later() {
        let st = state();
        let mut rx1 = add_node(&st, "n1", false);
        let mut rx2 = add_node(&st, "n2", false);
        let mut rx3 = add_node(&st, "n3", true);
        submit(&st);
        pass(&st, st.now_ms()).unwrap();
        let (s1, s2) = (seeds(&mut rx1), seeds(&mut rx2));
        assert_eq!((s1.len(), s2.len()), (1, 1), "one seed per ready node");
        assert!(seeds(&mut rx3).is_empty(), "a cordoned node is not seeded");
        let Some(pb::operation::Kind::SeedTemplate(t)) = &s1[0].kind else {
            unreachable!()
        };
        assert!(
            t.file_name.starts_with("debian-13"),
            "only the all_nodes template: {t:?}"
        );
        // in flight: not planned again
        pass(&st, st.now_ms()).unwrap();
        assert!(seeds(&mut rx1).is_empty() && seeds(&mut rx2).is_empty());
        finish(&st, "n1", &s1[0], true);
        finish(&st, "n2", &s2[0], true);
        pass(&st, st.now_ms()).unwrap();
        assert!(seeds(&mut rx1).is_empty() && seeds(&mut rx2).is_empty());
        for n in ["n1", "n2"] {
            let rec = st.store.node(n).unwrap().unwrap();
            assert!(rec.seeded.contains_key("deb"), "{n}: {:?}", rec.seeded);
        }
        // a node that joins later gets it on the next pass
        let mut rx4 = add_node(&st, "n4", false);
        pass(&st, st.now_ms()).unwrap();
        assert_eq!(seeds(&mut rx4).len(), 1);
        // uncordoning n3 seeds it too
        st.store.update_node("n3", |r| r.cordoned = false).unwrap();
        pass(&st, st.now_ms()).unwrap();
        assert_eq!(seeds(&mut rx3).len(), 1);
    }

    #[test]
    fn a_failing_seed_is_retried_then_left_failed() {
        let st = state();
        let mut rx = add_node(&st, "n1", false);
        submit(&st);
        let max = st.config.reconciler.max_attempts as usize;
        let mut tries = 0;
        for _ in 0..max + 2 {
            pass(&st, st.now_ms()).unwrap();
            for op in seeds(&mut rx) {
                tries += 1;
                finish(&st, "n1", &op, false);
            }
        }
        assert_eq!(tries, max, "max_attempts seeds, then no more");
        let last = st
            .store
            .ops()
            .unwrap()
            .into_iter()
            .last()
            .expect("the seed operations are in the history");
        assert_eq!(last.state, OpState::Failed);
        assert!(last.last_error.unwrap().contains("404"));
    }
}
