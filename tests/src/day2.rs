//! Helpers of the day-2 scenarios (tests/tests/day2.rs, day2b.rs and adopt_cli.rs): submit through pxctl, wait
//! for an empty plan, read a node's pending config changes, make a container by hand.

use std::time::Duration;

use crate::{wait_until, Cluster};

/// How long a day-2 step may take to show on the nodes.
pub const UP: Duration = Duration::from_secs(120);

/// Writes `yaml`, submits it with pxctl (which must succeed) and returns the file's path.
pub async fn submit(c: &Cluster, file: &str, yaml: &str) -> String {
    let path = c.write_fleet(file, yaml);
    let path = path.to_str().expect("a UTF-8 temp path").to_string();
    let (code, out, err) = c.pxctl(&["submit", &path, "-y"]).await;
    assert_eq!(code, 0, "pxctl submit: {out}\n{err}\n{}", c.logs());
    path
}

/// `pxctl plan FILE --detailed-exitcode` exits 0 (nothing left to change) once the nodes' reports caught up.
pub async fn plan_is_empty(c: &Cluster, path: &str) {
    wait_until("plan --detailed-exitcode exits 0", UP, || async {
        let (code, out, err) = c.pxctl(&["plan", path, "--detailed-exitcode"]).await;
        if code == 0 {
            Ok(())
        } else {
            Err(format!("exit {code}: {out}\n{err}"))
        }
    })
    .await;
}

/// The `new ...` / `del ...` lines of `pct pending VMID` on `node`: changes waiting for a restart.
pub fn pending(c: &Cluster, node: &str, vmid: u32) -> Vec<String> {
    let out = c.pve(node, "pct", &["pending", &vmid.to_string()]);
    assert_eq!(out.code, 0, "pct pending: {}", out.stderr);
    out.stdout
        .lines()
        .filter(|l| l.starts_with("new ") || l.starts_with("del "))
        .map(str::to_string)
        .collect()
}

/// The Debian 13 template as `pct create` names it (pvesim's appliance list has it).
pub const HAND_TEMPLATE: &str = "local:vztmpl/debian-13-standard_13.6-1_amd64.tar.zst";

/// Makes container `vmid` on `node` by hand, as an operator would outside pxfleet (no mark): downloads the
/// template if needed, then `pct create VMID TEMPLATE ARGS...`, which must succeed.
pub fn create_by_hand(c: &Cluster, node: &str, vmid: u32, args: &[&str]) {
    let _ = c.pve(
        node,
        "pveam",
        &[
            "download",
            "local",
            "debian-13-standard_13.6-1_amd64.tar.zst",
        ],
    );
    let vmid = vmid.to_string();
    let mut argv = vec!["create", vmid.as_str(), HAND_TEMPLATE];
    argv.extend_from_slice(args);
    let out = c.pve(node, "pct", &argv);
    assert_eq!(out.code, 0, "pct create {vmid}: {}", out.stderr);
}
