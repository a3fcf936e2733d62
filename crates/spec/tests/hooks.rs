//! `hooks:` in fleet.yaml: parsing and validation.

use pxfleet_spec::hooks::{HookAction, HookEvent};
use pxfleet_spec::{parse_fleet, NoFiles};

const HEAD: &str = "fleet: dev\ntemplates:\n  deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}\ncontainers:\n  web-1: {template: deb}\n  db-1: {template: deb}\nhooks:\n";

fn errors(hooks: &str) -> String {
    parse_fleet("fleet.yaml", &format!("{HEAD}{hooks}"), &NoFiles)
        .unwrap_err()
        .to_string()
}

#[test]
fn technitium_hooks_parse() {
    let text = format!(
        "{HEAD}  dns-add:\n    on: ready\n    http:\n      url: \"http://dns.lan:5380/api/zones/records/add?token=${{env:TECHNITIUM_TOKEN}}&domain=${{hostname}}.lan&type=A&ipAddress=${{ipv4}}\"\n    retries: 5\n    timeout: 3\n  dns-del:\n    on: [destroyed]\n    http:\n      method: post\n      url: \"https://dns.lan/api/zones/records/delete\"\n      headers: {{Authorization: \"Bearer ${{file:/etc/pxfleet/dns.token}}\"}}\n      body: {{domain: \"${{hostname}}.lan\", vm: 7, ok: true, list: [\"${{vm_id}}\"]}}\n  notify:\n    on: [ready, destroyed]\n    containers: [db-1]\n    command: [/usr/local/bin/notify, \"${{name}}\", \"${{ipv4}}\"]\n"
    );
    let f = parse_fleet("fleet.yaml", &text, &NoFiles).unwrap();
    assert_eq!(f.hooks.len(), 3);
    let add = &f.hooks[0];
    assert_eq!(
        (add.name.as_str(), add.retries, add.timeout_secs),
        ("dns-add", 5, 3)
    );
    assert_eq!(add.on, vec![HookEvent::Ready]);
    let HookAction::Http(h) = &add.action else {
        panic!("http")
    };
    assert_eq!(h.method, "GET");
    let HookAction::Http(del) = &f.hooks[1].action else {
        panic!("http")
    };
    assert_eq!(del.method, "POST");
    assert_eq!(
        del.body.as_ref().unwrap().to_string(),
        r#"{"domain":"${hostname}.lan","vm":7,"ok":true,"list":["${vm_id}"]}"#
    );
    assert_eq!(f.hooks[1].retries, 3, "default retries");
    let notify = &f.hooks[2];
    assert!(notify.applies("db-1", HookEvent::Destroyed));
    assert!(!notify.applies("web-1", HookEvent::Ready));
    assert!(matches!(&notify.action, HookAction::Command { argv } if argv.len() == 3));
    // The plan/revision form keeps the templates, never a secret's value.
    let json = serde_json::to_string(&f).unwrap();
    assert!(json.contains("${env:TECHNITIUM_TOKEN}"));
}

#[test]
fn bad_url_is_named() {
    let e = errors("  dns:\n    on: ready\n    http: {url: \"ftp://dns.lan/x\"}\n");
    assert!(
        e.contains("fleet.yaml:10:17: hooks.dns.http.url: url 'ftp://dns.lan/x' is not a usable URL: it must start with http:// or https://"),
        "{e}"
    );
    let e = errors("  dns:\n    on: ready\n    http: {url: \"http://dns.lan:0/x\"}\n");
    assert!(
        e.contains("hooks.dns.http.url:") && e.contains("port '0'"),
        "{e}"
    );
}

#[test]
fn unknown_placeholder_is_named_with_the_list() {
    let e = errors("  dns:\n    on: ready\n    http:\n      url: \"http://dns/x\"\n      headers: {X-Name: \"${hostnme}\"}\n");
    assert!(
        e.contains("hooks.dns.http.headers.X-Name: unknown placeholder '${hostnme}'"),
        "{e}"
    );
    assert!(
        e.contains("${hostname}") && e.contains("${env:NAME}"),
        "{e}"
    );
    let e = errors("  dns:\n    on: ready\n    http:\n      url: \"http://dns/x\"\n      body: {a: [\"${ip}\"]}\n");
    assert!(
        e.contains("hooks.dns.http.body.a.0: unknown placeholder '${ip}'"),
        "{e}"
    );
}

