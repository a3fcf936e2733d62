//! Golden renderings of plans: text (plain and coloured), markdown and JSON, compared byte for byte with the
//! files in `tests/golden/`. Run with `UPDATE_GOLDEN=1` to rewrite them after an intended change, then review
//! the diff.

mod plan_support;

use std::path::PathBuf;

use plan_support::*;
use pxfleet_spec::model::*;
use pxfleet_spec::observed::PowerState;
use pxfleet_spec::plan::{plan, Plan};
use pxfleet_spec::render;

fn check(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with UPDATE_GOLDEN=1 to create it",
            path.display()
        )
    });
    pretty_assertions::assert_eq!(expected, actual, "{} differs", path.display());
}

fn check_all(stem: &str, p: &Plan) {
    check(&format!("{stem}.txt"), &render::text::render(p, false));
    check(&format!("{stem}.ansi.txt"), &render::text::render(p, true));
    check(&format!("{stem}.md"), &render::markdown::render(p));
    check(&format!("{stem}.json"), &render::json::render(p));
}

/// `pxctl plan --offline` of a small fleet: everything is created.
#[test]
fn offline_create() {
    let mut db = container("dev-db", Some(2101));
    db.startup = Some(Startup {
        order: Some(1),
        up_delay: Some(30),
        down_delay: None,
    });
    db.mount_points.push(MountPoint::Volume {
        datastore_id: "local-lvm".into(),
        size_gib: 64,
        path: "/var/lib/postgresql".into(),
        backup: true,
        read_only: false,
        flags: Default::default(),
    });
    db.interfaces[0] = static_iface("eth0", "192.168.7.101/24", "192.168.7.1");
    db.password = Some(Secret::new("s3cret-db-password"));
    let mut web = container("dev-web", None);
    web.node = None;
    web.datastore_id = None;
    web.tags = vec!["web".into()];
    web.description = Some("Nextcloud\nfront end".into());
    web.ssh_public_keys = vec!["ssh-ed25519 AAAAC3Nza ops@example".into()];
    let p = plan(&fleet("dev", vec![web, db]), None, &[]).unwrap();
    check_all("plan_offline_create", &p);
}

/// Every kind of action at once.
#[test]
fn mixed_changes() {
    let mut base: Vec<Container> = ["app", "cache", "db", "old", "worker"]
        .iter()
        .enumerate()
        .map(|(i, n)| container(n, Some(100 + i as u32)))
        .collect();
    base[2].startup = Some(Startup {
        order: Some(1),
        ..Startup::default()
    });
    let applied = fleet("dev", base.clone());
    let mut obs = observe(&applied, PowerState::Running);
    obs.iter_mut()
        .find(|o| o.vm_id == 101)
        .unwrap()
        .config
        .memory = 768; // cache: drift
    obs.iter_mut().find(|o| o.vm_id == 104).unwrap().status = PowerState::Stopped; // worker: stopped by hand

    let mut desired = base;
    desired.retain(|c| c.name != "old");
    let app = desired.iter_mut().find(|c| c.name == "app").unwrap();
    app.cores = Some(4);
    app.features.keyctl = true;
    app.disk_size = 16;
    app.tags = vec!["web".into()];
    app.password = Some(Secret::new("n3w-app-password"));
    let db = desired.iter_mut().find(|c| c.name == "db").unwrap();
    db.template = "ubuntu-25.04".into();
    let worker = desired.iter_mut().find(|c| c.name == "worker").unwrap();
    worker.node = Some("pve2".into());
    let mut new = container("search", Some(110));
    new.startup = Some(Startup {
        order: Some(5),
        ..Startup::default()
    });
    desired.push(new);

    let p = plan(&fleet("dev", desired), Some(&applied), &obs).unwrap();
    check_all("plan_mixed", &p);
}

#[test]
fn no_changes() {
    let f = fleet("dev", vec![container("a", Some(100))]);
    let p = plan(&f, Some(&f), &observe(&f, PowerState::Running)).unwrap();
    check_all("plan_empty", &p);
}
