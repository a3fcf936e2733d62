//! The system options of `pct create` / `pct set` (`arch`, `timezone`, `console`, `tty`, `cmode`) and the hook
//! script, checked as PVE's schema and `check_hookscript` check them.

use super::{Args, R};
use crate::error::PveError;

pub use pxfleet_pvekeys::{ARCHES, CMODES, MAX_TTY};

pub(super) fn check_arch(vmid: u32, arch: &str) -> R<()> {
    if ARCHES.contains(&arch) {
        Ok(())
    } else {
        Err(PveError::invalid(
            Some(vmid),
            "arch",
            arch,
            &format!("one of {}", ARCHES.join(", ")),
        ))
    }
}

pub use pxfleet_pvekeys::is_hookscript_volid;

pub(super) fn check_hookscript(vmid: u32, h: &str) -> R<()> {
    if is_hookscript_volid(h) {
        Ok(())
    } else {
        Err(PveError::invalid(
            Some(vmid),
            "hookscript",
            h,
            "a snippets volume like local:snippets/hook.sh",
        ))
    }
}

/// `--timezone`, `--console`, `--tty`, `--cmode`, checked as PVE's schema checks them.
pub(super) fn system(
    a: &mut Args,
    vmid: u32,
    timezone: Option<&String>,
    console: Option<bool>,
    tty: Option<u32>,
    cmode: Option<&String>,
) -> R<()> {
    if let Some(tz) = timezone {
        if !crate::zones::is_timezone(tz) {
            return Err(PveError::invalid(
                Some(vmid),
                "timezone",
                tz,
                "host, UTC or a zone of /usr/share/zoneinfo/zone.tab (Europe/Berlin)",
            ));
        }
        a.opt("timezone", tz.clone());
    }
    if let Some(c) = console {
        a.flag("console", c);
    }
    if let Some(t) = tty {
        if t > MAX_TTY {
            return Err(PveError::invalid(
                Some(vmid),
                "tty",
                t,
                &format!("0 to {MAX_TTY}"),
            ));
        }
        a.opt("tty", t.to_string());
    }
    if let Some(m) = cmode {
        if !CMODES.contains(&m.as_str()) {
            return Err(PveError::invalid(
                Some(vmid),
                "cmode",
                m,
                &format!("one of {}", CMODES.join(", ")),
            ));
        }
        a.opt("cmode", m.clone());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use crate::spec::RootfsSpec;

    fn spec() -> CreateSpec {
        CreateSpec::new(
            100,
            "local:vztmpl/debian-13-standard_13.6-1_amd64.tar.zst",
            RootfsSpec {
                storage: "local-lvm".into(),
                size_gib: 8,
            },
        )
    }

    fn has(args: &[String], key: &str, value: &str) -> bool {
        args.windows(2)
            .any(|w| w[0] == format!("--{key}") && w[1] == value)
    }

    #[test]
    fn arch_timezone_and_console_reach_create_and_set() {
        let mut s = spec();
        s.arch = Some("arm64".into());
        s.timezone = Some("Europe/Berlin".into());
        s.console = Some(false);
        s.tty = Some(6);
        s.cmode = Some("shell".into());
        let a = create_args(&s, None).unwrap();
        for (k, v) in [
            ("arch", "arm64"),
            ("timezone", "Europe/Berlin"),
            ("console", "0"),
            ("tty", "6"),
            ("cmode", "shell"),
        ] {
            assert!(has(&a, k, v), "--{k} {v} in {a:?}");
        }
        let c = ConfigChange {
            arch: Some("amd64".into()),
            timezone: Some("host".into()),
            console: Some(true),
            tty: Some(0),
            cmode: Some("console".into()),
            ..Default::default()
        };
        let a = set_args(100, &c).unwrap();
        for (k, v) in [
            ("arch", "amd64"),
            ("timezone", "host"),
            ("console", "1"),
            ("tty", "0"),
            ("cmode", "console"),
        ] {
            assert!(has(&a, k, v), "--{k} {v} in {a:?}");
        }
    }

    #[test]
    fn values_pves_schema_refuses_are_refused_before_running_anything() {
        type Case = (&'static str, fn(&mut CreateSpec));
        let cases: [Case; 5] = [
            ("arch", |s| s.arch = Some("sparc".into())),
            ("timezone", |s| {
                s.timezone = Some("Mars/Olympus_Mons".into())
            }),
            ("timezone", |s| s.timezone = Some("CET".into())),
            ("tty", |s| s.tty = Some(7)),
            ("cmode", |s| s.cmode = Some("serial".into())),
        ];
        for (field, f) in cases {
            let mut s = spec();
            f(&mut s);
            match create_args(&s, None) {
                Err(PveError::Invalid { field: got, .. }) => assert_eq!(got, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
