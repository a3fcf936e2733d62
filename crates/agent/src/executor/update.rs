//! `update`: the in-place change of a container's configuration (`pct set`, `--delete`, `--revert`); what
//! differs from the stored configuration is pve's [`ConfigChange::diff`].

use super::*;
use crate::node::ConfigChange;

impl<D: NodeApi> Executor<D> {
    /// Puts the container into pool `want` when it is in another or none (`None`: not the file's business, left
    /// as it is). Returns whether it moved.
    pub(super) async fn move_to_pool(
        &self,
        op_id: &str,
        vmid: u32,
        want: Option<&str>,
    ) -> Result<bool, OpFailure> {
        let Some(want) = want else {
            return Ok(false);
        };
        let d = &*self.inner.node;
        let now = d.guest_pools().await.remove(&vmid);
        if now.as_deref() == Some(want) {
            return Ok(false);
        }
        self.progress(
            op_id,
            format!("pvesh set /pools --poolid {want} --vms {vmid}"),
        );
        d.set_pool(vmid, now.as_deref(), Some(want)).await?;
        Ok(true)
    }

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
            make_template,
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
        let mut want = desired.clone();
        want.tags = tag_list(tags);
        want.description = Some(mark.description(description.as_deref()));
        // `pct config` shows pending values merged in: where the file wants what is in effect now, the diff
        // drops the pending change (a `pct set` made by hand on the running container) instead of piling
        // another one on it.
        let pending_before = d.pending(*vmid).await?;
        let mut change = ConfigChange::diff(&cfg, &want, &pending_before);
        // env is written into the file's main section: a pending `env` (a `pct set --env` by hand on the running
        // container) would hide it from `pct config`, so it is reverted.
        if change.env.is_some() && pending_before.iter().any(|p| p.key == "env") {
            change.revert.insert("env".into());
        }
        let revert: Vec<String> = std::mem::take(&mut change.revert).into_iter().collect();
        if !revert.is_empty() {
            self.progress(&op.id, format!("pct set --revert {}", revert.join(",")));
            d.revert(*vmid, &revert).await?;
        }
        // Written into the config file, not given to `pct set` (env: its NUL separator cannot be in an argument).
        let env = change.env.take();
        if let Some(env) = &env {
            pxfleet_pve::runtime::env_entries(*vmid, env)?; // refused before anything is changed
        }
        let idmap = change.idmap.take();
        let keys = change.keys();
        if !change.is_empty() {
            self.progress(&op.id, format!("pct set {}", keys.join(" ")));
            d.set(*vmid, &change).await?;
        }
        if let Some(env) = &env {
            self.progress(
                &op.id,
                "writing env (lxc.environment.runtime) into the config file",
            );
            d.write_env(*vmid, env).await?;
        }
        if let Some(values) = &idmap {
            self.progress(&op.id, "writing lxc.idmap into the config file");
            d.write_idmap(*vmid, values).await?;
        }
        let pool_moved = self
            .move_to_pool(&op.id, *vmid, desired.pool.as_deref())
            .await?;
        // What PVE could not apply to the running container waits for its next start (also from an
        // earlier update that was not allowed to restart).
        let pending = if self.status(*vmid).await? == "running" {
            d.pending(*vmid).await?
        } else {
            Vec::new()
        };
        let mut keys: Vec<&str> = pending.iter().map(|p| p.key.as_str()).collect();
        // env and lxc.idmap are read when the container starts; written into the file, they are not listed as
        // pending.
        if (env.is_some() || idmap.is_some()) && self.status(*vmid).await? == "running" {
            if env.is_some() {
                keys.push("env");
            }
            if idmap.is_some() {
                keys.push("lxc.idmap");
            }
        }
        // `state: template`: what changed is in the config; the container is stopped and made a template (PVE
        // starts no template, so nothing stays pending).
        if *make_template && !cfg.template {
            self.make_template(&op.id, *vmid).await?;
            return ok("updated and made a template", self.observed(*vmid).await);
        }
        let message = match (keys.is_empty(), *restart) {
            (true, _)
                if change.is_empty()
                    && revert.is_empty()
                    && env.is_none()
                    && idmap.is_none()
                    && !pool_moved =>
            {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_keep_the_mark_and_only_touch_what_differs() {
        let mark = ManagedMark {
            fleet: "dev".into(),
            name: "web".into(),
        };
        let mut cfg = crate::node::CtConfig::new();
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
        let cfg = crate::node::typed_config(&cfg).unwrap();
        let desired = vec![
            ("cores".to_string(), "4".to_string()),
            ("memory".to_string(), "512".to_string()),
            ("rootfs".to_string(), "local:8".to_string()),
            ("unprivileged".to_string(), "0".to_string()),
            ("tags".to_string(), "other".to_string()),
            (
                "net0".to_string(),
                "name=eth0,bridge=vmbr0,ip=dhcp,type=veth".to_string(),
            ),
        ];
        let mut want = crate::pve_options::options_spec(&desired).unwrap();
        want.tags = tag_list(&["web".into()]);
        want.description = Some(mark.description(Some("hello")));
        let c = ConfigChange::diff(&cfg, &want, &[]);
        assert_eq!(c.keys(), vec!["cores", "description", "startup"]);
        assert_eq!(c.cores, Some(4));
        assert_eq!(
            c.description.as_deref(),
            Some("managed-by: pxfleet fleet=dev name=web\nhello\n")
        );
        assert_eq!(
            tag_list(&["Web".into(), "db".into()]),
            vec!["db", "pxfleet", "web"]
        );
    }
}
