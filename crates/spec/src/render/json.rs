//! The JSON rendering: the [`Plan`] serialised with serde, pretty-printed, with a trailing newline.
//! The document's schema is described in `docs/plan-json.md` and versioned by `schema_version`.

use crate::plan::Plan;

/// Renders `plan` as pretty JSON. Serialising these types cannot fail (string keys, finite numbers only:
/// the planner never produces NaN), so a failure is reported as a JSON error object rather than a panic.
pub fn render(plan: &Plan) -> String {
    match serde_json::to_string_pretty(plan) {
        Ok(mut s) => {
            s.push('\n');
            s
        }
        Err(e) => format!(
            "{{\"error\": {}}}\n",
            serde_json::Value::String(e.to_string())
        ),
    }
}

/// Reads a plan back (for `pxctl submit plan.json`), refusing schema versions this build does not know.
pub fn parse(text: &str) -> Result<Plan, PlanJsonError> {
    let plan: Plan = serde_json::from_str(text).map_err(|e| PlanJsonError::Syntax {
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    if plan.schema_version != crate::plan::SCHEMA_VERSION {
        return Err(PlanJsonError::Version {
            found: plan.schema_version,
            expected: crate::plan::SCHEMA_VERSION,
        });
    }
    Ok(plan)
}

/// Why a plan document could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PlanJsonError {
    #[error("plan JSON {line}:{column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("plan JSON has schema_version {found}; this pxfleet reads version {expected}: plan again with this version")]
    Version { found: u32, expected: u32 },
}
