//! bpg parity fields: `env`, `entrypoint`, `host_managed`, net0's `interface_name` and `volume:` templates, as a
//! user reads them: parsed (errors at file:line:column), planned (live or restart), and no plan once applied.

mod plan_support;

use plan_support::*;
use pxfleet_spec::model::*;
use pxfleet_spec::observed::PowerState;
use pxfleet_spec::plan::*;
use pxfleet_spec::{parse_fleet, NoFiles};

fn parse(containers: &str) -> Result<Fleet, String> {
    let text = format!(
        "fleet: dev\ntemplates:\n  deb: {{pveam: debian-12-standard_12.7-1_amd64.tar.zst}}\ncontainers:\n{containers}"
    );
    parse_fleet("fleet.yaml", &text, &NoFiles).map_err(|e| format!("{e}"))
}

#[test]
fn runtime_and_interface_fields_are_parsed() {
    let f = parse(
        "  app:\n    template: deb\n    env: {APP_PORT: 8080}\n    entrypoint: /usr/local/bin/app --serve\n    interface_name: lan0\n    host_managed: true\n    extra_interfaces:\n      - {name: wan0, bridge: vmbr1, host_managed: true}\n",
    )
    .unwrap();
    let c = &f.containers["app"];
    assert_eq!(
        c.env
            .as_ref()
            .and_then(|e| e.get("APP_PORT"))
            .map(String::as_str),
        Some("8080")
    );
    assert_eq!(c.entrypoint.as_deref(), Some("/usr/local/bin/app --serve"));
    assert_eq!(c.interfaces[0].name, "lan0");
    assert!(c.interfaces[0].host_managed);
    assert_eq!(c.interfaces[1].name, "wan0");
    assert!(c.interfaces[1].host_managed);
    // Left out: eth0, not host-managed, nothing in env.
    let f = parse("  app: {template: deb}\n").unwrap();
    let c = &f.containers["app"];
    assert_eq!(c.interfaces[0].name, "eth0");
    assert!(!c.interfaces[0].host_managed && c.env.is_none() && c.entrypoint.is_none());
    // Given empty: none (a difference from left out).
    let f = parse("  app: {template: deb, env: {}, entrypoint: \"\"}\n").unwrap();
    let c = &f.containers["app"];
    assert_eq!(c.env, Some(Default::default()));
    assert_eq!(c.entrypoint.as_deref(), Some(""));
}

#[test]
fn env_takes_several_variables() {
    let f = parse(
        "  app:\n    template: deb\n    env:\n      APP_PORT: 8080\n      DB_URL: \"postgres://db:5432/app?sslmode=require\"\n      EMPTY:\n",
    )
    .unwrap();
    let env: Vec<(&str, &str)> = f.containers["app"]
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
            ("EMPTY", ""),
        ]
    );
    // A bad name among several is still an error at its place.
    let e = parse("  app:\n    template: deb\n    env: {A: 1, B-2: 2, C: 3}\n").unwrap_err();
    assert!(
        e.contains("fleet.yaml:7:17") && e.contains("environment variable name 'B-2' is not valid"),
        "{e}"
    );
}

#[test]
fn bad_runtime_fields_are_errors_at_their_place() {
    let cases = [
        (
            "  app:\n    template: deb\n    env: {APP-PORT: 1}\n",
            "fleet.yaml:7:11",
            "environment variable name 'APP-PORT' is not valid",
        ),
        (
            "  app:\n    template: deb\n    env: {A: \"x\\ny\"}\n",
            "fleet.yaml:7:14",
            "control character",
        ),
        (
            "  app:\n    template: deb\n    entrypoint: \"  \"\n",
            "fleet.yaml:7:17",
            "entrypoint is blank",
        ),
        (
            "  app:\n    template: deb\n    interface_name: \"eth 0\"\n",
            "fleet.yaml:7:21",
            "interface name 'eth 0' is not valid",
        ),
        (
            "  app:\n    template: deb\n    host_managed: true\n    ipv6: auto\n",
            "containers.app.ipv6",
            "no SLAAC",
        ),
        (
            "  app:\n    template: deb\n    interface_name: wan0\n    extra_interfaces: [{name: wan0}]\n",
            "fleet.yaml:8:31: containers.app.extra_interfaces.0.name",
            "used twice",
        ),
    ];
    for (yaml, at, what) in cases {
        let err = parse(yaml).unwrap_err();
        assert!(err.contains(at) && err.contains(what), "{yaml}: {err}");
    }
}

