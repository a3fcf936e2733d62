//! Pure parsers for what pct, pvesh, pvesm and pveam print, and printers for the property strings they take.
//!
//! No I/O here: every function takes text and returns typed values, and each is tested on the captured
//! examples (`tests/fixtures/`, copied from `../shared/pve/examples/`). Tolerant where PVE is loose
//! (CONTRACT §4.1): numbers may be JSON numbers or strings, array order is arbitrary, `interfaces` of a
//! stopped CT is `null`.

pub mod config;
pub mod json;
pub mod propstr;
pub mod text;
pub mod upid;

pub use config::ContainerConfig;
pub use json::*;
pub use propstr::{
    disk_size, format_size, parse_bool, parse_size, Features, MountPoint, NetConfig, Startup,
};
pub use text::*;
pub use upid::Upid;

/// Output that does not have the expected shape.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse {what}: {detail}")]
pub struct ParseError {
    /// What was being parsed (`pct list`, `net property string`, `GET /nodes/{node}/lxc`, ...).
    pub what: String,
    pub detail: String,
}

impl ParseError {
    pub fn new(what: impl Into<String>, detail: impl Into<String>) -> Self {
        ParseError {
            what: what.into(),
            detail: detail.into(),
        }
    }
}

/// Takes the JSON document from `pvesh --output-format json` stdout: task-returning calls print the task log
/// first, so the JSON is the last non-empty line (CONTRACT §4.1). `json-pretty` output (several lines starting
/// with `[`/`{`) is accepted too.
pub fn json_payload(stdout: &str) -> &str {
    let trimmed = stdout.trim_end();
    if trimmed.is_empty() {
        return trimmed;
    }
    // Pretty output: the document begins at the last line that starts in column 0 with `[` or `{`.
    let last = trimmed.lines().last().unwrap_or("");
    if last == "]" || last == "}" {
        let mut offset = 0;
        let mut start = 0;
        for line in trimmed.split_inclusive('\n') {
            if line.starts_with('[') || line.starts_with('{') {
                start = offset;
            }
            offset += line.len();
        }
        return &trimmed[start..];
    }
    last
}
