//! Where an e2e scenario's seconds go: reads the agents' logs (every PVE command with its start and end, logged
//! by crates/pve's runner at debug; the executor's "operation started" / "operation succeeded" lines) and what the
//! scenario saw itself (when the controller reported each container running, when it answered ssh), and prints a
//! per-container, per-node table: seed, `pct create`, `pct start`, the address wait, ssh-ready, and the node's own
//! PVE command time next to the wall time.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// One PVE command an agent ran: seconds since the scenario's t0.
#[derive(Debug, Clone, PartialEq)]
pub struct CmdRun {
    pub command: String,
    pub start: f64,
    pub end: f64,
}

impl CmdRun {
    pub fn secs(&self) -> f64 {
        self.end - self.start
    }
    /// `pct create`, `pvesh get`, ...: the tool and its first word.
    pub fn kind(&self) -> String {
        let mut w = self.command.split_whitespace();
        let tool = w.next().unwrap_or("").rsplit('/').next().unwrap_or("");
        format!("{tool} {}", w.next().unwrap_or(""))
    }
    /// The vm_id the command is about (`pct X VMID`, or `/lxc/VMID/` in a pvesh path).
    pub fn vmid(&self) -> Option<u32> {
        let words: Vec<&str> = self.command.split_whitespace().collect();
        if words.first().is_some_and(|t| t.ends_with("pct")) {
            return words.get(2).and_then(|v| v.parse().ok());
        }
        let i = self.command.find("/lxc/")?;
        let rest = &self.command[i + 5..];
        rest.split(['/', ' ']).next()?.parse().ok()
    }
}

/// One operation an agent ran.
#[derive(Debug, Clone, PartialEq)]
pub struct OpRun {
    pub op_id: String,
    pub kind: String,
    pub vmid: Option<u32>,
    pub start: f64,
    pub end: Option<f64>,
}

/// What one agent's log says, times in seconds since t0.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentLog {
    pub commands: Vec<CmdRun>,
    pub ops: Vec<OpRun>,
}

/// Seconds of `ts` (RFC 3339) after `t0`.
fn secs_since(ts: &str, t0: OffsetDateTime) -> Option<f64> {
    let t = OffsetDateTime::parse(ts, &Rfc3339).ok()?;
    Some((t - t0).as_seconds_f64())
}

/// The value of `key=` in a log line, up to the next ` word=` (values of the runner's `command=` hold spaces).
fn field<'a>(line: &'a str, key: &str, next: &[&str]) -> Option<&'a str> {
    let start = line.find(&format!(" {key}="))? + key.len() + 2;
    let rest = &line[start..];
    let end = next
        .iter()
        .filter_map(|n| rest.find(&format!(" {n}=")))
        .min()
        .unwrap_or(rest.len());
    // tracing prints a `&str` field with its Debug form: quoted
    let v = rest[..end].trim();
    Some(
        v.strip_prefix('"')
            .and_then(|x| x.strip_suffix('"'))
            .unwrap_or(v),
    )
}

