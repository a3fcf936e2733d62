//! `pxctl start|stop|restart FLEET [CONTAINER...]`: changes the containers' desired power state (`state:`) and
//! records it as a new revision of the fleet, like a submit; then follows until they are running (or stopped).
//! The fleet's file keeps its own `state:`: submitting it again applies what it says.

use std::collections::BTreeSet;

use pxfleet_proto::v1 as pb;

use crate::args::PowerArgs;
use crate::client::Client;
use crate::error::Result;
use crate::progress::{follow, Follow};
use crate::term::Io;

pub async fn run(
    client: &mut Client,
    a: &PowerArgs,
    action: pb::PowerAction,
    io: &mut Io<'_>,
) -> Result<u8> {
    let resp = client
        .api
        .set_power(pb::SetPowerRequest {
            fleet: a.fleet.clone(),
            containers: a.containers.clone(),
            action: action as i32,
            expected_revision: None,
        })
        .await?
        .into_inner();
    let verb = match action {
        pb::PowerAction::Stop => "Stop",
        pb::PowerAction::Restart => "Restart",
        _ => "Start",
    };
    writeln!(
        io.out,
        "{verb} accepted (fleet {} revision {}, {} operation(s)).",
        a.fleet,
        resp.revision,
        resp.operations.len()
    )?;
    if a.no_wait {
        return Ok(0);
    }
    let only: Option<BTreeSet<String>> =
        (!a.containers.is_empty()).then(|| a.containers.iter().cloned().collect());
    let want_stopped = match (action, &only) {
        (pb::PowerAction::Stop, Some(names)) => names.clone(),
        (pb::PowerAction::Stop, None) => client
            .api
            .get_containers(pb::GetContainersRequest {
                fleet: a.fleet.clone(),
                node: String::new(),
            })
            .await?
            .into_inner()
            .containers
            .into_iter()
            .map(|c| c.name)
            .collect(),
        _ => BTreeSet::new(),
    };
    let f = Follow {
        fleet: a.fleet.clone(),
        op_ids: resp.operations.iter().map(|o| o.op_id.clone()).collect(),
        only,
        destroying: false,
        expect_activity: !resp.operations.is_empty(),
        timeout: a.timeout,
        poll: std::time::Duration::from_millis(500),
        want_stopped,
    };
    let outcome = follow(client, &f, io.out).await?;
    Ok(if outcome.success(false, &f.want_stopped) {
        0
    } else {
        1
    })
}
