//! `pxctl import terraform`: the PRD's Terraform project (tests/fixtures/prd-terraform, a verbatim copy of
//! shared/reference/prd-terraform) imported; the fleet written describes the same containers the Terraform
//! files make, and everything that could not be mapped is a warning naming FILE:LINE:COL.

use std::path::{Path, PathBuf};

use pxfleet_cli::import::{terraform, ImportError, Options};
use pxfleet_spec::{parse_fleet, Container, Ipv4Config, NoFiles};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn dev_dir() -> PathBuf {
    fixtures().join("prd-terraform/environments/dev")
}

fn import(opts: &Options) -> (pxfleet_spec::Fleet, String, Vec<String>) {
    let imported = terraform(opts).expect("import");
    let fleet = parse_fleet("fleet.yaml", &imported.yaml, &NoFiles).unwrap_or_else(|d| {
        panic!(
            "the imported fleet does not validate:\n{d}\n{}",
            imported.yaml
        )
    });
    (fleet, imported.yaml, imported.warnings)
}

/// Imports a directory holding only `main.tf` with `text`, as fleet `name`.
fn import_main_tf(text: &str, name: &str) -> (pxfleet_spec::Fleet, String, Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("main.tf"), text).unwrap();
    import(&Options {
        dir: tmp.path().to_path_buf(),
        fleet: Some(name.into()),
        ..Options::default()
    })
}

fn net0(c: &Container) -> &pxfleet_spec::Interface {
    &c.interfaces[0]
}

#[test]
fn the_prd_dev_environment_becomes_the_same_two_containers() {
    let (fleet, yaml, warnings) = import(&Options {
        dir: dev_dir(),
        ..Options::default()
    });
    assert_eq!(fleet.name, "dev");
    assert_eq!(fleet.containers.len(), 2, "{yaml}");
    // The values of environments/dev/main.tf's lxc_configs, and the module's defaults for what it leaves out.
    let expect = [
        ("dev-nextcloud", 2100, 4, 4096, 16, "192.168.7.100/24"),
        ("dev-vaultwarden", 2101, 2, 2048, 8, "192.168.7.101/24"),
    ];
    for (name, vm_id, cores, memory, disk, ip) in expect {
        let c = &fleet.containers[name];
        assert_eq!(c.vm_id, Some(vm_id), "{name}");
        assert_eq!(c.hostname, name);
        assert_eq!(
            c.node.as_deref(),
            Some("mk33"),
            "{name}: the misspelt module input's value"
        );
        assert_eq!(c.cores, Some(cores), "{name}");
        assert_eq!(c.memory, memory, "{name}");
        assert_eq!(c.swap, 0, "{name}: memory.swap = 0 in the module");
        assert_eq!(
            c.cpu_units,
            Some(1024),
            "{name}: cpu.units = 1024 in the module"
        );
        assert_eq!(c.disk_size, disk, "{name}");
        assert_eq!(c.datastore_id.as_deref(), Some("local-zfs"), "{name}");
        assert_eq!(
            net0(c).ipv4,
            Ipv4Config::Static {
                addr: ip.parse().unwrap(),
                gateway: Some("192.168.7.1".parse().unwrap()),
            },
            "{name}"
        );
        assert_eq!(net0(c).bridge, "vmbr0");
        assert_eq!(
            net0(c).name,
            "veth0",
            "{name}: network_interface.name becomes interface_name"
        );
        assert!(c.unprivileged, "{name}: unprivileged = true in the module");
        // features: optional(object({nesting = optional(bool, true), ...}), {})
        assert!(
            c.features.nesting && !c.features.fuse && !c.features.keyctl,
            "{name}"
        );
        assert!(
            c.start_on_boot,
            "{name}: the provider starts containers on boot by default"
        );
        let s = c.startup.as_ref().expect("startup");
        assert_eq!(
            (s.order, s.up_delay, s.down_delay),
            (Some(3), Some(60), Some(60))
        );
        assert_eq!(
            c.description.as_deref(),
            Some(format!("Managed by Terraform — {name}").as_str())
        );
    }
    // template_url: null in the module (optional(string)), the root variables.tf's default used instead.
    let templates: Vec<_> = fleet.templates.values().collect();
    assert_eq!(templates.len(), 1, "{yaml}");
    assert!(
        format!("{:?}", templates[0]).contains(
            "https://mirrors.servercentral.com/ubuntu-cloud-images/releases/25.04/release/ubuntu-25.04-server-cloudimg-amd64-root.tar.xz"
        ),
        "{:?}",
        templates[0]
    );

    // What could not be used is named with its place, on stderr and as a comment.
    let expect_warnings = [
        ("main.tf:4:3", "`proxxmox_node` is not a variable"),
        ("main.tf:4:3", "did you mean `proxmox_node`?"),
        (
            "modules/lxc/variables.tf:9:1",
            "`template_url` has no default here",
        ),
        ("variables.tf:18:1", "the default of the same variable"),
        ("modules/lxc/main.tf:53:7", "user_account.keys"),
        ("modules/lxc/main.tf:53:7", "main.tf:5:3"),
        ("modules/lxc/main.tf:54:7", "user_account.password"),
    ];
    // operating_system.type is fleet.yaml's ostype
    assert!(
        fleet
            .containers
            .values()
            .all(|c| c.ostype.as_deref() == Some("ubuntu")),
        "{yaml}"
    );
    assert!(
        !warnings.iter().any(|w| w.contains("operating_system.type")),
        "{warnings:#?}"
    );
    for (place, text) in expect_warnings {
        assert!(
            warnings
                .iter()
                .any(|w| w.contains(place) && w.contains(text)),
            "no warning at {place} saying {text:?}: {warnings:#?}"
        );
        assert!(
            yaml.lines()
                .any(|l| l.starts_with('#') && l.contains(place) && l.contains(text)),
            "no comment at {place} saying {text:?}:\n{yaml}"
        );
    }
    // Every warning names a file, line and column (or the state file); none is repeated per container.
    for w in &warnings {
        let place = w.split(": ").next().unwrap();
        assert!(
            place.rsplit(':').take(2).all(|n| n.parse::<u32>().is_ok()),
            "{w}"
        );
    }
    let mut sorted = warnings.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), warnings.len(), "{warnings:#?}");
}

