//! Plan warnings: a template without checksum (a container's `template_url`) is named, located and
//! explained in every rendering; a pinned template gives none.

use pxfleet_spec::plan::plan;
use pxfleet_spec::render::{json, markdown, text};
use pxfleet_spec::{parse_fleet, NoFiles};

const UNPINNED: &str = "fleet: dev
containers:
  web-1:
    template_url: https://images.example.org/ubuntu-25.04.tar.xz
  web-2:
    template_url: https://images.example.org/ubuntu-25.04.tar.xz
";

const PINNED: &str = "fleet: dev
templates:
  ubuntu:
    url: https://images.example.org/ubuntu-25.04.tar.xz
    sha256: 3b1f000000000000000000000000000000000000000000000000000000000000
containers:
  web-1:
    template: ubuntu
";

#[test]
fn a_template_without_checksum_is_warned_about_in_every_rendering() {
    let fleet = parse_fleet("fleet.yaml", UNPINNED, &NoFiles).unwrap();
    let p = plan(&fleet, None, &[]).unwrap();
    assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    let w = &p.warnings[0];
    assert!(w.contains("ubuntu-25.04.tar.xz"), "{w}");
    assert!(w.contains("web-1, web-2"), "{w}");
    assert!(
        w.contains("containers.web-1.template_url at line:column 4:19"),
        "{w}"
    );
    assert!(w.contains("sha256: <hex>"), "says how to pin: {w}");

    let t = text::render(&p, false);
    assert!(
        t.starts_with("Warning: template ubuntu-25.04.tar.xz"),
        "{t}"
    );
    let m = markdown::render(&p);
    assert!(
        m.contains("> **Warning:** template ubuntu-25.04.tar.xz"),
        "{m}"
    );
    let j = json::render(&p);
    let back = json::parse(&j).unwrap();
    assert_eq!(back.warnings, p.warnings);
    assert!(j.contains("\"warnings\""), "{j}");
}

#[test]
fn an_unchanged_fleet_still_shows_the_warning() {
    let fleet = parse_fleet("fleet.yaml", UNPINNED, &NoFiles).unwrap();
    let mut p = plan(&fleet, None, &[]).unwrap();
    p.actions.clear();
    let t = text::render(&p, false);
    assert!(t.contains("Warning:") && t.contains("No changes."), "{t}");
}

#[test]
fn a_pinned_template_gives_no_warning() {
    let fleet = parse_fleet("fleet.yaml", PINNED, &NoFiles).unwrap();
    let p = plan(&fleet, None, &[]).unwrap();
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    assert!(!json::render(&p).contains("warnings"));
    assert!(!text::render(&p, false).contains("Warning"));
}

#[test]
fn a_template_without_checksum_used_by_many_names_a_few_and_counts_the_rest() {
    let mut yaml = String::from("fleet: dev\ndefaults:\n  template_url: https://images.example.org/ubuntu-25.04.tar.xz\ncontainers:\n");
    for i in 0..300 {
        yaml.push_str(&format!("  web-{i:03}: {{}}\n"));
    }
    let fleet = parse_fleet("fleet.yaml", &yaml, &NoFiles).unwrap();
    let p = plan(&fleet, None, &[]).unwrap();
    assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    let w = &p.warnings[0];
    assert!(
        w.contains("used by web-000, web-001, web-002, web-003, web-004 and 295 more"),
        "{w}"
    );
    assert!(w.len() < 600, "one short line: {} bytes", w.len());
}

/// bpg's clone tests give the clones `user_account { keys }`: pct clone copies the source's root account and no
/// `pct` option adds keys afterwards, so the plan of their create says the keys are not applied.
#[test]
fn ssh_keys_on_containers_made_by_clone_are_warned_about() {
    let yaml = "fleet: dev
defaults:
  ssh_public_keys: [\"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII/tPVpCESUKZXQ0ZlJvcxfIUAgEGPXvlUgtWiKvukcx ops@example\"]
templates:
  gold: {clone: {vm_id: 9000, node: pve1}}
  deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}
containers:
  copy: {template: gold}
  fresh: {template: deb}
";
    let fleet = parse_fleet("fleet.yaml", yaml, &NoFiles).unwrap();
    let p = plan(&fleet, None, &[]).unwrap();
    let w: Vec<&String> = p
        .warnings
        .iter()
        .filter(|w| w.contains("ssh_public_keys"))
        .collect();
    assert_eq!(w.len(), 1, "{:?}", p.warnings);
    assert!(w[0].contains("of copy are not applied"), "{}", w[0]);
    assert!(!w[0].contains("fresh"), "{}", w[0]);
}