#[test]
fn a_volume_template_is_used_as_it_is() {
    let text = "fleet: dev\ntemplates:\n  deb: {volume: \"nfs-tmpl:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst\"}\ncontainers:\n  app: {template: deb}\n";
    let f = parse_fleet("fleet.yaml", text, &NoFiles).unwrap();
    let t = &f.templates["deb"];
    assert_eq!(
        t.source,
        TemplateSource::Volume {
            volid: "nfs-tmpl:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst".into()
        }
    );
    assert_eq!(t.storage, "nfs-tmpl");
    assert_eq!(t.file_name(), "debian-13-standard_13.1-2_amd64.tar.zst");
    for (tmpl, at, what) in [
        (
            "{volume: \"local:iso/x.iso\"}",
            "fleet.yaml:3:17",
            "not a template volume id",
        ),
        (
            "{volume: \"local:vztmpl/x.tar.zst\", pveam: x.tar.zst}",
            "templates.deb",
            "either `volume` or `pveam`",
        ),
        (
            "{volume: \"local:vztmpl/x.tar.zst\", storage: nfs}",
            "templates.deb.storage",
            "the volume id names its storage",
        ),
        (
            "{volume: \"local:vztmpl/x.tar.zst\", seed: all_nodes}",
            "templates.deb.seed",
            "nothing is downloaded",
        ),
    ] {
        let text = format!(
            "fleet: dev\ntemplates:\n  deb: {tmpl}\ncontainers:\n  app: {{template: deb}}\n"
        );
        let err = format!(
            "{}",
            parse_fleet("fleet.yaml", &text, &NoFiles).unwrap_err()
        );
        assert!(err.contains(at) && err.contains(what), "{tmpl}: {err}");
    }
}

fn update(p: &Plan) -> (&Vec<FieldChange>, bool) {
    let [a] = &p.actions[..] else {
        panic!("one action expected: {:?}", p.actions)
    };
    let ActionKind::Update {
        changes,
        restart_required,
    } = &a.kind
    else {
        panic!("an update expected: {:?}", a.kind)
    };
    (changes, *restart_required)
}

#[test]
fn env_and_entrypoint_apply_at_restart_interfaces_live() {
    let applied = fleet("dev", vec![container("a", Some(100))]);
    let obs = observe(&applied, PowerState::Running);
    let mut want = container("a", Some(100));
    want.env = Some([("APP_PORT".into(), "8080".into())].into());
    want.entrypoint = Some("/app".into());
    let desired = fleet("dev", vec![want.clone()]);
    let p = plan(&desired, Some(&applied), &obs).unwrap();
    let (changes, restart) = update(&p);
    assert!(restart, "env and entrypoint are read at start");
    let fields: Vec<&str> = changes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(fields, ["env", "entrypoint"]);

    let mut want = container("a", Some(100));
    want.interfaces[0].name = "lan0".into();
    want.interfaces[0].host_managed = true;
    let desired = fleet("dev", vec![want]);
    let p = plan(&desired, Some(&applied), &obs).unwrap();
    let (changes, restart) = update(&p);
    assert!(!restart, "netN is hot-plugged");
    let fields: Vec<&str> = changes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(fields, ["interface_name", "host_managed"]);
}

#[test]
fn once_applied_the_plan_is_empty_and_an_image_env_is_left_alone() {
    let mut c = container("a", Some(100));
    c.env = Some([("APP_PORT".into(), "8080".into())].into());
    c.entrypoint = Some("/app --serve".into());
    c.interfaces[0].name = "lan0".into();
    c.interfaces[0].host_managed = true;
    let f = fleet("dev", vec![c]);
    let obs = observe(&f, PowerState::Running);
    let p = plan(&f, Some(&f), &obs).unwrap();
    assert!(p.is_empty(), "{:?}", p.actions);

    // The file says nothing of env/entrypoint: what the node has (an OCI image's own) is not drift.
    let plain = fleet("dev", vec![container("a", Some(100))]);
    let mut obs = observe(&plain, PowerState::Running);
    obs[0].config.env.insert("PATH".into(), "/usr/bin".into());
    obs[0].config.entrypoint = Some("/docker-entrypoint.sh".into());
    let p = plan(&plain, Some(&plain), &obs).unwrap();
    assert!(p.is_empty(), "{:?}", p.actions);
}

#[test]
fn env_and_entrypoint_given_empty_remove_what_the_node_has() {
    let plain = fleet("dev", vec![container("a", Some(100))]);
    let mut obs = observe(&plain, PowerState::Running);
    obs[0].config.env.insert("PATH".into(), "/usr/bin".into());
    obs[0].config.entrypoint = Some("/docker-entrypoint.sh".into());
    let mut none = container("a", Some(100));
    none.env = Some(Default::default());
    none.entrypoint = Some(String::new());
    let desired = fleet("dev", vec![none]);
    let p = plan(&desired, Some(&plain), &obs).unwrap();
    let (changes, restart) = update(&p);
    assert!(restart);
    let shown: Vec<(&str, Option<String>)> = changes
        .iter()
        .map(|c| (c.field.as_str(), c.to.as_ref().map(|v| v.to_string())))
        .collect();
    assert_eq!(shown, [("env", Some("{}".into())), ("entrypoint", None)]);
    // once the node has none, nothing left to do
    let obs = observe(&desired, PowerState::Running);
    assert!(obs[0].config.env.is_empty() && obs[0].config.entrypoint.is_none());
    let p = plan(&desired, Some(&desired), &obs).unwrap();
    assert!(p.is_empty(), "{:?}", p.actions);
}