fn first_word(v: Option<&str>) -> &str {
    v.and_then(|v| v.split_whitespace().next()).unwrap_or("")
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses an agent's log (tracing's text format: `TIMESTAMP LEVEL target: message fields`). A command's
/// "running" line is paired with the next "finished" line of the same command text.
pub fn parse_agent_log(text: &str, t0: OffsetDateTime) -> AgentLog {
    let mut log = AgentLog::default();
    let mut open: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for raw in text.lines() {
        let line = strip_ansi(raw);
        let Some((ts, _)) = line.split_once(' ') else {
            continue;
        };
        let Some(at) = secs_since(ts, t0) else {
            continue;
        };
        if line.contains("pxfleet_pve::runner: running ") {
            if let Some(c) = field(&line, "command", &["timeout"]) {
                open.entry(c.to_string()).or_default().push(at);
            }
        } else if line.contains("pxfleet_pve::runner: finished ") {
            if let Some(c) = field(&line, "command", &["status"]) {
                if let Some(starts) = open.get_mut(c) {
                    if !starts.is_empty() {
                        let start = starts.remove(0);
                        log.commands.push(CmdRun {
                            command: c.to_string(),
                            start,
                            end: at,
                        });
                    }
                }
            }
        } else if line.contains(": operation started ") {
            let op_id = first_word(field(&line, "op_id", &["kind", "vmid"]));
            let kind = field(&line, "kind", &["vmid"]).unwrap_or("");
            let vmid = field(&line, "vmid", &[])
                .and_then(|v| v.strip_prefix("Some(")?.strip_suffix(')')?.parse().ok());
            log.ops.push(OpRun {
                op_id: op_id.into(),
                kind: kind.into(),
                vmid,
                start: at,
                end: None,
            });
        } else if line.contains(": operation succeeded ") {
            // `message = %...` replaces the event's field list tail: the op id is the first word
            let op_id = first_word(field(&line, "op_id", &["message"]));
            if let Some(o) = log
                .ops
                .iter_mut()
                .rev()
                .find(|o| o.op_id == op_id && o.end.is_none())
            {
                o.end = Some(at);
            }
        }
    }
    log.commands.sort_by(|a, b| {
        a.start
            .partial_cmp(&b.start)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    log
}

/// What the scenario itself saw of one container.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub name: String,
    pub node: String,
    pub vmid: u32,
    /// The controller first reported it running with its address.
    pub up: f64,
    /// It first answered ssh with its hostname.
    pub ssh: f64,
}

/// Total length of the union of intervals.
fn union_secs(mut iv: Vec<(f64, f64)>) -> f64 {
    iv.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    let mut total = 0.0;
    let mut cur: Option<(f64, f64)> = None;
    for (s, e) in iv {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    if let Some((cs, ce)) = cur {
        total += ce - cs;
    }
    total
}

/// The table, as `E2E_BENCH` lines (also the lines written to PXFLEET_E2E_BENCH_OUT). `wall` is t0 to the last
/// container ssh-ready; `logs` maps node name to its parsed agent log.
pub fn report(wall: f64, seen: &[Seen], logs: &BTreeMap<String, AgentLog>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "E2E_BENCH breakdown (seconds since pxctl submit; step = start+duration)"
    );
    let _ = writeln!(
        out,
        "E2E_BENCH {:<7} {:<5} {:>5} {:>6} {:>13} {:>13} {:>11} {:>6} {:>6} {:>6}",
        "name", "node", "vmid", "op", "pct create", "pct start", "addr wait", "done", "up", "ssh"
    );
    let mut sorted: Vec<&Seen> = seen.iter().collect();
    sorted.sort_by(|a, b| {
        a.ssh
            .partial_cmp(&b.ssh)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    for s in &sorted {
        let Some(log) = logs.get(&s.node) else {
            continue;
        };
        let mine: Vec<&CmdRun> = log
            .commands
            .iter()
            .filter(|c| c.vmid() == Some(s.vmid))
            .collect();
        let step = |kind: &str| {
            mine.iter()
                .find(|c| c.kind() == kind)
                .map(|c| format!("{:.2}+{:.2}", c.start, c.secs()))
                .unwrap_or_else(|| "-".into())
        };
        let op = log
            .ops
            .iter()
            .find(|o| o.kind == "create" && o.vmid == Some(s.vmid));
        let started_end = mine.iter().find(|c| c.kind() == "pct start").map(|c| c.end);
        let polls: Vec<&&CmdRun> = mine
            .iter()
            .filter(|c| c.command.contains("/interfaces"))
            .filter(|c| started_end.is_some_and(|e| c.start >= e))
            .filter(|c| op.and_then(|o| o.end).is_none_or(|e| c.end <= e))
            .collect();
        let addr = match (started_end, polls.last()) {
            (Some(s0), Some(last)) => format!("{:.2}/{}p", last.end - s0, polls.len()),
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "E2E_BENCH {:<7} {:<5} {:>5} {:>6} {:>13} {:>13} {:>11} {:>6} {:>6.2} {:>6.2}",
            s.name,
            s.node,
            s.vmid,
            op.map(|o| format!("{:.2}", o.start))
                .unwrap_or_else(|| "-".into()),
            step("pct create"),
            step("pct start"),
            addr,
            op.and_then(|o| o.end)
                .map(|e| format!("{e:.2}"))
                .unwrap_or_else(|| "-".into()),
            s.up,
            s.ssh,
        );
    }
    for (node, log) in logs {
        let seeds: Vec<String> = log
            .ops
            .iter()
            .filter(|o| o.kind == "seed-template")
            .map(|o| match o.end {
                Some(e) => format!("{:.2}+{:.2}", o.start, e - o.start),
                None => format!("{:.2}+?", o.start),
            })
            .collect();
        let in_wall: Vec<&CmdRun> = log
            .commands
            .iter()
            .filter(|c| c.start >= 0.0 && c.end <= wall)
            .collect();
        let mut by_kind: BTreeMap<String, (usize, f64)> = BTreeMap::new();
        for c in &in_wall {
            let e = by_kind.entry(c.kind()).or_default();
            e.0 += 1;
            e.1 += c.secs();
        }
        let create_start: Vec<(f64, f64)> = in_wall
            .iter()
            .filter(|c| matches!(c.kind().as_str(), "pct create" | "pct start"))
            .map(|c| (c.start, c.end))
            .collect();
        let own: f64 = create_start.iter().map(|(s, e)| e - s).sum();
        let busy = union_secs(create_start);
        let all = union_secs(in_wall.iter().map(|c| (c.start, c.end)).collect());
        let first = in_wall.first().map(|c| c.start).unwrap_or(0.0);
        let _ = writeln!(
            out,
            "E2E_BENCH node {node}: seed {} | first command at {first:.2} | pct create+start: sum {own:.2}, \
             busy (union) {busy:.2} | any pve command busy {all:.2} | wall {wall:.2}",
            if seeds.is_empty() {
                "-".into()
            } else {
                seeds.join(",")
            },
        );
        let kinds: Vec<String> = by_kind
            .iter()
            .map(|(k, (n, s))| format!("{k} {n}x {s:.2}"))
            .collect();
        let _ = writeln!(out, "E2E_BENCH node {node} commands: {}", kinds.join(" | "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
2026-12-04T14:00:01.000000Z  INFO pxfleet_agent::executor: operation started op_id=op-1 kind=\"create\" vmid=Some(101)
2026-12-04T14:00:01.100000Z DEBUG pxfleet_pve::runner: running command=/n/bin/pct create 101 local:vztmpl/t.tar.zst --hostname a timeout=600s
2026-12-04T14:00:02.100000Z DEBUG pxfleet_pve::runner: running command=/n/bin/pct list timeout=30s
2026-12-04T14:00:02.300000Z DEBUG pxfleet_pve::runner: finished command=/n/bin/pct list status=Some(0)
2026-12-04T14:00:03.600000Z DEBUG pxfleet_pve::runner: finished command=/n/bin/pct create 101 local:vztmpl/t.tar.zst --hostname a status=Some(0)
2026-12-04T14:00:03.700000Z DEBUG pxfleet_pve::runner: running command=/n/bin/pct start 101 timeout=90s
2026-12-04T14:00:04.200000Z DEBUG pxfleet_pve::runner: finished command=/n/bin/pct start 101 status=Some(0)
2026-12-04T14:00:04.300000Z DEBUG pxfleet_pve::runner: running command=/n/bin/pvesh get /nodes/n1/lxc/101/interfaces --output-format json timeout=30s
2026-12-04T14:00:04.400000Z DEBUG pxfleet_pve::runner: finished command=/n/bin/pvesh get /nodes/n1/lxc/101/interfaces --output-format json status=Some(0)
2026-12-04T14:00:04.500000Z  INFO pxfleet_agent::executor: operation succeeded op_id=op-1 created
";

    fn t0() -> OffsetDateTime {
        OffsetDateTime::parse("2026-12-04T14:00:00Z", &Rfc3339).expect("t0")
    }

    #[test]
    fn commands_and_operations_are_paired_and_timed() {
        let log = parse_agent_log(LOG, t0());
        let kinds: Vec<String> = log.commands.iter().map(|c| c.kind()).collect();
        assert_eq!(kinds, ["pct create", "pct list", "pct start", "pvesh get"]);
        let create = &log.commands[0];
        assert_eq!(create.vmid(), Some(101));
        assert!((create.start - 1.1).abs() < 1e-6 && (create.secs() - 2.5).abs() < 1e-6);
        assert_eq!(log.commands[1].vmid(), None);
        assert_eq!(log.commands[3].vmid(), Some(101));
        assert_eq!(log.ops.len(), 1);
        assert_eq!(log.ops[0].vmid, Some(101));
        assert_eq!(log.ops[0].kind, "create");
        assert!((log.ops[0].end.expect("end") - 4.5).abs() < 1e-6);
    }

    #[test]
    fn the_table_names_each_step_and_the_node_sums() {
        let logs: BTreeMap<String, AgentLog> =
            [("n1".to_string(), parse_agent_log(LOG, t0()))].into();
        let seen = [Seen {
            name: "a".into(),
            node: "n1".into(),
            vmid: 101,
            up: 4.8,
            ssh: 5.0,
        }];
        let t = report(5.0, &seen, &logs);
        let row = t.lines().find(|l| l.contains(" a ")).expect("row for a");
        assert!(row.contains("1.10+2.50"), "{row}");
        assert!(row.contains("3.70+0.50"), "{row}");
        assert!(row.contains("0.20/1p"), "{row}");
        assert!(
            t.contains("pct create+start: sum 3.00, busy (union) 3.00"),
            "{t}"
        );
        assert!(t.contains("pct list 1x 0.20"), "{t}");
    }

    #[test]
    fn ansi_colours_are_ignored() {
        let coloured = "\u{1b}[2m2026-12-04T14:00:01.000000Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2mpxfleet_agent::executor\u{1b}[0m\u{1b}[2m:\u{1b}[0m operation started \u{1b}[3mop_id\u{1b}[0m\u{1b}[2m=\u{1b}[0mop-9 \u{1b}[3mkind\u{1b}[0m\u{1b}[2m=\u{1b}[0mcreate \u{1b}[3mvmid\u{1b}[0m\u{1b}[2m=\u{1b}[0mSome(7)";
        let log = parse_agent_log(coloured, t0());
        assert_eq!(log.ops.len(), 1, "{log:?}");
        assert_eq!(log.ops[0].vmid, Some(7));
    }
}
