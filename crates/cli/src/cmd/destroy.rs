//! `pxctl destroy FLEET [CONTAINER...]`: lists what will go, asks unless `-y`, asks the controller to
//! destroy, then follows until the containers are gone (or failed).

use std::collections::BTreeSet;

use pxfleet_proto::v1 as pb;

use crate::args::DestroyArgs;
use crate::client::Client;
use crate::error::{CliError, Result};
use crate::progress::{follow, Follow};
use crate::term::Io;

pub async fn run(client: &mut Client, a: &DestroyArgs, io: &mut Io<'_>) -> Result<u8> {
    let all = client
        .api
        .get_containers(pb::GetContainersRequest {
            fleet: a.fleet.clone(),
            node: String::new(),
        })
        .await?
        .into_inner()
        .containers;
    if all.is_empty() {
        return Err(CliError::Usage(format!(
            "fleet {:?} has no containers; list fleets with `pxctl get fleets`",
            a.fleet
        )));
    }
    let known: BTreeSet<&str> = all.iter().map(|c| c.name.as_str()).collect();
    let unknown: Vec<&str> = a
        .containers
        .iter()
        .map(String::as_str)
        .filter(|n| !known.contains(n))
        .collect();
    if !unknown.is_empty() {
        return Err(CliError::Usage(format!(
            "fleet {} has no container {}; it has: {}",
            a.fleet,
            unknown.join(", "),
            known.iter().copied().collect::<Vec<_>>().join(", ")
        )));
    }
    let targets: Vec<&pb::ContainerInfo> = all
        .iter()
        .filter(|c| a.containers.is_empty() || a.containers.contains(&c.name))
        .collect();
    writeln!(
        io.out,
        "{} container(s) of fleet {} will be destroyed:",
        targets.len(),
        a.fleet
    )?;
    for c in &targets {
        let at = match (c.vm_id, c.node.as_str()) {
            (0, _) | (_, "") => "not created yet".to_string(),
            (id, node) => format!("vm_id {id} on {node}"),
        };
        writeln!(io.out, "  - {} ({at})", c.name)?;
    }
    if a.containers.is_empty() {
        writeln!(
            io.out,
            "The fleet's file still lists them: submitting it again recreates them."
        )?;
    }
    if !a.yes {
        io.out.flush()?;
        let q = format!("Destroy these containers of fleet {}?", a.fleet);
        if !io.confirm.confirm(&q, "-y")? {
            return Err(CliError::NotConfirmed("destroy cancelled".into()));
        }
    }
    let resp = client
        .api
        .destroy(pb::DestroyRequest {
            fleet: a.fleet.clone(),
            containers: a.containers.clone(),
            expected_revision: None,
        })
        .await?
        .into_inner();
    writeln!(
        io.out,
        "Destroy accepted (fleet {} revision {}, {} operation(s)).",
        a.fleet,
        resp.revision,
        resp.operations.len()
    )?;
    if a.no_wait {
        return Ok(0);
    }
    let f = Follow {
        fleet: a.fleet.clone(),
        op_ids: resp.operations.iter().map(|o| o.op_id.clone()).collect(),
        only: Some(targets.iter().map(|c| c.name.clone()).collect()),
        destroying: true,
        expect_activity: true,
        timeout: a.timeout,
        poll: std::time::Duration::from_millis(500),
        want_stopped: Default::default(),
    };
    let outcome = follow(client, &f, io.out).await?;
    Ok(if outcome.success(true, &f.want_stopped) {
        0
    } else {
        1
    })
}
