//! `pxctl output [--fleet F] [--show-sensitive]`: per container vm_id, node, ipv4, ipv6 (and the generated
//! password only when asked; otherwise it is neither requested nor printed).

use std::collections::BTreeMap;

use pxfleet_proto::v1 as pb;

use crate::args::OutputArgs;
use crate::client::Client;
use crate::error::Result;
use crate::render::{self, OutputRecord};
use crate::term::Io;

pub async fn run(client: &mut Client, args: &OutputArgs, io: &mut Io<'_>) -> Result<u8> {
    let fleet = super::resolve_fleet(client, args.fleet.as_deref()).await?;
    let resp = client
        .api
        .output(pb::OutputRequest {
            fleet,
            show_sensitive: args.show_sensitive,
        })
        .await?
        .into_inner();
    let rs: BTreeMap<String, OutputRecord> = resp
        .containers
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                OutputRecord::from_pb(c, args.show_sensitive),
            )
        })
        .collect();
    io.out
        .write_all(render::outputs(args.format, &rs, args.show_sensitive).as_bytes())?;
    Ok(0)
}
