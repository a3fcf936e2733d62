//! Unit tests of the root file system helpers (paths kept inside the rootfs, setup files).

use super::*;

#[test]
fn writes_never_leave_the_root() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    let outside = d.path().join("outside");
    fs::create_dir_all(root.join("etc")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("victim"), "keep").unwrap();
    // absolute and relative escapes
    std::os::unix::fs::symlink(outside.join("victim"), root.join("etc/hostname")).unwrap();
    std::os::unix::fs::symlink("/", root.join("etc/abs")).unwrap();
    std::os::unix::fs::symlink("../../outside", root.join("etc/rel")).unwrap();
    let me = fs::metadata("/proc/self").unwrap().uid();
    write_in(&root, "etc/hostname", b"h\n", 0o644, me).unwrap();
    assert_eq!(fs::read_to_string(outside.join("victim")).unwrap(), "keep");
    assert_eq!(
        fs::read_to_string(root.join("etc/hostname")).unwrap(),
        "h\n"
    );
    assert_eq!(resolve_in(&root, "etc/abs/etc"), root.join("etc"));
    assert!(resolve_in(&root, "etc/rel/victim").starts_with(&root));
}

#[test]
fn network_files_as_pve_writes_them() {
    let nets = vec![
        NetSetup {
            name: "eth0".into(),
            ip: Some("10.77.0.10/24".into()),
            gw: Some("10.77.0.1".into()),
            ..Default::default()
        },
        NetSetup {
            name: "eth1".into(),
            ip: Some("dhcp".into()),
            ..Default::default()
        },
    ];
    assert_eq!(
        interfaces_file(&nets),
        "auto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet static\n\taddress 10.77.0.10/24\n\tgateway 10.77.0.1\n\nauto eth1\niface eth1 inet dhcp\n"
    );
    let h = hosts_file("127.0.0.1 localhost\n127.0.1.1 old\n", "web1.example");
    assert!(
        h.ends_with("# --- BEGIN PVE ---\n127.0.1.1 web1.example web1\n# --- END PVE ---\n"),
        "{h}"
    );
    assert_eq!(hosts_file(&h, "web1.example"), h, "idempotent");
}

#[test]
fn password_lands_in_shadow_as_sha512_crypt() {
    let d = tempfile::tempdir().unwrap();
    fs::create_dir_all(d.path().join("etc")).unwrap();
    fs::write(
        d.path().join("etc/shadow"),
        "root:*:19000:0:99999:7:::\nbin:*:19000:0:99999:7:::\n",
    )
    .unwrap();
    let me = fs::metadata("/proc/self").unwrap().uid();
    setup_password(d.path(), "s3cret", me).unwrap();
    let s = fs::read_to_string(d.path().join("etc/shadow")).unwrap();
    let hash = s.lines().next().unwrap().split(':').nth(1).unwrap();
    assert!(hash.starts_with("$6$"), "{s}");
    assert!(!s.contains("s3cret"));
    let salt = hash.split('$').nth(2).unwrap();
    assert_eq!(
        crate::lxc::crypt::sha512_crypt_with_salt("s3cret", salt),
        hash
    );
    assert!(s.contains("\nbin:*:19000:0:99999:7:::\n"));
}

#[test]
fn init_kind_follows_symlinks_inside() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    fs::create_dir_all(r.join("usr/sbin")).unwrap();
    fs::create_dir_all(r.join("lib/systemd")).unwrap();
    std::os::unix::fs::symlink("usr/sbin", r.join("sbin")).unwrap();
    assert_eq!(init_kind(r), InitKind::Other);
    std::os::unix::fs::symlink("/lib/systemd/systemd", r.join("usr/sbin/init")).unwrap();
    assert_eq!(init_kind(r), InitKind::Systemd);
}
