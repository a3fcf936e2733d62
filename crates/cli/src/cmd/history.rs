//! `pxctl history [--fleet F]`: the fleet's revisions, newest first.

use pxfleet_proto::v1 as pb;

use crate::args::HistoryArgs;
use crate::client::Client;
use crate::error::Result;
use crate::render::{self, RevisionRecord};
use crate::term::Io;

pub async fn run(client: &mut Client, args: &HistoryArgs, io: &mut Io<'_>) -> Result<u8> {
    let fleet = super::resolve_fleet(client, args.fleet.as_deref()).await?;
    let mut revs = client
        .api
        .history(pb::HistoryRequest {
            fleet,
            limit: args.limit,
        })
        .await?
        .into_inner()
        .revisions;
    revs.sort_by_key(|r| std::cmp::Reverse(r.revision));
    let rs: Vec<RevisionRecord> = revs.iter().map(Into::into).collect();
    io.out
        .write_all(render::history(args.format, &rs).as_bytes())?;
    Ok(0)
}
