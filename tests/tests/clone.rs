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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_and_linked_clones_of_a_template_are_configured_and_running() {
    let c = Cluster::start(1).await.expect("cluster");
    create_by_hand(
        &c,
        "mk33",
        9000,
        &[
            "--hostname",
            "gold",
            "--memory",
            "256",
            "--rootfs",
            "local-lvm:4",
            "--net0",
            "name=eth0,bridge=vmbr0,ip=dhcp,type=veth",
        ],
    );
    let out = c.pve("mk33", "pct", &["template", "9000"]);
    assert_eq!(out.code, 0, "pct template: {}", out.stderr);

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
