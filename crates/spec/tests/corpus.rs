//! The invalid corpus (tests/invalid/*.yaml): each file starts with
//! `# expect: <field path or -> @ <line> ~ <message fragment>`, and parsing it must fail with a
//! diagnostic naming exactly that path and line, whose message (or hint) contains the fragment.
//! The valid corpus (tests/valid/*.yaml and examples/) must parse without any diagnostic.

use std::path::{Path, PathBuf};

use pxfleet_spec::*;

fn dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(name)
}

fn yaml_files(d: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    v.sort();
    v
}

struct Expect {
    path: String,
    line: u32,
    fragment: String,
}

fn expectation(text: &str) -> Expect {
    let first = text.lines().next().unwrap_or_default();
    let rest = first
        .strip_prefix("# expect: ")
        .expect("first line must be `# expect: PATH @ LINE ~ TEXT`");
    let (path, rest) = rest.split_once(" @ ").unwrap();
    let (line, fragment) = rest.split_once(" ~ ").unwrap();
    Expect {
        path: if path == "-" {
            String::new()
        } else {
            path.to_owned()
        },
        line: line.trim().parse().unwrap(),
        fragment: fragment.trim().to_owned(),
    }
}

#[test]
fn every_invalid_fleet_is_reported_at_the_expected_field_and_line() {
    let files = yaml_files(&dir("invalid"));
    assert!(
        files.len() >= 60,
        "the corpus must hold at least 60 files, has {}",
        files.len()
    );
    let key_files = MemFiles::default().with("keys/ops.pub", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII/tPVpCESUKZXQ0ZlJvcxfIUAgEGPXvlUgtWiKvukcx ops@example\n");
    let mut failures = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let want = expectation(&text);
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        match parse_fleet(&name, &text, &key_files) {
            Ok(_) => failures.push(format!(
                "{name}: parsed without error, expected {} @ {}",
                want.path, want.line
            )),
            Err(diags) => {
                let hit = diags.iter().any(|d| {
                    d.path == want.path
                        && d.line == want.line
                        && d.to_string().contains(&want.fragment)
                });
                if !hit {
                    failures.push(format!(
                        "{name}: expected `{}` @ {} ~ {:?}, got:\n{diags}",
                        want.path, want.line, want.fragment
                    ));
                }
                for d in diags.iter() {
                    assert_eq!(d.file, name);
                    assert!(d.line >= 1 && d.column >= 1, "{d}");
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} corpus files failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn every_valid_fleet_parses() {
    let mut files = yaml_files(&dir("valid"));
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    for e in ["dev", "prod"] {
        files.push(examples.join(e).join("fleet.yaml"));
    }
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let keys = MemFiles::default().with(
            f.parent().unwrap().join("keys/ops.pub"),
            std::fs::read_to_string(examples.join("dev/keys/ops.pub")).unwrap(),
        );
        if let Err(e) = parse_fleet(f.to_str().unwrap(), &text, &keys) {
            panic!("{} should be valid:\n{e}", f.display());
        }
    }
}

#[test]
fn all_errors_are_reported_at_once() {
    let text = "fleet: t\ncontainers:\n  a: {memory: 1, cores: 0, vlan_id: 0}\n  b: {mtu: 10}\n";
    let errs = parse_fleet("f.yaml", text, &NoFiles).unwrap_err();
    let paths: Vec<&str> = errs.iter().map(|d| d.path.as_str()).collect();
    for p in [
        "containers.a.memory",
        "containers.a.cores",
        "containers.a.vlan_id",
        "containers.b.mtu",
        "containers.a",
        "containers.b",
    ] {
        assert!(paths.contains(&p), "{p} missing from {paths:?}");
    }
    // sorted by position
    let lines: Vec<u32> = errs.iter().map(|d| d.line).collect();
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted);
}

#[test]
fn an_error_in_defaults_is_reported_once_not_per_container() {
    let mut text = String::from("fleet: t\ndefaults: {memory: 1, template: d}\ntemplates: {d: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}}\ncontainers:\n");
    for i in 0..50 {
        text.push_str(&format!("  c{i}: {{}}\n"));
    }
    let errs = parse_fleet("f.yaml", &text, &NoFiles).unwrap_err();
    assert_eq!(errs.len(), 1, "{errs}");
    assert_eq!(errs.0[0].path, "defaults.memory");
}

/// docs/fleet-yaml.md: a field written with nothing after it counts as not given, in nested mappings too
/// (`dns: {domain: }`, `features: {nesting: }`, a mount point's `backup:`...).
#[test]
fn an_empty_value_counts_as_not_given_at_every_level() {
    let with_empties = "fleet: t\n\
        templates:\n  deb: {pveam: debian-13-standard_13.6-1_amd64.tar.zst, storage: }\n\
        containers:\n  a:\n    template: deb\n    datastore_id: local-lvm\n    memory: 512\n    \
        description:\n    dns: {domain: , servers: [10.0.0.1]}\n    features: {nesting: , fuse: true}\n    \
        startup: {order: 1, up_delay: }\n    constraints: {nodes: , anti_affinity: [role]}\n    \
        extra_interfaces: [{bridge: vmbr1, mtu: , ip_address: dhcp}]\n    \
        mount_points: [{path: /data, size: 4, datastore_id: local-lvm, backup: }]\n";
    let without = "fleet: t\n\
        templates:\n  deb: {pveam: debian-13-standard_13.6-1_amd64.tar.zst}\n\
        containers:\n  a:\n    template: deb\n    datastore_id: local-lvm\n    memory: 512\n    \
        dns: {servers: [10.0.0.1]}\n    features: {fuse: true}\n    \
        startup: {order: 1}\n    constraints: {anti_affinity: [role]}\n    \
        extra_interfaces: [{bridge: vmbr1, ip_address: dhcp}]\n    \
        mount_points: [{path: /data, size: 4, datastore_id: local-lvm}]\n";
    let a = parse_fleet("a.yaml", with_empties, &NoFiles)
        .unwrap_or_else(|e| panic!("empty values refused: {e:?}"));
    let b = parse_fleet("b.yaml", without, &NoFiles).unwrap();
    assert_eq!(a.containers, b.containers);
    assert_eq!(a.templates, b.templates);
    // an empty gateway stays an error of its own, and an unknown empty field is still unknown
    let gw = "fleet: t\ncontainers:\n  a: {template: deb, extra_interfaces: [{bridge: vmbr1, gateway: }]}\n";
    let e = format!("{:?}", parse_fleet("g.yaml", gw, &NoFiles).unwrap_err());
    assert!(e.contains("gateway is empty"), "{e}");
    let unknown = "fleet: t\ncontainers:\n  a: {template: deb, dns: {domian: }}\n";
    let e = format!(
        "{:?}",
        parse_fleet("u.yaml", unknown, &NoFiles).unwrap_err()
    );
    assert!(e.contains("unknown field"), "{e}");
}
