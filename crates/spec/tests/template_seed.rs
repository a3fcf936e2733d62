//! `templates.NAME.seed`: on_demand (default) or all_nodes.

use pxfleet_spec::{parse_fleet, NoFiles, TemplateSeed};

fn fleet(seed: &str) -> String {
    format!(
        "fleet: dev\ntemplates:\n  deb: {{pveam: debian-12-standard_12.7-1_amd64.tar.zst{seed}}}\n  alp: {{pveam: alpine-3.22-default_20250617_amd64.tar.xz}}\ncontainers:\n  web-1: {{template: alp, memory: 512}}\n"
    )
}

#[test]
fn seed_all_nodes_is_parsed_and_defaults_to_on_demand() {
    let f = parse_fleet("fleet.yaml", &fleet(", seed: all_nodes"), &NoFiles).unwrap();
    assert_eq!(f.templates["deb"].seed, TemplateSeed::AllNodes);
    assert_eq!(f.templates["alp"].seed, TemplateSeed::OnDemand);
    // the stored (normalised) spec keeps it, and leaves the default out
    let json = serde_json::to_value(&f).unwrap();
    assert_eq!(json["templates"]["deb"]["seed"], "all_nodes");
    assert!(json["templates"]["alp"].get("seed").is_none());
}

#[test]
fn an_unknown_seed_mode_is_an_error_naming_the_field_and_the_choices() {
    let err = parse_fleet("fleet.yaml", &fleet(", seed: everywhere"), &NoFiles).unwrap_err();
    let text = format!("{err:?}");
    assert!(text.contains("templates.deb.seed"), "{text}");
    assert!(text.contains("all_nodes"), "{text}");
}
