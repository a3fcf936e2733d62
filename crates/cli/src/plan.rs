//! `pxctl plan`: parse a fleet file, plan it, print the plan as text, markdown or JSON.
//!
//! Only `--offline` works for now: the file is planned against an empty world (nothing applied, nothing
//! observed), so every container shows as a create. Without `--offline` the command would ask the controller,
//! which is not configured yet; it says so instead of guessing. Exit status: 1 on any error; with
//! `--detailed-exitcode` 0 when there are no changes and 2 when there are, else 0.

use std::io::{self, Write};

use pxfleet_spec::plan::{plan, Plan};
use pxfleet_spec::{parse_fleet, render, FileSource};

/// How the plan is printed (`-o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    /// Like `terraform plan`; coloured on a terminal unless `NO_COLOR` is set.
    #[default]
    Text,
    /// For a pull-request comment.
    Markdown,
    /// The plan document (schema in docs/plan-json.md).
    Json,
}

/// What `pxctl plan` was asked to do.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub file: String,
    pub offline: bool,
    pub output: OutputFormat,
    pub detailed_exitcode: bool,
    /// ANSI colour in the text output (see [`colour_wanted`]).
    pub colour: bool,
}

/// Exit status for "no changes" / "changes" / "error" under `--detailed-exitcode`.
pub const EXIT_NO_CHANGES: u8 = 0;
pub const EXIT_ERROR: u8 = 1;
pub const EXIT_CHANGES: u8 = 2;

