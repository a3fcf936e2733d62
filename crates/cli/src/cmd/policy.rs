//! `pxctl policy add|list|show|remove`: Rego policies an admin installs on the controller (see `pxctl policy
//! --help` and docs/security.md). The controller compiles a policy before it installs it.

use pxfleet_proto::v1 as pb;
use serde::Serialize;

use crate::args::{ListFormat, PolicyCommand};
use crate::client::Client;
use crate::error::{CliError, Result};
use crate::render::{self, table::Table};
use crate::term::Io;

/// One installed policy as `list -o json|yaml` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyRow {
    pub name: String,
    pub installed_by: String,
    pub installed: Option<String>,
    pub sha256: String,
}

async fn policies(client: &mut Client) -> Result<Vec<pb::AdminPolicyInfo>> {
    Ok(client
        .api
        .list_policies(pb::ListPoliciesRequest {})
        .await?
        .into_inner()
        .policies)
}

pub async fn run(client: &mut Client, cmd: &PolicyCommand, io: &mut Io<'_>) -> Result<u8> {
    match cmd {
        PolicyCommand::Add { name, file } => {
            let source = std::fs::read_to_string(file).map_err(|source| CliError::Io {
                action: "reading",
                path: file.clone(),
                source,
            })?;
            let p = client
                .api
                .install_policy(pb::InstallPolicyRequest {
                    name: name.clone(),
                    source,
                })
                .await?
                .into_inner();
            writeln!(
                io.out,
                "installed policy admin:{} (sha256 {}): it is evaluated on every submit, destroy, start, stop \
                 and restart from now on",
                p.name, p.sha256
            )?;
        }
        PolicyCommand::List { format } => {
            let rows: Vec<PolicyRow> = policies(client)
                .await?
                .into_iter()
                .map(|p| PolicyRow {
                    installed: render::timestamp(p.installed_unix_ms),
                    name: p.name,
                    installed_by: p.installed_by,
                    sha256: p.sha256,
                })
                .collect();
            let text = match format {
                ListFormat::Json => render::json(&rows),
                ListFormat::Yaml => {
                    render::yaml::to_yaml(&serde_json::to_value(&rows).unwrap_or_default())
                }
                ListFormat::Table if rows.is_empty() => {
                    "No policies. An admin installs one with `pxctl policy add NAME FILE.rego`.\n"
                        .into()
                }
                ListFormat::Table => {
                    let mut t = Table::new(&["NAME", "INSTALLED BY", "INSTALLED", "SHA256"]);
                    for r in &rows {
                        t.row(vec![
                            r.name.clone(),
                            r.installed_by
                                .strip_prefix("pxfleet://")
                                .unwrap_or(&r.installed_by)
                                .to_string(),
                            r.installed.clone().unwrap_or_default(),
                            r.sha256.clone(),
                        ]);
                    }
                    t.render()
                }
            };
            io.out.write_all(text.as_bytes())?;
        }
        PolicyCommand::Show { name } => {
            let p = policies(client)
                .await?
                .into_iter()
                .find(|p| &p.name == name)
                .ok_or_else(|| {
                    CliError::Usage(format!(
                        "there is no policy {name}; `pxctl policy list` shows the installed ones"
                    ))
                })?;
            io.out.write_all(render::printable(&p.source).as_bytes())?;
        }
        PolicyCommand::Remove { name } => {
            let p = client
                .api
                .remove_policy(pb::RemovePolicyRequest { name: name.clone() })
                .await?
                .into_inner();
            writeln!(io.out, "removed policy admin:{}", p.name)?;
        }
    }
    Ok(0)
}
