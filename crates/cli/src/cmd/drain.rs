//! `pxctl node drain NODE`: cordons the node and has the controller move every container the files leave
//! unplaced off it (`pct migrate`; the scheduler picks each target), then follows the moves until they are done.
//! Exit 0 when every container left the node; 1 when some stay (pinned by the file, no room) or a move failed.

use std::collections::BTreeMap;
use std::time::Duration;

use pxfleet_common::Stopwatch;
use pxfleet_proto::v1 as pb;

use crate::client::Client;
use crate::error::Result;
use crate::term::Io;

pub async fn run(
    client: &mut Client,
    node: &str,
    reason: &str,
    no_wait: bool,
    timeout: Duration,
    io: &mut Io<'_>,
) -> Result<u8> {
    let r = client
        .api
        .drain_node(pb::DrainNodeRequest {
            node: node.to_string(),
            reason: reason.to_string(),
        })
        .await?
        .into_inner();
    writeln!(
        io.out,
        "node {node} cordoned; {} container(s) to move, {} staying",
        r.moves.len(),
        r.stuck.len()
    )?;
    for m in &r.moves {
        writeln!(
            io.out,
            "  {}/{} (vm_id {}) -> {}",
            m.fleet, m.container, m.vm_id, m.to
        )?;
    }
    for s in &r.stuck {
        writeln!(io.out, "  {}/{} stays: {}", s.fleet, s.container, s.reason)?;
    }
    if no_wait || r.moves.is_empty() {
        return Ok(if r.stuck.is_empty() { 0 } else { 1 });
    }
    let start = Stopwatch::start();
    let mut last: BTreeMap<(String, String), String> = BTreeMap::new();
    loop {
        let containers = client
            .api
            .get_containers(pb::GetContainersRequest::default())
            .await?
            .into_inner()
            .containers;
        let mut done = 0;
        let mut failed = 0;
        for m in &r.moves {
            let Some(c) = containers
                .iter()
                .find(|c| c.fleet == m.fleet && c.name == m.container)
            else {
                continue;
            };
            let state = pb::ContainerState::try_from(c.state)
                .map(|s| {
                    s.as_str_name()
                        .trim_start_matches("CONTAINER_STATE_")
                        .to_ascii_lowercase()
                })
                .unwrap_or_default();
            let key = (m.fleet.clone(), m.container.clone());
            if last.get(&key) != Some(&state) {
                writeln!(
                    io.out,
                    "[{}s] {}/{}  {state}{}",
                    start.elapsed().as_secs(),
                    m.fleet,
                    m.container,
                    if state == "running" || state == "stopped" {
                        format!(" on {}", c.node)
                    } else {
                        String::new()
                    }
                )?;
                last.insert(key, state.clone());
            }
            match state.as_str() {
                "running" | "stopped" if c.node == m.to => done += 1,
                "failed" => failed += 1,
                _ => {}
            }
        }
        let active = client
            .api
            .get_operations(pb::GetOperationsRequest {
                fleet: String::new(),
                node: node.to_string(),
                active_only: true,
                limit: 0,
                op_id: String::new(),
            })
            .await?
            .into_inner()
            .operations;
        let moving = active.iter().any(|o| {
            o.kind != pb::OperationKind::Hook as i32
                && r.moves
                    .iter()
                    .any(|m| m.fleet == o.fleet && m.container == o.container)
        });
        if !moving && done + failed == r.moves.len() {
            writeln!(
                io.out,
                "Drain of {node}: {done} moved, {failed} failed, {} staying ({}s).",
                r.stuck.len(),
                start.elapsed().as_secs()
            )?;
            return Ok(if failed == 0 && r.stuck.is_empty() {
                0
            } else {
                1
            });
        }
        if start.elapsed() > timeout {
            writeln!(
                io.err,
                "gave up following after {}s; the controller keeps moving",
                timeout.as_secs()
            )?;
            return Ok(1);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
