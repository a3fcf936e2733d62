//! `create` from a clone template: `pct clone` of the source container (the new one carries pxfleet's mark from
//! the start), then `pct set` of everything the spec says, the root disk grown when the spec asks for more than
//! the clone has, and a start per `state`. Each step looks at the node first, so a re-run after an agent restart
//! continues where the last attempt stopped and never clones twice.

use super::*;
use crate::node::{CloneSpec, ConfigChange};
use crate::ops::CloneFrom;

const GIB: u64 = 1 << 30;

impl<D: NodeApi> Executor<D> {
    pub(super) async fn create_clone(&self, op_id: &str, c: &CreateOp, from: CloneFrom) -> Outcome {
        let d = &*self.inner.node;
        let vmid = c.vmid;
        let description = c.mark.description(c.description.as_deref());
        let exists = match d.config(vmid).await? {
            Some(cfg) if is_half_made(&cfg) => {
                self.progress(
                    op_id,
                    "removing a half-made clone left by an earlier attempt",
                );
                self.cleanup(vmid).await?;
                false
            }
            Some(cfg) => {
                check_managed(vmid, &cfg, Some(&c.mark))?;
                true
            }
            None => false,
        };
        if exists {
            self.progress(
                op_id,
                format!("CT {vmid} was cloned by an earlier attempt; configuring it"),
            );
        } else {
            let spec = CloneSpec {
                source: from.source,
                vmid,
                hostname: c.options.hostname.clone(),
                full: from.full,
                // A full clone's disk goes to the container's datastore; a linked one stays on the template's.
                storage: (from.full && !c.options.rootfs.storage.is_empty())
                    .then(|| c.options.rootfs.storage.clone()),
                description: Some(description.clone()),
            };
            let kind = if from.full { "full" } else { "linked" };
            self.progress(op_id, format!("pct clone {} {vmid} ({kind})", from.source));
            if let Err(e) = d.clone_ct(&spec).await {
                if let Ok(Some(cfg)) = d.config(vmid).await {
                    if is_half_made(&cfg) {
                        let _ = self.cleanup(vmid).await;
                    }
                }
                return Err(e.into());
            }
        }
        // Everything else the spec says, over what the clone copied from its source.
        let cfg = self.existing(vmid).await?;
        let mut want = c.options.clone();
        want.tags = tag_list(&c.tags);
        want.description = Some(description);
        let mut change = ConfigChange::diff(&cfg, &want, &d.pending(vmid).await?);
        // Given no mount points, a clone keeps the storage volumes it copied (its own, named for its vm_id: `pct
        // clone` made them from the source's); bind mounts it copied are host paths, which the spec would have to
        // give, and go.
        if want.mount_points.is_empty() {
            change.delete.retain(|key| {
                let slot = key.strip_prefix("mp").and_then(|n| n.parse::<u32>().ok());
                slot.and_then(|n| cfg.mount_points.get(&n))
                    .is_none_or(|m| pxfleet_pve::volume_owner(&m.volume) != Some(vmid))
            });
        }
        let revert: Vec<String> = std::mem::take(&mut change.revert).into_iter().collect();
        if !revert.is_empty() {
            d.revert(vmid, &revert).await?;
        }
        // env and lxc.idmap are no `pct set` options: written into the config file, as a create does.
        let idmap = change.idmap.take();
        let env = change.env.take();
        if let Some(env) = &env {
            pxfleet_pve::runtime::env_entries(vmid, env)?; // refused before anything is changed
        }
        if !change.is_empty() {
            self.progress(op_id, format!("pct set {}", change.keys().join(" ")));
            d.set(vmid, &change).await?;
        }
        if let Some(env) = &env {
            self.progress(
                op_id,
                "writing env (lxc.environment.runtime) into the config file",
            );
            d.write_env(vmid, env).await?;
        }
        if let Some(values) = &idmap {
            self.progress(op_id, "writing lxc.idmap into the config file");
            d.write_idmap(vmid, values).await?;
        }
        self.move_to_pool(op_id, vmid, c.options.pool.as_deref())
            .await?;
        let have_gib = cfg
            .rootfs
            .as_ref()
            .and_then(|r| r.size)
            .map_or(0, |b| b.div_ceil(GIB));
        let want_gib = u64::from(want.rootfs.size_gib);
        if want_gib > have_gib {
            self.progress(
                op_id,
                format!("pct resize rootfs {have_gib}G -> {want_gib}G"),
            );
            d.resize(vmid, "rootfs", want_gib).await?;
        }
        if c.make_template {
            self.make_template(op_id, vmid).await?;
        } else if c.start {
            let status = self.status(vmid).await?;
            if status != "running" {
                self.progress(op_id, format!("starting CT {vmid}"));
                d.start(vmid).await?;
            } else if !change.is_empty() || idmap.is_some() || env.is_some() {
                // Started by an earlier attempt before this one's changes: they take effect at the next start.
                d.reboot(vmid, REBOOT_TIMEOUT_SECS).await?;
            }
            self.wait_for_ip(op_id, vmid, !want.nets.is_empty(), c.wait_for)
                .await?;
        }
        let message = if exists {
            "cloned (continued)"
        } else {
            "cloned"
        };
        ok(message, self.observed(vmid).await)
    }
}
