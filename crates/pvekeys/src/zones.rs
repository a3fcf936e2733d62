//! The time zones PVE's `timezone` option takes (`pve-ct-timezone`): `host`, `UTC`, or a zone of
//! `/usr/share/zoneinfo/zone.tab` (`PVE::JSONSchema::pve_verify_timezone` reads that file's third column). The list is
//! embedded (zones.txt, from Debian's tzdata 2025b) so that a fleet file is checked the same way on any machine.

use std::collections::BTreeSet;
use std::sync::OnceLock;

fn zones() -> &'static BTreeSet<&'static str> {
    static ZONES: OnceLock<BTreeSet<&'static str>> = OnceLock::new();
    ZONES.get_or_init(|| {
        include_str!("zones.txt")
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .collect()
    })
}

/// Whether PVE accepts `tz` as a container's `timezone`.
pub fn is_timezone(tz: &str) -> bool {
    tz == "host" || tz == "UTC" || zones().contains(tz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_tab_zones_host_and_utc_only() {
        for ok in [
            "host",
            "UTC",
            "Europe/Berlin",
            "America/Argentina/Buenos_Aires",
            "Asia/Tokyo",
        ] {
            assert!(is_timezone(ok), "{ok}");
        }
        // not in zone.tab: links, abbreviations, offsets, case variants
        for bad in [
            "",
            "utc",
            "Etc/UTC",
            "GMT",
            "CET",
            "Europe/berlin",
            "Europe",
            "+01:00",
            "Europe/Berlin ",
        ] {
            assert!(!is_timezone(bad), "{bad}");
        }
        assert!(zones().len() > 400, "{}", zones().len());
    }
}
