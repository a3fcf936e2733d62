//! `pxctl grant add|list|revoke`: host powers an admin grants to a fleet (see `pxctl grant --help` and
//! docs/security.md). The controller parses and checks the power; pxctl only sends the text.

use pxfleet_proto::v1 as pb;
use serde::Serialize;

use crate::args::{GrantCommand, ListFormat};
use crate::client::Client;
use crate::error::Result;
use crate::render::{self, table::Table};
use crate::term::Io;

/// One grant as `-o json|yaml` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GrantRow {
    pub id: u64,
    pub fleet: String,
    pub power: String,
    pub reason: String,
    pub granted_by: String,
    pub granted: Option<String>,
}

impl From<pb::HostPowerGrant> for GrantRow {
    fn from(g: pb::HostPowerGrant) -> Self {
        GrantRow {
            id: g.id,
            fleet: g.fleet,
            power: g.power,
            reason: g.reason,
            granted_by: g.granted_by,
            granted: render::timestamp(g.granted_unix_ms),
        }
    }
}

/// The rendering of `rows` in `format`.
pub fn render_rows(format: ListFormat, rows: &[GrantRow]) -> String {
    match format {
        ListFormat::Json => render::json(rows),
        ListFormat::Yaml => render::yaml::to_yaml(&serde_json::to_value(rows).unwrap_or_default()),
        ListFormat::Table if rows.is_empty() => {
            "No grants. An admin grants a fleet a host power with `pxctl grant add FLEET POWER`.\n"
                .into()
        }
        ListFormat::Table => {
            let mut t = Table::new(&["ID", "FLEET", "POWER", "GRANTED BY", "GRANTED", "REASON"]);
            for r in rows {
                t.row(vec![
                    r.id.to_string(),
                    r.fleet.clone(),
                    r.power.clone(),
                    r.granted_by
                        .strip_prefix("pxfleet://")
                        .unwrap_or(&r.granted_by)
                        .to_string(),
                    r.granted.clone().unwrap_or_default(),
                    r.reason.clone(),
                ]);
            }
            t.render()
        }
    }
}

pub async fn run(client: &mut Client, cmd: &GrantCommand, io: &mut Io<'_>) -> Result<u8> {
    match cmd {
        GrantCommand::Add(a) => {
            let mut rows = Vec::new();
            for power in &a.powers {
                let g = client
                    .api
                    .grant_host_power(pb::GrantHostPowerRequest {
                        fleet: a.fleet.clone(),
                        power: power.clone(),
                        reason: a.reason.clone(),
                    })
                    .await?
                    .into_inner();
                rows.push(GrantRow::from(g));
            }
            io.out.write_all(render_rows(a.format, &rows).as_bytes())?;
        }
        GrantCommand::List(a) => {
            let grants = client
                .api
                .list_grants(pb::ListGrantsRequest {
                    fleet: a.fleet.clone().unwrap_or_default(),
                })
                .await?
                .into_inner()
                .grants;
            let rows: Vec<GrantRow> = grants.into_iter().map(Into::into).collect();
            io.out.write_all(render_rows(a.format, &rows).as_bytes())?;
        }
        GrantCommand::Revoke(a) => {
            for id in &a.ids {
                let g = client
                    .api
                    .revoke_grant(pb::RevokeGrantRequest { id: *id })
                    .await?
                    .into_inner();
                writeln!(
                    io.out,
                    "revoked grant {} of fleet {}: {} (containers made with it keep running; the next submit \
                     that needs it is refused)",
                    g.id,
                    g.fleet,
                    render::printable(&g.power)
                )?;
            }
        }
    }
    Ok(0)
}
