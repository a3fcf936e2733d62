//! Mount points with PVE's options, an existing volume, device passthrough and idmap (issue 10 item 13): a fleet
//! using all of them is submitted to a pvesim node through the real controller and agent, `pct config` shows
//! them, the plan is then empty, a day-2 change of each kind is applied (with the restart PVE needs), and the
//! existing volume outlives the container.

use pxfleet_tests::day2::{pending, plan_is_empty, submit, UP};
use pxfleet_tests::{fleet_yaml, wait_until, Cluster};

const VMID: u32 = 2400;

fn fleet(data_options: &str, dev_mode: &str, host_id: u32) -> String {
    fleet_yaml(
        "mnt",
        &format!(
            "  m:\n    vm_id: {VMID}\n    memory: 512\n    disk_size: 4\n    \
             mount_points:\n      \
               - {{datastore_id: local-lvm, size: 1, path: /data, backup: true, acl: true, replicate: false, mount_options: [{data_options}]}}\n      \
               - {{volume: \"local-lvm:vm-900-disk-1\", path: /kept}}\n      \
               - {{host_path: /srv/media, path: /media, read_only: true, shared: true, mount_options: [nosuid]}}\n    \
             devices:\n      \
               - {{path: /dev/null, mode: \"{dev_mode}\", uid: 0, gid: 0, deny_write: true}}\n    \
             idmap:\n      \
               - {{type: uid, container_id: 0, host_id: {host_id}, size: 65536}}\n      \
               - {{type: gid, container_id: 0, host_id: {host_id}, size: 65536}}\n"
        ),
    )
}

/// `pct config` text of the container (all `lxc.idmap` lines, which a key map would fold into one).
fn config_text(c: &Cluster) -> String {
    let out = c.pve("mk33", "pct", &["config", &VMID.to_string()]);
    assert_eq!(out.code, 0, "pct config: {}", out.stderr);
    out.stdout
}

fn has_lines(text: &str, want: &[&str]) -> Result<(), String> {
    match want.iter().find(|w| !text.lines().any(|l| l == **w)) {
        None => Ok(()),
        Some(w) => Err(format!("no line {w:?} in:\n{text}")),
    }
}