/// Colour only on a terminal, and never when `NO_COLOR` is set to a non-empty value (no-color.org).
pub fn colour_wanted(stdout_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stdout_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Runs `pxctl plan`: reads the file, plans, writes the rendering to `out` and problems to `err`.
/// Returns the exit status.
pub fn run(
    opts: &PlanOptions,
    files: &dyn FileSource,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> io::Result<u8> {
    if !opts.offline {
        writeln!(
            err,
            "pxctl plan: no controller is configured yet, so there is nothing to plan against; \
             use `pxctl plan --offline {}` to plan against an empty world",
            opts.file
        )?;
        return Ok(EXIT_ERROR);
    }
    let text = match std::fs::read_to_string(&opts.file) {
        Ok(t) => t,
        Err(e) => {
            writeln!(err, "{}: cannot read the file: {e}", opts.file)?;
            return Ok(EXIT_ERROR);
        }
    };
    run_text(opts, &text, files, out, err)
}

/// [`run`] on the process's stdout and stderr, with colour decided from the terminal and `NO_COLOR`:
/// what `pxctl plan` calls. Returns the exit status.
pub fn run_stdio(file: String, offline: bool, output: OutputFormat, detailed_exitcode: bool) -> u8 {
    use std::io::IsTerminal;
    let colour = colour_wanted(
        io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let opts = PlanOptions {
        file,
        offline,
        output,
        detailed_exitcode,
        colour,
    };
    let (mut out, mut err) = (io::stdout().lock(), io::stderr().lock());
    match run(&opts, &crate::validate::FsFiles, &mut out, &mut err) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(err, "pxctl plan: cannot write the plan: {e}");
            EXIT_ERROR
        }
    }
}

/// [`run`] on a file's text (already read).
pub fn run_text(
    opts: &PlanOptions,
    text: &str,
    files: &dyn FileSource,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> io::Result<u8> {
    let fleet = match parse_fleet(&opts.file, text, files) {
        Ok(f) => f,
        Err(diags) => {
            let mut n = 0;
            for d in diags.iter() {
                writeln!(err, "{d}")?;
                n += 1;
            }
            writeln!(
                err,
                "{}: invalid ({n} error{})",
                opts.file,
                if n == 1 { "" } else { "s" }
            )?;
            return Ok(EXIT_ERROR);
        }
    };
    let p = match plan(&fleet, None, &[]) {
        Ok(p) => p,
        Err(e) => {
            writeln!(err, "{}: {e}", opts.file)?;
            return Ok(EXIT_ERROR);
        }
    };
    out.write_all(render_plan(&p, opts.output, opts.colour).as_bytes())?;
    // The fleet's policies, evaluated here against this offline plan as the controller does against its own.
    match crate::policy::evaluate_local(&opts.file, text, files, &fleet, &p) {
        Ok(None) => {}
        Ok(Some(report)) => {
            let shown = crate::policy::render(&report, opts.output);
            match opts.output {
                OutputFormat::Json => err.write_all(shown.as_bytes())?,
                _ => out.write_all(shown.as_bytes())?,
            }
            if crate::policy::denied(&report) {
                writeln!(err, "{}: denied by its policies", opts.file)?;
                return Ok(EXIT_ERROR);
            }
        }
        Err(lines) => {
            for l in lines {
                writeln!(err, "{l}")?;
            }
            return Ok(EXIT_ERROR);
        }
    }
    Ok(match (opts.detailed_exitcode, p.is_empty()) {
        (true, false) => EXIT_CHANGES,
        _ => EXIT_NO_CHANGES,
    })
}

/// The plan in the requested format.
pub fn render_plan(p: &Plan, format: OutputFormat, colour: bool) -> String {
    match format {
        OutputFormat::Text => render::text::render(p, colour),
        OutputFormat::Markdown => render::markdown::render(p),
        OutputFormat::Json => render::json::render(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pxfleet_spec::NoFiles;

    const FLEET: &str = "fleet: dev\ntemplates:\n  deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}\n\
        containers:\n  web-1: {template: deb, vm_id: 2100, node: pve1, password: hunter2-hunter2}\n  web-2: {template: deb}\n";

    fn opts(output: OutputFormat, detailed: bool) -> PlanOptions {
        PlanOptions {
            file: "fleet.yaml".into(),
            offline: true,
            output,
            detailed_exitcode: detailed,
            colour: false,
        }
    }

    fn run_on(o: &PlanOptions, text: &str) -> (u8, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run_text(o, text, &NoFiles, &mut out, &mut err).unwrap();
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn offline_plan_creates_every_container() {
        let (code, out, err) = run_on(&opts(OutputFormat::Text, false), FLEET);
        assert_eq!((code, err.as_str()), (0, ""));
        assert!(
            out.contains("# container \"web-1\" (vm_id 2100 on pve1) will be created"),
            "{out}"
        );
        assert!(
            out.contains(
                "# container \"web-2\" (vm_id and node known after apply) will be created"
            ),
            "{out}"
        );
        assert!(out.ends_with("Plan: 2 to create.\n"), "{out}");
        assert!(!out.contains("hunter2"), "password leaked: {out}");
        assert!(!out.contains('\x1b'), "no colour unless asked");
    }

    #[test]
    fn detailed_exitcode_says_changes() {
        assert_eq!(
            run_on(&opts(OutputFormat::Json, true), FLEET).0,
            EXIT_CHANGES
        );
        let empty = "fleet: dev\ncontainers: {}\n";
        let (code, out, _) = run_on(&opts(OutputFormat::Text, true), empty);
        assert_eq!(code, EXIT_NO_CHANGES, "{out}");
        assert!(out.starts_with("No changes."), "{out}");
    }

    #[test]
    fn json_and_markdown_outputs() {
        let (_, out, _) = run_on(&opts(OutputFormat::Json, false), FLEET);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["summary"]["create"], 2);
        assert!(!out.contains("hunter2"));
        let (_, md, _) = run_on(&opts(OutputFormat::Markdown, false), FLEET);
        assert!(md.starts_with("### pxfleet plan for fleet `dev`"), "{md}");
        assert!(
            md.contains("| 1 | + create | `web-1` | 2100 | pve1 |"),
            "{md}"
        );
    }

    #[test]
    fn invalid_file_is_reported_like_validate() {
        let bad = "fleet: dev\ncontainers:\n  a: {template: nope, memroy: 5}\n";
        let (code, out, err) = run_on(&opts(OutputFormat::Text, true), bad);
        assert_eq!(code, EXIT_ERROR);
        assert_eq!(out, "");
        assert!(err.contains("fleet.yaml:3:"), "{err}");
        assert!(err.contains("fleet.yaml: invalid ("), "{err}");
    }

    #[test]
    fn without_offline_says_what_to_do() {
        let mut o = opts(OutputFormat::Text, false);
        o.offline = false;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(&o, &NoFiles, &mut out, &mut err).unwrap();
        assert_eq!(code, EXIT_ERROR);
        assert!(String::from_utf8(err)
            .unwrap()
            .contains("use `pxctl plan --offline fleet.yaml`"));
    }

    #[test]
    fn plans_the_shipped_dev_example_from_disk() {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/dev/fleet.yaml");
        let mut o = opts(OutputFormat::Json, true);
        o.file = file.to_owned();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(&o, &crate::validate::FsFiles, &mut out, &mut err).unwrap();
        let (out, err) = (
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        );
        assert_eq!(code, EXIT_CHANGES, "{err}");
        let plan = pxfleet_spec::render::json::parse(&out).unwrap();
        let names: Vec<&str> = plan.actions.iter().map(|a| a.container.as_str()).collect();
        assert_eq!(
            names,
            vec!["dev-nextcloud", "dev-vaultwarden"],
            "startup order first"
        );
        // the `file:` SSH key was read next to the fleet file
        assert!(out.contains("ops@example"), "{out}");
    }

    #[test]
    fn colour_follows_terminal_and_no_color() {
        use std::ffi::OsStr;
        assert!(colour_wanted(true, None));
        assert!(!colour_wanted(false, None));
        assert!(!colour_wanted(true, Some(OsStr::new("1"))));
        assert!(colour_wanted(true, Some(OsStr::new(""))));
    }
}
