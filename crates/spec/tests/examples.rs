//! The shipped examples parse, validate and resolve to what the PRD describes.

use std::path::{Path, PathBuf};

use pxfleet_spec::*;

struct Fs;
impl FileSource for Fs {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }
}

fn example(name: &str) -> Fleet {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "..",
        "examples",
        name,
        "fleet.yaml",
    ]
    .iter()
    .collect();
    let text = std::fs::read_to_string(&path).unwrap();
    match parse_fleet(path.to_str().unwrap(), &text, &Fs) {
        Ok(f) => f,
        Err(e) => panic!("{name} does not validate:\n{e}"),
    }
}

#[test]
fn dev_example_is_the_prd_dev_environment() {
    let f = example("dev");
    assert_eq!(f.name, "dev");
    let nc = &f.containers["dev-nextcloud"];
    assert_eq!(nc.vm_id, Some(2100));
    assert_eq!((nc.cores, nc.memory, nc.disk_size), (Some(4), 4096, 16));
    assert_eq!(nc.datastore_id.as_deref(), Some("local-zfs"));
    assert_eq!(
        nc.interfaces[0].ipv4,
        Ipv4Config::Static {
            addr: "192.168.7.100/24".parse().unwrap(),
            gateway: Some("192.168.7.1".parse().unwrap())
        }
    );
    assert!(nc.features.nesting);
    assert!(nc.unprivileged);
    assert_eq!(nc.interfaces[0].bridge, "vmbr0");
    assert_eq!(nc.ssh_public_keys.len(), 1);
    assert!(nc.ssh_public_keys[0].starts_with("ssh-ed25519 "));
    let vw = &f.containers["dev-vaultwarden"];
    assert_eq!(vw.vm_id, Some(2101));
    assert_eq!((vw.cores, vw.memory, vw.disk_size), (Some(2), 2048, 8));
    assert_eq!(
        vw.interfaces[0].ipv4.static_addr(),
        Some("192.168.7.101".parse().unwrap())
    );
    assert_eq!(nc.template, vw.template);
    let t = &f.templates[&nc.template];
    assert_eq!(
        t.file_name(),
        "ubuntu-25.04-server-cloudimg-amd64-root.tar.xz"
    );
    assert!(
        matches!(&t.source, TemplateSource::Url { url, checksum: None } if url.contains("25.04"))
    );
    // spans point at the file
    assert_eq!(
        f.spans.get("containers.dev-nextcloud.memory").unwrap().line,
        19
    );
}

#[test]
fn prod_example_uses_dhcp_and_the_scheduler() {
    let f = example("prod");
    assert_eq!(f.containers.len(), 3);
    for c in f.containers.values() {
        assert_eq!(c.node, None, "{}", c.name);
        assert_eq!(c.interfaces[0].ipv4, Ipv4Config::Dhcp);
        assert_eq!(c.vm_id, None);
        assert!(c.protection);
    }
    let db = &f.containers["db-1"];
    assert_eq!(db.interfaces.len(), 2);
    assert_eq!(db.interfaces[1].name, "eth1");
    assert_eq!(db.interfaces[1].vlan_id, Some(20));
    assert_eq!(db.mount_points.len(), 1);
    assert_eq!(
        db.constraints.node_labels.get("zone").map(String::as_str),
        Some("dc1")
    );
    assert_eq!(db.labels.get("role").map(String::as_str), Some("db"));
}
