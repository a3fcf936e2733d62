//! `clone:` templates (`pct clone` of an existing container): parsed with file:line:column errors, the container
//! placed on the source's node, the plan saying where the container is copied from, and no plan once applied.

mod plan_support;

use pxfleet_spec::model::*;
use pxfleet_spec::observed::PowerState;
use pxfleet_spec::plan::*;
use pxfleet_spec::{parse_fleet, NoFiles};

fn parse(template: &str, container: &str) -> Result<Fleet, String> {
    let text =
        format!("fleet: dev\ntemplates:\n  base: {template}\ncontainers:\n  app: {container}\n");
    parse_fleet("fleet.yaml", &text, &NoFiles).map_err(|e| format!("{e}"))
}

#[test]
fn a_clone_template_pins_its_containers_to_the_source_node() {
    let f = parse("{clone: {vm_id: 9000, node: pve1}}", "{template: base}").unwrap();
    assert_eq!(
        f.templates["base"].source,
        TemplateSource::Clone {
            vm_id: 9000,
            node: "pve1".into(),
            full: true,
            datastore_id: None
        }
    );
    let c = &f.containers["app"];
    assert_eq!(c.node.as_deref(), Some("pve1"));
    assert_eq!(c.datastore_id, None);

    // A full clone to a datastore: the container's root disk goes there.
    let f = parse(
        "{clone: {vm_id: 9000, node: pve1, full: true, datastore_id: local-zfs}}",
        "{template: base, node: pve1}",
    )
    .unwrap();
    assert_eq!(
        f.containers["app"].datastore_id.as_deref(),
        Some("local-zfs")
    );

    // Linked: no datastore of its own.
    let f = parse(
        "{clone: {vm_id: 9000, node: pve2, full: false}}",
        "{template: base}",
    )
    .unwrap();
    assert_eq!(f.containers["app"].node.as_deref(), Some("pve2"));
    assert!(matches!(
        f.templates["base"].source,
        TemplateSource::Clone { full: false, .. }
    ));
}

#[test]
fn bad_clone_templates_are_errors_at_their_place() {
    let cases = [
        (
            "{clone: {vm_id: 99, node: pve1}}",
            "fleet.yaml:3:25: templates.base.clone.vm_id",
            "vm_id must be at least 100",
        ),
        (
            "{clone: {vm_id: 1000000000, node: pve1}}",
            "fleet.yaml:3:25",
            "vm_id must be at most 999999999",
        ),
        (
            "{clone: {vm_id: 9000, node: pve1, linked: true}}",
            "fleet.yaml:3:43: templates.base.clone.linked",
            "unknown field 'linked'",
        ),
        (
            "{clone: {vm_id: 9000, node: pve1, full: false, datastore_id: local-zfs}}",
            "fleet.yaml:3:56: templates.base.clone.datastore_id",
            "applies to full clones only",
        ),
        (
            "{clone: {vm_id: 9000}}",
            "templates.base.clone",
            "needs `vm_id` and `node`",
        ),
        (
            "{clone: {vm_id: 9000, node: \"pve 1\"}}",
            "fleet.yaml:3:37",
            "not a PVE node name",
        ),
        (
            "{clone: {vm_id: 9000, node: pve1}, pveam: x.tar.zst}",
            "templates.base",
            "either `clone` or `pveam`",
        ),
        (
            "{clone: {vm_id: 9000, node: pve1}, seed: all_nodes}",
            "templates.base",
            "either `clone` or `seed`",
        ),
    ];
    for (tmpl, at, what) in cases {
        let err = parse(tmpl, "{template: base}").unwrap_err();
        assert!(err.contains(at) && err.contains(what), "{tmpl}: {err}");
    }
}

#[test]
fn a_container_elsewhere_than_its_clone_source_is_an_error() {
    let err = parse(
        "{clone: {vm_id: 9000, node: pve1}}",
        "{template: base, node: pve2}",
    )
    .unwrap_err();
    assert!(
        err.contains("fleet.yaml:5:31: containers.app.node")
            && err.contains("container app is on node pve2")
            && err.contains("CT 9000 on node pve1")
            && err.contains("set `node: pve1`"),
        "{err}"
    );
    let err = parse(
        "{clone: {vm_id: 9000, node: pve1, full: false}}",
        "{template: base, datastore_id: local-lvm}",
    )
    .unwrap_err();
    assert!(
        err.contains("containers.app.datastore_id") && err.contains("linked clone"),
        "{err}"
    );
    let err = parse(
        "{clone: {vm_id: 9000, node: pve1, datastore_id: local-zfs}}",
        "{template: base, datastore_id: local-lvm}",
    )
    .unwrap_err();
    assert!(
        err.contains("containers.app.datastore_id") && err.contains("copies the disk to local-zfs"),
        "{err}"
    );
}

#[test]
fn the_plan_says_where_a_clone_comes_from_and_is_empty_once_applied() {
    for (full, text) in [
        ("true", "clone of CT 9000 on pve1 (full)"),
        ("false", "clone of CT 9000 on pve1 (linked)"),
    ] {
        let f = parse(
            &format!("{{clone: {{vm_id: 9000, node: pve1, full: {full}}}}}"),
            "{template: base}",
        )
        .unwrap();
        let p = plan(&f, None, &[]).unwrap();
        let [a] = &p.actions[..] else {
            panic!("one create expected: {:?}", p.actions)
        };
        assert_eq!(a.node.as_deref(), Some("pve1"));
        let ActionKind::Create { attributes, .. } = &a.kind else {
            panic!("a create expected: {:?}", a.kind)
        };
        let from = attributes
            .iter()
            .find(|x| x.field == "template_source")
            .and_then(|x| x.value.clone());
        assert_eq!(from, Some(serde_json::json!(text)));
        let obs = plan_support::observe(&f, PowerState::Running);
        assert!(plan(&f, Some(&f), &obs).unwrap().actions.is_empty());
    }
}

#[test]
fn a_linked_clone_is_not_replaced_for_its_datastore() {
    let f = parse(
        "{clone: {vm_id: 9000, node: pve1, full: false}}",
        "{template: base}",
    )
    .unwrap();
    let obs = plan_support::observe(&f, PowerState::Running); // rootfs on local-lvm
    let mut placed = f.clone();
    placed.containers.get_mut("app").unwrap().datastore_id = Some("local-zfs".into());
    assert!(plan(&placed, Some(&placed), &obs)
        .unwrap()
        .actions
        .is_empty());
    // A full clone elsewhere than asked is replaced, as any container.
    let f = parse(
        "{clone: {vm_id: 9000, node: pve1, datastore_id: local-zfs}}",
        "{template: base}",
    )
    .unwrap();
    let p = plan(&f, Some(&f), &obs).unwrap();
    assert!(
        p.actions
            .iter()
            .any(|a| matches!(a.kind, ActionKind::Replace { .. })),
        "{:?}",
        p.actions
    );
}