fn volumes(c: &Cluster) -> String {
    let out = c.pve("mk33", "pvesm", &["list", "local-lvm"]);
    assert_eq!(out.code, 0, "pvesm list: {}", out.stderr);
    out.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_options_existing_volumes_devices_and_idmap_are_applied_and_kept() {
    let c = Cluster::start(1).await.expect("cluster");
    // A volume made outside pxfleet (as Terraform or an operator would have), owned by vm_id 900.
    let out = c.pve(
        "mk33",
        "pvesm",
        &["alloc", "local-lvm", "900", "vm-900-disk-1", "1G"],
    );
    assert_eq!(out.code, 0, "pvesm alloc: {}", out.stderr);

    let path = submit(&c, "mnt.yaml", &fleet("noatime, nodev", "0666", 200000)).await;
    c.wait_running("mnt", &["m"], UP).await;
    let text = config_text(&c);
    has_lines(
        &text,
        &[
            "mp0: local-lvm:vm-2400-disk-1,mp=/data,acl=1,backup=1,mountoptions=noatime;nodev,replicate=0,size=1G",
            "mp1: local-lvm:vm-900-disk-1,mp=/kept,size=1G",
            "mp2: /srv/media,mp=/media,mountoptions=nosuid,ro=1,shared=1",
            "dev0: path=/dev/null,deny-write=1,gid=0,mode=0666,uid=0",
            "lxc.idmap: u 0 200000 65536",
            "lxc.idmap: g 0 200000 65536",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    plan_is_empty(&c, &path).await;

    // Day 2: another mount option, another device mode, another map: all wait for the next start on PVE, so
    // the agent restarts the container and nothing stays pending.
    let path = submit(
        &c,
        "mnt.yaml",
        &fleet("noatime, nodev, noexec", "0660", 300000),
    )
    .await;
    wait_until("day-2 changes applied", UP, || async {
        has_lines(
            &config_text(&c),
            &[
                "mp0: local-lvm:vm-2400-disk-1,mp=/data,acl=1,backup=1,mountoptions=noatime;nodev;noexec,replicate=0,size=1G",
                "dev0: path=/dev/null,deny-write=1,gid=0,mode=0660,uid=0",
                "lxc.idmap: u 0 300000 65536",
                "lxc.idmap: g 0 300000 65536",
            ],
        )
    })
    .await;
    c.wait_running("mnt", &["m"], UP).await;
    assert!(
        !config_text(&c).contains("200000"),
        "old idmap lines left: {}",
        config_text(&c)
    );
    plan_is_empty(&c, &path).await;
    assert_eq!(pending(&c, "mk33", VMID), Vec::<String>::new());

    // The container goes: its own volume is freed, the existing one is not.
    let (code, out, err) = c.pxctl(&["destroy", "mnt", "-y"]).await;
    assert_eq!(code, 0, "destroy: {out}\n{err}");
    wait_until("container destroyed", UP, || async {
        if c.vmids_on("mk33").contains(&VMID) {
            Err("still there".to_string())
        } else {
            Ok(())
        }
    })
    .await;
    let vols = volumes(&c);
    assert!(vols.contains("local-lvm:vm-900-disk-1"), "{vols}");
    assert!(!vols.contains("vm-2400-disk-1"), "{vols}");
}

/// `volume_of:` mounts another container's volume (bpg's `mount_point.volume = <other>.mount_point[0]
/// .path_in_datastore`): submitted together, the second is created once the first's node reports the volume, and
/// mounts exactly that volume; the first cannot be destroyed alone while the second mounts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_of_another_container_is_mounted_once_it_exists_and_keeps_its_owner_alive() {
    let c = Cluster::start(1).await.expect("cluster");
    let both = fleet_yaml(
        "vs",
        "  db: {node: mk33, vm_id: 2630, memory: 512, disk_size: 4, mount_points: [{datastore_id: local-lvm, size: 2, path: /srv/data}]}\n  \
         app: {node: mk33, vm_id: 2631, memory: 512, disk_size: 4, mount_points: [{volume_of: {container: db, path: /srv/data}, path: /mnt/db, read_only: true}]}\n",
    );
    let path = c.write_fleet("vs.yaml", &both);
    let path = path.to_str().unwrap().to_string();
    // Before db exists the plan names the volume by its owner.
    let (code, out, err) = c.pxctl(&["plan", &path]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("volume_of") && out.contains("/srv/data"),
        "{out}"
    );
    let (code, out, err) = c.pxctl(&["submit", &path, "-y"]).await;
    assert_eq!(code, 0, "{out}\n{err}\n{}", c.logs());
    c.wait_running("vs", &["app", "db"], UP).await;
    let volid = |vmid: u32, key: &str| {
        c.pct_config("mk33", vmid)
            .get(key)
            .map(|v| v.split(',').next().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    let db_volume = volid(2630, "mp0");
    assert!(
        db_volume.starts_with("local-lvm:vm-2630-disk-"),
        "{db_volume}"
    );
    assert_eq!(volid(2631, "mp0"), db_volume, "app mounts db's volume");
    let app_mp0 = c.pct_config("mk33", 2631)["mp0"].clone();
    assert!(
        app_mp0.contains("mp=/mnt/db") && app_mp0.contains("ro=1"),
        "{app_mp0}"
    );
    plan_is_empty(&c, &path).await;

    // db alone may not go: PVE would free its volume under app.
    let (code, out, err) = c.pxctl(&["destroy", "vs", "db", "-y"]).await;
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("app of fleet vs (vm_id 2631) mounts its volume"),
        "{err}"
    );
    let only_app = fleet_yaml(
        "vs",
        "  app: {node: mk33, vm_id: 2631, memory: 512, disk_size: 4, mount_points: [{volume: \"PLACEHOLDER\", path: /mnt/db, read_only: true}]}\n",
    )
    .replace("PLACEHOLDER", &db_volume);
    let p2 = c.write_fleet("vs2.yaml", &only_app);
    let (code, out, err) = c.pxctl(&["plan", p2.to_str().unwrap()]).await;
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("mounts its volume"), "{err}");
    assert!(!volid(2630, "mp0").is_empty(), "db is still there");

    // Together they go (app first or not: PVE frees db's volume with db only).
    let (code, out, err) = c.pxctl(&["destroy", "vs", "-y"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    wait_until("both destroyed", UP, || async {
        let o = c.pve("mk33", "pct", &["list"]);
        if o.stdout.contains("2630") || o.stdout.contains("2631") {
            Err(o.stdout)
        } else {
            Ok(())
        }
    })
    .await;
}
