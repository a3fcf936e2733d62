//! Text outputs: `pct list`, `pct status [--verbose]`, `key: value` listings, `pvesm status`, `pvesm list`,
//! `pveam list`, `pveam available` (formats in CONTRACT §3.5, §3.6, §5.2, §6).

use super::json::RunState;
use super::ParseError;

/// Splits `key: value` lines (blank lines skipped).
pub fn parse_key_values(what: &str, text: &str) -> Result<Vec<(String, String)>, ParseError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (k, v) = line.split_once(':').ok_or_else(|| {
            ParseError::new(
                what,
                format!("line {}: `{line}` is not `key: value`", n + 1),
            )
        })?;
        out.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(out)
}

/// One row of `pct list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PctListEntry {
    pub vmid: u64,
    pub status: RunState,
    pub lock: Option<String>,
    pub name: String,
}

/// Parses `pct list` (fixed columns `%-10s %-10s %-12s %-20s`; empty output means no CTs). Sorted by vmid.
pub fn parse_pct_list(text: &str) -> Result<Vec<PctListEntry>, ParseError> {
    const W: &str = "pct list";
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if n == 0 && line.starts_with("VMID") {
            continue;
        }
        let col = |a: usize, b: Option<usize>| -> &str {
            let end = b.unwrap_or(line.len()).min(line.len());
            line.get(a.min(end)..end).unwrap_or("").trim()
        };
        let vmid_s = col(0, Some(11));
        let vmid: u64 = vmid_s.parse().map_err(|_| {
            ParseError::new(
                W,
                format!("line {}: `{vmid_s}` is not a vmid in `{line}`", n + 1),
            )
        })?;
        let status = col(11, Some(22));
        if status.is_empty() {
            return Err(ParseError::new(
                W,
                format!("line {}: no status in `{line}`", n + 1),
            ));
        }
        let lock = col(22, Some(35));
        out.push(PctListEntry {
            vmid,
            status: RunState::parse(status),
            lock: (!lock.is_empty()).then(|| lock.to_string()),
            name: col(35, None).to_string(),
        });
    }
    out.sort_by_key(|e| e.vmid);
    Ok(out)
}

/// Parses `pct status <vmid>` (`status: running`); with `--verbose`, use [`parse_key_values`].
pub fn parse_pct_status(text: &str) -> Result<RunState, ParseError> {
    let kv = parse_key_values("pct status", text)?;
    kv.into_iter()
        .find(|(k, _)| k == "status")
        .map(|(_, v)| RunState::parse(&v))
        .ok_or_else(|| {
            ParseError::new(
                "pct status",
                format!("no `status:` line in `{}`", text.trim()),
            )
        })
}

/// One row of `pvesm status`.
#[derive(Clone, Debug, PartialEq)]
pub struct PvesmStatus {
    pub name: String,
    pub kind: String,
    /// `active`, `inactive`, `disabled`.
    pub status: String,
    pub total_kib: u64,
    pub used_kib: u64,
    pub avail_kib: u64,
    /// `None` when shown as `N/A`.
    pub used_percent: Option<f64>,
}

/// Parses `pvesm status`, both the PVE 9.0.14+ header with `(KiB)` and the older one.
pub fn parse_pvesm_status(text: &str) -> Result<Vec<PvesmStatus>, ParseError> {
    const W: &str = "pvesm status";
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() || (n == 0 && f[0] == "Name") {
            continue;
        }
        if f.len() != 7 {
            return Err(ParseError::new(
                W,
                format!("line {}: expected 7 columns in `{line}`", n + 1),
            ));
        }
        let num = |s: &str| -> Result<u64, ParseError> {
            s.parse()
                .map_err(|_| ParseError::new(W, format!("line {}: `{s}` is not a number", n + 1)))
        };
        out.push(PvesmStatus {
            name: f[0].into(),
            kind: f[1].into(),
            status: f[2].into(),
            total_kib: num(f[3])?,
            used_kib: num(f[4])?,
            avail_kib: num(f[5])?,
            used_percent: f[6].trim_end_matches('%').parse().ok(),
        });
    }
    Ok(out)
}

