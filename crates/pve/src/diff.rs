//! [`ConfigChange::diff`]: the in-place change (`pct set`) that takes a container from its stored configuration
//! ([`ContainerConfig`]) to a desired one (the in-place part of a [`CreateSpec`]), on typed values: scalars set
//! when they differ and deleted when the desired side leaves them out, `netN` compared without a generated MAC
//! (and keeping it), mount points matched by path, and pending changes reverted instead of piled on.

use std::collections::BTreeSet;

use crate::mark::stored_description;
use crate::node::PendingKey;
use crate::parse::propstr::format_number;
use crate::parse::{ContainerConfig, NetConfig};
use crate::spec::{ConfigChange, CreateSpec};

/// A NIC as compared: MAC upper-case (left out when the desired side has none, so a generated one is accepted),
/// `type` defaulting to `veth`, an explicit `firewall=0` / `link_down=0` / `host-managed=0` the same as none.
fn normalised(n: &NetConfig, ignore_hwaddr: bool) -> NetConfig {
    let mut n = n.clone();
    n.hwaddr = if ignore_hwaddr {
        None
    } else {
        n.hwaddr.map(|h| h.to_ascii_uppercase())
    };
    n.kind.get_or_insert_with(|| "veth".into());
    if n.firewall == Some(false) {
        n.firewall = None;
    }
    if n.link_down == Some(false) {
        n.link_down = None;
    }
    if n.host_managed == Some(false) {
        n.host_managed = None;
    }
    n
}

/// Whether a stored NIC and a desired one mean the same (a desired one without `hwaddr` accepts whatever MAC
/// PVE generated).
pub fn same_net(current: &NetConfig, desired: &NetConfig) -> bool {
    let ignore = desired.hwaddr.is_none();
    normalised(current, ignore) == normalised(desired, ignore)
}

/// Sets `slot` when the desired value is there and differs; deletes `key` when the desired side leaves it out
/// and the config has it.
fn scalar<T: PartialEq + Clone>(
    slot: &mut Option<T>,
    delete: &mut BTreeSet<String>,
    key: &str,
    current: &ContainerConfig,
    now: Option<T>,
    want: Option<&T>,
    deletable: bool,
) {
    match want {
        Some(w) if now.as_ref() != Some(w) => *slot = Some(w.clone()),
        Some(_) => {}
        None if deletable && current.raw.contains_key(key) => {
            delete.insert(key.to_string());
        }
        None => {}
    }
}

