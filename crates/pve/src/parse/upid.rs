//! UPIDs (`UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:`, CONTRACT §4.2) and finding one in task output.

use super::ParseError;

/// A parsed task ID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upid {
    /// The whole string, as PVE wants it back in `/nodes/{node}/tasks/{upid}/status`.
    pub raw: String,
    pub node: String,
    pub pid: u32,
    pub pstart: u64,
    /// Unix time the task started.
    pub starttime: u64,
    /// Task type (`vzcreate`, `download`, ...).
    pub kind: String,
    /// Task ID (often the vmid); may be empty.
    pub id: String,
    pub user: String,
}

impl Upid {
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        let s = s.trim().trim_matches('"');
        let err = |d: &str| ParseError::new("UPID", format!("`{s}`: {d}"));
        let rest = s
            .strip_prefix("UPID:")
            .ok_or_else(|| err("does not start with UPID:"))?;
        let rest = rest
            .strip_suffix(':')
            .ok_or_else(|| err("no trailing colon"))?;
        let f: Vec<&str> = rest.split(':').collect();
        if f.len() != 7 {
            return Err(err("expected 7 colon-separated fields"));
        }
        let hex = |v: &str, n: &str, lens: &[usize]| -> Result<u64, ParseError> {
            if !lens.contains(&v.len()) {
                return Err(err(&format!("{n} must be {lens:?} hex digits")));
            }
            u64::from_str_radix(v, 16).map_err(|_| err(&format!("{n} is not hex")))
        };
        if f[0].is_empty() || f[4].is_empty() || f[6].is_empty() {
            return Err(err("empty node, type or user"));
        }
        Ok(Upid {
            raw: s.to_string(),
            node: f[0].to_string(),
            pid: hex(f[1], "pid", &[8])? as u32,
            pstart: hex(f[2], "pstart", &[8, 9])?,
            starttime: hex(f[3], "starttime", &[8])?,
            kind: f[4].to_string(),
            id: f[5].to_string(),
            user: f[6].to_string(),
        })
    }

    /// The last line of task output that is a UPID (text or JSON-quoted), if any.
    pub fn find_in_output(stdout: &str) -> Option<Upid> {
        stdout
            .lines()
            .rev()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .find_map(|l| Upid::parse(l).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_example() {
        let u = Upid::parse("UPID:pve1:0003C8E1:0071A2B4:6711F0A2:vzcreate:103:root@pam:").unwrap();
        assert_eq!(u.node, "pve1");
        assert_eq!(u.pid, 0x3C8E1);
        assert_eq!(u.starttime, 0x6711F0A2);
        assert_eq!(u.kind, "vzcreate");
        assert_eq!(u.id, "103");
        assert_eq!(u.user, "root@pam");
        let quoted =
            Upid::parse("\"UPID:pve1:0003C8E1:171A2B4A0:6711F0A2:download::root@pam:\"").unwrap();
        assert_eq!(quoted.id, "");
        assert_eq!(quoted.pstart, 0x171A2B4A0);
    }

    #[test]
    fn rejects_garbage() {
        assert!(Upid::parse("UPID:pve1:xyz").is_err());
        assert!(Upid::parse("pve1:0003C8E1:0071A2B4:6711F0A2:vzcreate:103:root@pam:").is_err());
        assert!(Upid::parse("UPID:pve1:3C8E1:0071A2B4:6711F0A2:vzcreate:103:root@pam:").is_err());
    }
}
