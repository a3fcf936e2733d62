//! Worker tasks: UPIDs, task log files (`tasks/<hex>/<UPID>`, last line `TASK OK|WARNINGS: n|ERROR: msg`),
//! the synchronous CLI behaviour (log lines on stdout, the error as one line on stderr) and task status.
// pvesim simulates PVE: its timestamps and lock timeouts are the simulated node's real time
#![allow(clippy::disallowed_methods)]

use std::fs;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::error::{Result, SimError};
use crate::node::Node;

/// Lines written by a running task.
#[derive(Debug, Default)]
pub struct TaskLog {
    pub lines: Vec<String>,
    pub warnings: usize,
}

impl TaskLog {
    pub fn line(&mut self, s: impl Into<String>) {
        self.lines.push(s.into());
    }

    /// `log_warn`: a `WARN: ` line that makes the task end with warnings.
    pub fn warn(&mut self, s: impl AsRef<str>) {
        self.warnings += 1;
        self.lines.push(format!("WARN: {}", s.as_ref()));
    }
}

/// How a task ended.
#[derive(Debug, Clone)]
pub struct TaskOutcome {
    pub upid: String,
    pub error: Option<String>,
    pub warnings: usize,
}

impl TaskOutcome {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn pstart() -> u64 {
    let ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    ((ns / 10_000_000) as u64) & 0xFFFF_FFFF
}

/// Builds a UPID.
pub fn make_upid(node: &str, ttype: &str, id: &str) -> (String, u64) {
    let start = now();
    let upid = format!(
        "UPID:{node}:{:08X}:{:08X}:{:08X}:{ttype}:{id}:root@pam:",
        std::process::id(),
        pstart(),
        start
    );
    (upid, start)
}

/// Parsed UPID fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Upid {
    pub node: String,
    pub pid: u64,
    pub pstart: u64,
    pub starttime: u64,
    pub ttype: String,
    pub id: String,
    pub user: String,
}

/// Parses a UPID with PVE's regex.
pub fn parse_upid(upid: &str) -> Option<Upid> {
    let re = regex::Regex::new(
        r"^UPID:([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):([^:\s/]+):([^:\s/]*):([^:\s/]+):$",
    )
    .ok()?;
    let c = re.captures(upid)?;
    let hex = |i: usize| u64::from_str_radix(&c[i], 16).ok();
    Some(Upid {
        node: c[1].to_string(),
        pid: hex(3)?,
        pstart: hex(4)?,
        starttime: hex(5)?,
        ttype: c[6].to_string(),
        id: c[7].to_string(),
        user: c[8].to_string(),
    })
}

fn log_path(node: &Node, upid: &str, starttime: u64) -> PathBuf {
    node.state
        .join("tasks")
        .join(format!("{:X}", starttime & 0xF))
        .join(upid)
}

/// Runs `f` as a synchronous worker task: the log file is created first (the task shows as running), the
/// task's lines go to `out` (stdout) and the file, and the final status line is appended.
pub fn run_task(
    node: &Node,
    out: &mut String,
    ttype: &str,
    id: &str,
    f: impl FnOnce(&mut TaskLog) -> Result<()>,
) -> Result<TaskOutcome> {
    let (upid, start) = make_upid(node.name(), ttype, id);
    let path = log_path(node, &upid, start);
    if let Some(d) = path.parent() {
        fs::create_dir_all(d).map_err(|e| SimError::io(d, e))?;
    }
    fs::write(&path, "").map_err(|e| SimError::io(&path, e))?;
    let mut log = TaskLog::default();
    let res = f(&mut log);
    let mut text = String::new();
    for l in &log.lines {
        out.push_str(l);
        out.push('\n');
        text.push_str(l);
        text.push('\n');
    }
    let error = match res {
        Ok(()) => None,
        Err(SimError::Die(m)) => Some(m),
        Err(SimError::Param { errors }) => Some(
            SimError::Param { errors }
                .render(None)
                .trim_end()
                .to_string(),
        ),
        Err(e @ (SimError::Io { .. } | SimError::State { .. } | SimError::Usage(_))) => {
            return Err(e)
        }
        Err(other) => Some(other.to_string()),
    };
    match &error {
        Some(m) => text.push_str(&format!("TASK ERROR: {m}\n")),
        None if log.warnings > 0 => text.push_str(&format!("TASK WARNINGS: {}\n", log.warnings)),
        None => text.push_str("TASK OK\n"),
    }
    fs::write(&path, text).map_err(|e| SimError::io(&path, e))?;
    Ok(TaskOutcome {
        upid,
        error,
        warnings: log.warnings,
    })
}

/// What the CLI prints on stderr after a task: the error as one line, or the warning count.
pub fn stderr_after(t: &TaskOutcome) -> String {
    match &t.error {
        Some(m) => format!("{}\n", m.replace('\n', " ").trim_end()),
        None if t.warnings > 0 => format!("Task finished with {} warning(s)!\n", t.warnings),
        None => String::new(),
    }
}

fn read_log(node: &Node, upid: &str) -> Result<(Upid, String)> {
    let u =
        parse_upid(upid).ok_or_else(|| SimError::param("upid", "unable to parse worker upid"))?;
    let path = log_path(node, upid, u.starttime);
    let text =
        fs::read_to_string(&path).map_err(|_| SimError::die(format!("no such task '{upid}'")))?;
    Ok((u, text))
}

/// `GET /nodes/{node}/tasks/{upid}/status`
pub fn status(node: &Node, upid: &str) -> Result<Value> {
    let (u, text) = read_log(node, upid)?;
    let last = text.lines().last().unwrap_or("");
    let mut v = json!({
        "upid": upid, "node": u.node, "pid": u.pid, "pstart": u.pstart, "starttime": u.starttime,
        "type": u.ttype, "id": u.id, "user": u.user, "status": "running",
    });
    let exit = if last == "TASK OK" {
        Some("OK".to_string())
    } else if let Some(w) = last.strip_prefix("TASK WARNINGS: ") {
        Some(format!("WARNINGS: {w}"))
    } else {
        last.strip_prefix("TASK ERROR: ").map(str::to_string)
    };
    if let Some(e) = exit {
        v["status"] = json!("stopped");
        v["exitstatus"] = json!(e);
    }
    Ok(v)
}

/// `GET /nodes/{node}/tasks/{upid}/log`
pub fn log(node: &Node, upid: &str, start: usize, limit: usize) -> Result<Value> {
    let (_, text) = read_log(node, upid)?;
    let items: Vec<Value> = text
        .lines()
        .enumerate()
        .skip(start)
        .take(limit)
        .map(|(i, l)| json!({"n": i + 1, "t": l}))
        .collect();
    Ok(Value::Array(items))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upid_roundtrip() {
        let u = parse_upid("UPID:pve1:0003C8E1:0071A2B4:6711F0A2:vzcreate:103:root@pam:").unwrap();
        assert_eq!(u.pid, 0x3C8E1);
        assert_eq!(u.ttype, "vzcreate");
        assert_eq!(u.id, "103");
        let (upid, _) = make_upid("pve1", "vzstart", "100");
        assert!(parse_upid(&upid).is_some(), "{upid}");
    }
}