#[test]
fn the_state_pins_vm_ids_nodes_and_macs_and_says_what_it_could_not_match() {
    let (fleet, yaml, warnings) = import(&Options {
        dir: dev_dir(),
        state: Some(fixtures().join("dev.tfstate.json")),
        fleet: Some("dev".into()),
        ..Options::default()
    });
    let nc = &fleet.containers["dev-nextcloud"];
    assert_eq!(nc.vm_id, Some(2100));
    assert_eq!(
        net0(nc)
            .mac_address
            .as_ref()
            .map(|m| m.to_string())
            .as_deref(),
        Some("BC:24:11:AA:21:00")
    );
    let vw = &fleet.containers["dev-vaultwarden"];
    // The state says the container runs on mk34 (moved by hand after Terraform made it): the state wins.
    assert_eq!(vw.node.as_deref(), Some("mk34"));
    assert_eq!(
        net0(vw)
            .mac_address
            .as_ref()
            .map(|m| m.to_string())
            .as_deref(),
        Some("BC:24:11:AA:21:01")
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("dev-vaultwarden") && w.contains("node is mk34 in the state, mk33")),
        "{warnings:#?}"
    );
    // An instance the configuration no longer has is named, not imported.
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("dev-old") && w.contains("2199") && w.contains("not imported")),
        "{warnings:#?}"
    );
    assert!(!yaml.contains("vm_id: 2199"), "{yaml}");
    if pxfleet_cli::import::spec_knows_adopt() {
        // fleet.yaml has `adopt: true`: the containers of the state carry it (with node and vm_id).
        assert!(
            yaml.contains(
                "    vm_id: 2100\n    hostname: dev-nextcloud\n    node: mk33\n    adopt: true\n"
            ),
            "{yaml}"
        );
        assert!(!yaml.contains("pct set"), "{yaml}");
    } else {
        // How to mark the existing containers for pxfleet, per container, in the header.
        assert!(
            yaml.contains("#   pct set 2100 --description $'Managed by Terraform — dev-nextcloud\\nmanaged-by: pxfleet fleet=dev name=dev-nextcloud'"),
            "{yaml}"
        );
    }
}

