//! `update`: the in-place change of a container's configuration (`pct set`, `--delete`, `--revert`) and the
//! plan of it ([`plan_update`]): what differs from the stored configuration, mount points matched by path.

use super::*;
use crate::node::CtConfig;
use crate::pve_options::config_change;

impl<D: NodeApi> Executor<D> {
    /// `update`: an in-place `pct set` of what differs (the mark kept), pending changes reverted where the file
    /// wants the value in effect, and a reboot when allowed and something waits for the next start.
    pub(super) async fn update(&self, op: &Operation) -> Outcome {
        let OpKind::Update {
            vmid,
            expect,
            desired,
            tags,
            description,
            restart,
            adopt,
        } = &op.kind
        else {
            unreachable!("perform dispatches updates here");
        };
        let d = &*self.inner.node;
        let cfg = self.existing(*vmid).await?;
        let unmarked = cfg
            .description
            .as_deref()
            .and_then(ManagedMark::from_description)
            .is_none();
        let mark = match expect {
            // Taken over: the mark is written with the other changes.
            Some(e) if *adopt && unmarked => {
                self.progress(
                    &op.id,
                    format!("adopting CT {vmid} as {} {}", e.fleet, e.name),
                );
                e.clone()
            }
            _ => check_managed(*vmid, &cfg, expect.as_ref())?,
        };
        let (mut options, mut delete) =
            plan_update(&mark, &cfg.raw, desired, tags, description.as_deref());
        // `pct config` shows pending values merged in: where the file wants what is in effect now, drop
        // the pending change (a `pct set` made by hand on the running container) instead of piling
        // another one on it.
        let revert = revert_pending(&d.pending(*vmid).await?, &mut options, &mut delete);
        if !revert.is_empty() {
            self.progress(&op.id, format!("pct set --revert {}", revert.join(",")));
            d.revert(*vmid, &revert).await?;
        }
        if !options.is_empty() || !delete.is_empty() {
            let keys: Vec<&str> = options
                .iter()
                .map(|(k, _)| k.as_str())
                .chain(delete.iter().map(String::as_str))
                .collect();
            self.progress(&op.id, format!("pct set {}", keys.join(" ")));
            let change = config_change(&options, &delete)?;
            d.set(*vmid, &change).await?;
        }
        // What PVE could not apply to the running container waits for its next start (also from an
        // earlier update that was not allowed to restart).
        let pending = if self.status(*vmid).await? == "running" {
            d.pending(*vmid).await?
        } else {
            Vec::new()
        };
        let keys: Vec<&str> = pending.iter().map(|p| p.key.as_str()).collect();
        let message = match (keys.is_empty(), *restart) {
            (true, _) if options.is_empty() && delete.is_empty() && revert.is_empty() => {
                return ok("nothing to change", self.observed(*vmid).await)
            }
            (true, _) => "updated".to_string(),
            (false, true) => {
                self.progress(&op.id, format!("pct reboot: {} pending", keys.join(" ")));
                d.reboot(*vmid, REBOOT_TIMEOUT_SECS).await?;
                let cfg = self.existing(*vmid).await?;
                self.wait_for_addresses(&op.id, *vmid, !cfg.nets.is_empty())
                    .await;
                format!("updated and restarted ({} applied)", keys.join(" "))
            }
            (false, false) => format!(
                "updated; pending until the next restart: {}",
                keys.join(" ")
            ),
        };
        ok(message, self.observed(*vmid).await)
    }
}

