//! `clone:` templates (issue 10 item 13): a template container made by hand on a pvesim node, a fleet with a full
//! and a linked clone of it submitted through a real controller and agent; `pct config` on the node shows the
//! fleet's memory, MAC and pxfleet's mark, both run, and the plan is empty afterwards.

use pxfleet_tests::day2::{create_by_hand, plan_is_empty, UP};
use pxfleet_tests::{Cluster, TEST_SSH_KEY};

fn fleet() -> String {
    format!(
        "fleet: cln\n\
         defaults:\n  \
           ssh_public_keys: [\"{TEST_SSH_KEY}\"]\n\
         templates:\n  \
           gold-full: {{clone: {{vm_id: 9000, node: mk33, datastore_id: local-zfs}}}}\n  \
           gold-linked: {{clone: {{vm_id: 9000, node: mk33, full: false}}}}\n\
         containers:\n  \
           full:\n    template: gold-full\n    vm_id: 2800\n    memory: 1024\n    cores: 2\n    disk_size: 8\n    \
             mac_address: \"BC:24:11:28:00:01\"\n    tags: [web]\n  \
           linked:\n    template: gold-linked\n    vm_id: 2801\n    memory: 768\n    disk_size: 4\n    \
             mac_address: \"BC:24:11:28:00:02\"\n"
    )
}

