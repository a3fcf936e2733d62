//! `pxctl submit FILE|PLAN.json`: shows the plan, asks unless `-y`, submits (with the revision the plan was
//! computed against, so a concurrent change is refused), then follows progress until every container is
//! running or failed. Exit 0 only when all succeeded.

use std::path::Path;
use std::time::Duration;

use pxfleet_proto::v1 as pb;

use crate::args::SubmitArgs;
use crate::client::Client;
use crate::error::{CliError, Result};
use crate::plan::{render_plan, OutputFormat};
use crate::progress::{follow, Follow};
use crate::source::{FleetSource, SavedPlan};
use crate::term::Io;

use super::remote_plan::{fetch, RemotePlan};

pub async fn run(client: &mut Client, a: &SubmitArgs, io: &mut Io<'_>) -> Result<u8> {
    let path = Path::new(&a.file);
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Io {
        action: "reading",
        path: path.to_path_buf(),
        source,
    })?;
    // A saved plan: apply exactly it. A fleet file: plan now, show, apply that.
    let (src, rp, plan_json) = match SavedPlan::parse(path, &text)? {
        Some(saved) => {
            let src = saved.fleet_source(path)?;
            let plan = pxfleet_spec::render::json::parse(&saved.plan.to_string()).map_err(|e| {
                CliError::SavedPlan {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                }
            })?;
            let rp = RemotePlan {
                fleet: saved.fleet.clone(),
                base_revision: saved.base_revision,
                has_changes: !plan.is_empty(),
                plan,
                policy: None,
            };
            (src, rp, saved.plan.to_string())
        }
        None => {
            let src = FleetSource::from_text(&a.file.to_string_lossy(), text);
            let rp = fetch(client, &src, false, io).await?;
            (src, rp, String::new())
        }
    };
    io.out
        .write_all(render_plan(&rp.plan, OutputFormat::Text, io.colour).as_bytes())?;
    if let Some(report) = &rp.policy {
        io.out
            .write_all(crate::policy::render(report, OutputFormat::Text).as_bytes())?;
    }
    let mut op_ids = Default::default();
    if rp.has_changes || a.retry_failed {
        if !a.yes && rp.has_changes {
            io.out.flush()?;
            let q = format!("Apply these changes to fleet {}?", rp.fleet);
            if !io.confirm.confirm(&q, "-y")? {
                return Err(CliError::NotConfirmed(
                    "submit cancelled; nothing was changed".into(),
                ));
            }
        }
        let resp = client
            .api
            .submit(pb::SubmitRequest {
                file_name: src.file_name.clone(),
                source: src.source.clone(),
                files: src.files.clone().into_iter().collect(),
                expected_revision: Some(rp.base_revision),
                plan_json,
                retry_failed: a.retry_failed,
                // shown above; the answer need not carry it again
                omit_plan: true,
            })
            .await?
            .into_inner();
        let errors = super::print_diagnostics(io.err, &resp.diagnostics)?;
        if errors > 0 || resp.revision == 0 {
            return Err(CliError::Invalid {
                file: src.file_name.clone(),
                count: errors.max(1),
            });
        }
        writeln!(
            io.out,
            "Submitted fleet {} revision {} ({} operation(s)).",
            resp.fleet,
            resp.revision,
            resp.operations.len()
        )?;
        op_ids = resp.operations.iter().map(|o| o.op_id.clone()).collect();
    } else {
        writeln!(
            io.out,
            "Nothing to submit; checking that every container is running."
        )?;
    }
    if a.no_wait {
        return Ok(0);
    }
    let f = Follow {
        fleet: rp.fleet.clone(),
        op_ids,
        only: None,
        destroying: false,
        expect_activity: rp.has_changes,
        timeout: a.timeout,
        poll: Duration::from_millis(500),
        want_stopped: want_stopped(&src),
    };
    let outcome = follow(client, &f, io.out).await?;
    Ok(if outcome.success(false, &f.want_stopped) {
        0
    } else {
        1
    })
}

/// The containers the file wants stopped (`state: stopped`).
fn want_stopped(src: &FleetSource) -> std::collections::BTreeSet<String> {
    let files = src
        .files
        .iter()
        .fold(pxfleet_spec::MemFiles::default(), |m, (k, v)| {
            m.with(k.clone(), v.clone())
        });
    pxfleet_spec::parse_fleet(&src.file_name, &src.source, &files)
        .map(|f| {
            f.containers
                .into_values()
                .filter(|c| !c.state.is_running())
                .map(|c| c.name)
                .collect()
        })
        .unwrap_or_default()
}