/// Option keys an update may delete when the spec no longer sets them. Create-only and
/// resize-only keys (`rootfs`, `unprivileged`, `mpN` volumes) are never touched here.
fn deletable(key: &str) -> bool {
    matches!(
        key,
        "cores"
            | "cpulimit"
            | "cpuunits"
            | "nameserver"
            | "searchdomain"
            | "startup"
            | "onboot"
            | "protection"
            | "features"
    ) || key
        .strip_prefix("net")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Computes the `pct set` for an update: desired options that differ from the config (with the mark
/// kept in description and tags), and managed keys to delete.
fn plan_update(
    mark: &ManagedMark,
    cfg: &CtConfig,
    desired: &[(String, String)],
    tags: &[String],
    description: Option<&str>,
) -> (Vec<(String, String)>, Vec<String>) {
    // Mount points are matched by their path, not their slot: one already there is left alone (growth is a
    // resize), a new one gets a free slot, one whose path left the file is deleted (PVE keeps its volume as
    // unusedN).
    let mp_path = |v: &str| {
        v.split(',')
            .find_map(|p| p.strip_prefix("mp="))
            .map(str::to_string)
    };
    let have_mps: Vec<(&String, Option<String>)> = cfg
        .iter()
        .filter(|(k, _)| is_mp_key(k))
        .map(|(k, v)| (k, mp_path(v)))
        .collect();
    let want_paths: Vec<Option<String>> = desired
        .iter()
        .filter(|(k, _)| is_mp_key(k))
        .map(|(_, v)| mp_path(v))
        .collect();
    let mut taken: Vec<String> = have_mps.iter().map(|(k, _)| (*k).clone()).collect();
    let mut want: Vec<(String, String)> = Vec::new();
    for (k, v) in desired {
        if matches!(
            k.as_str(),
            "tags" | "description" | "rootfs" | "unprivileged"
        ) {
            continue;
        }
        if !is_mp_key(k) {
            want.push((k.clone(), v.clone()));
            continue;
        }
        let path = mp_path(v);
        if have_mps.iter().any(|(_, p)| *p == path) {
            continue;
        }
        let slot = if taken.contains(k) {
            (0..256)
                .map(|i| format!("mp{i}"))
                .find(|s| !taken.contains(s))
                .unwrap_or_else(|| k.clone())
        } else {
            k.clone()
        };
        taken.push(slot.clone());
        want.push((slot, v.clone()));
    }
    want.push(("tags".into(), tags_with_mark(tags)));
    want.push(("description".into(), mark.description(description)));
    let mut set = Vec::new();
    for (k, v) in want {
        let same = match cfg.get(&k) {
            None => false,
            Some(cur) if k.starts_with("net") => crate::convert::same_net(cur, &v),
            Some(cur) if k == "tags" => {
                observe::split_tags(cur).join(";") == observe::split_tags(&v).join(";")
            }
            Some(cur) => cur.trim_end() == v.trim_end(),
        };
        if !same {
            // Keep a generated MAC: a spec without one must not make PVE generate a new one.
            let v = match (k.starts_with("net"), cfg.get(&k)) {
                (true, Some(cur)) => crate::convert::keep_hwaddr(cur, &v),
                _ => v,
            };
            set.push((k, v));
        }
    }
    let mut delete: Vec<String> = cfg
        .keys()
        .filter(|k| deletable(k) && !desired.iter().any(|(d, _)| d == *k))
        .cloned()
        .collect();
    delete.extend(
        have_mps
            .iter()
            .filter(|(_, p)| !want_paths.contains(p))
            .map(|(k, _)| (*k).clone()),
    );
    (set, delete)
}

/// Takes out of `options` / `delete` what would only undo a pending change (the file wants the value in effect
/// now) and returns those keys, to be reverted instead.
fn revert_pending(
    pending: &[pxfleet_pve::PendingKey],
    options: &mut Vec<(String, String)>,
    delete: &mut Vec<String>,
) -> Vec<String> {
    let mut revert = Vec::new();
    for p in pending {
        if p.current.is_none() {
            if let Some(i) = delete.iter().position(|k| *k == p.key) {
                delete.remove(i);
                revert.push(p.key.clone());
            }
        }
        let now = p.current.as_deref().map(str::trim_end);
        if let Some(i) = options
            .iter()
            .position(|(k, v)| *k == p.key && Some(v.trim_end()) == now)
        {
            options.remove(i);
            revert.push(p.key.clone());
        }
    }
    revert
}

/// `mp0` ... `mp255`.
fn is_mp_key(key: &str) -> bool {
    key.strip_prefix("mp")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_change_the_file_does_not_want_is_reverted_not_piled_on() {
        let pend =
            |key: &str, current: Option<&str>, pending: Option<&str>| pxfleet_pve::PendingKey {
                key: key.into(),
                current: current.map(String::from),
                pending: pending.map(String::from),
                delete: pending.is_none(),
            };
        // features=nesting=1 set by hand (pending only), nameserver changed by hand (pending), cores by
        // the file (no pending entry)
        let pending = vec![
            pend("features", None, Some("nesting=1")),
            pend("nameserver", Some("10.0.0.1"), Some("10.0.0.9")),
        ];
        let mut options = vec![
            ("nameserver".to_string(), "10.0.0.1".to_string()),
            ("cores".to_string(), "2".to_string()),
        ];
        let mut delete = vec!["features".to_string()];
        let revert = revert_pending(&pending, &mut options, &mut delete);
        assert_eq!(
            revert,
            vec!["features".to_string(), "nameserver".to_string()]
        );
        assert_eq!(options, vec![("cores".to_string(), "2".to_string())]);
        assert!(delete.is_empty());
    }

    #[test]
    fn mount_points_are_matched_by_path_not_slot() {
        let mark = ManagedMark {
            fleet: "dev".into(),
            name: "web".into(),
        };
        let mut cfg = CtConfig::new();
        cfg.insert("description".into(), mark.description(None));
        cfg.insert("tags".into(), "pxfleet".into());
        cfg.insert(
            "mp0".into(),
            "local-lvm:vm-1-disk-1,mp=/data,size=4G".into(),
        );
        cfg.insert(
            "mp1".into(),
            "local-lvm:vm-1-disk-2,mp=/logs,size=2G".into(),
        );
        // /data left the file (so /logs is mp0 in the spec), /new came in as mp1
        let desired = vec![
            ("mp0".to_string(), "local-lvm:2,mp=/logs".to_string()),
            ("mp1".to_string(), "local-lvm:1,mp=/new".to_string()),
        ];
        let (set, delete) = plan_update(&mark, &cfg, &desired, &[], None);
        assert_eq!(delete, vec!["mp0".to_string()]);
        let mps: Vec<&(String, String)> = set.iter().filter(|(k, _)| is_mp_key(k)).collect();
        assert_eq!(
            mps,
            vec![&("mp2".to_string(), "local-lvm:1,mp=/new".to_string())]
        );
    }

    #[test]
    fn updates_keep_the_mark_and_only_touch_what_differs() {
        let mark = ManagedMark {
            fleet: "dev".into(),
            name: "web".into(),
        };
        let mut cfg = CtConfig::new();
        cfg.insert("description".into(), mark.description(None));
        cfg.insert("tags".into(), "pxfleet;web".into());
        cfg.insert("cores".into(), "2".into());
        cfg.insert("memory".into(), "512".into());
        cfg.insert("startup".into(), "order=1".into());
        cfg.insert("rootfs".into(), "local:100/x.raw,size=4G".into());
        cfg.insert(
            "net0".into(),
            "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth".into(),
        );
        let desired = vec![
            ("cores".to_string(), "4".to_string()),
            ("memory".to_string(), "512".to_string()),
            ("rootfs".to_string(), "local:8".to_string()),
            (
                "net0".to_string(),
                "name=eth0,bridge=vmbr0,ip=dhcp,type=veth".to_string(),
            ),
        ];
        let (set, del) = plan_update(&mark, &cfg, &desired, &["web".into()], Some("hello"));
        assert_eq!(
            set,
            vec![
                ("cores".to_string(), "4".to_string()),
                (
                    "description".to_string(),
                    "managed-by: pxfleet fleet=dev name=web\nhello\n".to_string()
                ),
            ]
        );
        assert_eq!(del, vec!["startup".to_string()]);
        assert_eq!(
            tags_with_mark(&["Web".into(), "db".into()]),
            "db;pxfleet;web"
        );
    }
}
