//! Plan renderings: text like `terraform plan` ([`text`]), markdown for a pull-request comment ([`markdown`]) and
//! JSON ([`json`], schema in `docs/plan-json.md`).
//!
//! All three read only a [`Plan`](crate::plan::Plan), which never holds a secret value (the planner marks
//! sensitive fields instead), so no rendering can print one. This module holds what the text and markdown
//! renderings share: how a value, a container's identity and an action's body lines are written.

pub mod json;
pub mod markdown;
pub mod text;

use std::fmt::Write as _;

use serde_json::Value;

use crate::plan::{Action, ActionKind, Attribute, CreateReason, DestroyReason, FieldChange};

/// What a changed sensitive value prints as.
pub const SENSITIVE: &str = "(sensitive)";
/// What a value decided at apply time prints as.
pub const KNOWN_AFTER_APPLY: &str = "(known after apply)";

/// The sign in front of an action or a body line, as terraform uses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sign {
    Add,
    Change,
    Remove,
    Replace,
}

impl Sign {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Sign::Add => "+",
            Sign::Change => "~",
            Sign::Remove => "-",
            Sign::Replace => "-/+",
        }
    }
}

/// A comment after a body line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Note {
    RestartNeeded,
    ForcesReplacement,
    /// Not live, and `restart_policy: never`: stays pending until the container restarts.
    StaysPending,
}

impl Note {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Note::RestartNeeded => "# restart needed",
            Note::ForcesReplacement => "# forces replacement",
            Note::StaysPending => "# pending until the next restart (restart_policy: never)",
        }
    }
}

/// One line inside an action's block: `<sign> <field> = <value> [# note]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BodyLine {
    pub sign: Sign,
    pub field: String,
    pub value: String,
    pub note: Option<Note>,
    /// Why, after the note (`# forces replacement: mk2 is in cluster B, not A: ...`).
    pub why: Option<String>,
}

/// Writes a JSON value the way the text rendering shows it: strings quoted (JSON escapes, so a newline in a
/// description stays on one line), lists in brackets, objects as `{ key = value, ... }`.
pub(crate) fn value(v: &Value) -> String {
    let mut s = String::new();
    write_value(&mut s, v);
    s
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => {
            let _ = write!(out, "{b}");
        }
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::String(s) => out.push_str(&Value::String(s.clone()).to_string()),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            if map.values().all(Value::is_null) {
                out.push_str("{}");
                return;
            }
            out.push_str("{ ");
            // Unset members (null) are left out, as terraform does.
            for (i, (k, item)) in map.iter().filter(|(_, v)| !v.is_null()).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{k} = ");
                write_value(out, item);
            }
            out.push_str(" }");
        }
    }
}

/// `vm_id 2100 on mk33`, with `known after apply` where the controller decides.
pub(crate) fn identity(a: &Action) -> String {
    match (&a.vm_id, &a.node) {
        (Some(id), Some(node)) => format!("vm_id {id} on {node}"),
        (Some(id), None) => format!("vm_id {id}, node known after apply"),
        (None, Some(node)) => format!("vm_id known after apply, on {node}"),
        (None, None) => "vm_id and node known after apply".to_owned(),
    }
}

/// The sign of the whole action.
pub(crate) fn action_sign(kind: &ActionKind) -> Sign {
    match kind {
        ActionKind::Create { .. } => Sign::Add,
        ActionKind::Destroy { .. } => Sign::Remove,
        ActionKind::Replace { .. } => Sign::Replace,
        _ => Sign::Change,
    }
}

/// What will happen, as the end of the sentence `container "x" (...) will ...`.
pub(crate) fn headline(kind: &ActionKind) -> String {
    match kind {
        ActionKind::Create {
            reason: CreateReason::New,
            ..
        } => "be created".to_owned(),
        ActionKind::Create {
            reason: CreateReason::Missing,
            ..
        } => "be created again: it was applied but no node reports it".to_owned(),
        ActionKind::Update { changes, .. }
            if changes.iter().any(|c| c.field == crate::plan::ADOPT_FIELD) =>
        {
            "be adopted: taken under management where it is (kept, not recreated) and updated in place"
                .to_owned()
        }
        ActionKind::Update {
            restart_required: false,
            ..
        } => "be updated in place".to_owned(),
        ActionKind::Update {
            restart_required: true,
            ..
        } => "be updated in place, then restarted".to_owned(),
        ActionKind::Resize { .. } => "have a disk grown".to_owned(),
        ActionKind::Replace { .. } => "be replaced (destroyed, then created)".to_owned(),
        ActionKind::Move { from, to } => format!("be moved from {from} to {to}"),
        ActionKind::Destroy {
            reason: DestroyReason::RemovedFromFile,
        } => "be destroyed: it left the fleet file".to_owned(),
        ActionKind::Destroy {
            reason: DestroyReason::Orphaned,
        } => "be destroyed: it carries this fleet's mark but is not in the file".to_owned(),
        ActionKind::Destroy {
            reason: DestroyReason::Duplicate,
        } => "be destroyed: another container carries the same fleet/name mark".to_owned(),
        ActionKind::Destroy {
            reason: DestroyReason::NotFound,
        } => "be removed from the fleet: it left the file and no node reports it (its create failed or has not \
              run, or its node is down; one found later with its mark is destroyed)"
            .to_owned(),
        ActionKind::Start => "be started".to_owned(),
        ActionKind::Stop => "be stopped".to_owned(),
        ActionKind::Repair {
            restart_required: false,
            ..
        } => "be repaired: it was changed outside pxfleet".to_owned(),
        ActionKind::Repair {
            restart_required: true,
            ..
        } => "be repaired (then restarted): it was changed outside pxfleet".to_owned(),
    }
}

