//! Observation: what really exists on this node. A full snapshot (every container, its config, its
//! managed mark, its addresses when running) and the delta between two snapshots, which is what the
//! agent sends after each operation and on every periodic pass.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::driver::{CtConfig, Interface, ManagedMark, NodeDriver, NodeError};

/// One container as observed on the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedContainer {
    pub vmid: u32,
    pub name: String,
    /// `running` / `stopped`.
    pub status: String,
    pub lock: Option<String>,
    /// The pxfleet mark; `None` for containers the agent did not create (reported, never touched).
    pub managed: Option<ManagedMark>,
    pub tags: Vec<String>,
    /// Stored config values (description included, digest left out).
    pub config: CtConfig,
    /// Addresses seen inside the running container (`addr/prefix`), loopback and link-local left out.
    pub addresses: Vec<String>,
}

/// A change between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Delta {
    /// New or changed containers.
    pub changed: Vec<ObservedContainer>,
    /// vmids that disappeared.
    pub removed: Vec<u32>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.removed.is_empty()
    }
}

/// The last snapshot sent, to compute deltas against.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    pub containers: BTreeMap<u32, ObservedContainer>,
}

impl Snapshot {
    /// Replaces the snapshot with `now` and returns what changed.
    pub fn update(&mut self, now: Vec<ObservedContainer>) -> Delta {
        let now: BTreeMap<u32, ObservedContainer> = now.into_iter().map(|c| (c.vmid, c)).collect();
        let removed = self
            .containers
            .keys()
            .filter(|k| !now.contains_key(k))
            .copied()
            .collect();
        let changed = now
            .values()
            .filter(|c| self.containers.get(&c.vmid) != Some(c))
            .cloned()
            .collect();
        self.containers = now;
        Delta { changed, removed }
    }

    /// Records one container's new state (or its absence) and returns the delta for it.
    pub fn update_one(&mut self, vmid: u32, now: Option<ObservedContainer>) -> Delta {
        match now {
            Some(c) => {
                if self.containers.get(&vmid) == Some(&c) {
                    Delta::default()
                } else {
                    self.containers.insert(vmid, c.clone());
                    Delta {
                        changed: vec![c],
                        removed: vec![],
                    }
                }
            }
            None => {
                if self.containers.remove(&vmid).is_some() {
                    Delta {
                        changed: vec![],
                        removed: vec![vmid],
                    }
                } else {
                    Delta::default()
                }
            }
        }
    }
}

/// Addresses worth reporting: no loopback, no IPv6 link-local.
pub fn useful_addresses(ifaces: &[Interface]) -> Vec<String> {
    let mut out = Vec::new();
    for i in ifaces {
        if i.name == "lo" {
            continue;
        }
        for a in &i.addresses {
            let ip = a.split('/').next().unwrap_or("");
            if ip.starts_with("127.") || ip == "::1" || ip.to_ascii_lowercase().starts_with("fe80:")
            {
                continue;
            }
            out.push(a.clone());
        }
    }
    out
}

/// Splits a PVE tag list (`a;b`, also `,` or spaces).
pub fn split_tags(tags: &str) -> Vec<String> {
    tags.split([';', ',', ' '])
        .filter(|t| !t.is_empty())
        .map(|t| t.to_string())
        .collect()
}

/// Observes one container; `None` when it does not exist on this node.
pub async fn observe_one<D: NodeDriver>(
    driver: &D,
    vmid: u32,
) -> Result<Option<ObservedContainer>, NodeError> {
    let list = driver.list().await?;
    let Some(summary) = list.into_iter().find(|c| c.vmid == vmid) else {
        return Ok(None);
    };
    let config = driver.config(vmid).await?.unwrap_or_default();
    let addresses = if summary.status == "running" {
        driver
            .interfaces(vmid)
            .await?
            .map(|i| useful_addresses(&i))
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    Ok(Some(build(summary, config, addresses)))
}

/// Observes every container on the node.
pub async fn observe_all<D: NodeDriver>(driver: &D) -> Result<Vec<ObservedContainer>, NodeError> {
    let mut out = Vec::new();
    for summary in driver.list().await? {
        let vmid = summary.vmid;
        // A container may vanish between list and config (destroyed meanwhile): skip it.
        let Some(config) = driver.config(vmid).await? else {
            continue;
        };
        let addresses = if summary.status == "running" {
            driver
                .interfaces(vmid)
                .await
                .ok()
                .flatten()
                .map(|i| useful_addresses(&i))
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        out.push(build(summary, config, addresses));
    }
    Ok(out)
}

fn build(
    summary: crate::driver::CtSummary,
    mut config: CtConfig,
    addresses: Vec<String>,
) -> ObservedContainer {
    config.remove("digest");
    let managed = config
        .get("description")
        .and_then(|d| ManagedMark::parse(d));
    let tags = config
        .get("tags")
        .map(|t| split_tags(t))
        .unwrap_or_default();
    let lock = summary.lock.or_else(|| config.get("lock").cloned());
    ObservedContainer {
        vmid: summary.vmid,
        name: summary.name,
        status: summary.status,
        lock,
        managed,
        tags,
        config,
        addresses,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ct(vmid: u32, status: &str) -> ObservedContainer {
        ObservedContainer {
            vmid,
            name: format!("ct{vmid}"),
            status: status.into(),
            lock: None,
            managed: None,
            tags: vec![],
            config: CtConfig::new(),
            addresses: vec![],
        }
    }

    #[test]
    fn delta_reports_new_changed_and_removed() {
        let mut s = Snapshot::default();
        let d = s.update(vec![ct(100, "running"), ct(101, "stopped")]);
        assert_eq!(d.changed.len(), 2);
        let d = s.update(vec![ct(100, "running"), ct(101, "stopped")]);
        assert!(d.is_empty());
        let d = s.update(vec![ct(100, "stopped")]);
        assert_eq!(d.changed, vec![ct(100, "stopped")]);
        assert_eq!(d.removed, vec![101]);
        assert!(s.update_one(100, Some(ct(100, "stopped"))).is_empty());
        assert_eq!(s.update_one(100, None).removed, vec![100]);
        assert!(s.update_one(100, None).is_empty());
    }

    #[test]
    fn loopback_and_link_local_are_not_reported() {
        let ifaces = vec![
            Interface {
                name: "lo".into(),
                hwaddr: "00:00:00:00:00:00".into(),
                addresses: vec!["127.0.0.1/8".into(), "::1/128".into()],
            },
            Interface {
                name: "eth0".into(),
                hwaddr: "bc:24:11:5e:7a:01".into(),
                addresses: vec![
                    "192.168.7.100/24".into(),
                    "fe80::be24:11ff:fe5e:7a01/64".into(),
                    "2001:db8::5/64".into(),
                ],
            },
        ];
        assert_eq!(
            useful_addresses(&ifaces),
            vec!["192.168.7.100/24".to_string(), "2001:db8::5/64".to_string()]
        );
        assert_eq!(split_tags("prod;web"), vec!["prod", "web"]);
    }
}