#[test]
fn a_syntax_error_names_the_file_line_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("main.tf"),
        "resource \"proxmox_virtual_environment_container\" \"a\" {\n  vm_id = 100\n  cpu {\n    cores = = 2\n  }\n}\n",
    )
    .unwrap();
    let err = terraform(&Options {
        dir: tmp.path().to_path_buf(),
        ..Options::default()
    })
    .unwrap_err();
    assert!(matches!(err, ImportError::Parse { line: 4, .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("main.tf:4:"), "{text}");
}

#[test]
fn a_direct_resource_with_provider_defaults_and_unmapped_fields() {
    let (fleet, yaml, warnings) = import_main_tf(
        r#"
locals {
  node = "pve1"
  size = 6
}
resource "proxmox_virtual_environment_container" "db_1" {
  node_name = local.node
  vm_id     = 300
  pool_id   = "prod"
  tags      = ["db"]
  disk {
    datastore_id = "local-lvm"
    size         = local.size
  }
  initialization {
    hostname = "db-1"
    ip_config {
      ipv4 { address = "dhcp" }
    }
  }
  network_interface {
    name   = "eth0"
    bridge = "vmbr1"
  }
  operating_system {
    template_file_id = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
  }
  mount_point {
    volume = "local-lvm"
    size   = "10G"
    path   = "/var/lib/postgresql"
  }
}
resource "proxmox_virtual_environment_vm" "x" {}
"#,
        "prod",
    );
    let c = &fleet.containers["db-1"];
    assert_eq!(c.node.as_deref(), Some("pve1"));
    assert_eq!(c.disk_size, 6);
    assert_eq!(
        c.cores,
        Some(1),
        "the provider's default, not all host CPUs"
    );
    assert_eq!(c.swap, 0, "the provider's default");
    assert!(!c.unprivileged, "the provider's default is privileged");
    assert!(fleet.allow_privileged, "{yaml}");
    assert_eq!(c.template, "debian-12-standard_12.7-1_amd64.tar.zst");
    assert_eq!(
        fleet.templates[&c.template].source,
        pxfleet_spec::TemplateSource::Volume {
            volid: "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst".into()
        },
        "a static template_file_id is the volume as it is in storage"
    );
    assert_eq!(c.mount_points.len(), 1);
    assert_eq!(c.tags, vec!["db".to_string()]);
    assert_eq!(net0(c).bridge, "vmbr1");
    assert_eq!(c.pool.as_deref(), Some("prod"), "{yaml}");
    for (place, text) in [
        ("main.tf:6:1", "privileged"),
        ("main.tf:34:1", "proxmox_virtual_environment_vm.x"),
    ] {
        assert!(
            warnings
                .iter()
                .any(|w| w.contains(place) && w.contains(text)),
            "no warning at {place} saying {text:?}: {warnings:#?}"
        );
    }
}

#[test]
fn a_root_module_with_tfvars_like_the_prd_root() {
    // The layout the PRD's root suggests: the variables.tf with lxc_configs, the resources in the same
    // directory, the values in terraform.tfvars; a --var-file overrides them.
    let tmp = tempfile::tempdir().unwrap();
    let root = fixtures().join("prd-terraform");
    std::fs::copy(root.join("variables.tf"), tmp.path().join("variables.tf")).unwrap();
    let module = std::fs::read_to_string(root.join("modules/lxc/main.tf")).unwrap();
    std::fs::write(tmp.path().join("main.tf"), module).unwrap();
    std::fs::write(
        tmp.path().join("terraform.tfvars"),
        "proxmox_node = \"mk34\"\nssh_public_key = \"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOq0bsqNY8b9Bw9L9NNIDnfqyhtu6cQKxs2CNtOjkx3v ops\"\nlxc_configs = {\n  web = { vm_id = 300, hostname = \"web\", ip_address = \"10.0.0.5/24\", gateway = \"10.0.0.1\" }\n}\nunknown_thing = 1\n",
    )
    .unwrap();
    let over = tmp.path().join("more.tfvars");
    std::fs::write(&over, "proxmox_node = \"mk35\"\n").unwrap();
    let (fleet, yaml, warnings) = import(&Options {
        dir: tmp.path().to_path_buf(),
        fleet: Some("root".into()),
        var_files: vec![over],
        ..Options::default()
    });
    let c = &fleet.containers["web"];
    assert_eq!(c.vm_id, Some(300));
    assert_eq!(c.node.as_deref(), Some("mk35"), "--var-file wins: {yaml}");
    assert_eq!(c.cores, Some(2), "the type's default");
    assert_eq!(c.memory, 2048);
    assert_eq!(c.datastore_id.as_deref(), Some("local-lvm"));
    assert_eq!(c.ssh_public_keys.len(), 1, "{yaml}");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("terraform.tfvars:6:1") && w.contains("unknown_thing")),
        "{warnings:#?}"
    );
}

