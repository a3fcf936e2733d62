//! The text rendering, shaped like `terraform plan`: one commented block per action with `+`, `~`, `-` and `-/+`
//! signs, aligned `field = value` lines, and a closing `Plan: ...` line.
//!
//! Colour (ANSI escapes) only when the caller asks for it: the CLI decides from isatty and `NO_COLOR`.

use std::fmt::Write as _;

use super::{action_sign, body, headline, identity, summary_sentence, BodyLine, Note, Sign};
use crate::plan::Plan;

const RESET: &str = "\x1b[0m";
const BOLD: &str = "\x1b[1m";
const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";

struct Palette {
    on: bool,
}

impl Palette {
    fn paint(&self, code: &str, s: &str) -> String {
        if self.on {
            format!("{code}{s}{RESET}")
        } else {
            s.to_owned()
        }
    }

    fn sign(&self, sign: Sign) -> String {
        let code = match sign {
            Sign::Add => GREEN,
            Sign::Change => YELLOW,
            Sign::Remove => RED,
            Sign::Replace => {
                // terraform paints "-/+" as a red minus and a green plus.
                return if self.on {
                    format!("{RED}-{RESET}/{GREEN}+{RESET}")
                } else {
                    "-/+".to_owned()
                };
            }
        };
        self.paint(code, sign.as_str())
    }
}

/// Renders `plan` as text; `colour` adds ANSI escapes.
pub fn render(plan: &Plan, colour: bool) -> String {
    let p = Palette { on: colour };
    let mut out = String::new();
    for w in &plan.warnings {
        let _ = writeln!(
            out,
            "{} {w}\n",
            p.paint(&format!("{BOLD}{YELLOW}"), "Warning:")
        );
    }
    if plan.is_empty() {
        let _ = writeln!(
            out,
            "{} Fleet \"{}\" matches the file and what the nodes report.",
            p.paint(&format!("{BOLD}{GREEN}"), "No changes."),
            plan.fleet
        );
        return out;
    }
    let _ = writeln!(
        out,
        "pxfleet will perform the following actions on fleet \"{}\":",
        plan.fleet
    );
    for action in &plan.actions {
        out.push('\n');
        let head = format!(
            "# container \"{}\" ({}) will {}",
            action.container,
            identity(action),
            headline(&action.kind)
        );
        let _ = writeln!(out, "  {}", p.paint(BOLD, &head));
        let sign = action_sign(&action.kind);
        let lines = body(&action.kind);
        // Right-align the sign in three columns (the escapes take no room on screen).
        let pad = " ".repeat(3 - sign.as_str().len());
        let _ = write!(
            out,
            "{pad}{} container \"{}\"",
            p.sign(sign),
            action.container
        );
        if lines.is_empty() {
            out.push('\n');
            continue;
        }
        out.push_str(" {\n");
        write_lines(&mut out, &p, &lines);
        out.push_str("    }\n");
    }
    let _ = writeln!(out, "\n{}", p.paint(BOLD, &summary_sentence(plan)));
    out
}

fn write_lines(out: &mut String, p: &Palette, lines: &[BodyLine]) {
    let width = lines
        .iter()
        .map(|l| l.field.chars().count())
        .max()
        .unwrap_or(0);
    for l in lines {
        let pad = width - l.field.chars().count();
        let _ = write!(
            out,
            "      {} {}{} = {}",
            p.sign(l.sign),
            l.field,
            " ".repeat(pad),
            l.value
        );
        if let Some(note) = l.note {
            let code = if note == Note::ForcesReplacement {
                RED
            } else {
                YELLOW
            };
            let text = match &l.why {
                Some(why) => format!("{}: {why}", note.as_str()),
                None => note.as_str().to_owned(),
            };
            let _ = write!(out, " {}", p.paint(code, &text));
        }
        out.push('\n');
    }
}
