//! `pxctl snapshot create|list|rollback|delete FLEET CONTAINER [NAME]`: asks the controller for one snapshot
//! operation on the container's node, waits for it (up to `--timeout`) and prints the container's snapshots
//! after it. A rollback asks first unless `-y`.

use std::time::Duration;

use pxfleet_common::Stopwatch;
use pxfleet_proto::v1 as pb;

use crate::args::{ListFormat, SnapshotCommand, SnapshotTarget};
use crate::client::Client;
use crate::error::{CliError, Result};
use crate::render::{self, printable, SnapshotRecord};
use crate::term::Io;

pub async fn run(client: &mut Client, c: &SnapshotCommand, io: &mut Io<'_>) -> Result<u8> {
    let (target, action, name, description, format) = match c {
        SnapshotCommand::Create {
            target,
            name,
            description,
        } => (
            target,
            pb::SnapshotAction::Create,
            name.as_str(),
            description.as_str(),
            ListFormat::Table,
        ),
        SnapshotCommand::List { target, format } => {
            (target, pb::SnapshotAction::List, "", "", *format)
        }
        SnapshotCommand::Rollback { target, name, yes } => {
            if !yes {
                writeln!(
                    io.out,
                    "Container {} of fleet {} goes back to snapshot {}: what it wrote since is lost, and a running \
                     container is stopped and started again.",
                    target.container,
                    target.fleet,
                    printable(name)
                )?;
                io.out.flush()?;
                let q = format!(
                    "Roll back {} to snapshot {}?",
                    target.container,
                    printable(name)
                );
                if !io.confirm.confirm(&q, "-y")? {
                    return Err(CliError::NotConfirmed("rollback cancelled".into()));
                }
            }
            (
                target,
                pb::SnapshotAction::Rollback,
                name.as_str(),
                "",
                ListFormat::Table,
            )
        }
        SnapshotCommand::Delete { target, name } => (
            target,
            pb::SnapshotAction::Delete,
            name.as_str(),
            "",
            ListFormat::Table,
        ),
    };
    let op = client
        .api
        .snapshot(pb::SnapshotRequest {
            fleet: target.fleet.clone(),
            container: target.container.clone(),
            action: action as i32,
            name: name.to_string(),
            description: description.to_string(),
        })
        .await?
        .into_inner();
    let table = format == ListFormat::Table;
    if table {
        writeln!(
            io.out,
            "{} (vm_id {} on {}, operation {})...",
            printable(&op.reason),
            op.vm_id,
            op.node,
            op.op_id
        )?;
        io.out.flush()?;
    }
    let Some(done) = wait_for(client, target, &op.op_id).await? else {
        writeln!(
            io.err,
            "error: the operation is still not finished after {}s; it goes on on the node: pxctl get operations {}",
            target.timeout.as_secs(),
            target.fleet
        )?;
        return Ok(1);
    };
    if done.state != pb::OperationState::Succeeded as i32 {
        writeln!(
            io.err,
            "error: snapshot {} of {} failed on {}: {}",
            action_word(action),
            target.container,
            done.node,
            printable(&done.error)
        )?;
        return Ok(1);
    }
    if table {
        let what = match action {
            pb::SnapshotAction::Create => format!("Snapshot {} taken.", printable(name)),
            pb::SnapshotAction::Delete => format!("Snapshot {} deleted.", printable(name)),
            pb::SnapshotAction::Rollback => format!(
                "Rolled back to snapshot {}; the next reconcile pass repairs what differs from the fleet's file.",
                printable(name)
            ),
            _ => String::new(),
        };
        if !what.is_empty() {
            writeln!(io.out, "{what}")?;
        }
    }
    let records: Vec<SnapshotRecord> = done.snapshots.iter().map(SnapshotRecord::from_pb).collect();
    write!(io.out, "{}", render::snapshots(format, &records))?;
    Ok(0)
}

fn action_word(a: pb::SnapshotAction) -> &'static str {
    match a {
        pb::SnapshotAction::Create => "create",
        pb::SnapshotAction::Delete => "delete",
        pb::SnapshotAction::Rollback => "rollback",
        _ => "list",
    }
}

/// The operation once it finished, or None when `target.timeout` passed first.
async fn wait_for(
    client: &mut Client,
    target: &SnapshotTarget,
    op_id: &str,
) -> Result<Option<pb::OperationInfo>> {
    let start = Stopwatch::start();
    loop {
        let found = client
            .api
            .get_operations(pb::GetOperationsRequest {
                fleet: target.fleet.clone(),
                op_id: op_id.to_string(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .operations
            .into_iter()
            .next();
        match found {
            Some(op)
                if op.state == pb::OperationState::Succeeded as i32
                    || op.state == pb::OperationState::Failed as i32 =>
            {
                return Ok(Some(op))
            }
            Some(_) => {}
            None => {
                return Err(CliError::Usage(format!(
                "operation {op_id} is gone from the controller (pruned?): pxctl get operations {}",
                target.fleet
            )))
            }
        }
        if start.elapsed() >= target.timeout {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
