//! `pxctl audit [--fleet F] [--since T] [--limit N] [-o json]`: the controller's audit trail (admin only),
//! oldest first.

use pxfleet_proto::v1 as pb;
use serde::Serialize;

use crate::args::{AuditArgs, ListFormat};
use crate::client::Client;
use crate::error::Result;
use crate::render::{self, table::Table};
use crate::term::Io;

/// One entry as `audit -o json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRow {
    pub time: Option<String>,
    pub unix_ms: i64,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub detail: String,
}

impl From<&pb::AuditRecord> for AuditRow {
    fn from(r: &pb::AuditRecord) -> Self {
        AuditRow {
            time: render::timestamp(r.unix_ms),
            unix_ms: r.unix_ms,
            actor: r.actor.clone(),
            action: r.action.clone(),
            target: r.target.clone(),
            detail: r.detail.clone(),
        }
    }
}

/// The rendering of `rows` in `format`.
pub fn render_rows(format: ListFormat, rows: &[AuditRow]) -> String {
    match format {
        ListFormat::Json => render::json(rows),
        ListFormat::Yaml => render::yaml::to_yaml(&serde_json::to_value(rows).unwrap_or_default()),
        ListFormat::Table if rows.is_empty() => "No audit entries.\n".into(),
        ListFormat::Table => {
            let mut t = Table::new(&["TIME", "ACTOR", "ACTION", "TARGET", "DETAIL"]);
            for r in rows {
                t.row(vec![
                    r.time.clone().unwrap_or_default(),
                    r.actor
                        .strip_prefix("pxfleet://")
                        .unwrap_or(&r.actor)
                        .to_string(),
                    r.action.clone(),
                    r.target.clone(),
                    r.detail.clone(),
                ]);
            }
            t.render()
        }
    }
}

pub async fn run(client: &mut Client, args: &AuditArgs, io: &mut Io<'_>) -> Result<u8> {
    let since_unix_ms = args
        .since
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let entries = client
        .api
        .get_audit(pb::GetAuditRequest {
            fleet: args.fleet.clone().unwrap_or_default(),
            since_unix_ms,
            limit: args.limit,
        })
        .await?
        .into_inner()
        .entries;
    let rows: Vec<AuditRow> = entries.iter().map(Into::into).collect();
    io.out
        .write_all(render_rows(args.format, &rows).as_bytes())?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_and_json_show_who_did_what_when() {
        let rows = vec![AuditRow::from(&pb::AuditRecord {
            unix_ms: 1_796_292_000_000,
            actor: "pxfleet://user/alice?role=operator".into(),
            action: "output_sensitive".into(),
            target: "dev".into(),
            detail: String::new(),
        })];
        let t = render_rows(ListFormat::Table, &rows);
        assert!(t.contains("user/alice?role=operator"), "{t}");
        assert!(t.contains("output_sensitive") && t.contains("2026-"), "{t}");
        let j: serde_json::Value =
            serde_json::from_str(&render_rows(ListFormat::Json, &rows)).unwrap();
        assert_eq!(j[0]["action"], "output_sensitive");
        assert_eq!(j[0]["unix_ms"], 1_796_292_000_000i64);
        assert_eq!(render_rows(ListFormat::Table, &[]), "No audit entries.\n");
    }

    #[test]
    fn since_takes_a_duration_or_a_time() {
        let t = crate::args::parse_since("2026-12-03T08:00:00Z").unwrap();
        assert_eq!(
            t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs(),
            1_796_284_800
        );
        let ago = crate::args::parse_since("2h").unwrap();
        assert!(ago < pxfleet_common::Clock::system().system_time());
        let err = crate::args::parse_since("yesterday").unwrap_err();
        assert!(err.contains("RFC 3339"), "{err}");
    }
}