impl ConfigChange {
    /// What `pct set` must do so that `current` becomes `desired`, with the pending changes of `pct pending`
    /// taken into account (`pct config` shows them merged in): where the desired value is the one in effect
    /// now, the pending change is reverted (`revert`) instead of another one piled on it.
    ///
    /// From `desired`, only what can change in place is read: hostname, cores, cpulimit, cpuunits, memory, swap,
    /// features, nets, nameservers, searchdomains, startup, onboot, protection, ostype, arch, timezone, console,
    /// tty, cmode, env, entrypoint, tags, description, mount points and devices (vmid, template, rootfs,
    /// unprivileged and SSH keys are create-only). `None` / empty desired values delete what the config has
    /// (memory, swap, hostname, ostype, arch, timezone, console, tty, cmode, env, entrypoint and the description
    /// are never deleted; tags are compared as the whole list). A NIC without
    /// `hwaddr` keeps its current MAC. Mount points and devices are matched by their path, not their slot (see
    /// [`mounts::diff`]).
    pub fn diff(
        current: &ContainerConfig,
        desired: &CreateSpec,
        pending: &[PendingKey],
    ) -> ConfigChange {
        let mut c = ConfigChange::default();
        let d = desired;
        let del = &mut c.delete;
        if let Some(h) = &d.hostname {
            if current.hostname.as_ref() != Some(h) {
                c.hostname = Some(h.clone());
            }
        }
        scalar(
            &mut c.cores,
            del,
            "cores",
            current,
            current.cores,
            d.cores.as_ref(),
            true,
        );
        scalar(
            &mut c.cpulimit,
            del,
            "cpulimit",
            current,
            current.cpulimit,
            d.cpulimit.as_ref(),
            true,
        );
        scalar(
            &mut c.cpuunits,
            del,
            "cpuunits",
            current,
            current.cpuunits,
            d.cpuunits.as_ref(),
            true,
        );
        let mib = |v: Option<u64>| v.and_then(|m| u32::try_from(m).ok());
        scalar(
            &mut c.memory,
            del,
            "memory",
            current,
            mib(current.memory),
            d.memory.as_ref(),
            false,
        );
        scalar(
            &mut c.swap,
            del,
            "swap",
            current,
            mib(current.swap),
            d.swap.as_ref(),
            false,
        );
        let features = (!d.features.is_empty()).then_some(&d.features);
        let now = current
            .raw
            .contains_key("features")
            .then(|| current.features.clone());
        scalar(
            &mut c.features,
            del,
            "features",
            current,
            now,
            features,
            true,
        );
        let list = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
        let now = current
            .raw
            .contains_key("nameserver")
            .then(|| current.nameserver.clone());
        scalar(
            &mut c.nameservers,
            del,
            "nameserver",
            current,
            now,
            list(&d.nameservers).as_ref(),
            true,
        );
        let now = current
            .raw
            .contains_key("searchdomain")
            .then(|| current.searchdomain.clone());
        scalar(
            &mut c.searchdomains,
            del,
            "searchdomain",
            current,
            now,
            list(&d.searchdomains).as_ref(),
            true,
        );
        scalar(
            &mut c.startup,
            del,
            "startup",
            current,
            current.startup.clone(),
            d.startup.as_ref(),
            true,
        );
        let flag = |key: &str, v: bool| current.raw.contains_key(key).then_some(v);
        scalar(
            &mut c.onboot,
            del,
            "onboot",
            current,
            flag("onboot", current.onboot),
            d.onboot.as_ref(),
            true,
        );
        scalar(
            &mut c.protection,
            del,
            "protection",
            current,
            flag("protection", current.protection),
            d.protection.as_ref(),
            true,
        );
        scalar(
            &mut c.ostype,
            del,
            "ostype",
            current,
            current.ostype.clone(),
            d.ostype.as_ref(),
            false,
        );
        scalar(
            &mut c.hookscript,
            del,
            "hookscript",
            current,
            current.hookscript.clone(),
            d.hookscript.as_ref(),
            true,
        );
        // Set when given, never deleted (the fleet compares them only when given); an absent console, tty or cmode
        // is PVE's default (1, 2, tty).
        scalar(
            &mut c.arch,
            del,
            "arch",
            current,
            current.arch.clone(),
            d.arch.as_ref(),
            false,
        );
        scalar(
            &mut c.timezone,
            del,
            "timezone",
            current,
            current.timezone.clone(),
            d.timezone.as_ref(),
            false,
        );
        scalar(
            &mut c.console,
            del,
            "console",
            current,
            Some(current.console.unwrap_or(true)),
            d.console.as_ref(),
            false,
        );
        scalar(
            &mut c.tty,
            del,
            "tty",
            current,
            Some(current.tty.unwrap_or(2)),
            d.tty.as_ref(),
            false,
        );
        scalar(
            &mut c.cmode,
            del,
            "cmode",
            current,
            Some(current.cmode.clone().unwrap_or_else(|| "tty".into())),
            d.cmode.as_ref(),
            false,
        );
        // Set when given, never deleted: an OCI image brings its own (the fleet compares them only when given).
        if let Some(env) = &d.env {
            if current.env != *env {
                c.env = Some(env.clone());
            }
        }
        match d.entrypoint.as_deref() {
            // given empty: none, so one on the node is deleted
            Some("") if current.raw.contains_key("entrypoint") => {
                del.insert("entrypoint".into());
            }
            Some("") | None => {}
            Some(e) if current.entrypoint.as_deref() != Some(e) => {
                c.entrypoint = Some(e.to_string());
            }
            Some(_) => {}
        }
        if current.tags != d.tags {
            c.tags = Some(d.tags.clone());
        }
        if let Some(want) = &d.description {
            // Compared as PVE keeps it (trailing spaces and empty lines inside count, trailing empty lines not).
            let now = current.description.as_deref().map(stored_description);
            if now.as_deref() != Some(stored_description(want).as_str()) {
                c.description = Some(want.clone());
            }
        }
        for (i, want) in &d.nets {
            match current.nets.get(i) {
                Some(now) if same_net(now, want) => {}
                now => {
                    let mut n = want.clone();
                    // Keep a generated MAC: a desired NIC without one must not make PVE generate a new one.
                    if n.hwaddr.is_none() {
                        n.hwaddr = now.and_then(|x| x.hwaddr.clone());
                    }
                    c.nets.insert(*i, n);
                }
            }
        }
        for i in current.nets.keys().filter(|i| !d.nets.contains_key(i)) {
            c.delete.insert(format!("net{i}"));
        }
        if let Some(r) = &current.rootfs {
            if !d.rootfs_options.matches(r) {
                c.rootfs = Some(d.rootfs_options.applied_to(r));
            }
        }
        mounts::diff(&mut c, current, desired);
        if current.idmap != d.idmap {
            c.idmap = Some(d.idmap.clone());
        }
        c.revert_pending(pending);
        c
    }

