//! `pxctl plan FILE` against the controller (the offline form lives in [`crate::plan`]): sends the fleet
//! and its files, prints the diagnostics or renders the returned plan, optionally saves it (`--out`) for
//! `pxctl submit PLAN.json`. Exit status: 1 on error; with `--detailed-exitcode` 0 no changes, 2 changes.

use std::path::Path;

use pxfleet_proto::v1 as pb;
use pxfleet_spec::plan::Plan;

use crate::args::PlanArgs;
use crate::client::Client;
use crate::error::{CliError, Result};
use crate::plan::{render_plan, EXIT_CHANGES, EXIT_NO_CHANGES};
use crate::source::{FleetSource, SavedPlan, SAVED_PLAN_VERSION};
use crate::term::Io;

/// A plan the controller computed.
#[derive(Debug, Clone)]
pub struct RemotePlan {
    pub fleet: String,
    pub base_revision: u64,
    pub has_changes: bool,
    pub plan: Plan,
    /// The fleet's policies evaluated by the controller (`None`: it names none).
    pub policy: Option<pb::PolicyReport>,
}

/// Asks the controller to plan `src`; diagnostics go to `io.err` and errors among them fail the call.
pub async fn fetch(
    client: &mut Client,
    src: &FleetSource,
    destroy: bool,
    io: &mut Io<'_>,
) -> Result<RemotePlan> {
    let resp = client
        .api
        .plan(pb::PlanRequest {
            file_name: src.file_name.clone(),
            source: src.source.clone(),
            files: src.files.clone().into_iter().collect(),
            destroy,
        })
        .await?
        .into_inner();
    let errors = super::print_diagnostics(io.err, &resp.diagnostics)?;
    if errors > 0 || resp.plan_json.is_empty() {
        return Err(CliError::Invalid {
            file: src.file_name.clone(),
            count: errors.max(1),
        });
    }
    let plan = pxfleet_spec::render::json::parse(&resp.plan_json).map_err(|e| {
        CliError::Rpc(Box::new(tonic::Status::internal(format!(
            "the controller sent a plan this pxctl cannot read: {e}"
        ))))
    })?;
    Ok(RemotePlan {
        fleet: resp.fleet,
        base_revision: resp.base_revision,
        has_changes: resp.has_changes || !plan.is_empty(),
        plan,
        policy: resp.policy,
    })
}

pub async fn run(client: &mut Client, args: &PlanArgs, io: &mut Io<'_>) -> Result<u8> {
    let src = FleetSource::read(&args.file)?;
    let rp = fetch(client, &src, args.destroy, io).await?;
    io.out
        .write_all(render_plan(&rp.plan, args.output, io.colour).as_bytes())?;
    // Policy results under the plan (on stderr for JSON, whose stdout stays the plan document); a denial
    // makes the plan fail (exit 1): the controller would refuse to submit it.
    if let Some(report) = &rp.policy {
        let text = crate::policy::render(report, args.output);
        match args.output {
            crate::plan::OutputFormat::Json => io.err.write_all(text.as_bytes())?,
            _ => io.out.write_all(text.as_bytes())?,
        }
    }
    let denied = rp.policy.as_ref().is_some_and(crate::policy::denied);
    if let Some(out) = &args.out {
        save(out, &src, &rp)?;
        writeln!(
            io.err,
            "Saved the plan to {}; apply exactly it with: pxctl submit {}",
            out.display(),
            out.display()
        )?;
    }
    if denied {
        return Err(CliError::PolicyDenied {
            fleet: rp.fleet.clone(),
        });
    }
    Ok(if args.detailed_exitcode && rp.has_changes {
        EXIT_CHANGES
    } else {
        EXIT_NO_CHANGES
    })
}

/// Writes a [`SavedPlan`] (no fleet text, hence no secrets; key files mode 0600 not needed).
pub fn save(path: &Path, src: &FleetSource, rp: &RemotePlan) -> Result<()> {
    let abs =
        std::fs::canonicalize(&src.file_name).unwrap_or_else(|_| src.file_name.clone().into());
    let saved = SavedPlan {
        pxfleet_saved_plan: SAVED_PLAN_VERSION,
        fleet: rp.fleet.clone(),
        base_revision: rp.base_revision,
        file_name: src.file_name.clone(),
        path: abs,
        inputs_sha256: src.digest(),
        plan: serde_json::to_value(&rp.plan).unwrap_or_default(),
    };
    let text = crate::render::json(&saved);
    std::fs::write(path, text).map_err(|source| CliError::Io {
        action: "writing saved plan",
        path: path.to_path_buf(),
        source,
    })
}