#[test]
fn other_mistakes() {
    let e = errors("  x:\n    on: created\n    command: [/bin/true]\n");
    assert!(e.contains("hooks.x.on: unknown event 'created'"), "{e}");
    let e = errors("  x:\n    on: ready\n");
    assert!(
        e.contains("hooks.x: missing `http`, `command` or `use`"),
        "{e}"
    );
    let e = errors("  x:\n    command: [/bin/true]\n");
    assert!(e.contains("hooks.x: missing field 'on'"), "{e}");
    let e = errors("  x:\n    on: ready\n    command: [notify]\n");
    assert!(
        e.contains("hooks.x.command.0: the program 'notify' must be an absolute path"),
        "{e}"
    );
    let e = errors("  x:\n    on: ready\n    command: [/bin/notify, \"${env:TOKEN}\"]\n");
    assert!(e.contains("hooks.x.command.1: '${env:...}'"), "{e}");
    let e = errors("  x:\n    on: ready\n    containers: [web-9]\n    command: [/bin/true]\n");
    assert!(
        e.contains("hooks.x.containers.0: no container named 'web-9'"),
        "{e}"
    );
    let e = errors("  x:\n    on: ready\n    retries: 99\n    command: [/bin/true]\n");
    assert!(
        e.contains("hooks.x.retries: retries must be at most 20"),
        "{e}"
    );
    let e = errors("  x:\n    on: ready\n    http: {url: \"http://a/\", methd: GET}\n");
    assert!(
        e.contains("hooks.x.http.methd: unknown field 'methd'; did you mean 'method'?"),
        "{e}"
    );
}

#[test]
fn a_hook_used_by_name_gives_when_for_whom_and_plain_params() {
    let text = format!(
        "{HEAD}  dns:\n    use: dns-add\n    on: ready\n    containers: [web-1]\n    params: {{zone: lan, ttl: \"300\"}}\n"
    );
    let f = parse_fleet("fleet.yaml", &text, &NoFiles).unwrap();
    let HookAction::Use { hook, params } = &f.hooks[0].action else {
        panic!("use")
    };
    assert_eq!(hook, "dns-add");
    assert_eq!(params["zone"], "lan");
    assert_eq!(params["ttl"], "300");
    // the definition decides what runs: no http/command/timeout beside `use`, no placeholders in params
    let e = errors("  dns:\n    use: dns-add\n    on: ready\n    timeout: 5\n");
    assert!(
        e.contains("hooks.dns.timeout: `timeout` is set by the definition"),
        "{e}"
    );
    let e = errors("  dns:\n    use: dns-add\n    on: ready\n    params: {token: \"${file:/var/lib/pxcontroller/pki/ca.key}\"}\n");
    assert!(
        e.contains("hooks.dns.params.token: a parameter is plain text"),
        "{e}"
    );
    let e = errors("  dns:\n    on: ready\n    http: {url: \"http://dns.lan/${param:zone}\"}\n");
    assert!(
        e.contains("'${param:...}' is for hooks defined in the controller's configuration"),
        "{e}"
    );
    let e =
        errors("  dns:\n    on: ready\n    http: {url: \"http://dns.lan/\"}\n    params: {a: b}\n");
    assert!(
        e.contains("hooks.dns.params: `params` go with `use: NAME`"),
        "{e}"
    );
}

#[test]
fn definitions_use_params_and_secrets_but_not_the_fleets_fields() {
    let defs = pxfleet_spec::parse_hook_definitions(
        "controller.toml",
        r#"{"dns-add": {"http": {"url": "https://dns.lan/add?zone=${param:zone}&name=${hostname}", "headers": {"Authorization": "Bearer ${file:/etc/pxfleet/dns.token}"}}, "retries": 2}}"#,
    )
    .unwrap();
    assert_eq!(defs[0].name, "dns-add");
    assert!(defs[0].on.is_empty());
    assert_eq!(defs[0].retries, 2);
    assert_eq!(
        defs[0].action.params_used().into_iter().collect::<Vec<_>>(),
        ["zone"]
    );
    let e = pxfleet_spec::parse_hook_definitions(
        "controller.toml",
        r#"{"x": {"on": "ready", "command": ["/bin/true"]}}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("hooks.x.on: `on` is not part of a hook definition"),
        "{e}"
    );
}
