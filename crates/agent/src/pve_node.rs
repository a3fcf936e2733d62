//! [`PveNode`]: the agent's [`NodeApi`] over crates/pve's node driver ([`pxfleet_pve::Node`]). The agent's PVE
//! options (`key`, `value` as PVE stores them) are mapped onto pve's typed [`CreateSpec`] / [`ConfigChange`],
//! and pve's typed answers back into the agent's plain data. This is the only module that drives crates/pve.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pxfleet_pve::parse::{parse_bool, Features, MountPoint, NetConfig, Startup};
use pxfleet_pve::spec::MountVolume;
use pxfleet_pve::{
    ConfigChange, CreateSpec, MountPointSpec, Node, ProcessRunner, PveError, RootfsSpec, Timeouts,
};

use crate::config::AgentConfig;
use crate::node::{
    BridgeInfo, CreateArgs, CtConfig, CtSummary, Interface, NodeApi, NodeFacts, Secret,
    StorageInfo, TemplateFile,
};

/// A PVE node reached through its command-line tools.
pub struct PveNode {
    node: Node,
    /// Storage -> its template directory (`pvesm path`): asked once per storage, not once per create.
    template_dirs: std::sync::Mutex<BTreeMap<String, PathBuf>>,
}

impl PveNode {
    pub fn new(node: Node) -> Self {
        PveNode {
            node,
            template_dirs: Default::default(),
        }
    }

    /// The node described by the agent config: tools in `pve_bin_dir`, `env` passed to them.
    pub fn from_config(config: &AgentConfig) -> Self {
        let mut runner = ProcessRunner::with_bin_dir(&config.pve_bin_dir);
        for (k, v) in &config.env {
            runner = runner.with_env(k, v);
        }
        let t = config.command_timeout();
        let timeouts = Timeouts {
            create: t,
            destroy: t,
            migrate: t,
            download: t,
            ..Timeouts::default()
        };
        PveNode::new(Node::new(&config.node, Arc::new(runner)).with_timeouts(timeouts))
    }
}

fn bad(key: &str, value: &str, why: impl std::fmt::Display) -> PveError {
    PveError::Invalid {
        vmid: None,
        field: format!("option {key}"),
        value: value.to_string(),
        expected: why.to_string(),
    }
}

fn num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, PveError> {
    v.trim().parse().map_err(|_| bad(k, v, "not a number"))
}

/// A PVE boolean as PVE reads it (`1/yes/on/true`, `0/no/off/false`).
fn flag(k: &str, v: &str) -> Result<bool, PveError> {
    parse_bool(v.trim())
        .ok_or_else(|| bad(k, v, "not a PVE boolean (1/0, yes/no, on/off, true/false)"))
}

fn index(key: &str, prefix: &str) -> Option<u32> {
    key.strip_prefix(prefix)?.parse().ok()
}