#[test]
fn bpg_mount_points_devices_and_idmap_are_mapped() {
    let (fleet, yaml, warnings) = import_main_tf(
        r#"
resource "proxmox_virtual_environment_container" "media" {
  node_name     = "pve1"
  vm_id         = 310
  unprivileged  = true
  disk {
    datastore_id = "local-lvm"
    size         = 8
  }
  initialization {
    hostname = "media"
  }
  operating_system {
    template_file_id = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
  }
  mount_point {
    volume        = "local-lvm"
    size          = "10G"
    path          = "/srv/new"
    acl           = true
    quota         = false
    replicate     = false
    mount_options = ["noatime", "nodev"]
  }
  mount_point {
    volume = "local-lvm:vm-900-disk-1"
    size   = "32G"
    path   = "/srv/kept"
    backup = true
  }
  mount_point {
    volume    = "/mnt/media"
    path      = "/media"
    read_only = true
    shared    = true
  }
  device_passthrough {
    path       = "/dev/dri/renderD128"
    mode       = "0660"
    gid        = 44
    deny_write = false
  }
  idmap {
    type         = "uid"
    container_id = 0
    host_id      = 100000
    size         = 65536
  }
  idmap {
    type         = "gid"
    container_id = 0
    host_id      = 100000
    size         = 65536
  }
}
"#,
        "media",
    );
    let c = &fleet.containers["media"];
    use pxfleet_spec::{Device, IdKind, IdMap, MountFlags, MountPoint};
    assert_eq!(
        c.mount_points,
        vec![
            MountPoint::Volume {
                datastore_id: "local-lvm".into(),
                size_gib: 10,
                path: "/srv/new".into(),
                backup: false,
                read_only: false,
                flags: MountFlags {
                    mount_options: vec!["noatime".into(), "nodev".into()],
                    acl: Some(true),
                    quota: false,
                    replicate: false,
                    shared: false,
                    keepattrs: false,
                    idmap: None,
                },
            },
            MountPoint::Existing {
                volume: "local-lvm:vm-900-disk-1".into(),
                path: "/srv/kept".into(),
                backup: true,
                read_only: false,
                flags: MountFlags::default(),
            },
            MountPoint::Bind {
                host_path: "/mnt/media".into(),
                path: "/media".into(),
                read_only: true,
                flags: MountFlags {
                    shared: true,
                    ..MountFlags::default()
                },
            },
        ],
        "{yaml}"
    );
    assert_eq!(
        c.devices,
        vec![Device {
            path: "/dev/dri/renderD128".into(),
            mode: Some("0660".into()),
            uid: None,
            gid: Some(44),
            deny_write: false,
        }]
    );
    assert_eq!(
        c.idmap,
        [IdKind::Uid, IdKind::Gid]
            .map(|kind| IdMap {
                kind,
                container_id: 0,
                host_id: 100000,
                size: 65536,
            })
            .to_vec()
    );
    assert!(
        !warnings.iter().any(|w| w.contains("mount_point")
            || w.contains("device_passthrough")
            || w.contains("idmap")),
        "{warnings:#?}"
    );
}

#[test]
fn bpg_environment_variables_map_every_variable() {
    let (fleet, yaml, warnings) = import_main_tf(
        r#"
resource "proxmox_virtual_environment_container" "app" {
  node_name = "pve1"
  vm_id     = 320
  disk {
    datastore_id = "local-lvm"
    size         = 8
  }
  initialization {
    hostname   = "app"
    entrypoint = "/usr/local/bin/app --serve"
  }
  operating_system {
    template_file_id = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
  }
  environment_variables = {
    APP_PORT = "8080"
    DB_URL   = "postgres://db:5432/app?sslmode=require"
    LOG      = ""
  }
}
"#,
        "app",
    );
    let c = &fleet.containers["app"];
    let env: Vec<(&str, &str)> = c
        .env
        .iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        env,
        vec![
            ("APP_PORT", "8080"),
            ("DB_URL", "postgres://db:5432/app?sslmode=require"),
            ("LOG", ""),
        ],
        "{yaml}"
    );
    assert_eq!(c.entrypoint.as_deref(), Some("/usr/local/bin/app --serve"));
    assert!(
        !warnings
            .iter()
            .any(|w| w.contains("environment_variables") || w.contains("entrypoint")),
        "{warnings:#?}"
    );
}

