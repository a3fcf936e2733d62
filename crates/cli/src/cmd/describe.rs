//! `pxctl describe container NAME [--fleet F]`: desired and observed state, drift and recent operations of
//! one container, as text (default), JSON or YAML.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use pxfleet_proto::v1 as pb;
use serde::Serialize;

use crate::args::{DescribeCommand, DescribeContainerArgs, ListFormat};
use crate::client::Client;
use crate::error::{CliError, Result};
use crate::render::{self, power_state, table::Table, ContainerRecord, OperationRecord};
use crate::term::Io;

/// The JSON/YAML form.
#[derive(Debug, Serialize)]
pub struct DescribeRecord {
    pub container: ContainerRecord,
    /// Every address seen at runtime (CIDR or plain).
    pub addresses: Vec<String>,
    pub drift: Vec<String>,
    pub observed: Option<ObservedRecord>,
    pub operations: Vec<OperationRecord>,
    /// The last run of each hook (fleet.yaml `hooks:`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookRecord>,
}

#[derive(Debug, Serialize)]
pub struct HookRecord {
    pub hook: String,
    pub event: String,
    pub status: String,
    pub attempts: String,
    pub last_attempt: Option<String>,
    pub error: Option<String>,
    pub detail: Option<String>,
}

impl From<&pb::HookResult> for HookRecord {
    fn from(h: &pb::HookResult) -> Self {
        HookRecord {
            hook: h.hook.clone(),
            event: h.event.clone(),
            status: h.status.clone(),
            attempts: format!("{}/{}", h.attempts, h.max_attempts),
            last_attempt: render::timestamp(h.last_attempt_unix_ms),
            error: (!h.error.is_empty()).then(|| h.error.clone()),
            detail: (!h.detail.is_empty()).then(|| h.detail.clone()),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ObservedRecord {
    pub power: Option<&'static str>,
    pub lock: Option<String>,
    pub managed: bool,
    pub config: BTreeMap<String, String>,
}

pub async fn run(client: &mut Client, cmd: &DescribeCommand, io: &mut Io<'_>) -> Result<u8> {
    let DescribeCommand::Container(a) = cmd;
    container(client, a, io).await
}

async fn container(client: &mut Client, a: &DescribeContainerArgs, io: &mut Io<'_>) -> Result<u8> {
    let fleet = match &a.fleet {
        Some(f) => f.clone(),
        None => {
            let all = client
                .api
                .get_containers(pb::GetContainersRequest::default())
                .await?
                .into_inner()
                .containers;
            let fleets: Vec<String> = all
                .iter()
                .filter(|c| c.name == a.name)
                .map(|c| c.fleet.clone())
                .collect();
            match fleets.as_slice() {
                [] => {
                    return Err(CliError::Usage(format!(
                        "no container named {:?}; list them with `pxctl get containers`",
                        a.name
                    )))
                }
                [one] => one.clone(),
                many => {
                    return Err(CliError::Usage(format!(
                        "container {:?} exists in fleets {}; pass --fleet NAME",
                        a.name,
                        many.join(", ")
                    )))
                }
            }
        }
    };
    let d = client
        .api
        .describe_container(pb::DescribeContainerRequest {
            fleet,
            name: a.name.clone(),
        })
        .await?
        .into_inner();
    let info = d.info.clone().unwrap_or_default();
    let rec = DescribeRecord {
        container: ContainerRecord::from(&info),
        addresses: info.addresses.clone(),
        drift: d.drift.clone(),
        observed: d.observed.as_ref().map(|o| ObservedRecord {
            power: power_state(o.power),
            lock: (!o.lock.is_empty()).then(|| o.lock.clone()),
            managed: o.managed,
            config: o
                .raw_config
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }),
        operations: d.operations.iter().map(Into::into).collect(),
        hooks: d.hooks.iter().map(Into::into).collect(),
    };
    let text = match a.format {
        ListFormat::Json => render::json(&rec),
        ListFormat::Yaml => render::yaml::to_yaml(&serde_json::to_value(&rec).unwrap_or_default()),
        // a description, an error from the node: nothing in them may drive the terminal
        ListFormat::Table => render::printable(&describe_text(&rec)).into_owned(),
    };
    io.out.write_all(text.as_bytes())?;
    Ok(0)
}

/// The human form: `Key: value` lines, then drift and operations.
pub fn describe_text(r: &DescribeRecord) -> String {
    let c = &r.container;
    let mut s = String::new();
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let mut kv = |k: &str, v: String| {
        let _ = writeln!(s, "{:<12}{v}", format!("{k}:"));
    };
    kv("Name", c.name.clone());
    kv("Fleet", format!("{} (revision {})", c.fleet, c.revision));
    kv("Node", dash(c.node.clone()));
    kv("VM ID", dash(c.vm_id.map(|v| v.to_string())));
    kv("Hostname", c.hostname.clone());
    let power = c
        .power
        .map(|p| format!(" (power: {p})"))
        .unwrap_or_default();
    kv("Status", format!("{}{power}", c.status));
    kv(
        "Addresses",
        if r.addresses.is_empty() {
            "-".into()
        } else {
            r.addresses.join(", ")
        },
    );
    kv("Template", c.template.clone());
    kv(
        "Resources",
        format!(
            "{} cores, {} MiB memory, {} GiB disk",
            c.cores
                .map(|n| n.to_string())
                .unwrap_or_else(|| "all".into()),
            c.memory_mib,
            c.disk_size_gib
        ),
    );
    if let Some(o) = &r.observed {
        if let Some(lock) = &o.lock {
            kv("Lock", lock.clone());
        }
    } else if c.power.is_none() {
        kv("Observed", "not found on its node".into());
    }
    if let Some(e) = &c.error {
        kv("Error", e.clone());
    }
    if !r.drift.is_empty() {
        s.push_str("Drift:\n");
        for d in &r.drift {
            let _ = writeln!(s, "  - {d}");
        }
    }
    if !r.operations.is_empty() {
        s.push_str("Operations:\n");
        let mut t = Table::new(&["op_id", "kind", "state", "attempts", "updated", "detail"]);
        for o in &r.operations {
            t.row(vec![
                o.op_id.clone(),
                o.kind.into(),
                o.state.into(),
                o.attempts.to_string(),
                o.updated.clone().unwrap_or_default(),
                o.error.clone().unwrap_or_else(|| o.reason.clone()),
            ]);
        }
        for line in t.render().lines() {
            let _ = writeln!(s, "  {line}");
        }
    }
    if !r.hooks.is_empty() {
        s.push_str("Hooks:\n");
        let mut t = Table::new(&[
            "hook",
            "event",
            "status",
            "attempts",
            "last attempt",
            "detail",
        ]);
        for h in &r.hooks {
            t.row(vec![
                h.hook.clone(),
                h.event.clone(),
                h.status.clone(),
                h.attempts.clone(),
                h.last_attempt.clone().unwrap_or_default(),
                h.error
                    .clone()
                    .or_else(|| h.detail.clone())
                    .unwrap_or_default(),
            ]);
        }
        for line in t.render().lines() {
            let _ = writeln!(s, "  {line}");
        }
    }
    s
}