/// One row of `pvesm list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PvesmVolume {
    pub volid: String,
    pub format: String,
    /// Content type (`rootdir`, `vztmpl`, `images`, ...).
    pub content: String,
    /// Bytes (approximate sizes `~n` are read as n).
    pub size: u64,
    pub vmid: Option<u64>,
}

/// Parses `pvesm list <storage>` (header always printed; VMID column only on rows that have one).
pub fn parse_pvesm_list(text: &str) -> Result<Vec<PvesmVolume>, ParseError> {
    const W: &str = "pvesm list";
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() || (n == 0 && f[0] == "Volid") {
            continue;
        }
        if f.len() != 4 && f.len() != 5 {
            return Err(ParseError::new(
                W,
                format!("line {}: expected 4 or 5 columns in `{line}`", n + 1),
            ));
        }
        let size = f[3].trim_start_matches('~');
        out.push(PvesmVolume {
            volid: f[0].into(),
            format: f[1].into(),
            content: f[2].into(),
            size: size
                .parse()
                .map_err(|_| ParseError::new(W, format!("line {}: size `{}`", n + 1, f[3])))?,
            vmid: match f.get(4) {
                Some(v) => Some(
                    v.parse()
                        .map_err(|_| ParseError::new(W, format!("line {}: vmid `{v}`", n + 1)))?,
                ),
                None => None,
            },
        });
    }
    Ok(out)
}

/// One row of `pveam list <storage>`.
#[derive(Clone, Debug, PartialEq)]
pub struct PveamTemplate {
    /// `local:vztmpl/<file>`.
    pub volid: String,
    pub size_mib: f64,
}

/// Parses `pveam list <storage>` (`NAME SIZE` header; sizes like `126.00MB`).
pub fn parse_pveam_list(text: &str) -> Result<Vec<PveamTemplate>, ParseError> {
    const W: &str = "pveam list";
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() || (n == 0 && f[0] == "NAME") {
            continue;
        }
        if f.len() != 2 {
            return Err(ParseError::new(
                W,
                format!("line {}: expected 2 columns in `{line}`", n + 1),
            ));
        }
        out.push(PveamTemplate {
            volid: f[0].into(),
            size_mib: f[1]
                .trim_end_matches("MB")
                .parse()
                .map_err(|_| ParseError::new(W, format!("line {}: size `{}`", n + 1, f[1])))?,
        });
    }
    Ok(out)
}

/// One row of `pveam available`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PveamAvailable {
    pub section: String,
    /// File name for `pveam download`.
    pub template: String,
    /// Present from pve-manager 9.2.7 on.
    pub arch: Option<String>,
}

/// Parses `pveam available` (two or three columns, no header).
pub fn parse_pveam_available(text: &str) -> Result<Vec<PveamAvailable>, ParseError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            [] => continue,
            [s, t] => out.push(PveamAvailable {
                section: (*s).into(),
                template: (*t).into(),
                arch: None,
            }),
            [s, t, a] => out.push(PveamAvailable {
                section: (*s).into(),
                template: (*t).into(),
                arch: Some((*a).into()),
            }),
            _ => {
                return Err(ParseError::new(
                    "pveam available",
                    format!("line {}: expected 2 or 3 columns in `{line}`", n + 1),
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_pct_list() {
        assert!(parse_pct_list("").unwrap().is_empty());
    }

    #[test]
    fn long_names_in_pct_list() {
        let line = format!(
            "{:<10} {:<10} {:<12} {:<20}\n",
            "100", "running", "", "a-very-long-hostname-over-twenty"
        );
        let v = parse_pct_list(&line).unwrap();
        assert_eq!(v[0].name, "a-very-long-hostname-over-twenty");
        assert_eq!(v[0].lock, None);
        assert!(parse_pct_list("abc        running\n").is_err());
    }

    #[test]
    fn pvesm_list_approximate_sizes() {
        let v = parse_pvesm_list(
            "Volid Format Type Size VMID\nlocal:100/x.raw raw rootdir ~1024 100\n",
        )
        .unwrap();
        assert_eq!(v[0].size, 1024);
        assert_eq!(v[0].vmid, Some(100));
    }

    #[test]
    fn pct_status_missing_line() {
        assert!(parse_pct_status("foo: bar\n").is_err());
    }
}
