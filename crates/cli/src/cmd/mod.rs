//! The client commands, one module each; every command is an async function taking a [`Client`], its
//! arguments and an [`Io`](crate::term::Io), returning the process exit status (or a [`CliError`]).

pub mod adopt;
pub mod audit;
pub mod backup;
pub mod describe;
pub mod destroy;
pub mod drain;
pub mod get;
pub mod grant;
pub mod history;
pub mod node;
pub mod output;
pub mod policy;
pub mod power;
pub mod remote_plan;
pub mod snapshot;
pub mod submit;
pub mod user;

use pxfleet_proto::v1 as pb;

use crate::client::Client;
use crate::error::{CliError, Result};

/// The fleet a command is about: the one given, else the only one the controller knows.
pub async fn resolve_fleet(client: &mut Client, given: Option<&str>) -> Result<String> {
    if let Some(f) = given {
        return Ok(f.to_string());
    }
    let fleets = client
        .api
        .get_fleets(pb::GetFleetsRequest {})
        .await?
        .into_inner()
        .fleets;
    match fleets.as_slice() {
        [] => Err(CliError::Usage(
            "the controller has no fleets yet; submit one with `pxctl submit fleet.yaml`".into(),
        )),
        [one] => Ok(one.name.clone()),
        many => Err(CliError::Usage(format!(
            "there are several fleets ({}); pass --fleet NAME",
            many.iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Prints a response's diagnostics (errors and warnings) on `err`; returns how many were errors.
pub fn print_diagnostics(err: &mut dyn std::io::Write, diags: &[pb::Diagnostic]) -> Result<usize> {
    let mut errors = 0;
    for d in diags {
        let is_error = d.severity != pb::Severity::Warning as i32;
        errors += usize::from(is_error);
        let mut line = String::new();
        if !d.file.is_empty() {
            line.push_str(&d.file);
            if d.line > 0 {
                line.push_str(&format!(":{}:{}", d.line, d.column.max(1)));
            }
            line.push_str(": ");
        }
        if !is_error {
            line.push_str("warning: ");
        }
        if !d.field.is_empty() {
            line.push_str(&d.field);
            line.push_str(": ");
        }
        line.push_str(&d.message);
        writeln!(err, "{}", crate::render::printable(&line))?;
    }
    Ok(errors)
}
