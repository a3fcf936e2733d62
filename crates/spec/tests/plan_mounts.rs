//! What the planner decides for mount point options, existing volumes, devices and idmap: which changes are
//! live on a running container, which wait for a restart, and that an applied fleet plans empty.

mod plan_support;

use plan_support::*;
use pxfleet_spec::model::*;
use pxfleet_spec::observed::PowerState;
use pxfleet_spec::plan::*;

fn with_all(name: &str, vm_id: u32) -> Container {
    let mut c = container(name, Some(vm_id));
    c.mount_points = vec![
        MountPoint::Volume {
            datastore_id: "local-lvm".into(),
            size_gib: 4,
            path: "/data".into(),
            backup: true,
            read_only: false,
            flags: MountFlags {
                mount_options: vec!["noatime".into()],
                acl: Some(true),
                quota: true,
                replicate: false,
                shared: false,
                keepattrs: false,
                idmap: None,
            },
        },
        MountPoint::Existing {
            volume: "local-lvm:vm-900-disk-1".into(),
            path: "/kept".into(),
            backup: false,
            read_only: true,
            flags: MountFlags::default(),
        },
    ];
    c.devices = vec![Device {
        path: "/dev/ttyUSB0".into(),
        mode: Some("0660".into()),
        uid: None,
        gid: Some(20),
        deny_write: false,
    }];
    c.idmap = [IdKind::Uid, IdKind::Gid]
        .map(|kind| IdMap {
            kind,
            container_id: 0,
            host_id: 100000,
            size: 65536,
        })
        .to_vec();
    c
}

fn update_of(p: &Plan) -> (Vec<String>, bool) {
    assert_eq!(p.actions.len(), 1, "{:?}", p.actions);
    let ActionKind::Update {
        changes,
        restart_required,
    } = &p.actions[0].kind
    else {
        panic!("not an update: {:?}", p.actions[0])
    };
    (
        changes.iter().map(|c| c.field.clone()).collect(),
        *restart_required,
    )
}

#[test]
fn an_applied_fleet_with_every_kind_plans_empty() {
    let f = fleet("dev", vec![with_all("a", 100)]);
    let obs = observe(&f, PowerState::Running);
    let p = plan(&f, Some(&f), &obs).unwrap();
    assert!(p.actions.is_empty(), "{:?}", p.actions);
}

#[test]
fn an_existing_volume_read_back_as_a_storage_volume_is_the_same_mount() {
    // The agent reports every storage volume alike (storage, size, volume id); the file names it as existing.
    let f = fleet("dev", vec![with_all("a", 100)]);
    let mut obs = observe(&f, PowerState::Running);
    let m = &mut obs[0].config.mount_points[1];
    m.mount = MountPoint::Volume {
        datastore_id: "local-lvm".into(),
        size_gib: 32,
        path: "/kept".into(),
        backup: false,
        read_only: true,
        flags: MountFlags::default(),
    };
    m.size_gib = Some(32.0);
    m.volume = Some("local-lvm:vm-900-disk-1".into());
    let p = plan(&f, Some(&f), &obs).unwrap();
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    // Another volume under that path is drift to repair (never a resize of somebody else's volume).
    obs[0].config.mount_points[1].volume = Some("local-lvm:vm-901-disk-1".into());
    let p = plan(&f, Some(&f), &obs).unwrap();
    let ActionKind::Repair {
        drift,
        restart_required,
    } = &p.actions[0].kind
    else {
        panic!("not a repair: {:?}", p.actions)
    };
    assert_eq!(drift[0].field, "mount_points[\"/kept\"]");
    assert_eq!(
        drift[0].to.as_ref().unwrap()["volume"],
        "local-lvm:vm-900-disk-1"
    );
    assert!(restart_required, "a changed mpN waits for the next start");
}

#[test]
fn changed_mount_options_devices_and_idmap_need_a_restart_new_ones_do_not() {
    let applied = fleet("dev", vec![with_all("a", 100)]);
    let obs = observe(&applied, PowerState::Running);

    let mut want = with_all("a", 100);
    if let MountPoint::Volume { flags, .. } = &mut want.mount_points[0] {
        flags.mount_options.push("nodev".into());
    }
    let (fields, restart) =
        update_of(&plan(&fleet("dev", vec![want]), Some(&applied), &obs).unwrap());
    assert_eq!(fields, vec!["mount_points[\"/data\"]"]);
    assert!(restart);

    let mut want = with_all("a", 100);
    want.devices.push(Device {
        path: "/dev/dri/renderD128".into(),
        mode: None,
        uid: None,
        gid: None,
        deny_write: true,
    });
    let (fields, restart) =
        update_of(&plan(&fleet("dev", vec![want]), Some(&applied), &obs).unwrap());
    assert_eq!(fields, vec!["devices[\"/dev/dri/renderD128\"]"]);
    assert!(!restart, "a new devN is hot-plugged");

    let mut want = with_all("a", 100);
    want.devices[0].mode = Some("0600".into());
    let (fields, restart) =
        update_of(&plan(&fleet("dev", vec![want]), Some(&applied), &obs).unwrap());
    assert_eq!(fields, vec!["devices[\"/dev/ttyUSB0\"]"]);
    assert!(restart);

    let mut want = with_all("a", 100);
    want.devices.clear();
    let (fields, restart) =
        update_of(&plan(&fleet("dev", vec![want]), Some(&applied), &obs).unwrap());
    assert_eq!(fields, vec!["devices[\"/dev/ttyUSB0\"]"]);
    assert!(restart, "removing a devN waits for the next start");

    let mut want = with_all("a", 100);
    want.idmap[0].host_id = 200000;
    let p = plan(&fleet("dev", vec![want]), Some(&applied), &obs).unwrap();
    let (fields, restart) = update_of(&p);
    assert_eq!(fields, vec!["idmap"]);
    assert!(restart);
    let ActionKind::Update { changes, .. } = &p.actions[0].kind else {
        unreachable!()
    };
    assert_eq!(changes[0].to.as_ref().unwrap()[0]["host_id"], 200000);

    // On a stopped container every one of them applies at once.
    let stopped = observe(&applied, PowerState::Stopped);
    let mut want = with_all("a", 100);
    want.idmap[0].host_id = 200000;
    want.state = DesiredState::Stopped;
    let (_, restart) =
        update_of(&plan(&fleet("dev", vec![want]), Some(&applied), &stopped).unwrap());
    assert!(!restart);
}

#[test]
fn a_hand_edit_of_a_mount_option_is_drift() {
    let applied = fleet("dev", vec![with_all("a", 100)]);
    let mut obs = observe(&applied, PowerState::Running);
    if let MountPoint::Volume { flags, .. } = &mut obs[0].config.mount_points[0].mount {
        flags.acl = None;
    }
    let p = plan(&applied, Some(&applied), &obs).unwrap();
    assert_eq!(p.actions.len(), 1, "{:?}", p.actions);
    assert_eq!(p.actions[0].kind.verb(), "repair", "{:?}", p.actions[0]);
}