fn attribute_line(a: &Attribute) -> BodyLine {
    let value = if a.sensitive {
        SENSITIVE.to_owned()
    } else if a.known_after_apply {
        KNOWN_AFTER_APPLY.to_owned()
    } else {
        a.value
            .as_ref()
            .map(value)
            .unwrap_or_else(|| "null".to_owned())
    };
    BodyLine {
        sign: Sign::Add,
        field: a.field.clone(),
        value,
        note: None,
        why: None,
    }
}

fn change_line(c: &FieldChange, note: Option<Note>) -> BodyLine {
    if c.sensitive {
        return BodyLine {
            sign: Sign::Change,
            field: c.field.clone(),
            value: SENSITIVE.to_owned(),
            note,
            why: None,
        };
    }
    let (sign, value) = match (&c.from, &c.to) {
        (None, Some(to)) => (Sign::Add, value(to)),
        (Some(from), None) => (Sign::Remove, format!("{} -> null", value(from))),
        (Some(from), Some(to)) => (Sign::Change, format!("{} -> {}", value(from), value(to))),
        (None, None) => (Sign::Change, "null -> null".to_owned()),
    };
    BodyLine {
        sign,
        field: c.field.clone(),
        value,
        note,
        why: c.why.clone(),
    }
}

fn gib(x: f64) -> String {
    format!("{} GiB", trim_float(x))
}

fn trim_float(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// The lines inside an action's block, in order.
pub(crate) fn body(kind: &ActionKind) -> Vec<BodyLine> {
    match kind {
        ActionKind::Create { attributes, .. } => attributes.iter().map(attribute_line).collect(),
        ActionKind::Update {
            changes,
            restart_required,
        }
        | ActionKind::Repair {
            drift: changes,
            restart_required,
        } => changes
            .iter()
            .map(|c| {
                let note = match (c.live, *restart_required) {
                    (true, _) => None,
                    (false, true) => Some(Note::RestartNeeded),
                    (false, false) => Some(Note::StaysPending),
                };
                change_line(c, note)
            })
            .collect(),
        ActionKind::Resize {
            disk,
            from_gib,
            to_gib,
        } => vec![BodyLine {
            sign: Sign::Change,
            field: if disk == "rootfs" {
                "disk_size".to_owned()
            } else {
                format!("{disk}.size")
            },
            value: format!("{} -> {}", gib(*from_gib), gib(*to_gib)),
            note: None,
            why: None,
        }],
        ActionKind::Replace { reasons, .. } => reasons
            .iter()
            .map(|c| change_line(c, Some(Note::ForcesReplacement)))
            .collect(),
        ActionKind::Move { from, to } => vec![BodyLine {
            sign: Sign::Change,
            field: "node".to_owned(),
            value: format!(
                "{} -> {}",
                value(&Value::from(from.as_str())),
                value(&Value::from(to.as_str()))
            ),
            note: None,
            why: None,
        }],
        ActionKind::Destroy { .. } => Vec::new(),
        ActionKind::Start => vec![BodyLine {
            sign: Sign::Change,
            field: "status".to_owned(),
            value: "\"stopped\" -> \"running\"".to_owned(),
            note: None,
            why: None,
        }],
        ActionKind::Stop => vec![BodyLine {
            sign: Sign::Change,
            field: "status".to_owned(),
            value: "\"running\" -> \"stopped\"".to_owned(),
            note: None,
            why: None,
        }],
    }
}

/// The plan's summary sentence: `Plan: 1 to create, 2 to update.` (only kinds that occur).
pub(crate) fn summary_sentence(plan: &crate::plan::Plan) -> String {
    let parts: Vec<String> = plan
        .summary
        .parts()
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(label, n)| format!("{n} {label}"))
        .collect();
    format!("Plan: {}.", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_print_like_terraform() {
        assert_eq!(value(&json!("a\nb")), "\"a\\nb\"");
        assert_eq!(value(&json!(["web", "db"])), "[\"web\", \"db\"]");
        assert_eq!(value(&json!({"nesting": true})), "{ nesting = true }");
        assert_eq!(value(&json!(4096)), "4096");
        assert_eq!(gib(0.5), "0.5 GiB");
        assert_eq!(gib(16.0), "16 GiB");
    }
}
