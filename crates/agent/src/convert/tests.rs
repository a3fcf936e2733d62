//! Tests of the conversions.

use super::*;

fn spec() -> v1::ContainerSpec {
    v1::ContainerSpec {
        fleet: "dev".into(),
        name: "dev-web".into(),
        vm_id: 2100,
        hostname: "dev-web".into(),
        cores: Some(4),
        memory_mib: 4096,
        swap_mib: 0,
        disk_size_gib: 16,
        datastore_id: "local-zfs".into(),
        template_volid: "local:vztmpl/ubuntu.tar.xz".into(),
        unprivileged: true,
        features: Some(v1::Features {
            nesting: true,
            ..Default::default()
        }),
        interfaces: vec![v1::NetworkInterface {
            name: "eth0".into(),
            bridge: "vmbr0".into(),
            ipv4: Some(v1::IpConfig {
                mode: v1::IpMode::Static as i32,
                address: "192.168.7.100/24".into(),
                gateway: "192.168.7.1".into(),
            }),
            index: 0,
            ..Default::default()
        }],
        startup: Some(v1::Startup {
            order: Some(3),
            up_delay: Some(60),
            down_delay: Some(60),
        }),
        tags: vec!["web".into()],
        password: Some(v1::Secret {
            value: "s3cret-pw".into(),
        }),
        ..Default::default()
    }
}

#[test]
fn spec_renders_as_pve_stores_it() {
    let o: BTreeMap<_, _> = crate::pve_options::options_text(&create_spec(&spec()).unwrap())
        .into_iter()
        .collect();
    assert_eq!(
        o["net0"],
        "name=eth0,bridge=vmbr0,gw=192.168.7.1,ip=192.168.7.100/24,type=veth"
    );
    assert_eq!(o["rootfs"], "local-zfs:16");
    assert_eq!(o["features"], "nesting=1");
    assert_eq!(o["startup"], "order=3,up=60,down=60");
    assert_eq!(o["unprivileged"], "1");
    assert_eq!(o["swap"], "0");
    assert!(!o.contains_key("password"));
}

