//! Host powers granted to fleets by admins ([`crate::grants`]): one key per grant (`g` + its id, big-endian),
//! ids from a counter kept beside them, so `pxctl grant list` shows small numbers in the order granted.

use super::{enc, tx_get, unwrap_tx, Store, StoreError};
use crate::grants::{Grant, HostPower};
use crate::model::Millis;

const NEXT: &[u8] = b"next";

fn key(id: u64) -> Vec<u8> {
    let mut k = b"g".to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

impl Store {
    /// Records a grant and returns it with its id; an equal grant of the same fleet is returned as it is.
    pub fn add_grant(
        &self,
        fleet: &str,
        power: HostPower,
        reason: &str,
        by: &str,
        now: Millis,
    ) -> Result<Grant, StoreError> {
        if let Some(g) = self
            .grants(Some(fleet))?
            .into_iter()
            .find(|g| g.power == power)
        {
            return Ok(g);
        }
        let r = self.grants.transaction(|t| {
            let id = tx_get::<u64>(t, "grants", NEXT)?.unwrap_or(1);
            let g = Grant {
                id,
                fleet: fleet.to_string(),
                power: power.clone(),
                reason: reason.to_string(),
                granted_by: by.to_string(),
                granted_ms: now,
            };
            t.insert(key(id), enc(&g))?;
            t.insert(NEXT, enc(&(id + 1)))?;
            Ok(g)
        });
        unwrap_tx(r)
    }

    /// The grants of `fleet` (all fleets: `None`), oldest first.
    pub fn grants(&self, fleet: Option<&str>) -> Result<Vec<Grant>, StoreError> {
        let all: Vec<Grant> = Self::scan(&self.grants, "grants", b"g")?;
        Ok(all
            .into_iter()
            .filter(|g| fleet.is_none_or(|f| g.fleet == f))
            .collect())
    }

    /// Removes grant `id`; returns it, `None` when there is no such grant.
    pub fn remove_grant(&self, id: u64) -> Result<Option<Grant>, StoreError> {
        match self.grants.remove(key(id))? {
            Some(v) => Ok(Some(super::dec("grants", &key(id), &v)?)),
            None => Ok(None),
        }
    }
}
