//! Observation: what really exists on this node. A full snapshot (every container, its config, its
//! managed mark, its addresses when running) and the delta between two snapshots, which is what the
//! agent sends after each operation and on every periodic pass.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::node::{ContainerConfig, CtConfig, Interface, ManagedMark, NodeApi, PveError};

/// One container as observed on the node. Journaled with the operation's result: its configuration is written
/// as the stored `key -> value` text (the format of earlier agents) and typed again when read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedContainer {
    pub vmid: u32,
    pub name: String,
    /// `running` / `stopped`.
    pub status: String,
    pub lock: Option<String>,
    /// The pxfleet mark; `None` for containers the agent did not create (reported, never touched).
    pub managed: Option<ManagedMark>,
    pub tags: Vec<String>,
    /// Its configuration, typed (description included, digest left out; every key also as text in `raw`).
    #[serde(with = "as_text")]
    pub config: ContainerConfig,
    /// Addresses seen inside the running container (`addr/prefix`), loopback and link-local left out.
    pub addresses: Vec<String>,
    /// The node's listing of it when its configuration was read ([`listing_key`]): a pass reads the
    /// configuration again only when the listing moved (or its turn came).
    #[serde(default)]
    pub listed_as: String,
    /// The resource pool it is in (the cluster's `user.cfg`), read every pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

/// A [`ContainerConfig`] (de)serialised as its stored text (`raw`).
mod as_text {
    use super::*;

    pub fn serialize<S: serde::Serializer>(c: &ContainerConfig, s: S) -> Result<S::Ok, S::Error> {
        c.raw.serialize(s)
    }

    /// A configuration pve's parser refuses still loads, as text only.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<ContainerConfig, D::Error> {
        let raw = CtConfig::deserialize(d)?;
        Ok(crate::node::typed_config(&raw).unwrap_or(ContainerConfig {
            raw,
            ..ContainerConfig::default()
        }))
    }
}

/// What the node's one-call listing says of a container; a change means its configuration changed.
pub fn listing_key(s: &crate::node::CtSummary) -> String {
    format!(
        "status={} lock={:?} name={} {}",
        s.status, s.lock, s.name, s.listing
    )
}

/// A change between two snapshots.
#[derive(Debug, Clone, PartialEq, Default)]
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
///
/// A pass over every container takes a while (one `pct config` per container), and operations run meanwhile.
/// What a pass read of a container an operation touched after the pass began is older than what the operation
/// reported, so a pass never overrides it: otherwise a create finishing during a pass would be reported as
/// removed again, and the controller would plan to create it a second time.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    pub containers: BTreeMap<u32, ObservedContainer>,
    /// Advances with every pass start and every per-container change.
    epoch: u64,
    /// vmid -> the epoch of the last time an operation touched it.
    touched: BTreeMap<u32, u64>,
    /// vmid -> the epoch its configuration was last read (by a pass or after an operation).
    read_at: BTreeMap<u32, u64>,
    /// vmid -> operations running on it now: a pass does not read these (the operation reports the container
    /// when it ends), and keeps their current entry.
    busy: BTreeMap<u32, usize>,
}

impl Snapshot {
    /// Marks the start of a pass over the whole node; hand the value to [`Snapshot::update_pass`].
    pub fn begin_pass(&mut self) -> u64 {
        self.epoch += 1;
        self.epoch
    }

    /// Notes that an operation is changing `vmid`, so a pass already under way does not report it.
    pub fn touch(&mut self, vmid: u32) {
        self.epoch += 1;
        self.touched.insert(vmid, self.epoch);
    }