/// A template `gold` (CT `vmid` on mk33, 256 MiB, a 4 GiB root disk on local-lvm, DHCP on vmbr0, and `extra`
/// options) made by hand with `pct create` and `pct template`, as a clone source is made without pxfleet.
fn golden_by_hand(c: &Cluster, vmid: u32, extra: &[&str]) {
    let mut args = vec![
        "--hostname",
        "gold",
        "--memory",
        "256",
        "--rootfs",
        "local-lvm:4",
        "--net0",
        "name=eth0,bridge=vmbr0,ip=dhcp,type=veth",
    ];
    args.extend_from_slice(extra);
    create_by_hand(c, "mk33", vmid, &args);
    let out = c.pve("mk33", "pct", &["template", &vmid.to_string()]);
    assert_eq!(out.code, 0, "pct template: {}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_and_linked_clones_of_a_template_are_configured_and_running() {
    let c = Cluster::start(1).await.expect("cluster");
    golden_by_hand(&c, 9000, &[]);

    let yaml = fleet();
    let plan = c.plan(&yaml).await.unwrap();
    for shown in [
        "clone of CT 9000 on mk33 (full)",
        "clone of CT 9000 on mk33 (linked)",
    ] {
        assert!(plan.plan_json.contains(shown), "{shown}: {plan:?}");
    }
    let path = c.write_fleet("cln.yaml", &yaml);
    let path = path.to_str().unwrap().to_string();
    let (code, out, err) = c.pxctl(&["submit", &path, "-y", "--timeout", "100s"]).await;
    assert_eq!(code, 0, "pxctl submit: {out}\n{err}\n{}", c.logs());
    c.wait_running("cln", &["full", "linked"], UP).await;
    // pct clone copies the source's root password: pxfleet shows none rather than one the clones never got
    let out = c
        .pxctl_json(&["output", "--fleet", "cln", "--show-sensitive"])
        .await;
    for name in ["full", "linked"] {
        assert!(out[name]["password"].is_null(), "{name}: {out}");
    }

    let full = c.pct_config("mk33", 2800);
    assert_eq!(full["memory"], "1024", "{full:?}");
    assert_eq!(full["cores"], "2");
    assert_eq!(full["hostname"], "full");
    assert!(
        full["net0"].contains("hwaddr=BC:24:11:28:00:01"),
        "{}",
        full["net0"]
    );
    assert!(
        full["rootfs"].starts_with("local-zfs:") && full["rootfs"].contains("size=8G"),
        "{}",
        full["rootfs"]
    );
    assert!(
        full["description"].contains("pxfleet fleet=cln name=full"),
        "{full:?}"
    );
    assert!(full["tags"].contains("pxfleet") && full["tags"].contains("web"));
    assert!(!full.contains_key("template"));

    let linked = c.pct_config("mk33", 2801);
    assert_eq!(linked["memory"], "768", "{linked:?}");
    assert!(linked["net0"].contains("hwaddr=BC:24:11:28:00:02"));
    assert!(
        linked["rootfs"].starts_with("local-lvm:"),
        "a linked clone stays on the template's storage: {}",
        linked["rootfs"]
    );
    assert!(linked["description"].contains("pxfleet fleet=cln name=linked"));

    for vmid in ["2800", "2801"] {
        let st = c.pve("mk33", "pct", &["status", vmid]);
        assert!(st.stdout.contains("running"), "{vmid}: {}", st.stdout);
    }
    // The template is untouched.
    let gold = c.pct_config("mk33", 9000);
    assert_eq!(gold["memory"], "256");
    assert_eq!(gold.get("template").map(String::as_str), Some("1"));
    plan_is_empty(&c, &path).await;
}

/// bpg's acceptance tests declare the template next to its clones (`template = true`, then `clone { vm_id = ...id }`):
/// one submit makes the template (created stopped, never booted, `pct template`) and then its full and linked
/// clones, which wait for it; a running container declared `state: template` later is converted in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_declared_in_the_file_is_made_first_and_then_cloned() {
    let c = Cluster::start(1).await.expect("cluster");
    let yaml = |golden_state: &str| {
        format!(
            "fleet: tpl\n\
             defaults:\n  \
               ssh_public_keys: [\"{TEST_SSH_KEY}\"]\n\
             templates:\n  \
               deb: {{pveam: debian-13-standard_13.6-1_amd64.tar.zst}}\n  \
               gold: {{clone: {{vm_id: 9100, node: mk33, datastore_id: local-zfs}}}}\n  \
               gold-thin: {{clone: {{vm_id: 9100, node: mk33, full: false}}}}\n\
             containers:\n  \
               golden: {{template: deb, vm_id: 9100, node: mk33, datastore_id: local-lvm, memory: 256, state: {golden_state}}}\n  \
               full: {{template: gold, vm_id: 2810, memory: 1024}}\n  \
               linked: {{template: gold-thin, vm_id: 2811, memory: 768}}\n  \
               other: {{template: deb, vm_id: 2812, node: mk33}}\n"
        )
    };
    let body = yaml("template");
    let plan = c.plan(&body).await.unwrap();
    assert!(plan.plan_json.contains("\"template\""), "{plan:?}");
    let path = c.write_fleet("tpl.yaml", &body);
    let path = path.to_str().unwrap().to_string();
    let (code, out, err) = c.pxctl(&["submit", &path, "-y", "--timeout", "100s"]).await;
    assert_eq!(code, 0, "pxctl submit: {out}\n{err}\n{}", c.logs());
    let gold = c.pct_config("mk33", 9100);
    assert_eq!(
        gold.get("template").map(String::as_str),
        Some("1"),
        "{gold:?}"
    );
    assert_eq!(gold["memory"], "256");
    let runtime = c.runtime("mk33", 9100).unwrap();
    assert_eq!(
        runtime["boots"], 0,
        "a template is never started: {runtime}"
    );
    let full = c.pct_config("mk33", 2810);
    assert!(full["rootfs"].starts_with("local-zfs:"), "{full:?}");
    assert_eq!(full["memory"], "1024");
    let linked = c.pct_config("mk33", 2811);
    assert!(linked["rootfs"].starts_with("local-lvm:"), "{linked:?}");
    for vmid in ["2810", "2811"] {
        let st = c.pve("mk33", "pct", &["status", vmid]);
        assert!(st.stdout.contains("running"), "{vmid}: {}", st.stdout);
    }
    plan_is_empty(&c, &path).await;
    // The clones waited for the template instead of failing against a source that was not one yet.
    let ops = c.pxctl_json(&["get", "operations", "--fleet", "tpl"]).await;
    let ops = ops.as_array().expect("a list of operations");
    assert!(
        ops.iter().all(|o| o["state"] != "failed"),
        "no operation failed: {ops:?}"
    );
    assert_eq!(
        ops.iter().filter(|o| o["kind"] == "create").count(),
        4,
        "one create per container: {ops:?}"
    );

    // `pxctl start` of the whole fleet leaves the template alone; naming it is an error.
    let (code, out, err) = c.pxctl(&["start", "tpl", "golden"]).await;
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("is a template"), "{err}");

    // A running container becomes a template in place: stopped and converted, its disk kept.
    let disk_before = c.pct_config("mk33", 2812)["rootfs"].clone();
    let converted = body.replace(
        "other: {template: deb, vm_id: 2812, node: mk33}",
        "other: {template: deb, vm_id: 2812, node: mk33, state: template}",
    );
    let (code, out, err) = c
        .pxctl(&[
            "plan",
            c.write_fleet("tpl2.yaml", &converted).to_str().unwrap(),
        ])
        .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("running -> template") || out.contains("\"running\" -> \"template\""),
        "{out}"
    );
    assert!(!out.contains("replace"), "{out}");
    let path2 = c.write_fleet("tpl.yaml", &converted);
    let path2 = path2.to_str().unwrap().to_string();
    let (code, out, err) = c
        .pxctl(&["submit", &path2, "-y", "--timeout", "100s"])
        .await;
    assert_eq!(code, 0, "pxctl submit: {out}\n{err}\n{}", c.logs());
    let other = c.pct_config("mk33", 2812);
    assert_eq!(
        other.get("template").map(String::as_str),
        Some("1"),
        "{other:?}"
    );
    assert_eq!(other["rootfs"], disk_before, "converted in place");
    let st = c.pve("mk33", "pct", &["status", "2812"]);
    assert!(st.stdout.contains("stopped"), "{}", st.stdout);
    plan_is_empty(&c, &path2).await;

    // Back to a container: PVE cannot, so the plan replaces it and says why.
    let (code, out, err) = c
        .pxctl(&["plan", c.write_fleet("tpl3.yaml", &body).to_str().unwrap()])
        .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("replace"), "{out}");
    assert!(out.contains("cannot turn a template back"), "{out}");
}

