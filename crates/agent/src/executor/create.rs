//! `create`: makes a container from a template (seeded first when needed), marks it, optionally starts it;
//! a half-created leftover of an earlier attempt is removed first.

use super::*;
use crate::node::CreateSpec;

/// How long a running container that becomes a template gets to shut down cleanly before it is stopped.
const TEMPLATE_SHUTDOWN_SECS: u32 = 60;

impl<D: NodeApi> Executor<D> {
    pub(super) async fn create(&self, op_id: &str, c: &CreateOp) -> Outcome {
        if let Some(from) = c.clone {
            return self.create_clone(op_id, c, from).await;
        }
        let d = &*self.inner.node;
        let vmid = c.vmid;
        if let Some(cfg) = d.config(vmid).await? {
            if is_half_made(&cfg) {
                self.progress(
                    op_id,
                    "removing a half-created container left by an earlier attempt",
                );
                self.cleanup(vmid).await?;
            } else {
                match cfg.description.as_deref().and_then(ManagedMark::from_description) {
                    Some(m) if m == c.mark => {
                        // Created by an earlier attempt of this (or an equivalent) operation, which may have
                        // stopped before it wrote env and idmap: written again (the same lines) before a start.
                        if self.status(vmid).await? != "running" && !cfg.template {
                            self.write_runtime_lines(op_id, vmid, &c.options).await?;
                            if c.make_template {
                                self.make_template(op_id, vmid).await?;
                            } else if c.start {
                                d.start(vmid).await?;
                            }
                        }
                        if c.start {
                            self.wait_for_ip(op_id, vmid, !cfg.nets.is_empty(), c.wait_for)
                                .await?;
                        }
                        return ok("already created", self.observed(vmid).await);
                    }
                    Some(m) => {
                        return Err(fail(format!(
                            "vm_id {vmid} is already used by fleet {} container {}, not {} {}",
                            m.fleet, m.name, c.mark.fleet, c.mark.name
                        )))
                    }
                    None => {
                        return Err(fail(format!(
                            "vm_id {vmid} is already used by a container pxfleet does not manage; refusing to touch it"
                        )))
                    }
                }
            }
        }
        // pct destroy frees the volumes a container owns: an existing volume must belong to another vm_id so
        // that pxfleet never deletes a volume it did not allocate.
        for (i, m) in &c.options.mount_points {
            if let (Some(owner), pxfleet_pve::MountVolume::Existing { volume }) =
                (m.volume.existing_owner(), &m.volume)
            {
                if owner == vmid {
                    return Err(fail(format!(
                        "mp{i}: existing volume {volume} belongs to vm_id {vmid}, the container being created: PVE would free it with the container; mount a volume owned by another vm_id"
                    )));
                }
            }
        }
        self.progress(op_id, format!("ensuring template {}", c.template.volid()));
        let (ostemplate, _) = self.ensure_template(op_id, &c.template).await?;
        if c.options.rootfs.storage.is_empty() {
            return Err(PveError::Invalid {
                vmid: Some(vmid),
                field: "rootfs".into(),
                value: "<none>".into(),
                expected: "a rootfs option".into(),
            }
            .into());
        }
        let spec = CreateSpec {
            vmid,
            template: ostemplate,
            tags: tag_list(&c.tags),
            description: Some(c.mark.description(c.description.as_deref())),
            ssh_public_keys: c.ssh_public_keys.clone(),
            ..c.options.clone()
        };
        self.progress(op_id, format!("creating CT {vmid}"));
        if let Err(e) = d.create(&spec, c.password.as_ref()).await {
            // PVE removes a failed create's config itself, but a killed tool may leave the lock behind.
            if let Ok(Some(cfg)) = d.config(vmid).await {
                if is_half_made(&cfg) {
                    let _ = self.cleanup(vmid).await;
                }
            }
            return Err(e.into());
        }
        self.write_runtime_lines(op_id, vmid, &spec).await?;
        if c.make_template {
            self.make_template(op_id, vmid).await?;
            return ok("created as a template", self.observed(vmid).await);
        }
        // What was asked for is what was created (pct create fails otherwise): no need to read it back here.
        let has_net = !spec.nets.is_empty();
        let mut interfaces = None;
        if c.start {
            self.progress(op_id, format!("starting CT {vmid}"));
            d.start(vmid).await?;
            interfaces = self.wait_for_ip(op_id, vmid, has_net, c.wait_for).await?;
        }
        ok("created", self.observed_with(vmid, interfaces).await)
    }

    /// `state: template`: the container is stopped (cleanly, then hard when it does not stop in time) and made a
    /// template with `pct template`; one that already is one is left as it is.
    pub(super) async fn make_template(&self, op_id: &str, vmid: u32) -> Result<(), OpFailure> {
        let d = &*self.inner.node;
        if self.existing(vmid).await?.template {
            return Ok(());
        }
        if self.status(vmid).await? == "running" {
            self.progress(op_id, format!("stopping CT {vmid} to make it a template"));
            if !d.shutdown(vmid, TEMPLATE_SHUTDOWN_SECS).await? {
                d.stop(vmid).await?;
            }
        }
        self.progress(op_id, format!("pct template {vmid}"));
        Ok(d.make_template(vmid).await?)
    }

    /// lxc.idmap and env are no `pct create` options (env's NUL separator cannot be in an argument): written into
    /// the config file of the stopped container before its first start, so the first boot already runs with them.
    async fn write_runtime_lines(
        &self,
        op_id: &str,
        vmid: u32,
        spec: &CreateSpec,
    ) -> Result<(), PveError> {
        let d = &*self.inner.node;
        if let Some(env) = spec.env.as_ref().filter(|e| !e.is_empty()) {
            self.progress(
                op_id,
                "writing env (lxc.environment.runtime) into the config file",
            );
            d.write_env(vmid, env).await?;
        }
        if !spec.idmap.is_empty() {
            self.progress(op_id, "writing lxc.idmap into the config file");
            d.write_idmap(vmid, &spec.idmap).await?;
        }
        Ok(())
    }
}
