//! Field names as used in plans (and understood by [`super::super::simulate`]), and the
//! names of interface and mount-point fields with their inverses.

pub const HOSTNAME: &str = "hostname";
pub const CORES: &str = "cores";
pub const CPU_LIMIT: &str = "cpu_limit";
pub const CPU_UNITS: &str = "cpu_units";
pub const MEMORY: &str = "memory";
pub const SWAP: &str = "swap";
pub const DISK_SIZE: &str = "disk_size";
pub const TEMPLATE: &str = "template";
/// Plan attribute of a create from a clone template: `clone of CT 9000 on pve1 (full)`.
pub const TEMPLATE_SOURCE: &str = "template_source";
pub const VM_ID: &str = "vm_id";
pub const NODE: &str = "node";
pub const DATASTORE_ID: &str = "datastore_id";
pub const UNPRIVILEGED: &str = "unprivileged";
pub const NESTING: &str = "features.nesting";
pub const FUSE: &str = "features.fuse";
pub const KEYCTL: &str = "features.keyctl";
pub const MKNOD: &str = "features.mknod";
pub const FORCE_RW_SYS: &str = "features.force_rw_sys";
pub const MOUNT: &str = "features.mount";
pub const DNS_SERVERS: &str = "dns.servers";
pub const DNS_DOMAIN: &str = "dns.domain";
pub const STARTUP: &str = "startup";
pub const START_ON_BOOT: &str = "start_on_boot";
pub const STATE: &str = "state";
pub const PROTECTION: &str = "protection";
pub const TAGS: &str = "tags";
pub const DESCRIPTION: &str = "description";
pub const PASSWORD: &str = "password";
pub const SSH_PUBLIC_KEYS: &str = "ssh_public_keys";
pub const LABELS: &str = "labels";
pub const OSTYPE: &str = "ostype";
pub const IDMAP: &str = "idmap";
pub const ENV: &str = "env";
pub const ENTRYPOINT: &str = "entrypoint";
pub const ARCH: &str = "arch";
pub const TIMEZONE: &str = "timezone";
pub const CONSOLE_ENABLED: &str = "console.enabled";
pub const CONSOLE_TTY_COUNT: &str = "console.tty_count";
pub const CONSOLE_TYPE: &str = "console.type";
pub const HOOKSCRIPT: &str = "hookscript";
pub const POOL: &str = "pool";
pub const ROOTFS_MOUNT_OPTIONS: &str = "rootfs.mount_options";
pub const ROOTFS_ACL: &str = "rootfs.acl";
pub const ROOTFS_QUOTA: &str = "rootfs.quota";
pub const ROOTFS_REPLICATE: &str = "rootfs.replicate";
/// net0's `name=`: top-level in the file, where `name` would read as the container's.
pub const INTERFACE_NAME: &str = "interface_name";

/// Sub-fields of an interface, after [`interface_prefix`].
pub const IFACE_FIELDS: [&str; 14] = [
    "name",
    "bridge",
    "ip_address",
    "gateway",
    "ipv6",
    "gateway6",
    "vlan_id",
    "mtu",
    "mac_address",
    "firewall",
    "rate_limit",
    "host_managed",
    "link_down",
    "trunks",
];

/// net0's fields are top-level in the file; net1.. live under `extra_interfaces`.
pub fn interface_prefix(i: usize) -> String {
    if i == 0 {
        String::new()
    } else {
        format!("extra_interfaces[{}].", i - 1)
    }
}

/// The plan's name of sub-field `sub` of interface `i` (net0's `name` is [`INTERFACE_NAME`]).
pub fn interface_field(i: usize, sub: &str) -> String {
    if i == 0 && sub == "name" {
        INTERFACE_NAME.to_owned()
    } else {
        format!("{}{sub}", interface_prefix(i))
    }
}

/// Inverse of [`interface_field`]: `(index, sub-field)`.
pub fn parse_interface(f: &str) -> Option<(usize, &str)> {
    if f == INTERFACE_NAME {
        return Some((0, "name"));
    }
    if let Some(rest) = f.strip_prefix("extra_interfaces[") {
        let (n, sub) = rest.split_once("].")?;
        let n: usize = n.parse().ok()?;
        return Some((n + 1, sub));
    }
    IFACE_FIELDS
        .iter()
        .find(|s| **s == f && **s != "name")
        .map(|s| (0, *s))
}

/// `mount_points["/data"]`: mount points are identified by their path inside the container.
pub fn mount_point(path: &str) -> String {
    format!(
        "mount_points[{}]",
        serde_json::Value::String(path.to_owned())
    )
}

/// Inverse of [`mount_point`].
pub fn parse_mount_point(f: &str) -> Option<String> {
    let inner = f.strip_prefix("mount_points[")?.strip_suffix(']')?;
    serde_json::from_str(inner).ok()
}

/// `devices["/dev/ttyUSB0"]`: devices are identified by their path.
pub fn device(path: &str) -> String {
    format!("devices[{}]", serde_json::Value::String(path.to_owned()))
}

/// Inverse of [`device`].
pub fn parse_device(f: &str) -> Option<String> {
    let inner = f.strip_prefix("devices[")?.strip_suffix(']')?;
    serde_json::from_str(inner).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_parse_back() {
        assert_eq!(parse_interface("ip_address"), Some((0, "ip_address")));
        assert_eq!(parse_interface("extra_interfaces[1].mtu"), Some((2, "mtu")));
        assert_eq!(parse_interface("cores"), None);
        assert_eq!(
            parse_interface(&interface_field(0, "name")),
            Some((0, "name"))
        );
        assert_eq!(parse_interface("name"), None);
        assert_eq!(
            parse_interface(&interface_field(2, "host_managed")),
            Some((2, "host_managed"))
        );
        let f = mount_point("/var/lib/a \"b\"");
        assert_eq!(parse_mount_point(&f).as_deref(), Some("/var/lib/a \"b\""));
    }
}
