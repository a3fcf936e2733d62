//! Container options of issue 34, each through its lifecycle on a pvesim node with the real controller and agent:
//! set at create, changed in place (with the restart PVE needs, announced by the plan), left alone when the file
//! stops giving it, and an empty plan after every submit.

use pxfleet_tests::day2::{pending, plan_is_empty, submit, UP};
use pxfleet_tests::{fleet_yaml, wait_until, Cluster};

const SYS: u32 = 2610;

fn has(c: &Cluster, vmid: u32, want: &[(&str, &str)]) -> Result<(), String> {
    let cfg = c.pct_config("mk33", vmid);
    match want
        .iter()
        .find(|(k, v)| cfg.get(*k).map(String::as_str) != Some(*v))
    {
        None if pending(c, "mk33", vmid).is_empty() => Ok(()),
        None => Err(format!("pending: {:?}", pending(c, "mk33", vmid))),
        Some((k, v)) => Err(format!("{k}: want {v}, config has {:?}", cfg.get(*k))),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arch_timezone_and_console_are_created_changed_with_a_restart_and_left_alone_when_dropped()
{
    let c = Cluster::start(1).await.expect("cluster");
    let body = |extra: &str| {
        fleet_yaml(
            "sys",
            &format!("  s: {{node: mk33, vm_id: {SYS}, memory: 512, disk_size: 4{extra}}}\n"),
        )
    };
    let first = ", arch: amd64, timezone: Europe/Berlin, console: {enabled: false, tty_count: 4, type: shell}";
    let path = submit(&c, "sys.yaml", &body(first)).await;
    c.wait_running("sys", &["s"], UP).await;
    has(
        &c,
        SYS,
        &[
            ("arch", "amd64"),
            ("timezone", "Europe/Berlin"),
            ("console", "0"),
            ("tty", "4"),
            ("cmode", "shell"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    plan_is_empty(&c, &path).await;
    let boots = c.runtime("mk33", SYS).unwrap()["boots"].clone();
    assert_eq!(boots, 1, "created and started once");

    // A change PVE applies at the next start: the plan says so, the agent restarts the container.
    let second =
        ", arch: amd64, timezone: UTC, console: {enabled: true, tty_count: 2, type: console}";
    let (code, out, err) = c
        .pxctl(&[
            "plan",
            c.write_fleet("sys2.yaml", &body(second)).to_str().unwrap(),
        ])
        .await;
    assert_eq!(code, 0, "{out}\n{err}");
    for field in [
        "timezone",
        "console.enabled",
        "console.tty_count",
        "console.type",
    ] {
        assert!(out.contains(field), "{field} in the plan:\n{out}");
    }
    assert!(
        out.contains("restart"),
        "the plan announces the restart:\n{out}"
    );
    assert!(
        !out.contains("arch"),
        "an unchanged arch is not in the plan:\n{out}"
    );
    let path = submit(&c, "sys.yaml", &body(second)).await;
    wait_until("second values in effect", UP, || async {
        has(
            &c,
            SYS,
            &[
                ("timezone", "UTC"),
                ("console", "1"),
                ("tty", "2"),
                ("cmode", "console"),
            ],
        )
    })
    .await;
    c.wait_running("sys", &["s"], UP).await;
    plan_is_empty(&c, &path).await;
    assert_eq!(
        c.runtime("mk33", SYS).unwrap()["boots"],
        2,
        "restarted once to apply them"
    );

    // Dropped from the file: not compared, so nothing changes on the node.
    let path = submit(&c, "sys.yaml", &body("")).await;
    plan_is_empty(&c, &path).await;
    has(
        &c,
        SYS,
        &[("arch", "amd64"), ("timezone", "UTC"), ("cmode", "console")],
    )
    .unwrap();

    // A value PVE refuses is refused at its field, before anything runs.
    let plan = c.plan(&body(", timezone: Europe/Atlantis")).await.unwrap();
    assert!(
        plan.diagnostics
            .iter()
            .any(|d| d.field.ends_with("timezone") && d.message.contains("Atlantis")),
        "{:?}",
        plan.diagnostics
    );
}
