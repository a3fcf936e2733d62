//! The markdown rendering, for a pull-request comment: a heading, a summary line, a table with one row per action,
//! and a collapsed `<details>` block per action holding its lines in a ```` ```diff ```` fence (GitHub colours `+`
//! and `-` lines; `~` is written `!` so that changed lines stand out too, as Atlantis does).

use std::fmt::Write as _;

use super::{action_sign, body, headline, identity, summary_sentence, Sign};
use crate::plan::{ActionKind, Plan};

/// Renders `plan` as GitHub-flavoured markdown.
pub fn render(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### pxfleet plan for fleet `{}`\n",
        code_safe(&plan.fleet)
    );
    for w in &plan.warnings {
        let _ = writeln!(out, "> **Warning:** {}\n", w.replace('\n', " "));
    }
    if plan.is_empty() {
        out.push_str("**No changes.** The fleet matches the file and what the nodes report.\n");
        return out;
    }
    let _ = writeln!(out, "**{}**\n", summary_sentence(plan));
    out.push_str("| # | action | container | vm_id | node | details |\n");
    out.push_str("|---:|---|---|---:|---|---|\n");
    for (i, a) in plan.actions.iter().enumerate() {
        let vm_id = a
            .vm_id
            .map(|v| v.to_string())
            .unwrap_or_else(|| "_after apply_".to_owned());
        let node = a
            .node
            .as_deref()
            .map(cell)
            .unwrap_or_else(|| "_after apply_".to_owned());
        let _ = writeln!(
            out,
            "| {} | {} {} | `{}` | {} | {} | {} |",
            i + 1,
            action_sign(&a.kind).as_str(),
            a.kind.verb(),
            code_safe(&a.container),
            vm_id,
            node,
            cell(&details(&a.kind)),
        );
    }
    out.push('\n');
    for (i, a) in plan.actions.iter().enumerate() {
        let lines = body(&a.kind);
        let _ = writeln!(
            out,
            "<details><summary>{}. {} <code>{}</code> ({})</summary>\n",
            i + 1,
            a.kind.verb(),
            html(&a.container),
            html(&identity(a)),
        );
        let _ = writeln!(out, "Will {}.\n", html(&headline(&a.kind)));
        if !lines.is_empty() {
            let width = lines
                .iter()
                .map(|l| l.field.chars().count())
                .max()
                .unwrap_or(0);
            let mut block = String::new();
            for l in &lines {
                let sign = match l.sign {
                    Sign::Add => "+",
                    Sign::Remove => "-",
                    Sign::Change | Sign::Replace => "!",
                };
                let pad = " ".repeat(width - l.field.chars().count());
                let _ = write!(block, "{sign} {}{pad} = {}", l.field, l.value);
                if let Some(note) = l.note {
                    let _ = write!(block, " {}", note.as_str());
                    if let Some(why) = &l.why {
                        let _ = write!(block, ": {why}");
                    }
                }
                block.push('\n');
            }
            let fence = fence_for(&block);
            let _ = write!(out, "{fence}diff\n{block}{fence}\n\n");
        }
        out.push_str("</details>\n\n");
    }
    out
}

/// The short text of the table's last column.
fn details(kind: &ActionKind) -> String {
    let fields = |v: &[crate::plan::FieldChange]| {
        v.iter()
            .map(|c| c.field.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match kind {
        ActionKind::Create { attributes, .. } => format!("{} attributes", attributes.len()),
        ActionKind::Update {
            changes,
            restart_required,
        } => {
            format!(
                "{}{}",
                fields(changes),
                if *restart_required { " (restart)" } else { "" }
            )
        }
        ActionKind::Repair {
            drift,
            restart_required,
        } => {
            format!(
                "drift: {}{}",
                fields(drift),
                if *restart_required { " (restart)" } else { "" }
            )
        }
        ActionKind::Resize {
            disk,
            from_gib,
            to_gib,
        } => format!("{disk}: {from_gib} GiB -> {to_gib} GiB"),
        ActionKind::Replace { reasons, .. } => {
            let whys: Vec<&str> = reasons.iter().filter_map(|c| c.why.as_deref()).collect();
            if whys.is_empty() {
                format!("forced by {}", fields(reasons))
            } else {
                format!("forced by {} ({})", fields(reasons), whys.join("; "))
            }
        }
        ActionKind::Move { from, to } => format!("{from} -> {to}"),
        ActionKind::Destroy { .. } | ActionKind::Start | ActionKind::Stop => headline(kind),
    }
}

/// A table cell: no pipes or newlines.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// Text inside inline code: backticks would end it.
fn code_safe(s: &str) -> String {
    s.replace('`', "'")
}

/// Text inside HTML (the `<summary>` line).
fn html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A code fence longer than any run of backticks inside the block.
fn fence_for(block: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in block.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat(longest.max(2) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_outgrow_backticks_in_values() {
        assert_eq!(fence_for("a = \"x\""), "```");
        assert_eq!(fence_for("a = \"````\""), "`````");
        assert_eq!(cell("a|b\nc"), "a\\|b c");
    }
}
