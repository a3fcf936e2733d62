//! Storing a fleet change: the revision with its passwords merged, then a reconcile pass; and the answers'
//! active operations.

use std::collections::BTreeMap;
use std::sync::Arc;

use pxfleet_spec::Fleet;
use pxfleet_tls::Identity;
use sha2::Digest as _;

use crate::error::{Error, Result};
use crate::model::Operation;
use crate::planning::Prepared;
use crate::reconcile;
use crate::state::State;
use crate::store::SubmitTx;

/// A random root password: 24 characters from an unambiguous alphabet.
pub fn generate_password() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    (0..24)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Every container's password: the one the fleet gives, else the stored one, else a new one. A container made
/// from a clone template has none: `pct clone` copies the source's, so a generated one would be a password the
/// container never got (and `pxctl output` would show it).
pub(super) fn merge_secrets(
    source_fleet: &Fleet,
    old: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    source_fleet
        .containers
        .iter()
        .filter(|(_, c)| {
            !source_fleet
                .templates
                .get(&c.template)
                .is_some_and(|t| t.source.is_clone())
        })
        .map(|(k, c)| {
            let pw = match &c.password {
                Some(p) => p.expose().to_string(),
                None => old.get(k).cloned().unwrap_or_else(generate_password),
            };
            (k.clone(), pw)
        })
        .collect()
}

/// Stores a new revision of `prepared` (under the fleet lock), then runs a reconcile pass so the
/// operations exist when the caller returns. `source_fleet` (the fleet as given, for its passwords), the
/// prepared fleet and the plan are handed to [`free_later`] before the store transaction: at 10,000
/// containers they are tens of MiB that would otherwise add to the transaction's own peak.
pub(super) fn store_revision(
    state: &State,
    author: &Identity,
    source_fleet: Fleet,
    prepared: Prepared,
    expected: Option<u64>,
    action: &str,
    source: Option<(&str, &str)>,
) -> Result<u64> {
    let name = prepared.fleet.name.clone();
    let secrets = merge_secrets(&source_fleet, &state.store.secrets(&name)?);
    let summary = prepared
        .plan
        .summary
        .parts()
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(l, n)| format!("{n} {l}"))
        .collect::<Vec<_>>()
        .join(", ");
    let tx = SubmitTx {
        fleet: name.clone(),
        expected_revision: expected,
        author: author.uri(),
        time_ms: state.now_ms(),
        spec: crate::store::spec_json(&prepared.fleet)
            .map_err(|e| Error::Internal(e.to_string()))?,
        summary: if summary.is_empty() {
            "no changes".into()
        } else {
            summary
        },
        desired: prepared.desired,
        secrets,
        audit_action: action.into(),
        file_name: source.map(|(f, _)| f.to_string()).unwrap_or_default(),
        source_sha256: source
            .map(|(_, text)| hex::encode(sha2::Sha256::digest(text.as_bytes())))
            .unwrap_or_default(),
        retry: crate::realise::failed_containers(state, &name)?,
    };
    free_later((source_fleet, prepared.fleet, prepared.plan));
    let rev = state.store.submit(&tx)?;
    free_later(tx);
    reconcile::pass(state, state.now_ms())?;
    state.changed();
    Ok(rev)
}

/// Frees `v` on the blocking pool, off the caller's path: the structures of a 10,000-container submit (spec,
/// desired containers, plan, snapshot) take a tenth of a second to free, and the client need not wait for it.
pub(super) fn free_later<T: Send + 'static>(v: T) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn_blocking(move || drop(v))),
        Err(_) => drop(v),
    }
}

/// The fleet's active operations (up to `revision`), shared with the store's cache.
pub(super) fn active_ops(
    state: &State,
    fleet: &str,
    revision: Option<u64>,
) -> Result<Vec<Arc<Operation>>> {
    Ok(state
        .store
        .ops_shared()?
        .into_iter()
        .filter(|o| {
            o.fleet == fleet && o.state.is_active() && revision.is_none_or(|r| o.revision <= r)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_passwords_are_24_unambiguous_characters() {
        let a = generate_password();
        assert_eq!(a.len(), 24);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() && !"0O1lI".contains(c)));
        assert_ne!(a, generate_password());
    }

    #[test]
    fn given_passwords_win_then_stored_ones_then_new_ones() {
        let fleet = pxfleet_spec::parse_fleet(
            "fleet.yaml",
            "fleet: dev\ntemplates: {deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}}\n\
             defaults: {template: deb, datastore_id: local-lvm, memory: 512}\ncontainers:\n  \
             a: {password: given-password}\n  b: {}\n  c: {}\n",
            &pxfleet_spec::NoFiles,
        )
        .unwrap();
        let old = BTreeMap::from([("b".to_string(), "kept".to_string())]);
        let merged = merge_secrets(&fleet, &old);
        assert_eq!(merged["a"], "given-password");
        assert_eq!(merged["b"], "kept");
        assert_eq!(merged["c"].len(), 24);
    }
}
