//! Resource figures of a process from /proc: peak resident memory (`VmHWM`) and CPU time (`utime + stime`).

use std::path::PathBuf;
use std::time::Duration;

/// Why a /proc file could not be read or understood.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
}

/// Peak resident set size of `pid` in bytes (`VmHWM` in /proc/PID/status).
pub fn peak_rss_bytes(pid: u32) -> Result<u64, ProcError> {
    let path = PathBuf::from(format!("/proc/{pid}/status"));
    let text = std::fs::read_to_string(&path).map_err(|source| ProcError::Read {
        path: path.clone(),
        source,
    })?;
    parse_status_kib(&text, "VmHWM:")
        .map(|kib| kib * 1024)
        .ok_or_else(|| ProcError::Parse {
            path,
            message: "no VmHWM line".into(),
        })
}

/// The value in KiB of a `Key:   1234 kB` line of /proc/PID/status.
pub fn parse_status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU time (user + system) `pid` has used so far.
pub fn cpu_time(pid: u32) -> Result<Duration, ProcError> {
    let path = PathBuf::from(format!("/proc/{pid}/stat"));
    let text = std::fs::read_to_string(&path).map_err(|source| ProcError::Read {
        path: path.clone(),
        source,
    })?;
    let ticks = parse_stat_ticks(&text).ok_or_else(|| ProcError::Parse {
        path,
        message: "cannot find utime and stime".into(),
    })?;
    Ok(ticks_to_duration(ticks, clock_ticks_per_second()))
}

/// utime + stime in clock ticks from the text of /proc/PID/stat (fields 14 and 15; the command name, field 2,
/// is in parentheses and may hold spaces, so fields are counted after its closing parenthesis).
pub fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14 -> index 11, stime index 12
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second()
}

fn ticks_to_duration(ticks: u64, per_second: u64) -> Duration {
    let per_second = per_second.max(1);
    Duration::from_secs(ticks / per_second)
        + Duration::from_nanos((ticks % per_second) * 1_000_000_000 / per_second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_spaces_in_the_name() {
        let stat = "1234 (px con) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 9 0 100 0 0";
        assert_eq!(parse_stat_ticks(stat), Some(325));
        assert_eq!(ticks_to_duration(325, 100), Duration::from_millis(3250));
    }

    #[test]
    fn parses_status_lines() {
        let status =
            "Name:\tpxcontroller\nVmPeak:\t  900 kB\nVmHWM:\t   51234 kB\nVmRSS:\t 40000 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM:"), Some(51234));
        assert_eq!(parse_status_kib(status, "VmSwap:"), None);
    }

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        assert!(peak_rss_bytes(pid).unwrap() > 0);
        cpu_time(pid).unwrap();
    }
}
