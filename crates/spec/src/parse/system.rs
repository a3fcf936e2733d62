//! The container's system options: `arch` (`--arch`), `timezone` (`--timezone`) and `console:` (`console`, `tty`,
//! `cmode`; bpg's `console { enabled, tty_count, type }`), checked as PVE's schema checks them.

use super::input::RootfsInput;
use super::{quote, Cx, CONSOLE_FIELDS, ROOTFS_FIELDS, WAIT_FOR_IP_FIELDS};
use crate::model::Console;
use crate::yaml::Node;

/// The architectures PVE's `arch` takes.
pub(crate) const ARCHES: &[&str] = pxfleet_pvekeys::ARCHES;
/// The console modes PVE's `cmode` takes.
pub(crate) const CONSOLE_TYPES: &[&str] = pxfleet_pvekeys::CMODES;

impl Cx<'_> {
    /// `arch:` one of PVE's architectures.
    pub(super) fn arch(&mut self, n: &Node, path: &str) -> Option<String> {
        let v = self.string(n, path)?;
        if ARCHES.contains(&v.as_str()) {
            return Some(v);
        }
        self.err(
            n.span,
            path,
            format!("arch {} is not one PVE knows", quote(&v)),
            Some(&format!("one of {}", ARCHES.join(", "))),
        );
        None
    }

    /// `hookscript:` a snippets volume, `STORAGE:snippets/FILE`.
    pub(super) fn hookscript(&mut self, n: &Node, path: &str) -> Option<String> {
        let v = self.string(n, path)?;
        if pxfleet_pvekeys::is_hookscript_volid(&v) {
            return Some(v);
        }
        self.err(
            n.span,
            path,
            format!("hookscript {} is not a snippets volume", quote(&v)),
            Some("STORAGE:snippets/FILE, e.g. local:snippets/hook.sh: an executable file in a storage with snippets content"),
        );
        None
    }

    /// `pool:` a PVE resource pool name (`pve-poolid`).
    pub(super) fn pool(&mut self, n: &Node, path: &str) -> Option<String> {
        let v = self.string(n, path)?;
        if pxfleet_pvekeys::is_pool_id(&v) {
            return Some(v);
        }
        self.err(
            n.span,
            path,
            format!("pool {} is not a PVE pool name", quote(&v)),
            Some("letters, digits, '.', '-', '_', each level starting with a letter, up to 3 levels with '/' (e.g. prod/web)"),
        );
        None
    }

    /// `timezone:` `host`, `UTC` or a zone of zone.tab.
    pub(super) fn timezone(&mut self, n: &Node, path: &str) -> Option<String> {
        let v = self.string(n, path)?;
        if pxfleet_pvekeys::zones::is_timezone(&v) {
            return Some(v);
        }
        self.err(
            n.span,
            path,
            format!("timezone {} is not one PVE accepts", quote(&v)),
            Some("host (the node's zone), UTC, or a zone of /usr/share/zoneinfo/zone.tab such as Europe/Berlin"),
        );
        None
    }

    /// `console:` a mapping of `enabled`, `tty_count` (0..6) and `type` (tty, console, shell); each sub-field
    /// given replaces the one from `defaults`.
    pub(super) fn console(&mut self, n: &Node, path: &str, into: &mut Console) {
        let Some(es) = self.map(n, path) else {
            return;
        };
        for e in es {
            let p = super::join(path, &e.key);
            self.record(&p, e.value.span);
            if Self::given_empty(e, CONSOLE_FIELDS) {
                continue;
            }
            match e.key.as_str() {
                "enabled" => into.enabled = self.boolean(&e.value, &p).or(into.enabled),
                "tty_count" => {
                    let max = i64::from(pxfleet_pvekeys::MAX_TTY);
                    into.tty_count = self
                        .int(&e.value, &p, 0, max, "")
                        .map(|v| v as u32)
                        .or(into.tty_count);
                }
                "type" => {
                    if let Some(v) = self.string(&e.value, &p) {
                        if CONSOLE_TYPES.contains(&v.as_str()) {
                            into.mode = Some(v);
                        } else {
                            self.err(
                                e.value.span,
                                &p,
                                format!("console type {} is not one PVE knows", quote(&v)),
                                Some(&format!("one of {}", CONSOLE_TYPES.join(", "))),
                            );
                        }
                    }
                }
                _ => self.unknown_field(e, path, CONSOLE_FIELDS),
            }
        }
    }

    /// `wait_for_ip:` a mapping of `ipv4` and `ipv6` (booleans); each sub-field given replaces the one from
    /// `defaults`.
    pub(super) fn wait_for_ip(
        &mut self,
        n: &Node,
        path: &str,
        into: &mut (Option<bool>, Option<bool>),
    ) {
        let Some(es) = self.map(n, path) else {
            return;
        };
        for e in es {
            let p = super::join(path, &e.key);
            self.record(&p, e.value.span);
            if Self::given_empty(e, WAIT_FOR_IP_FIELDS) {
                continue;
            }
            match e.key.as_str() {
                "ipv4" => into.0 = self.boolean(&e.value, &p).or(into.0),
                "ipv6" => into.1 = self.boolean(&e.value, &p).or(into.1),
                _ => self.unknown_field(e, path, WAIT_FOR_IP_FIELDS),
            }
        }
    }

    /// `rootfs:` the root disk's `mount_options`, `acl`, `quota` and `replicate`; each sub-field given replaces the
    /// one from `defaults`.
    pub(super) fn rootfs(&mut self, n: &Node, path: &str, into: &mut RootfsInput) {
        let Some(es) = self.map(n, path) else {
            return;
        };
        for e in es {
            let p = super::join(path, &e.key);
            self.record(&p, e.value.span);
            if Self::given_empty(e, ROOTFS_FIELDS) {
                continue;
            }
            match e.key.as_str() {
                "mount_options" => {
                    into.mount_options = self
                        .mount_options(&e.value, &p)
                        .or(into.mount_options.take())
                }
                "acl" => into.acl = self.boolean(&e.value, &p).or(into.acl),
                "quota" => into.quota = self.boolean(&e.value, &p).or(into.quota),
                "replicate" => into.replicate = self.boolean(&e.value, &p).or(into.replicate),
                _ => self.unknown_field(e, path, ROOTFS_FIELDS),
            }
        }
    }
}