#[test]
fn bpg_console_block_cpu_architecture_and_disk_options_are_mapped() {
    let (fleet, yaml, warnings) = import_main_tf(
        r#"
resource "proxmox_virtual_environment_container" "app" {
  node_name = "pve1"
  vm_id     = 321
  disk {
    datastore_id  = "local-lvm"
    size          = 8
    acl           = true
    replicate     = false
    mount_options = ["noatime", "nodev"]
  }
  initialization {
    hostname = "app"
  }
  operating_system {
    template_file_id = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
  }
  cpu {
    architecture = "arm64"
    cores        = 2
  }
  console {
    enabled   = false
    tty_count = 4
    type      = "shell"
  }
  network_interface {
    name         = "eth0"
    bridge       = "vmbr1"
    host_managed = true
  }
}
"#,
        "app",
    );
    let c = &fleet.containers["app"];
    assert_eq!(c.arch.as_deref(), Some("arm64"), "{yaml}");
    assert!(c.interfaces[0].host_managed, "{yaml}");
    assert_eq!(c.interfaces[0].bridge, "vmbr1");
    assert_eq!(
        c.console,
        pxfleet_spec::Console {
            enabled: Some(false),
            tty_count: Some(4),
            mode: Some("shell".into()),
        },
        "{yaml}"
    );
    assert_eq!(
        c.rootfs,
        pxfleet_spec::MountFlags {
            mount_options: vec!["noatime".into(), "nodev".into()],
            acl: Some(true),
            quota: false,
            replicate: false,
            shared: false,
            keepattrs: false,
            idmap: None,
        },
        "{yaml}"
    );
    assert!(
        !warnings
            .iter()
            .any(|w| w.contains("console") || w.contains("architecture") || w.contains("disk.")),
        "{warnings:#?}"
    );
}

#[test]
fn a_clone_block_becomes_a_clone_template() {
    let (fleet, yaml, warnings) = import_main_tf(
        r#"
resource "proxmox_virtual_environment_container" "web" {
  node_name = "pve1"
  vm_id     = 301
  clone {
    vm_id        = 9000
    datastore_id = "local-zfs"
  }
  initialization {
    hostname = "web"
  }
}
resource "proxmox_virtual_environment_container" "cache" {
  node_name = "pve1"
  vm_id     = 302
  disk {
    datastore_id = "local-lvm"
  }
  clone {
    vm_id     = 9001
    node_name = "pve1"
    full      = false
  }
  initialization {
    hostname = "cache"
  }
}
"#,
        "prod",
    );
    let web = &fleet.containers["web"];
    assert_eq!(web.template, "clone-9000", "{yaml}");
    assert_eq!(
        fleet.templates["clone-9000"].source,
        pxfleet_spec::TemplateSource::Clone {
            vm_id: 9000,
            node: "pve1".into(),
            full: true,
            datastore_id: Some("local-zfs".into()),
        },
        "{yaml}"
    );
    assert_eq!(web.node.as_deref(), Some("pve1"));
    assert_eq!(web.datastore_id.as_deref(), Some("local-zfs"));
    let cache = &fleet.containers["cache"];
    assert_eq!(
        fleet.templates[&cache.template].source,
        pxfleet_spec::TemplateSource::Clone {
            vm_id: 9001,
            node: "pve1".into(),
            full: false,
            datastore_id: None,
        },
        "{yaml}"
    );
    assert_eq!(cache.datastore_id, None, "{yaml}");
    let all = warnings.join("\n");
    assert!(
        all.contains("disk.datastore_id = \"local-lvm\" not imported")
            && all.contains("linked clone"),
        "{all}"
    );
}

