//! The complete configuration of a container to be created, as plan attributes in a fixed order.

use serde_json::Value;

use super::field;
use super::views::{description_view, iface_value, json, mount_value, tags_view};
use crate::model::{Container, Template};
use crate::plan::types::Attribute;

/// The complete configuration of a container to be created, in a fixed order; `template` is its template's
/// declaration (a clone template adds where the container is copied from).
pub(crate) fn attributes(c: &Container, template: Option<&Template>) -> Vec<Attribute> {
    let mut v = Vec::with_capacity(32);
    let opt = |v: &mut Vec<Attribute>, name: &str, val: Option<Value>| match val {
        Some(x) => v.push(Attribute::known(name, x)),
        None => v.push(Attribute::after_apply(name)),
    };
    opt(&mut v, field::VM_ID, c.vm_id.map(Value::from));
    opt(&mut v, field::NODE, c.node.as_deref().map(Value::from));
    v.push(Attribute::known(field::HOSTNAME, json(&c.hostname)));
    if !c.state.is_running() {
        v.push(Attribute::known(field::STATE, json(&c.state)));
    }
    v.push(Attribute::known(field::TEMPLATE, json(&c.template)));
    if let Some(from) = template.and_then(|t| t.source.clone_text()) {
        v.push(Attribute::known(field::TEMPLATE_SOURCE, json(&from)));
    }
    opt(
        &mut v,
        field::DATASTORE_ID,
        c.datastore_id.as_deref().map(Value::from),
    );
    v.push(Attribute::known(field::DISK_SIZE, json(&c.disk_size)));
    if let Some(x) = c.cores {
        v.push(Attribute::known(field::CORES, json(&x)));
    }
    if let Some(x) = c.cpu_limit {
        v.push(Attribute::known(field::CPU_LIMIT, json(&x)));
    }
    if let Some(x) = c.cpu_units {
        v.push(Attribute::known(field::CPU_UNITS, json(&x)));
    }
    v.push(Attribute::known(field::MEMORY, json(&c.memory)));
    v.push(Attribute::known(field::SWAP, json(&c.swap)));
    v.push(Attribute::known(field::UNPRIVILEGED, json(&c.unprivileged)));
    v.push(Attribute::known(field::NESTING, json(&c.features.nesting)));
    v.push(Attribute::known(field::FUSE, json(&c.features.fuse)));
    v.push(Attribute::known(field::KEYCTL, json(&c.features.keyctl)));
    if c.features.mknod {
        v.push(Attribute::known(field::MKNOD, json(&true)));
    }
    if c.features.force_rw_sys {
        v.push(Attribute::known(field::FORCE_RW_SYS, json(&true)));
    }
    if !c.features.mount.is_empty() {
        v.push(Attribute::known(field::MOUNT, json(&c.features.mount)));
    }
    for (i, iface) in c.interfaces.iter().enumerate() {
        for sub in field::IFACE_FIELDS {
            // Defaults the file need not name are left out (net0's eth0, host_managed off).
            if (i == 0 && sub == "name" && iface.name == "eth0")
                || (sub == "host_managed" && !iface.host_managed)
                || (sub == "link_down" && !iface.link_down)
                || (sub == "trunks" && iface.trunks.is_empty())
            {
                continue;
            }
            let name = field::interface_field(i, sub);
            let val = iface_value(iface, sub);
            if sub == "mac_address" && val.is_null() {
                v.push(Attribute::after_apply(name));
            } else if !val.is_null() {
                v.push(Attribute::known(name, val));
            }
        }
    }
    if !c.dns.servers.is_empty() {
        v.push(Attribute::known(field::DNS_SERVERS, json(&c.dns.servers)));
    }
    if let Some(d) = &c.dns.domain {
        v.push(Attribute::known(field::DNS_DOMAIN, json(d)));
    }
    if !c.ssh_public_keys.is_empty() {
        v.push(Attribute::known(
            field::SSH_PUBLIC_KEYS,
            json(&c.ssh_public_keys),
        ));
    }
    let mut pw = Attribute::sensitive(field::PASSWORD);
    // No password in the file: the controller generates one at apply time.
    pw.known_after_apply = c.password.is_none();
    v.push(pw);
    if let Some(st) = &c.startup {
        v.push(Attribute::known(field::STARTUP, json(st)));
    }
    v.push(Attribute::known(
        field::START_ON_BOOT,
        json(&c.start_on_boot),
    ));
    v.push(Attribute::known(field::PROTECTION, json(&c.protection)));
    if !c.tags.is_empty() {
        v.push(Attribute::known(
            field::TAGS,
            json(tags_view(&c.tags).as_ref()),
        ));
    }
    if let Some(d) = description_view(c.description.as_deref()) {
        v.push(Attribute::known(field::DESCRIPTION, json(d)));
    }
    if !c.labels.is_empty() {
        v.push(Attribute::known(field::LABELS, json(&c.labels)));
    }
    if let Some(o) = &c.ostype {
        v.push(Attribute::known(field::OSTYPE, json(o)));
    }
    if let Some(env) = &c.env {
        v.push(Attribute::known(field::ENV, json(env)));
    }
    if let Some(e) = &c.entrypoint {
        v.push(Attribute::known(field::ENTRYPOINT, json(e)));
    }
    if let Some(x) = &c.arch {
        v.push(Attribute::known(field::ARCH, json(x)));
    }
    if let Some(x) = &c.timezone {
        v.push(Attribute::known(field::TIMEZONE, json(x)));
    }
    if let Some(x) = c.console.enabled {
        v.push(Attribute::known(field::CONSOLE_ENABLED, json(&x)));
    }
    if let Some(x) = c.console.tty_count {
        v.push(Attribute::known(field::CONSOLE_TTY_COUNT, json(&x)));
    }
    if let Some(x) = &c.console.mode {
        v.push(Attribute::known(field::CONSOLE_TYPE, json(x)));
    }
    if let Some(h) = &c.hookscript {
        v.push(Attribute::known(field::HOOKSCRIPT, json(h)));
    }
    if let Some(p) = &c.pool {
        v.push(Attribute::known(field::POOL, json(p)));
    }
    // the root disk's options other than PVE's defaults
    let r = &c.rootfs;
    if !r.mount_options.is_empty() {
        v.push(Attribute::known(
            field::ROOTFS_MOUNT_OPTIONS,
            json(&r.mount_options),
        ));
    }
    if let Some(x) = r.acl {
        v.push(Attribute::known(field::ROOTFS_ACL, json(&x)));
    }
    if r.quota {
        v.push(Attribute::known(field::ROOTFS_QUOTA, json(&true)));
    }
    if !r.replicate {
        v.push(Attribute::known(field::ROOTFS_REPLICATE, json(&false)));
    }
    for m in &c.mount_points {
        v.push(Attribute::known(
            field::mount_point(m.path()),
            mount_value(m, true),
        ));
    }
    for dev in &c.devices {
        v.push(Attribute::known(field::device(&dev.path), json(dev)));
    }
    if !c.idmap.is_empty() {
        v.push(Attribute::known(field::IDMAP, json(&c.idmap)));
    }
    v
}
