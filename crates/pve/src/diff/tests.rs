//! Tests of [`ConfigChange::diff`]: one per kind of field.

use super::*;
use crate::spec::{MountPointSpec, MountVolume, RootfsSpec};

fn config(pairs: &[(&str, &str)]) -> ContainerConfig {
    ContainerConfig::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()))).unwrap()
}

fn desired() -> CreateSpec {
    let mut d = CreateSpec::new(
        100,
        "",
        RootfsSpec {
            storage: "local".into(),
            size_gib: 8,
        },
    );
    d.tags = vec!["pxfleet".into()];
    d
}

fn net(s: &str) -> NetConfig {
    NetConfig::parse(s).unwrap()
}

fn pend(key: &str, current: Option<&str>, pending: Option<&str>) -> PendingKey {
    PendingKey {
        key: key.into(),
        current: current.map(String::from),
        pending: pending.map(String::from),
        delete: pending.is_none(),
    }
}

#[test]
fn scalars_are_set_when_they_differ_and_deleted_when_left_out() {
    let cur = config(&[
        ("tags", "pxfleet"),
        ("cores", "2"),
        ("memory", "512"),
        ("swap", "0"),
        ("cpulimit", "1.5"),
        ("startup", "order=1"),
        ("onboot", "1"),
        ("hostname", "web"),
        (
            "description",
            "managed-by: pxfleet fleet=dev name=web\nhello\n",
        ),
        ("rootfs", "local:100/x.raw,size=4G"),
    ]);
    let mut d = desired();
    d.cores = Some(4);
    d.memory = Some(512);
    d.swap = Some(0);
    d.cpulimit = Some(1.5);
    d.hostname = Some("web".into());
    d.description = Some("managed-by: pxfleet fleet=dev name=web\nhello".into());
    let c = ConfigChange::diff(&cur, &d, &[]);
    assert_eq!(c.cores, Some(4));
    assert_eq!(c.memory, None);
    assert_eq!(c.cpulimit, None);
    assert_eq!(c.hostname, None);
    assert_eq!(c.description, None, "compared without trailing whitespace");
    assert_eq!(c.tags, None);
    assert_eq!(
        c.delete,
        ["onboot", "startup"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    assert_eq!(c.keys(), vec!["cores", "onboot", "startup"]);
    // a description or tags that differ are set whole
    d.description = Some("managed-by: pxfleet fleet=dev name=web\n".into());
    d.tags = vec!["pxfleet".into(), "web".into()];
    let c = ConfigChange::diff(&cur, &d, &[]);
    assert_eq!(
        c.description.as_deref(),
        Some("managed-by: pxfleet fleet=dev name=web\n")
    );
    assert_eq!(c.value("tags").as_deref(), Some("pxfleet;web"));
}

#[test]
fn nets_compare_without_a_generated_mac_and_keep_it() {
    let cur = config(&[
        ("tags", "pxfleet"),
        (
            "net0",
            "name=eth0,bridge=vmbr0,firewall=0,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth",
        ),
        (
            "net1",
            "name=eth1,bridge=vmbr1,hwaddr=BC:24:11:00:00:02,ip=dhcp,type=veth",
        ),
        (
            "net2",
            "name=eth2,bridge=vmbr2,hwaddr=BC:24:11:00:00:03,ip=dhcp,type=veth",
        ),
    ]);
    let mut d = desired();
    d.nets.insert(0, net("name=eth0,bridge=vmbr0,ip=dhcp"));
    d.nets
        .insert(1, net("name=eth1,bridge=vmbr9,ip=dhcp,type=veth"));
    d.nets.insert(
        3,
        net("name=eth3,bridge=vmbr3,hwaddr=bc:24:11:00:00:09,ip=dhcp"),
    );
    let c = ConfigChange::diff(&cur, &d, &[]);
    assert!(
        !c.nets.contains_key(&0),
        "the same but for the generated MAC"
    );
    assert_eq!(
        c.nets[&1].to_property_string(),
        "name=eth1,bridge=vmbr9,hwaddr=BC:24:11:00:00:02,ip=dhcp,type=veth"
    );
    assert_eq!(c.nets[&3].hwaddr.as_deref(), Some("bc:24:11:00:00:09"));
    assert_eq!(c.delete, ["net2".to_string()].into_iter().collect());
    // a desired MAC that differs is set
    d.nets.insert(
        0,
        net("name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:07,ip=dhcp"),
    );
    assert!(ConfigChange::diff(&cur, &d, &[]).nets.contains_key(&0));
    assert!(same_net(
        &net("name=eth0,hwaddr=bc:24:11:00:00:01,type=veth"),
        &net("name=eth0,hwaddr=BC:24:11:00:00:01")
    ));
}

#[test]
fn mount_points_are_matched_by_path_not_slot() {
    let cur = config(&[
        ("tags", "pxfleet"),
        ("mp0", "local-lvm:vm-1-disk-1,mp=/data,size=4G"),
        ("mp1", "local-lvm:vm-1-disk-2,mp=/logs,size=2G"),
    ]);
    let mp = |storage: &str, size_gib: u32, path: &str| MountPointSpec {
        volume: MountVolume::Storage {
            storage: storage.into(),
            size_gib,
        },
        path: path.into(),
        backup: None,
        read_only: None,
        mount_options: vec![],
        acl: None,
        quota: None,
        replicate: None,
        shared: None,
        keepattrs: None,
        idmap: None,
    };
    // /data left the file (so /logs is mp0 in the spec), /new came in as mp1
    let mut d = desired();
    d.mount_points.insert(0, mp("local-lvm", 2, "/logs"));
    d.mount_points.insert(1, mp("local-lvm", 1, "/new"));
    let c = ConfigChange::diff(&cur, &d, &[]);
    assert_eq!(c.delete, ["mp0".to_string()].into_iter().collect());
    assert_eq!(c.mount_points.len(), 1);
    assert_eq!(c.mount_points[&2], mp("local-lvm", 1, "/new"));
}

#[test]
fn create_only_keys_are_never_touched() {
    let cur = config(&[
        ("tags", "pxfleet"),
        ("rootfs", "local:100/x.raw,size=4G"),
        ("unprivileged", "1"),
        ("memory", "512"),
        ("ostype", "debian"),
        ("hostname", "web"),
        ("arch", "amd64"),
    ]);
    let mut d = desired();
    d.unprivileged = false;
    assert!(ConfigChange::diff(&cur, &d, &[]).is_empty());
}

#[test]
fn a_pending_change_the_desired_side_does_not_want_is_reverted_not_piled_on() {
    // features=nesting=1 set by hand (pending only), nameserver changed by hand (pending, merged into the
    // config), cores changed by the desired side (no pending entry)
    let cur = config(&[
        ("tags", "pxfleet"),
        ("cores", "2"),
        ("features", "nesting=1"),
        ("nameserver", "10.0.0.9"),
    ]);
    let pending = vec![
        pend("features", None, Some("nesting=1")),
        pend("nameserver", Some("10.0.0.1"), Some("10.0.0.9")),
    ];
    let mut d = desired();
    d.cores = Some(4);
    d.nameservers = vec!["10.0.0.1".into()];
    let c = ConfigChange::diff(&cur, &d, &pending);
    assert_eq!(
        c.revert,
        ["features", "nameserver"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    assert_eq!(c.cores, Some(4));
    assert_eq!(c.nameservers, None);
    assert!(c.delete.is_empty());
    assert_eq!(c.keys(), vec!["cores"]);
}

#[test]
fn arch_timezone_and_console_are_set_when_given_never_deleted_and_absent_keys_are_pves_defaults() {
    let cur = config(&[("tags", "pxfleet"), ("arch", "amd64"), ("timezone", "UTC")]);
    // Left out: nothing compared, nothing deleted.
    assert_eq!(
        ConfigChange::diff(&cur, &desired(), &[]),
        ConfigChange::default()
    );
    // PVE's defaults for absent console keys: asking for them changes nothing.
    let mut d = desired();
    d.console = Some(true);
    d.tty = Some(2);
    d.cmode = Some("tty".into());
    d.arch = Some("amd64".into());
    d.timezone = Some("UTC".into());
    assert_eq!(ConfigChange::diff(&cur, &d, &[]), ConfigChange::default());
    d.console = Some(false);
    d.tty = Some(4);
    d.cmode = Some("shell".into());
    d.timezone = Some("Europe/Berlin".into());
    let c = ConfigChange::diff(&cur, &d, &[]);
    assert_eq!(c.console, Some(false));
    assert_eq!(c.tty, Some(4));
    assert_eq!(c.cmode.as_deref(), Some("shell"));
    assert_eq!(c.timezone.as_deref(), Some("Europe/Berlin"));
    assert_eq!(c.arch, None);
    assert!(c.delete.is_empty(), "{c:?}");
    assert_eq!(c.keys(), ["timezone", "console", "tty", "cmode"]);
}
