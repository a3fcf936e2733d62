//! Resolution of a merged container: required fields, defaults filled in, the template
//! chosen, interfaces resolved, into the final [`Container`].

use std::collections::BTreeMap;

use super::input::{ContainerInput, StartupInput, TemplateChoice};
use super::templates::inline_template;
use super::{join, quote, Cx};
use crate::diag::did_you_mean;
use crate::model::*;

impl Cx<'_> {
    /// A container made from a clone template goes where the source is: the source's node (a different `node`
    /// is an error), and for a full clone with `datastore_id` that datastore; a linked clone's disk stays on the
    /// template's storage, so the container names none.
    fn clone_placement(
        &mut self,
        path: &str,
        t: Option<&Template>,
        node: Option<String>,
        datastore_id: Option<String>,
    ) -> (Option<String>, Option<String>) {
        let Some(TemplateSource::Clone {
            vm_id,
            node: src,
            full,
            datastore_id: ds,
        }) = t.map(|t| &t.source)
        else {
            return (node, datastore_id);
        };
        let key = path.rsplit('.').next().unwrap_or(path);
        if let Some(n) = node.as_ref().filter(|n| *n != src) {
            self.err_at(
                &join(path, "node"),
                format!("container {key} is on node {n}, but its template clones CT {vm_id} on node {src}: a clone is made on the source's node"),
                Some(&format!("set `node: {src}` or remove `node`")),
            );
        }
        let datastore_id = match (full, ds, datastore_id) {
            (true, Some(want), Some(have)) if *want != have => {
                self.err_at(
                    &join(path, "datastore_id"),
                    format!("container {key} has datastore_id {have}, but its clone template copies the disk to {want}"),
                    Some("remove one of the two `datastore_id`s or make them equal"),
                );
                None
            }
            (true, Some(want), _) => Some(want.clone()),
            (true, None, mine) => mine,
            (false, _, Some(have)) => {
                self.err_at(
                    &join(path, "datastore_id"),
                    format!("container {key} has datastore_id {have}, but a linked clone's disk stays on the template's storage"),
                    Some("remove `datastore_id` (also from `defaults`), or make the template a full clone (`full: true`)"),
                );
                None
            }
            (false, _, None) => None,
        };
        (Some(src.clone()), datastore_id)
    }

    pub(super) fn resolve(
        &mut self,
        key: &str,
        path: &str,
        c: ContainerInput,
        allow_privileged: bool,
        declared: &[String],
        templates: &mut BTreeMap<String, Template>,
    ) -> Option<Container> {
        let errors_before = self.diags.len();
        let cspan = self.lookup(path);
        let template = match c.template {
            None if c.template_invalid => None,
            None => {
                self.err(
                    cspan,
                    path,
                    "no template: set `template` (a name under `templates:`) or `template_url`",
                    Some("or set `template` once in `defaults`"),
                );
                None
            }
            Some(TemplateChoice::Name(name, span, tp)) => {
                if templates.contains_key(&name) {
                    Some(name)
                } else {
                    let names: Vec<&str> = declared.iter().map(String::as_str).collect();
                    let msg = match did_you_mean(&name, &names) {
                        Some(s) => format!(
                            "template {} is not declared; did you mean '{s}'?",
                            quote(&name)
                        ),
                        None => format!("template {} is not declared", quote(&name)),
                    };
                    let hint = if names.is_empty() {
                        "declare it under `templates:` or use `template_url`".to_owned()
                    } else {
                        format!("declared templates: {}", names.join(", "))
                    };
                    self.err(span, &tp, msg, Some(&hint));
                    None
                }
            }
            Some(TemplateChoice::Url(url)) => Some(inline_template(url, templates)),
        };
        let is_clone = template
            .as_ref()
            .and_then(|t| templates.get(t))
            .is_some_and(|t| t.source.is_clone());
        if is_clone && c.password.is_some() {
            // the file would show a password the container never gets
            self.err_at(
                &join(path, "password"),
                "password is not applied to a clone: pct clone copies the source container's root password",
                Some("remove `password` (also from `defaults`) for containers made from a clone template; set the password in the source container"),
            );
        }
        let (node, datastore_id) = self.clone_placement(
            path,
            template.as_ref().and_then(|t| templates.get(t)),
            c.node,
            c.datastore_id,
        );
        let unprivileged = c.unprivileged.unwrap_or(true);
        if !unprivileged && !allow_privileged {
            let p = join(path, "unprivileged");
            self.err_at(
                &p,
                "unprivileged: false needs `allow_privileged: true` at the top of the fleet",
                Some(
                    "privileged containers are root on the host; keep unprivileged unless you must",
                ),
            );
        }
        let idmap = c.idmap.clone().unwrap_or_default();
        if let (Some(id), Some(mounts)) = (c.vm_id, &c.mount_points) {
            for (i, m) in mounts.iter().enumerate() {
                if let MountPoint::Existing { volume, .. } = m {
                    if volume_owner(volume) == Some(id) {
                        self.err_at(
                            &join(path, &format!("mount_points.{i}.volume")),
                            format!("volume {volume} belongs to vm_id {id}, this container: PVE would free it when the container is destroyed or replaced"),
                            Some("mount an existing volume owned by another vm_id (or by none), so that it outlives the container"),
                        );
                    }
                }
            }
        }
        if unprivileged && c.rootfs.quota == Some(true) {
            self.err_at(
                &join(path, "rootfs.quota"),
                "quota is not supported by unprivileged containers: PVE refuses to start the container (\"Quotas are not supported by unprivileged containers.\")",
                Some("remove `quota`, or make the container privileged (`unprivileged: false`, which an admin must grant)"),
            );
        }
        if unprivileged {
            for (i, m) in c.mount_points.iter().flatten().enumerate() {
                if m.flags().quota {
                    self.err_at(
                        &join(path, &format!("mount_points.{i}.quota")),
                        "quota is not supported by unprivileged containers: PVE refuses to start the container (\"Quotas are not supported by unprivileged containers.\")",
                        Some("remove `quota`, or make the container privileged (`unprivileged: false`, which an admin must grant)"),
                    );
                }
            }
        }
        if !idmap.is_empty() && !unprivileged {
            self.err_at(
                &join(path, "idmap"),
                "idmap is for unprivileged containers only (a privileged container's ids are the host's)",
                Some("remove `idmap` or keep the container unprivileged"),
            );
        }
        let features = Features {
            nesting: c.features.nesting.unwrap_or(false),
            fuse: c.features.fuse.unwrap_or(false),
            keyctl: c.features.keyctl.unwrap_or(false),
            mount: c.features.mount.unwrap_or_default(),
            mknod: c.features.mknod.unwrap_or(false),
            force_rw_sys: c.features.force_rw_sys.unwrap_or(false),
        };
        if features.keyctl && !unprivileged {
            let p = join(path, "features.keyctl");
            self.err_at(
                &p,
                "features.keyctl is for unprivileged containers only (PVE refuses it otherwise)",
                None,
            );
        }
        let mut interfaces =
            Vec::with_capacity(1 + c.extra_interfaces.as_ref().map_or(0, Vec::len));
        if let Some(i) = self.interface(&c.net, path, 0, true) {
            interfaces.push(i);
        }
        for (idx, (net, _)) in c.extra_interfaces.iter().flatten().enumerate() {
            let ipath = net
                .path
                .clone()
                .unwrap_or_else(|| join(path, &format!("extra_interfaces.{idx}")));
            if let Some(i) = self.interface(net, &ipath, idx + 1, false) {
                interfaces.push(i);
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, iface) in interfaces.iter().enumerate() {
            if !names.insert(iface.name.clone()) {
                let p = if i == 0 {
                    join(path, "interface_name")
                } else {
                    join(path, &format!("extra_interfaces.{}.name", i - 1))
                };
                self.err_at(
                    &p,
                    format!("interface name {} is used twice", iface.name),
                    None,
                );
            }
        }
        // Waiting for a family no interface is configured with would never end.
        let (want4, want6) = c.wait_for_ip;
        if want4 == Some(true) && interfaces.iter().all(|i| i.ipv4 == Ipv4Config::None) {
            self.err_at(
                &join(path, "wait_for_ip.ipv4"),
                "wait_for_ip.ipv4 waits for an IPv4 address, but no interface has one (ip_address: none everywhere)",
                Some("give an interface `ip_address: dhcp` or a static address, or remove `ipv4: true`"),
            );
        }
        if want6 == Some(true) && interfaces.iter().all(|i| i.ipv6 == Ipv6Config::None) {
            self.err_at(
                &join(path, "wait_for_ip.ipv6"),
                "wait_for_ip.ipv6 waits for an IPv6 address, but no interface has IPv6 (no `ipv6:`)",
                Some("give an interface `ipv6: auto`, `dhcp` or a static address, or remove `ipv6: true`"),
            );
        }
        if self.diags.len() > errors_before {
            return None;
        }
        let startup = if c.startup == StartupInput::default() {
            None
        } else {
            Some(Startup {
                order: c.startup.order,
                up_delay: c.startup.up_delay,
                down_delay: c.startup.down_delay,
            })
        };
        Some(Container {
            name: key.to_owned(),
            vm_id: c.vm_id,
            hostname: c.hostname.unwrap_or_else(|| key.to_owned()),
            node,
            cores: c.cores,
            cpu_limit: c.cpu_limit,
            cpu_units: c.cpu_units,
            memory: c.memory.unwrap_or(DEFAULT_MEMORY_MIB),
            swap: c.swap.unwrap_or(DEFAULT_SWAP_MIB),
            disk_size: c.disk_size.unwrap_or(DEFAULT_DISK_GIB),
            datastore_id,
            template: template?,
            unprivileged,
            features,
            interfaces,
            dns: Dns {
                servers: c.dns_servers.unwrap_or_default(),
                domain: c.dns_domain,
            },
            ssh_public_keys: c.ssh_public_keys.unwrap_or_default(),
            password: c.password,
            startup,
            start_on_boot: c.start_on_boot.unwrap_or(false),
            state: c.state.unwrap_or_default(),
            adopt: c.adopt.unwrap_or(false),
            restart_policy: c.restart_policy.unwrap_or_default(),
            drift: c.drift.unwrap_or_default(),
            ostype: c.ostype,
            env: c.env,
            entrypoint: c.entrypoint,
            arch: c.arch,
            timezone: c.timezone,
            console: c.console,
            hookscript: c.hookscript,
            pool: c.pool,
            wait_for_ip: WaitForIp {
                ipv4: c.wait_for_ip.0.unwrap_or(false),
                ipv6: c.wait_for_ip.1.unwrap_or(false),
            },
            rootfs: MountFlags {
                mount_options: c.rootfs.mount_options.clone().unwrap_or_default(),
                acl: c.rootfs.acl,
                quota: c.rootfs.quota.unwrap_or(false),
                replicate: c.rootfs.replicate.unwrap_or(true),
                shared: false,
                keepattrs: false,
                idmap: None,
            },
            protection: c.protection.unwrap_or(false),
            tags: c.tags.unwrap_or_default(),
            description: c.description,
            labels: c.labels.unwrap_or_default(),
            constraints: Constraints {
                nodes: c.constraints.nodes.unwrap_or_default(),
                node_labels: c.constraints.node_labels.unwrap_or_default(),
                anti_affinity: c.constraints.anti_affinity.unwrap_or_default(),
            },
            mount_points: c.mount_points.unwrap_or_default(),
            devices: c.devices.unwrap_or_default(),
            idmap,
        })
    }
}