/// bpg's own clone acceptance test: a container made a template (`template = true`) and a clone naming it by
/// reference (`clone { vm_id = proxmox_virtual_environment_container.test_container.id }`) become `state: template`
/// and a clone template of that vm_id on its node; the fleet validates (the source is pinned to the clone's node).
#[test]
fn a_template_resource_and_a_clone_referring_to_it() {
    let (fleet, yaml, warnings) = import_main_tf(
        r#"
resource "proxmox_virtual_environment_container" "test_container" {
  node_name = "pve"
  vm_id     = 9000
  template  = true
  disk {
    datastore_id = "local-lvm"
    size         = 4
  }
  initialization {
    hostname = "test"
    ip_config {
      ipv4 {
        address = "dhcp"
      }
    }
  }
  network_interface {
    name = "vmbr0"
  }
  operating_system {
    template_file_id = "local:vztmpl/alpine-3.22-default_20250617_amd64.tar.xz"
    type             = "alpine"
  }
}

resource "proxmox_virtual_environment_container" "test_container_clone" {
  depends_on = [proxmox_virtual_environment_container.test_container]
  node_name  = "pve"
  vm_id      = 9001

  clone {
    vm_id = proxmox_virtual_environment_container.test_container.id
  }

  initialization {
    hostname = "test-clone"
    ip_config {
      ipv4 {
        address = "dhcp"
      }
    }
  }
  wait_for_ip {
    ipv4 = true
    ipv6 = false
  }
}
"#,
        "acc",
    );
    let gold = &fleet.containers["test-container"];
    assert_eq!(gold.state, pxfleet_spec::DesiredState::Template, "{yaml}");
    let clone = &fleet.containers["test-container-clone"];
    let t = &fleet.templates[&clone.template];
    match &t.source {
        pxfleet_spec::TemplateSource::Clone {
            vm_id, node, full, ..
        } => {
            assert_eq!(
                (*vm_id, node.as_str(), *full),
                (9000, "pve", true),
                "{yaml}"
            );
        }
        other => panic!("not a clone template: {other:?}\n{yaml}"),
    }
    assert!(
        !warnings
            .iter()
            .any(|w| w.contains("clone") && w.contains("not static")),
        "{warnings:?}"
    );
    assert!(yaml.contains("state: template"), "{yaml}");
    assert!(clone.wait_for_ip.ipv4 && !clone.wait_for_ip.ipv6, "{yaml}");
}

/// From bpg's acceptance tests: an empty DNS server or search domain is the provider's "none given" (the node's
/// own), and a mount path relative to the container's root (`mnt/local`) is one PVE takes as it is.
#[test]
fn blank_dns_values_are_left_out_and_a_relative_mount_path_is_kept() {
    let (fleet, yaml, _) = import_main_tf(
        r#"
resource "proxmox_virtual_environment_container" "test_container" {
  node_name    = "pve"
  vm_id        = 9000
  unprivileged = true
  disk {
    datastore_id = "local-lvm"
    size         = 4
  }
  mount_point {
    volume = "local-lvm"
    size   = "4G"
    path   = "mnt/local"
  }
  features {
    nesting = true
    mknod   = true
  }
  initialization {
    hostname = "test-dns"
    dns {
      domain  = " "
      server  = ""
      servers = null
    }
  }
  operating_system {
    template_file_id = "local:vztmpl/alpine-3.22-default_20250617_amd64.tar.xz"
  }
}
"#,
        "acc",
    );
    let c = &fleet.containers["test-container"];
    assert!(c.dns.servers.is_empty() && c.dns.domain.is_none(), "{yaml}");
    assert_eq!(c.mount_points[0].path(), "mnt/local", "{yaml}");
    assert!(c.features.nesting && c.features.mknod, "{yaml}");
}