/// A clone copies its source's mount points (`pct clone` copies every volume of a full clone; a linked clone's
/// are new links): when the file gives the clone no `mount_points`, they are what it has, not drift to detach, and
/// the plan after the submit is empty without a repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_keeps_the_mount_points_it_copied_when_the_file_gives_none() {
    let c = Cluster::start(1).await.expect("cluster");
    golden_by_hand(&c, 9200, &["--mp0", "local-lvm:1,mp=/srv/data"]);
    let yaml = format!(
        "fleet: cmp\n\
         defaults:\n  \
           ssh_public_keys: [\"{TEST_SSH_KEY}\"]\n\
         templates:\n  \
           gold: {{clone: {{vm_id: 9200, node: mk33}}}}\n\
         containers:\n  \
           copy: {{template: gold, vm_id: 2820, memory: 512}}\n"
    );
    let path = c.write_fleet("cmp.yaml", &yaml);
    let path = path.to_str().unwrap().to_string();
    let (code, out, err) = c.pxctl(&["submit", &path, "-y", "--timeout", "100s"]).await;
    assert_eq!(code, 0, "pxctl submit: {out}\n{err}\n{}", c.logs());
    c.wait_running("cmp", &["copy"], UP).await;
    plan_is_empty(&c, &path).await;
    let cfg = c.pct_config("mk33", 2820);
    assert!(
        cfg.get("mp0")
            .is_some_and(|v| v.contains("-2820-disk-") && v.contains("mp=/srv/data")),
        "the clone keeps its copy of the source's mount point: {cfg:?}"
    );
    let ops = c.pxctl_json(&["get", "operations", "--fleet", "cmp"]).await;
    let kinds: Vec<&str> = ops
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["create"], "no repair after the create: {ops:?}");

    // A day-2 change leaves it mounted too.
    let mp0 = cfg["mp0"].clone();
    let path =
        pxfleet_tests::day2::submit(&c, "cmp.yaml", &yaml.replace("memory: 512", "memory: 768"))
            .await;
    pxfleet_tests::wait_until("memory 768", UP, || async {
        match c.pct_config("mk33", 2820).get("memory").map(String::as_str) {
            Some("768") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    plan_is_empty(&c, &path).await;
    assert_eq!(c.pct_config("mk33", 2820).get("mp0"), Some(&mp0));
}
