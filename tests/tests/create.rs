//! A create does what the file says and nothing else (issue 34): a `state: stopped` container is never started
//! (its root password is set by `pct create` itself), and a container with `idmap` and `env` boots for the first
//! time with them, once. pvesim's runtime record counts the boots and keeps what the first one ran with.

use pxfleet_tests::day2::{plan_is_empty, submit, UP};
use pxfleet_tests::{fleet_yaml, v1 as pb, wait_until, Cluster};
use sha2::Digest;

const STOPPED: u32 = 2600;
const MAPPED: u32 = 2601;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_container_is_never_started_and_a_mapped_one_boots_once_with_its_map() {
    let c = Cluster::start(1).await.expect("cluster");
    let yaml = fleet_yaml(
        "boot",
        &format!(
            "  cold: {{node: mk33, vm_id: {STOPPED}, memory: 512, disk_size: 4, state: stopped}}\n  \
             mapped:\n    node: mk33\n    vm_id: {MAPPED}\n    memory: 512\n    disk_size: 4\n    \
             env: {{APP_MODE: blue}}\n    \
             idmap:\n      \
               - {{type: uid, container_id: 0, host_id: 200000, size: 65536}}\n      \
               - {{type: gid, container_id: 0, host_id: 200000, size: 65536}}\n"
        ),
    );
    let path = submit(&c, "boot.yaml", &yaml).await;
    wait_until("cold stopped, mapped running", UP, || async {
        let cs = c.containers("boot").await.map_err(|e| e.to_string())?;
        let state = |n: &str| cs.iter().find(|x| x.name == n).map(|x| x.state);
        if state("cold") == Some(pb::ContainerState::Stopped as i32)
            && state("mapped") == Some(pb::ContainerState::Running as i32)
        {
            Ok(())
        } else {
            Err(format!("{cs:?}"))
        }
    })
    .await;
    plan_is_empty(&c, &path).await;

    let pws = c.passwords("boot").await.unwrap();
    let hash = |name: &str| {
        let pw = &pws.iter().find(|(n, _)| n == name).expect("a password").1;
        hex::encode(sha2::Sha256::digest(pw.as_bytes()))
    };
    let cold = c.runtime("mk33", STOPPED).expect("cold's runtime record");
    assert_eq!(cold["boots"], 0, "created stopped, never started: {cold}");
    assert_eq!(cold["running"], false, "{cold}");
    assert_eq!(
        cold["passwords"]["root"],
        hash("cold").as_str(),
        "the root password was set without a start: {cold}"
    );

    let mapped = c.runtime("mk33", MAPPED).expect("mapped's runtime record");
    assert_eq!(mapped["boots"], 1, "one boot, no restart: {mapped}");
    let first = &mapped["first_boot"];
    assert_eq!(
        first["idmap"],
        serde_json::json!(["u 0 200000 65536", "g 0 200000 65536"]),
        "the first boot ran with the file's map: {mapped}"
    );
    assert_eq!(
        first["env"],
        serde_json::json!(["APP_MODE=blue"]),
        "{mapped}"
    );
    assert_eq!(first["root_password"], true, "{mapped}");
    assert_eq!(mapped["passwords"]["root"], hash("mapped").as_str());
}

/// `wait_for_ip` (bpg's `wait_for_ip { ipv4, ipv6 }`): a create is done once the container has the families asked
/// for; one that never comes fails the create with what is missing (the container is kept), where a create asking
/// for nothing is done without an address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_ip_waits_for_the_families_asked_for_and_says_which_never_came() {
    let c = Cluster::start(1).await.expect("cluster");
    let yaml = fleet_yaml(
        "wip",
        "  both: {node: mk33, vm_id: 2620, ipv6: \"fd00::20/64\", wait_for_ip: {ipv4: true, ipv6: true}}\n  \
           slaac: {node: mk33, vm_id: 2621, ipv6: auto, wait_for_ip: {ipv6: true}}\n  \
           any: {node: mk33, vm_id: 2622, ipv6: auto}\n",
    );
    let path = c.write_fleet("wip.yaml", &yaml);
    let path = path.to_str().unwrap().to_string();
    let (code, out, err) = c.pxctl(&["submit", &path, "-y", "--timeout", "100s"]).await;
    // pvesim gives `ipv6: auto` no SLAAC address (no router advertises one): `slaac` never gets its IPv6.
    assert_ne!(code, 0, "{out}\n{err}");
    let cs = c.containers("wip").await.unwrap();
    let row = |n: &str| cs.iter().find(|x| x.name == n).unwrap().clone();
    let both = row("both");
    assert!(
        both.addresses.iter().any(|a| a.starts_with("fd00::20"))
            && both.addresses.iter().any(|a| !a.contains(':')),
        "{both:?}"
    );
    assert!(both.last_error.is_empty(), "{both:?}");
    let slaac = row("slaac");
    assert!(
        slaac.last_error.contains("has no IPv6 address")
            && slaac.last_error.contains("wait_for_ip"),
        "{slaac:?}"
    );
    assert!(
        c.pct_config("mk33", 2621).contains_key("hostname"),
        "the container is kept"
    );
    let any = row("any");
    assert!(any.last_error.is_empty(), "{any:?}");
    assert!(any.addresses.iter().any(|a| !a.contains(':')), "{any:?}");
}