/// Every kind of field, as the option text PVE would store for a spec.
#[test]
fn a_full_spec_renders_as_the_option_text_of_earlier_agents() {
    let mut s = spec();
    s.cpu_limit = Some(1.5);
    s.ostype = "debian".into();
    s.onboot = true;
    s.protection = true;
    s.dns = Some(v1::Dns {
        servers: vec!["1.1.1.1".into(), "8.8.8.8".into()],
        domain: "example.com".into(),
    });
    s.interfaces.push(v1::NetworkInterface {
        name: "eth1".into(),
        bridge: "vmbr1".into(),
        ipv6: Some(v1::IpConfig {
            mode: v1::IpMode::Static as i32,
            address: "fd00::5/64".into(),
            gateway: "fd00::1".into(),
        }),
        vlan_id: Some(20),
        mtu: Some(1400),
        mac: "bc:24:11:aa:bb:cc".into(),
        firewall: true,
        rate_mbps: Some(10.5),
        index: 1,
        ..Default::default()
    });
    s.mount_points = vec![
        v1::MountPoint {
            index: 0,
            datastore_id: "local-zfs".into(),
            size_gib: 8,
            path: "/data".into(),
            backup: true,
            read_only: true,
            mount_options: vec!["noatime".into(), "nodev".into()],
            ..Default::default()
        },
        v1::MountPoint {
            index: 1,
            host_path: "/srv/x".into(),
            path: "/x".into(),
            ..Default::default()
        },
    ];
    let text = crate::pve_options::options_text(&create_spec(&s).unwrap());
    let want: Vec<(String, String)> = [
        ("hostname", "dev-web"),
        ("cores", "4"),
        ("cpulimit", "1.5"),
        ("memory", "4096"),
        ("swap", "0"),
        ("rootfs", "local-zfs:16"),
        ("unprivileged", "1"),
        ("features", "nesting=1"),
        (
            "net0",
            "name=eth0,bridge=vmbr0,gw=192.168.7.1,ip=192.168.7.100/24,type=veth",
        ),
        (
            "net1",
            "name=eth1,bridge=vmbr1,firewall=1,gw6=fd00::1,hwaddr=BC:24:11:AA:BB:CC,ip6=fd00::5/64,mtu=1400,rate=10.5,tag=20,type=veth",
        ),
        ("nameserver", "1.1.1.1 8.8.8.8"),
        ("searchdomain", "example.com"),
        ("startup", "order=3,up=60,down=60"),
        ("onboot", "1"),
        ("ostype", "debian"),
        ("protection", "1"),
        (
            "mp0",
            "local-zfs:8,mp=/data,backup=1,mountoptions=noatime;nodev,ro=1",
        ),
        ("mp1", "/srv/x,mp=/x"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(text, want);
    // and the journal reads it back to the same typed value
    assert_eq!(
        crate::pve_options::options_spec(&text).unwrap(),
        create_spec(&s).unwrap()
    );
    let mut bad = spec();
    bad.interfaces[0].vlan_id = Some(70_000);
    assert!(create_spec(&bad).unwrap_err().contains("vlan_id"));
}

#[test]
fn create_operation_converts_and_keeps_the_password_out_of_debug() {
    let op = v1::Operation {
        op_id: "op-1".into(),
        vm_id: 2100,
        kind: Some(v1::operation::Kind::Create(v1::CreateContainer {
            spec: Some(spec()),
            start: true,
            ..Default::default()
        })),
        ..Default::default()
    };
    let op = operation_from_proto(op).unwrap();
    let OpKind::Create(c) = &op.kind else {
        panic!("not a create")
    };
    assert_eq!(c.template.volid(), "local:vztmpl/ubuntu.tar.xz");
    assert_eq!(
        c.mark.description_line(),
        "managed-by: pxfleet fleet=dev name=dev-web"
    );
    assert!(c.password.is_some());
    assert!(!format!("{op:?}").contains("s3cret-pw"));
}

#[test]
fn a_clone_create_carries_its_source_and_needs_no_template_file() {
    let create = |spec: v1::ContainerSpec| {
        operation_from_proto(v1::Operation {
            op_id: "op-c".into(),
            vm_id: spec.vm_id,
            kind: Some(v1::operation::Kind::Create(v1::CreateContainer {
                spec: Some(spec),
                start: true,
                ..Default::default()
            })),
            ..Default::default()
        })
    };
    let mut s = spec();
    s.template_volid = String::new();
    s.clone_source = Some(v1::CloneSource {
        vm_id: 9000,
        full: false,
    });
    let op = create(s.clone()).unwrap();
    let OpKind::Create(c) = &op.kind else {
        panic!("not a create")
    };
    assert_eq!(
        c.clone,
        Some(CloneFrom {
            source: 9000,
            full: false
        })
    );
    // The source cannot be the new container itself.
    s.clone_source = Some(v1::CloneSource {
        vm_id: s.vm_id,
        full: true,
    });
    let e = create(s.clone()).unwrap_err();
    assert_eq!(e.field, "create.spec.clone_source.vm_id");
    // Without a clone source an empty template volid is still an error.
    s.clone_source = None;
    assert_eq!(create(s).unwrap_err().field, "create.spec.template_volid");
}

#[test]
fn a_seed_result_carries_the_template_sha256() {
    let u = OpUpdate::Succeeded {
        op_id: "op-9".into(),
        result: crate::ops::OpResult {
            message: "template present".into(),
            container: None,
            template_volid: Some("local:vztmpl/x.tar.xz".into()),
            template_sha256: Some("ab".repeat(32)),
            snapshots: None,
        },
    };
    let pb = update_to_proto(&u, 0, "n1", 1_700_000_000_000);
    assert_eq!(pb.template_sha256, "ab".repeat(32));
    assert_eq!(pb.state, v1::OperationState::Succeeded as i32);
}

#[test]
fn bad_operations_name_the_field() {
    let op = v1::Operation {
        op_id: "op-2".into(),
        vm_id: 100,
        kind: Some(v1::operation::Kind::SeedTemplate(v1::SeedTemplate {
            url: "http://127.0.0.1/x.tar.xz".into(),
            checksum: Some(v1::seed_template::Checksum::Sha256("abc".into())),
            storage: "local".into(),
            file_name: "x.tar.xz".into(),
            existing: false,
        })),
        ..Default::default()
    };
    let e = operation_from_proto(op).unwrap_err().to_string();
    assert!(e.contains("seed_template.checksum"), "{e}");
    // A URL without checksum (fleet.yaml `template_url`) is a download without verification.
    let op = operation_from_proto(v1::Operation {
        op_id: "op-4".into(),
        kind: Some(v1::operation::Kind::SeedTemplate(v1::SeedTemplate {
            url: "http://127.0.0.1/x.tar.xz".into(),
            checksum: None,
            storage: "local".into(),
            file_name: "x.tar.xz".into(),
            existing: false,
        })),
        ..Default::default()
    })
    .unwrap();
    assert!(matches!(
        op.kind,
        OpKind::SeedTemplate(TemplateSpec {
            source: TemplateSource::Url { digest: None, .. },
            ..
        })
    ));
    // A volume already in storage (fleet.yaml `volume:`): only looked for.
    let op = operation_from_proto(v1::Operation {
        op_id: "op-5".into(),
        kind: Some(v1::operation::Kind::SeedTemplate(v1::SeedTemplate {
            storage: "nfs".into(),
            file_name: "x.tar.zst".into(),
            existing: true,
            ..Default::default()
        })),
        ..Default::default()
    })
    .unwrap();
    assert!(matches!(
        op.kind,
        OpKind::SeedTemplate(TemplateSpec {
            source: TemplateSource::Volume,
            ..
        })
    ));
    let e = operation_from_proto(v1::Operation {
        op_id: "op-3".into(),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e.field, "kind");
}

#[test]
fn config_reads_back_into_the_same_spec() {
    let s = spec();
    let mut cfg: crate::node::CtConfig =
        crate::pve_options::options_text(&create_spec(&s).unwrap())
            .into_iter()
            .collect();
    cfg.insert(
        "rootfs".into(),
        "local-zfs:subvol-2100-disk-0,size=16G".into(),
    );
    cfg.insert(
        "description".into(),
        "managed-by: pxfleet fleet=dev name=dev-web\n".into(),
    );
    cfg.insert("tags".into(), "pxfleet;web".into());
    let back = config_to_spec(2100, &crate::node::typed_config(&cfg).unwrap());
    assert_eq!(back.fleet, "dev");
    assert_eq!(back.name, "dev-web");
    assert_eq!(back.disk_size_gib, 16);
    assert_eq!(back.datastore_id, "local-zfs");
    assert_eq!(back.tags, vec!["web".to_string()]);
    assert_eq!(back.description, "");
    assert_eq!(back.interfaces, s.interfaces);
    assert_eq!(back.startup, s.startup);
    assert_eq!(back.features, s.features);
    assert_eq!(back.cores, Some(4));
}

#[test]
fn pve_booleans_read_back_like_pve_reads_them() {
    let mut cfg = crate::node::CtConfig::new();
    cfg.insert("onboot".into(), "yes".into());
    cfg.insert("protection".into(), "on".into());
    cfg.insert("unprivileged".into(), "true".into());
    cfg.insert("features".into(), "nesting=yes,keyctl=off".into());
    cfg.insert(
        "net0".into(),
        "name=eth0,bridge=vmbr0,firewall=true,ip=dhcp,type=veth".into(),
    );
    cfg.insert(
        "mp0".into(),
        "local-lvm:vm-1-disk-1,mp=/data,backup=on,ro=yes,mountoptions=noatime;nodev,size=4G".into(),
    );
    let s = config_to_spec(100, &crate::node::typed_config(&cfg).unwrap());
    assert!(s.onboot && s.protection && s.unprivileged);
    let f = s.features.unwrap();
    assert!(f.nesting && !f.keyctl);
    assert!(s.interfaces[0].firewall);
    let mp = &s.mount_points[0];
    assert!(mp.backup && mp.read_only);
    assert_eq!(mp.size_gib, 4);
    assert_eq!(mp.mount_options, vec!["noatime", "nodev"]);
}

#[test]
fn mount_options_existing_volumes_devices_and_idmap_reach_pve_and_come_back() {
    let mut s = spec();
    s.mount_points = vec![
        v1::MountPoint {
            index: 0,
            datastore_id: "local-zfs".into(),
            size_gib: 8,
            path: "/data".into(),
            acl: Some(false),
            quota: true,
            replicate: Some(false),
            mount_options: vec!["noatime".into()],
            ..Default::default()
        },
        v1::MountPoint {
            index: 1,
            volume: "local-lvm:vm-900-disk-1".into(),
            existing: true,
            path: "/kept".into(),
            backup: true,
            ..Default::default()
        },
        v1::MountPoint {
            index: 2,
            host_path: "/srv/x".into(),
            path: "/x".into(),
            shared: true,
            ..Default::default()
        },
    ];
    s.devices = vec![v1::Device {
        index: 0,
        path: "/dev/ttyUSB0".into(),
        mode: "0660".into(),
        uid: None,
        gid: Some(20),
        deny_write: true,
    }];
    s.idmap = vec![
        v1::IdMapEntry {
            kind: "u".into(),
            container_id: 0,
            host_id: 200000,
            size: 65536,
        },
        v1::IdMapEntry {
            kind: "g".into(),
            container_id: 0,
            host_id: 200000,
            size: 65536,
        },
    ];
    let typed = create_spec(&s).unwrap();
    let text = crate::pve_options::options_text(&typed);
    let get = |k: &str| -> Vec<&str> {
        text.iter()
            .filter(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    assert_eq!(
        get("mp0"),
        ["local-zfs:8,mp=/data,acl=0,mountoptions=noatime,quota=1,replicate=0"]
    );
    assert_eq!(get("mp1"), ["local-lvm:vm-900-disk-1,mp=/kept,backup=1"]);
    assert_eq!(get("mp2"), ["/srv/x,mp=/x,shared=1"]);
    assert_eq!(
        get("dev0"),
        ["path=/dev/ttyUSB0,deny-write=1,gid=20,mode=0660"]
    );
    assert_eq!(get("lxc.idmap"), ["u 0 200000 65536", "g 0 200000 65536"]);
    // The journal reads it back to the same typed value (an existing volume stays existing).
    assert_eq!(crate::pve_options::options_spec(&text).unwrap(), typed);
    // pct create gets the mpN and devN, never lxc.idmap (written into the file afterwards).
    let argv = pxfleet_pve::argv::create_args(
        &pxfleet_pve::CreateSpec {
            vmid: 2100,
            template: "local:vztmpl/ubuntu.tar.xz".into(),
            ..typed.clone()
        },
        None,
    )
    .unwrap();
    assert!(argv.iter().any(|a| a == "--dev0"), "{argv:?}");
    assert!(!argv.iter().any(|a| a.contains("idmap")), "{argv:?}");

    // Read back as PVE stores them: the same options, the idmap lines in order.
    let mut cfg = crate::node::CtConfig::new();
    cfg.insert(
        "mp0".into(),
        "local-zfs:subvol-2100-disk-1,mp=/data,acl=0,mountoptions=noatime,quota=1,replicate=0,size=8G".into(),
    );
    cfg.insert(
        "mp1".into(),
        "local-lvm:vm-900-disk-1,mp=/kept,backup=1,size=32G".into(),
    );
    cfg.insert("mp2".into(), "/srv/x,mp=/x,shared=1".into());
    cfg.insert(
        "dev0".into(),
        "path=/dev/ttyUSB0,deny-write=1,gid=20,mode=0660".into(),
    );
    let mut typed_cfg = crate::node::typed_config(&cfg).unwrap();
    typed_cfg.idmap = vec!["u 0 200000 65536".into(), "g 0 200000 65536".into()];
    let back = config_to_spec(2100, &typed_cfg);
    let mp0 = &back.mount_points[0];
    assert_eq!(
        (mp0.acl, mp0.quota, mp0.replicate, mp0.mount_options.clone()),
        (Some(false), true, Some(false), vec!["noatime".to_string()])
    );
    assert_eq!(back.mount_points[1].volume, "local-lvm:vm-900-disk-1");
    assert!(back.mount_points[2].shared);
    assert_eq!(back.devices, s.devices);
    assert_eq!(back.idmap, s.idmap);
}

#[test]
fn a_snapshot_operation_converts_and_bad_actions_and_names_are_refused() {
    let op = |action: &str, name: &str| v1::Operation {
        op_id: "op-s".into(),
        vm_id: 2100,
        kind: Some(v1::operation::Kind::Snapshot(v1::SnapshotContainer {
            action: action.into(),
            name: name.into(),
            description: "nightly".into(),
            start: true,
        })),
        ..Default::default()
    };
    let got = operation_from_proto(op("rollback", "before")).unwrap();
    let OpKind::Snapshot {
        vmid,
        action,
        name,
        description,
        start,
        ..
    } = got.kind
    else {
        panic!("{:?}", got.kind)
    };
    assert_eq!(
        (vmid, action, name.as_str(), description.as_deref(), start),
        (
            2100,
            crate::ops::SnapshotAction::Rollback,
            "before",
            Some("nightly"),
            true
        )
    );
    assert!(operation_from_proto(op("list", "")).is_ok());
    let e = operation_from_proto(op("revert", "before")).unwrap_err();
    assert!(e.to_string().contains("snapshot.action"), "{e}");
    let e = operation_from_proto(op("create", "current")).unwrap_err();
    assert!(e.to_string().contains("snapshot.name"), "{e}");
}
