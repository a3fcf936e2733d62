//! `pxctl get nodes|containers|operations|fleets` and `pxctl node list`: fetch and render as a table,
//! JSON or YAML (records in [`crate::render`]).

use pxfleet_proto::v1 as pb;

use crate::args::{GetArgs, GetKind, ListFormat};
use crate::client::Client;
use crate::error::Result;
use crate::render::{self, ContainerRecord, FleetRecord, NodeRecord, OperationRecord};
use crate::term::Io;

pub async fn run(client: &mut Client, args: &GetArgs, io: &mut Io<'_>) -> Result<u8> {
    let fleet = args.fleet.clone().unwrap_or_default();
    let node = args.node.clone().unwrap_or_default();
    let text = match args.kind {
        GetKind::Nodes => return nodes(client, args.format, io).await,
        GetKind::Containers => {
            let cs = client
                .api
                .get_containers(pb::GetContainersRequest { fleet, node })
                .await?
                .into_inner()
                .containers;
            let rs: Vec<ContainerRecord> = cs.iter().map(Into::into).collect();
            render::containers(args.format, &rs)
        }
        GetKind::Operations => {
            let ops = client
                .api
                .get_operations(pb::GetOperationsRequest {
                    fleet,
                    node,
                    active_only: args.active,
                    limit: args.limit,
                    op_id: String::new(),
                })
                .await?
                .into_inner()
                .operations;
            let rs: Vec<OperationRecord> = ops.iter().map(Into::into).collect();
            render::operations(args.format, &rs)
        }
        GetKind::Unmanaged => {
            let us = client
                .api
                .get_unmanaged(pb::GetUnmanagedRequest { node })
                .await?
                .into_inner()
                .containers;
            let rs: Vec<render::UnmanagedRecord> = us.iter().map(Into::into).collect();
            render::unmanaged(args.format, &rs)
        }
        GetKind::Fleets => {
            let fs = client
                .api
                .get_fleets(pb::GetFleetsRequest {})
                .await?
                .into_inner()
                .fleets;
            let rs: Vec<FleetRecord> = fs.iter().map(Into::into).collect();
            render::fleets(args.format, &rs)
        }
    };
    io.out.write_all(text.as_bytes())?;
    Ok(0)
}

/// `get nodes` / `node list`.
pub async fn nodes(client: &mut Client, format: ListFormat, io: &mut Io<'_>) -> Result<u8> {
    let ns = client
        .api
        .get_nodes(pb::GetNodesRequest {})
        .await?
        .into_inner()
        .nodes;
    let rs: Vec<NodeRecord> = ns.iter().map(Into::into).collect();
    io.out.write_all(render::nodes(format, &rs).as_bytes())?;
    Ok(0)
}