    /// Notes that an operation on `vmid` began (`true`) or ended (`false`); see [`Snapshot::busy_vmids`].
    pub fn set_busy(&mut self, vmid: u32, busy: bool) {
        let n = self.busy.entry(vmid).or_default();
        if busy {
            *n += 1;
        } else {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.busy.remove(&vmid);
            }
        }
    }

    /// Containers an operation is changing right now. A pass leaves them alone: reading a container in the
    /// middle of a create or start costs a `pct config` and an interfaces call per pass on a node that is busy
    /// with the operation itself, and shows only a passing state (`lock: create`); the operation reads the
    /// container back when it ends.
    pub fn busy_vmids(&self) -> BTreeSet<u32> {
        self.busy.keys().copied().collect()
    }

    /// What a quick pass may take from the snapshot instead of reading the node: every container except the
    /// `1/rotate` whose configuration was read longest ago (so each is read again at least every `rotate`
    /// passes, and a change the listing does not show is still seen).
    pub fn reusable(&self, rotate: usize) -> BTreeMap<u32, ObservedContainer> {
        let mut by_age: Vec<(u64, u32)> = self
            .containers
            .keys()
            .map(|v| (self.read_at.get(v).copied().unwrap_or(0), *v))
            .collect();
        by_age.sort();
        let due = self.containers.len().div_ceil(rotate.max(1));
        by_age
            .into_iter()
            .skip(due)
            .filter_map(|(_, v)| self.containers.get(&v).map(|c| (v, c.clone())))
            .collect()
    }

    /// Notes the configurations a pass begun at `began` read.
    pub fn mark_read(&mut self, vmids: impl IntoIterator<Item = u32>, began: u64) {
        for v in vmids {
            self.read_at.insert(v, began);
        }
    }

    /// Replaces the snapshot with what the pass begun at `began` saw, except for containers touched since
    /// (their current entry is kept), and returns what changed.
    pub fn update_pass(&mut self, seen: Vec<ObservedContainer>, began: u64) -> Delta {
        let fresh = |vmid: &u32| {
            self.busy.contains_key(vmid) || self.touched.get(vmid).is_some_and(|&t| t >= began)
        };
        let mut now: BTreeMap<u32, ObservedContainer> = seen
            .into_iter()
            .filter(|c| !fresh(&c.vmid))
            .map(|c| (c.vmid, c))
            .collect();
        for (vmid, c) in &self.containers {
            if fresh(vmid) {
                now.insert(*vmid, c.clone());
            }
        }
        self.touched.retain(|_, &mut t| t >= began);
        self.read_at.retain(|v, _| now.contains_key(v));
        self.replace(now)
    }

    fn replace(&mut self, now: BTreeMap<u32, ObservedContainer>) -> Delta {
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

    /// Records one container's new state (or its absence) after an operation and returns the delta for it.
    pub fn update_one(&mut self, vmid: u32, now: Option<ObservedContainer>) -> Delta {
        self.touch(vmid);
        self.read_at.insert(vmid, self.epoch);
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
pub async fn observe_one<D: NodeApi>(
    node: &D,
    vmid: u32,
) -> Result<Option<ObservedContainer>, PveError> {
    observe_one_with(node, vmid, None).await
}

/// [`observe_one`], taking the container's interfaces as just read (by the address wait that ended the
/// operation) instead of asking the node again when it is running.
pub async fn observe_one_with<D: NodeApi>(
    node: &D,
    vmid: u32,
    interfaces: Option<Vec<Interface>>,
) -> Result<Option<ObservedContainer>, PveError> {
    let list = node.list().await?;
    let Some(summary) = list.into_iter().find(|c| c.vmid == vmid) else {
        return Ok(None);
    };
    let config = node.config(vmid).await?.unwrap_or_default();
    let addresses = if summary.status == "running" {
        let interfaces = match interfaces {
            Some(i) => Some(i),
            None => node.interfaces(vmid).await?,
        };
        interfaces.map(|i| useful_addresses(&i)).unwrap_or_default()
    } else {
        Vec::new()
    };
    let pool = node.guest_pools().await.remove(&vmid);
    Ok(Some(build(summary, config, addresses, pool)))
}

/// Observes every container on the node with one listing, reading the configuration (and, when running,
/// the addresses) only of containers that are not in `known` or whose listing moved since; a running one
/// without an address yet is asked for its addresses again. Returns the containers and the vmids whose
/// configuration was read. Containers in `skip` (an operation is changing them) are neither read nor returned.
pub async fn observe_changed<D: NodeApi>(
    node: &D,
    known: &BTreeMap<u32, ObservedContainer>,
    skip: &BTreeSet<u32>,
) -> Result<(Vec<ObservedContainer>, Vec<u32>), PveError> {
    let mut out = Vec::new();
    let mut read = Vec::new();
    // Pool membership is no config key: read for every container, so a change is seen without a config read.
    let pools = node.guest_pools().await;
    for summary in node.list().await? {
        let vmid = summary.vmid;
        if skip.contains(&vmid) {
            continue;
        }
        if let Some(prev) = known
            .get(&vmid)
            .filter(|p| !p.listed_as.is_empty() && p.listed_as == listing_key(&summary))
        {
            let mut c = prev.clone();
            c.pool = pools.get(&vmid).cloned();
            if c.status == "running" && c.addresses.is_empty() {
                c.addresses = node
                    .interfaces(vmid)
                    .await
                    .ok()
                    .flatten()
                    .map(|i| useful_addresses(&i))
                    .unwrap_or_default();
            }
            out.push(c);
            continue;
        }
        read.push(vmid);
        // A container may vanish between list and config (destroyed meanwhile): skip it.
        let Some(config) = node.config(vmid).await? else {
            continue;
        };
        let addresses = if summary.status == "running" {
            node.interfaces(vmid)
                .await
                .ok()
                .flatten()
                .map(|i| useful_addresses(&i))
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        out.push(build(summary, config, addresses, pools.get(&vmid).cloned()));
    }
    Ok((out, read))
}

fn build(
    summary: crate::node::CtSummary,
    mut config: ContainerConfig,
    addresses: Vec<String>,
    pool: Option<String>,
) -> ObservedContainer {
    config.raw.remove("digest");
    config.digest = None;
    let managed = config
        .description
        .as_deref()
        .and_then(ManagedMark::from_description);
    let tags = config.tags.clone();
    let listed_as = listing_key(&summary);
    let lock = summary.lock.or_else(|| config.lock.clone());
    ObservedContainer {
        listed_as,
        vmid: summary.vmid,
        name: summary.name,
        status: summary.status,
        lock,
        managed,
        tags,
        config,
        addresses,
        pool,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A whole pass that no operation overlapped.
    fn pass(s: &mut Snapshot, seen: Vec<ObservedContainer>) -> Delta {
        let began = s.begin_pass();
        s.update_pass(seen, began)
    }

    fn ct(vmid: u32, status: &str) -> ObservedContainer {
        ObservedContainer {
            vmid,
            name: format!("ct{vmid}"),
            status: status.into(),
            lock: None,
            managed: None,
            tags: vec![],
            config: ContainerConfig::default(),
            addresses: vec![],
            listed_as: String::new(),
            pool: None,
        }
    }

    /// Regression: a create that finished while a pass was reading the node was reported as removed by that
    /// pass, and the controller planned to create it again.
    #[test]
    fn a_pass_does_not_undo_what_an_operation_reported_meanwhile() {
        let mut s = Snapshot::default();
        pass(
            &mut s,
            vec![ct(100, "running"), ct(101, "running"), ct(102, "running")],
        );
        let began = s.begin_pass();
        // during the pass: 103 is created, 101 destroyed by operations; 102 vanished by hand
        s.update_one(103, Some(ct(103, "running")));
        s.update_one(101, None);
        // the pass read the node before those operations ended
        let d = s.update_pass(vec![ct(100, "running"), ct(101, "running")], began);
        assert!(d.changed.is_empty(), "{d:?}");
        assert_eq!(d.removed, vec![102], "only the one no operation touched");
        let vmids: Vec<u32> = s.containers.keys().copied().collect();
        assert_eq!(vmids, vec![100, 103]);
        // the next pass sees the node as it is and overrides as usual
        let began = s.begin_pass();
        let d = s.update_pass(vec![ct(100, "stopped")], began);
        assert_eq!(d.changed, vec![ct(100, "stopped")]);
        assert_eq!(d.removed, vec![103]);
    }

    /// A container an operation is changing is left out of passes (no reads on a node busy with the
    /// operation, no passing `lock: create` sent): its last entry stays, nothing is reported removed, and once
    /// the operation ended passes report it again.
    #[test]
    fn a_pass_keeps_what_it_knew_of_a_container_an_operation_is_changing() {
        let mut s = Snapshot::default();
        pass(&mut s, vec![ct(100, "stopped")]);
        s.set_busy(100, true);
        s.set_busy(101, true); // being created: not in the snapshot yet
        assert_eq!(s.busy_vmids().into_iter().collect::<Vec<_>>(), [100, 101]);
        // the pass skipped both (observe_changed leaves them out)
        let d = pass(&mut s, vec![]);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(s.containers.keys().copied().collect::<Vec<_>>(), [100]);
        s.set_busy(100, false);
        s.set_busy(101, false);
        assert!(s.busy_vmids().is_empty());
        let d = pass(&mut s, vec![ct(100, "running"), ct(101, "running")]);
        assert_eq!(d.changed, vec![ct(100, "running"), ct(101, "running")]);
    }

    /// The journal keeps results of earlier agents: the configuration as a `key -> text` map.
    #[test]
    fn journaled_configuration_is_text_and_is_typed_when_read() {
        let line = r#"{"vmid":100,"name":"web","status":"running","lock":null,"managed":null,"tags":["pxfleet"],"config":{"cores":"2","memory":"512","net0":"name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth"},"addresses":[]}"#;
        let c: ObservedContainer = serde_json::from_str(line).unwrap();
        assert_eq!(c.config.memory, Some(512));
        assert_eq!(c.config.hwaddr(0), Some("BC:24:11:00:00:01"));
        assert_eq!(c.config.raw["cores"], "2");
        let again = serde_json::to_value(&c).unwrap();
        assert_eq!(again["config"]["memory"], "512");
        assert_eq!(
            serde_json::from_value::<ObservedContainer>(again).unwrap(),
            c
        );
        // a value pve's parser refuses still loads, as text
        let odd = line.replace(r#""512""#, r#""lots""#);
        let c: ObservedContainer = serde_json::from_str(&odd).unwrap();
        assert_eq!(c.config.raw["memory"], "lots");
    }

    #[test]
    fn delta_reports_new_changed_and_removed() {
        let mut s = Snapshot::default();
        let d = pass(&mut s, vec![ct(100, "running"), ct(101, "stopped")]);
        assert_eq!(d.changed.len(), 2);
        let d = pass(&mut s, vec![ct(100, "running"), ct(101, "stopped")]);
        assert!(d.is_empty());
        let d = pass(&mut s, vec![ct(100, "stopped")]);
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
