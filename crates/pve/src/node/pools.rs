//! Resource pools (pve-manager `PVE/API2/Pool.pm`): which pool a guest is in is no container option but the
//! cluster's `user.cfg`; `pct create --pool` puts a new container in one (the pool must exist), `PUT /pools` moves
//! one in (`allow-move`: out of another) or out (`delete`), and `GET /cluster/resources` says where each guest is.

use super::*;

pub use pxfleet_pvekeys::is_pool_id;

/// Which pool each guest is in, from the text of the cluster's `user.cfg` (`pool:NAME:COMMENT:VMS:STORAGE:`
/// lines, pve-access-control's `parse_user_config`): guest vmid -> pool name.
pub fn guest_pools(user_cfg: &str) -> std::collections::BTreeMap<u32, String> {
    let mut out = std::collections::BTreeMap::new();
    for line in user_cfg.lines() {
        let Some(rest) = line.trim().strip_prefix("pool:") else {
            continue;
        };
        let f: Vec<&str> = rest.split(':').collect();
        let (Some(name), Some(vms)) = (f.first(), f.get(2)) else {
            continue;
        };
        for v in vms
            .split([',', ';', ' '])
            .filter_map(|v| v.parse::<u32>().ok())
        {
            out.entry(v).or_insert_with(|| name.to_string());
        }
    }
    out
}

impl Node {
    /// Puts container `vmid` into pool `to` (out of the one it is in, if any), or with `to` `None` takes it out of
    /// `from`. Errors worth matching say the pool does not exist (`pool 'x' does not exist`).
    pub async fn set_pool(
        &self,
        vmid: u32,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<(), PveError> {
        argv::check_vmid(vmid)?;
        let (pool, how) = match (from, to) {
            (_, Some(to)) => (to, "--allow-move"),
            (Some(from), None) => (from, "--delete"),
            (None, None) => return Ok(()),
        };
        if !is_pool_id(pool) {
            return Err(PveError::invalid(
                Some(vmid),
                "pool",
                pool,
                "a pool name: letters, digits, '.', '-', '_', starting with a letter (up to 3 levels with '/')",
            ));
        }
        let cmd = Command::new("pvesh")
            .args(["set", "/pools", "--poolid", pool, "--vms"])
            .arg(vmid.to_string())
            .args([how, "1"])
            .timeout(self.timeouts.set);
        self.exec(cmd, Some(vmid)).await?;
        Ok(())
    }

    /// The pools of the cluster (`GET /pools`), by name.
    pub async fn pools(&self) -> Result<Vec<String>, PveError> {
        #[derive(serde::Deserialize)]
        struct Entry {
            poolid: String,
        }
        let list: Vec<Entry> = self
            .get("/pools", &[], None, |s| {
                crate::parse::parse_json("GET /pools", s)
            })
            .await?;
        let mut names: Vec<String> = list.into_iter().map(|e| e.poolid).collect();
        names.sort();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_pools_are_read_from_user_cfg() {
        let text = "user:root@pam:1:0::::::\npool:web:Web servers:100,101::\npool:db::102:local-lvm:\npool:empty::::\n";
        let m = guest_pools(text);
        assert_eq!(m.get(&100).map(String::as_str), Some("web"));
        assert_eq!(m.get(&101).map(String::as_str), Some("web"));
        assert_eq!(m.get(&102).map(String::as_str), Some("db"));
        assert_eq!(m.len(), 3);
    }
}