fn words(v: &str) -> Vec<String> {
    v.split([' ', ',', ';'])
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn storage_size(k: &str, v: &str, volume: &str) -> Result<(String, u32), PveError> {
    let (storage, size) = volume
        .split_once(':')
        .ok_or_else(|| bad(k, v, "expected STORAGE:GiB"))?;
    Ok((storage.to_string(), num(k, size)?))
}

fn mount_point(k: &str, v: &str) -> Result<MountPointSpec, PveError> {
    let m = MountPoint::parse(v).map_err(|e| bad(k, v, e))?;
    let volume = if m.volume.starts_with('/') {
        MountVolume::Bind {
            host_path: m.volume.clone(),
        }
    } else {
        let (storage, size_gib) = storage_size(k, v, &m.volume)?;
        MountVolume::Storage { storage, size_gib }
    };
    let path =
        m.mp.filter(|p| !p.is_empty())
            .ok_or_else(|| bad(k, v, "missing mp=PATH"))?;
    Ok(MountPointSpec {
        volume,
        path,
        backup: m.backup,
        read_only: m.ro,
        mount_options: m
            .mountoptions
            .map(|o| {
                o.split(';')
                    .filter(|o| !o.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// Maps agent options onto a typed create request.
pub fn create_spec(args: &CreateArgs) -> Result<CreateSpec, PveError> {
    let rootfs = args
        .options
        .iter()
        .find(|(k, _)| k == "rootfs")
        .map(|(k, v)| storage_size(k, v, v.split(',').next().unwrap_or("")))
        .transpose()?
        .map(|(storage, size_gib)| RootfsSpec { storage, size_gib })
        .ok_or_else(|| PveError::Invalid {
            vmid: Some(args.vmid),
            field: "rootfs".into(),
            value: "<none>".into(),
            expected: "a rootfs option".into(),
        })?;
    let mut s = CreateSpec::new(args.vmid, &args.ostemplate, rootfs);
    s.ssh_public_keys = args.ssh_public_keys.clone();
    for (k, v) in &args.options {
        let (k, v) = (k.as_str(), v.as_str());
        match k {
            "rootfs" => {}
            "hostname" => s.hostname = Some(v.to_string()),
            "cores" => s.cores = Some(num(k, v)?),
            "cpulimit" => s.cpulimit = Some(num(k, v)?),
            "cpuunits" => s.cpuunits = Some(num(k, v)?),
            "memory" => s.memory = Some(num(k, v)?),
            "swap" => s.swap = Some(num(k, v)?),
            "unprivileged" => s.unprivileged = flag(k, v)?,
            "features" => s.features = Features::parse(v).map_err(|e| bad(k, v, e))?,
            "nameserver" => s.nameservers = words(v),
            "searchdomain" => s.searchdomains = words(v),
            "startup" => s.startup = Some(Startup::parse(v).map_err(|e| bad(k, v, e))?),
            "onboot" => s.onboot = Some(flag(k, v)?),
            "protection" => s.protection = Some(flag(k, v)?),
            "ostype" => s.ostype = Some(v.to_string()),
            "tags" => s.tags = words(v),
            "description" => s.description = Some(v.to_string()),
            _ => {
                if let Some(i) = index(k, "net") {
                    s.nets
                        .insert(i, NetConfig::parse(v).map_err(|e| bad(k, v, e))?);
                } else if let Some(i) = index(k, "mp") {
                    s.mount_points.insert(i, mount_point(k, v)?);
                } else {
                    return Err(bad(k, v, "not an option pxagent sets at create"));
                }
            }
        }
    }
    Ok(s)
}

/// Maps agent options and deletions onto a typed `pct set`.
pub fn config_change(
    options: &[(String, String)],
    delete: &[String],
) -> Result<ConfigChange, PveError> {
    let mut c = ConfigChange::default();
    for (k, v) in options {
        let (k, v) = (k.as_str(), v.as_str());
        match k {
            "hostname" => c.hostname = Some(v.to_string()),
            "cores" => c.cores = Some(num(k, v)?),
            "cpulimit" => c.cpulimit = Some(num(k, v)?),
            "cpuunits" => c.cpuunits = Some(num(k, v)?),
            "memory" => c.memory = Some(num(k, v)?),
            "swap" => c.swap = Some(num(k, v)?),
            "features" => c.features = Some(Features::parse(v).map_err(|e| bad(k, v, e))?),
            "nameserver" => c.nameservers = Some(words(v)),
            "searchdomain" => c.searchdomains = Some(words(v)),
            "startup" => c.startup = Some(Startup::parse(v).map_err(|e| bad(k, v, e))?),
            "onboot" => c.onboot = Some(flag(k, v)?),
            "protection" => c.protection = Some(flag(k, v)?),
            "ostype" => c.ostype = Some(v.to_string()),
            "tags" => c.tags = Some(words(v)),
            "description" => c.description = Some(v.to_string()),
            _ => {
                if let Some(i) = index(k, "net") {
                    c.nets
                        .insert(i, NetConfig::parse(v).map_err(|e| bad(k, v, e))?);
                } else if let Some(i) = index(k, "mp") {
                    c.mount_points.insert(i, mount_point(k, v)?);
                } else {
                    return Err(bad(k, v, "not an option pxagent changes in place"));
                }
            }
        }
    }
    c.delete = delete.iter().cloned().collect();
    Ok(c)
}

impl NodeApi for PveNode {
    async fn list(&self) -> Result<Vec<CtSummary>, PveError> {
        let list = self.node.list_containers().await?;
        Ok(list
            .into_iter()
            .map(|c| CtSummary {
                vmid: c.vmid as u32,
                status: match c.status {
                    pxfleet_pve::parse::RunState::Running => "running".to_string(),
                    pxfleet_pve::parse::RunState::Stopped => "stopped".to_string(),
                    pxfleet_pve::parse::RunState::Other(s) => s,
                },
                listing: format!(
                    "tags={:?} cpus={:?} maxmem={:?} maxswap={:?} maxdisk={:?}",
                    c.tags, c.cpus, c.maxmem, c.maxswap, c.maxdisk
                ),
                lock: c.lock,
                name: c.name.unwrap_or_else(|| format!("CT{}", c.vmid)),
            })
            .collect())
    }

    async fn config(&self, vmid: u32) -> Result<Option<CtConfig>, PveError> {
        match self.node.config(vmid).await {
            Ok(c) => Ok(Some(c.raw.into_iter().collect::<BTreeMap<_, _>>())),
            Err(PveError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn create(&self, args: &CreateArgs, password: Option<&Secret>) -> Result<bool, PveError> {
        let spec = create_spec(args)?;
        self.node.create(&spec).await?;
        let Some(pw) = password else {
            return Ok(false);
        };
        // PVE sets a password only inside a running container (chpasswd on stdin, never argv).
        let vmid = args.vmid;
        self.node.start(vmid).await?;
        let set = self
            .node
            .set_root_password(vmid, &pxfleet_pve::Secret::new(pw.0.clone()))
            .await;
        if set.is_ok() && args.start_after {
            return Ok(true); // it would be started again right away
        }
        self.node.stop(vmid).await?;
        set?;
        Ok(false)
    }

    async fn set(
        &self,
        vmid: u32,
        options: &[(String, String)],
        delete: &[String],
    ) -> Result<(), PveError> {
        let change = config_change(options, delete)?;
        self.node.set(vmid, &change).await
    }

    async fn resize(&self, vmid: u32, disk: &str, size_gib: u64) -> Result<(), PveError> {
        let size = u32::try_from(size_gib).map_err(|_| PveError::Invalid {
            vmid: Some(vmid),
            field: format!("{disk} size"),
            value: format!("{size_gib} GiB"),
            expected: format!("at most {} GiB", u32::MAX),
        })?;
        self.node.resize(vmid, disk, size).await
    }

    async fn start(&self, vmid: u32) -> Result<(), PveError> {
        match self.node.start(vmid).await {
            Ok(()) | Err(PveError::AlreadyRunning { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn stop(&self, vmid: u32) -> Result<(), PveError> {
        self.node.stop(vmid).await
    }

    async fn shutdown(&self, vmid: u32, timeout_secs: u32) -> Result<bool, PveError> {
        // pve stops hard by itself when the clean shutdown times out, so the container is stopped either way.
        self.node
            .shutdown(vmid, Duration::from_secs(timeout_secs.into()))
            .await
            .map(|_| true)
    }

    async fn destroy(&self, vmid: u32, _purge: bool) -> Result<(), PveError> {
        match self.node.destroy(vmid).await {
            Ok(()) | Err(PveError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn unlock(&self, vmid: u32) -> Result<(), PveError> {
        self.node.unlock(vmid).await
    }

    async fn pending(&self, vmid: u32) -> Result<Vec<pxfleet_pve::PendingKey>, PveError> {
        self.node.pending(vmid).await
    }

    async fn revert(&self, vmid: u32, keys: &[String]) -> Result<(), PveError> {
        let change = ConfigChange {
            revert: keys.iter().cloned().collect(),
            ..ConfigChange::default()
        };
        self.node.set(vmid, &change).await
    }

    async fn reboot(&self, vmid: u32, timeout_secs: u32) -> Result<(), PveError> {
        self.node
            .reboot(vmid, Duration::from_secs(timeout_secs.into()))
            .await
    }

    async fn migrate(&self, vmid: u32, target: &str, restart: bool) -> Result<(), PveError> {
        self.node.migrate(vmid, target, restart).await
    }

    async fn interfaces(&self, vmid: u32) -> Result<Option<Vec<Interface>>, PveError> {
        let ifaces = self.node.interfaces(vmid).await?;
        if ifaces.is_empty() {
            return Ok(None);
        }
        Ok(Some(
            ifaces
                .into_iter()
                .map(|i| Interface {
                    name: i.name,
                    hwaddr: i.hwaddr.unwrap_or_default(),
                    addresses: i
                        .addresses
                        .into_iter()
                        .map(|a| format!("{}/{}", a.address, a.prefix))
                        .collect(),
                })
                .collect(),
        ))
    }

    async fn memory_free_bytes(&self) -> Result<u64, PveError> {
        let status = self.node.node_status().await?;
        Ok(status.memory.available.unwrap_or(status.memory.free))
    }

    async fn facts(&self) -> Result<NodeFacts, PveError> {
        let version = self.node.version().await?;
        let status = self.node.node_status().await?;
        let storages = self.node.storages().await?;
        let bridges = self.node.bridges().await?;
        let mut templates = Vec::new();
        let mut out_storages = Vec::new();
        for s in storages {
            if s.content.contains("vztmpl") && s.active && s.enabled {
                if let Ok(list) = self.node.templates(&s.storage).await {
                    for t in list {
                        let file_name = t
                            .volid
                            .split_once(":vztmpl/")
                            .map(|(_, f)| f.to_string())
                            .unwrap_or_default();
                        templates.push(TemplateFile {
                            volid: t.volid,
                            storage: s.storage.clone(),
                            file_name,
                            size_bytes: t.size,
                        });
                    }
                }
            }
            let path = if s.content.contains("vztmpl") {
                self.node.template_dir(&s.storage).await.ok().and_then(|p| {
                    p.parent()
                        .and_then(|p| p.parent())
                        .map(|p| p.display().to_string())
                })
            } else {
                None
            };
            out_storages.push(StorageInfo {
                id: s.storage,
                kind: s.kind,
                content: s.content.into_iter().collect(),
                active: s.active,
                enabled: s.enabled,
                shared: s.shared,
                total_bytes: s.total,
                used_bytes: s.used,
                avail_bytes: s.avail,
                path,
            });
        }
        Ok(NodeFacts {
            pve_version: version.version,
            cores: status.cpuinfo.cpus.or(status.cpuinfo.cores).unwrap_or(0) as u32,
            memory_bytes: status.memory.total,
            memory_free_bytes: status.memory.available.unwrap_or(status.memory.free),
            storages: out_storages,
            bridges: bridges
                .into_iter()
                .map(|b| BridgeInfo {
                    name: b.iface,
                    active: b.active,
                    mtu: b.mtu.map(|m| m as u32),
                    cidrs: b.cidr.into_iter().collect(),
                })
                .collect(),
            templates,
        })
    }

    async fn template_dir(&self, storage: &str) -> Result<PathBuf, PveError> {
        if let Some(dir) = self
            .template_dirs
            .lock()
            .expect("template dirs")
            .get(storage)
        {
            return Ok(dir.clone());
        }
        let dir = self.node.template_dir(storage).await?;
        self.template_dirs
            .lock()
            .expect("template dirs")
            .insert(storage.to_string(), dir.clone());
        Ok(dir)
    }

    async fn pveam_download(&self, storage: &str, name: &str) -> Result<(), PveError> {
        self.node.pveam_download(storage, name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_map_onto_a_typed_create() {
        let args = CreateArgs {
            vmid: 2100,
            ostemplate: "local:vztmpl/u.tar.xz".into(),
            options: vec![
                ("hostname".into(), "web".into()),
                ("memory".into(), "4096".into()),
                ("swap".into(), "0".into()),
                ("rootfs".into(), "local-zfs:16".into()),
                ("unprivileged".into(), "1".into()),
                ("features".into(), "nesting=1".into()),
                (
                    "net0".into(),
                    "name=eth0,bridge=vmbr0,gw=192.168.7.1,ip=192.168.7.100/24,type=veth".into(),
                ),
                ("startup".into(), "order=3,up=60,down=60".into()),
                ("tags".into(), "pxfleet;web".into()),
                ("mp0".into(), "local-zfs:8,mp=/data,backup=yes".into()),
                (
                    "mp1".into(),
                    "/srv/shared,mp=/shared,mountoptions=noatime;nodev,ro=on".into(),
                ),
                ("onboot".into(), "true".into()),
            ],
            ssh_public_keys: vec!["ssh-ed25519 AAAA x".into()],
            start_after: false,
        };
        let s = create_spec(&args).unwrap();
        assert_eq!(s.rootfs.storage, "local-zfs");
        assert_eq!(s.rootfs.size_gib, 16);
        assert_eq!(s.memory, Some(4096));
        assert_eq!(s.swap, Some(0));
        assert!(s.features.nesting);
        assert_eq!(s.nets[&0].ip.as_deref(), Some("192.168.7.100/24"));
        assert_eq!(s.startup.as_ref().unwrap().order, Some(3));
        assert_eq!(s.tags, vec!["pxfleet", "web"]);
        assert_eq!(s.mount_points[&0].path, "/data");
        assert_eq!(s.mount_points[&0].backup, Some(true));
        assert_eq!(s.mount_points[&1].read_only, Some(true));
        assert_eq!(s.mount_points[&1].mount_options, vec!["noatime", "nodev"]);
        assert_eq!(s.onboot, Some(true));
        // mountoptions reach pct as PVE's own key.
        let argv = pxfleet_pve::argv::create_args(&s, Some(std::path::Path::new("/k"))).unwrap();
        assert!(
            argv.iter()
                .any(|a| a == "/srv/shared,mp=/shared,mountoptions=noatime;nodev,ro=1"),
            "{argv:?}"
        );
        let e = create_spec(&CreateArgs {
            options: vec![
                ("rootfs".into(), "local:4".into()),
                ("bogus".into(), "1".into()),
            ],
            ..args
        })
        .unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
    }

    #[test]
    fn deletions_and_changes_map_onto_pct_set() {
        let c = config_change(
            &[
                ("cores".into(), "4".into()),
                ("description".into(), "x\n".into()),
            ],
            &["startup".into()],
        )
        .unwrap();
        assert_eq!(c.cores, Some(4));
        assert_eq!(c.description.as_deref(), Some("x\n"));
        assert!(c.delete.contains("startup"));
    }
}