/// bpg's deprecated `dns { server }` is one server; given with `servers`, the provider uses `servers` (in either
/// order of the attributes).
#[test]
fn the_deprecated_dns_server_loses_to_servers() {
    for (first, second) in [
        (
            r#"server = "192.0.2.1""#,
            r#"servers = ["192.0.2.2", "192.0.2.3"]"#,
        ),
        (
            r#"servers = ["192.0.2.2", "192.0.2.3"]"#,
            r#"server = "192.0.2.1""#,
        ),
    ] {
        let (fleet, yaml, _) = import_main_tf(
            &format!(
                r#"
resource "proxmox_virtual_environment_container" "c" {{
  node_name    = "pve"
  vm_id        = 9000
  unprivileged = true
  initialization {{
    hostname = "c"
    dns {{
      {first}
      {second}
    }}
  }}
  operating_system {{
    template_file_id = "local:vztmpl/alpine-3.22-default_20250617_amd64.tar.xz"
  }}
}}
"#
            ),
            "acc",
        );
        let servers: Vec<String> = fleet.containers["c"]
            .dns
            .servers
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(servers, ["192.0.2.2", "192.0.2.3"], "{yaml}");
    }
    let (fleet, yaml, _) = import_main_tf(
        r#"
resource "proxmox_virtual_environment_container" "c" {
  node_name    = "pve"
  vm_id        = 9000
  unprivileged = true
  initialization {
    hostname = "c"
    dns {
      server = "192.0.2.1"
    }
  }
  operating_system {
    template_file_id = "local:vztmpl/alpine-3.22-default_20250617_amd64.tar.xz"
  }
}
"#,
        "acc",
    );
    assert_eq!(fleet.containers["c"].dns.servers.len(), 1, "{yaml}");
}

/// bpg's volume reference test: a mount point whose volume is another container's computed
/// `mount_point[0].path_in_datastore` becomes `volume_of` that container's mount path (never a new empty volume of
/// its `size`), and the fleet validates.
#[test]
fn a_mount_point_of_another_container_s_volume_becomes_volume_of() {
    let (fleet, yaml, warnings) = import_main_tf(
        r#"
resource "proxmox_virtual_environment_container" "source" {
  node_name    = "pve"
  vm_id        = 9000
  unprivileged = true
  disk {
    datastore_id = "local-lvm"
    size         = 4
  }
  mount_point {
    volume = "local-lvm"
    size   = "4G"
    path   = "/mnt/data"
  }
  operating_system {
    template_file_id = "local:vztmpl/alpine-3.22-default_20250617_amd64.tar.xz"
  }
}

resource "proxmox_virtual_environment_container" "target" {
  node_name    = "pve"
  vm_id        = 9001
  unprivileged = true
  disk {
    datastore_id = "local-lvm"
    size         = 4
  }
  mount_point {
    volume = proxmox_virtual_environment_container.source.mount_point[0].path_in_datastore
    size   = "4G"
    path   = "/mnt/shared"
  }
  operating_system {
    template_file_id = "local:vztmpl/alpine-3.22-default_20250617_amd64.tar.xz"
  }
}
"#,
        "acc",
    );
    assert_eq!(fleet.containers["source"].mount_points.len(), 1, "{yaml}");
    assert_eq!(
        fleet.containers["target"].mount_points,
        vec![pxfleet_spec::MountPoint::VolumeOf {
            container: "source".into(),
            source_path: "/mnt/data".into(),
            path: "/mnt/shared".into(),
            backup: false,
            read_only: false,
            flags: Default::default(),
        }],
        "{yaml}"
    );
    assert!(
        !warnings.iter().any(|w| w.contains("mount point")),
        "{warnings:#?}"
    );
}

/// A reference to a mount point of a container the importer cannot name (one with `for_each`) stays what it was:
/// not static, the whole mount point left out with a warning that says what to write.
#[test]
fn a_mount_point_whose_volume_is_not_static_is_left_out_whole() {
    let (fleet, yaml, warnings) = import_main_tf(
        r#"
resource "proxmox_virtual_environment_container" "source" {
  for_each  = toset(["a", "b"])
  node_name = "pve"
  unprivileged = true
  mount_point {
    volume = "local-lvm"
    size   = "4G"
    path   = "/mnt/data"
  }
  operating_system {
    template_file_id = "local:vztmpl/alpine-3.22-default_20250617_amd64.tar.xz"
  }
}

resource "proxmox_virtual_environment_container" "target" {
  node_name    = "pve"
  vm_id        = 9001
  unprivileged = true
  mount_point {
    volume = proxmox_virtual_environment_container.source["a"].mount_point[0].path_in_datastore
    path   = "/mnt/shared"
  }
  operating_system {
    template_file_id = "local:vztmpl/alpine-3.22-default_20250617_amd64.tar.xz"
  }
}
"#,
        "acc",
    );
    assert!(fleet.containers["target"].mount_points.is_empty(), "{yaml}");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("main.tf:") && w.contains("whole mount point is left out")),
        "{warnings:#?}"
    );
}