    /// Takes out what would only undo a pending change (the desired value is the one in effect now) and
    /// moves those keys to `revert`.
    fn revert_pending(&mut self, pending: &[PendingKey]) {
        for p in pending {
            if p.current.is_none() && self.delete.remove(&p.key) {
                self.revert.insert(p.key.clone());
            }
            let now = p.current.as_deref().map(str::trim_end);
            if now.is_some() && self.value(&p.key).as_deref().map(str::trim_end) == now {
                self.unset(&p.key);
                self.revert.insert(p.key.clone());
            }
        }
    }

    /// The value this change sets for `key`, as PVE stores it; `None` when it does not set the key (or for
    /// mount points, whose new volumes are never a value in effect).
    pub fn value(&self, key: &str) -> Option<String> {
        let b = |v: bool| if v { "1" } else { "0" }.to_string();
        match key {
            "hostname" => self.hostname.clone(),
            "cores" => self.cores.map(|v| v.to_string()),
            "cpulimit" => self.cpulimit.map(format_number),
            "cpuunits" => self.cpuunits.map(|v| v.to_string()),
            "memory" => self.memory.map(|v| v.to_string()),
            "swap" => self.swap.map(|v| v.to_string()),
            "features" => self.features.as_ref().map(|f| f.to_property_string()),
            "nameserver" => self.nameservers.as_ref().map(|v| v.join(" ")),
            "searchdomain" => self.searchdomains.as_ref().map(|v| v.join(" ")),
            "startup" => self.startup.as_ref().map(|s| s.to_property_string()),
            "onboot" => self.onboot.map(b),
            "protection" => self.protection.map(b),
            "ostype" => self.ostype.clone(),
            "arch" => self.arch.clone(),
            "timezone" => self.timezone.clone(),
            "console" => self.console.map(b),
            "tty" => self.tty.map(|v| v.to_string()),
            "cmode" => self.cmode.clone(),
            "hookscript" => self.hookscript.clone(),
            "env" => self.env.as_ref().map(|e| {
                e.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join("\0")
            }),
            "entrypoint" => self.entrypoint.clone(),
            "tags" => self.tags.as_ref().map(|t| {
                let set: BTreeSet<String> = t.iter().map(|t| t.to_ascii_lowercase()).collect();
                set.into_iter().collect::<Vec<_>>().join(";")
            }),
            "description" => self.description.clone(),
            "rootfs" => self.rootfs.as_ref().map(|r| r.to_property_string()),
            _ => {
                let i: u32 = key.strip_prefix("net")?.parse().ok()?;
                self.nets.get(&i).map(NetConfig::to_property_string)
            }
        }
    }

    /// Stops setting `key`.
    fn unset(&mut self, key: &str) {
        match key {
            "hostname" => self.hostname = None,
            "cores" => self.cores = None,
            "cpulimit" => self.cpulimit = None,
            "cpuunits" => self.cpuunits = None,
            "memory" => self.memory = None,
            "swap" => self.swap = None,
            "features" => self.features = None,
            "nameserver" => self.nameservers = None,
            "searchdomain" => self.searchdomains = None,
            "startup" => self.startup = None,
            "onboot" => self.onboot = None,
            "protection" => self.protection = None,
            "ostype" => self.ostype = None,
            "arch" => self.arch = None,
            "timezone" => self.timezone = None,
            "console" => self.console = None,
            "tty" => self.tty = None,
            "cmode" => self.cmode = None,
            "hookscript" => self.hookscript = None,
            "env" => self.env = None,
            "entrypoint" => self.entrypoint = None,
            "tags" => self.tags = None,
            "description" => self.description = None,
            "rootfs" => self.rootfs = None,
            _ => {
                if let Some(i) = key.strip_prefix("net").and_then(|n| n.parse().ok()) {
                    self.nets.remove(&i);
                }
            }
        }
    }

    /// The keys this change sets, then the ones it deletes (reverts left out), for messages.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = [
            "hostname",
            "cores",
            "cpulimit",
            "cpuunits",
            "memory",
            "swap",
            "features",
            "nameserver",
            "searchdomain",
            "startup",
            "onboot",
            "protection",
            "ostype",
            "arch",
            "timezone",
            "console",
            "tty",
            "cmode",
            "hookscript",
            "env",
            "entrypoint",
            "tags",
            "description",
            "rootfs",
        ]
        .into_iter()
        .filter(|k| self.value(k).is_some())
        .map(String::from)
        .collect();
        keys.extend(self.nets.keys().map(|i| format!("net{i}")));
        keys.extend(self.mount_points.keys().map(|i| format!("mp{i}")));
        keys.extend(self.devices.keys().map(|i| format!("dev{i}")));
        if self.idmap.is_some() {
            keys.push("lxc.idmap".into());
        }
        keys.extend(self.delete.iter().cloned());
        keys
    }
}

mod mounts;
#[cfg(test)]
mod tests;
