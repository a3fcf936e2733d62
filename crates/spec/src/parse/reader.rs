//! The typed readers of the decoder: one YAML node to a string, number, flag, list or
//! mapping (reporting the wrong type or range as a diagnostic at the node), unknown-field
//! reports with aliases and "did you mean", and the recording of each path's position.

use std::collections::BTreeMap;

use super::{alias, join, leaf, quote, Cx};
use crate::diag::{did_you_mean, Diagnostic};
use crate::model::*;
use crate::syntax;
use crate::yaml::{self, Entry, Node, Value};

impl Cx<'_> {
    pub(super) fn err(
        &mut self,
        span: Span,
        path: &str,
        message: impl Into<String>,
        hint: Option<&str>,
    ) {
        let mut d = Diagnostic::new(self.file, span, path, message);
        d.hint = hint.map(str::to_owned);
        self.diags.push(d);
    }

    /// An error at the best known position of `path`.
    pub(super) fn err_at(&mut self, path: &str, message: impl Into<String>, hint: Option<&str>) {
        let span = self.lookup(path);
        self.err(span, path, message, hint);
    }

    /// A known field written with nothing after it (`domain:`), which counts as not given. `gateway` and
    /// `gateway6` are the exception: an empty one is an error of its own.
    pub(super) fn given_empty(e: &Entry, known: &[&str]) -> bool {
        e.value.is_null() && known.contains(&e.key.as_str()) && !e.key.starts_with("gateway")
    }

    pub(super) fn unknown_field(&mut self, e: &Entry, path: &str, known: &[&str]) {
        let p = join(path, &e.key);
        if let Some((target, why)) =
            alias(&e.key).filter(|(t, _)| known.contains(&t.split('.').next().unwrap_or(t)))
        {
            let msg = format!("unknown field {}; did you mean '{target}'?", quote(&e.key));
            self.err(e.key_span, &p, msg, why);
            return;
        }
        match did_you_mean(&e.key, known) {
            Some(s) => self.err(
                e.key_span,
                &p,
                format!("unknown field {}; did you mean '{s}'?", quote(&e.key)),
                None,
            ),
            None => {
                let hint = format!("fields allowed here: {}", known.join(", "));
                self.err(
                    e.key_span,
                    &p,
                    format!("unknown field {}", quote(&e.key)),
                    Some(&hint),
                );
            }
        }
    }

    pub(super) fn wrong_type(&mut self, n: &Node, path: &str, expected: &str) {
        let got = match &n.value {
            Value::Scalar { text, .. } if !n.is_null() => format!("{} {}", n.kind(), quote(text)),
            _ => n.kind().to_owned(),
        };
        let quoted_value = matches!(&n.value, Value::Scalar { text, plain: false }
            if text.parse::<f64>().is_ok() || yaml::parse_bool(text).is_some());
        let hint = quoted_value.then_some("quotes make a string: write the value without quotes");
        self.err(
            n.span,
            path,
            format!("{} must be {expected}, got {got}", leaf(path)),
            hint,
        );
    }

    /// The path of a mapping entry whose key is free-form (a variable, a parameter), recorded; `None` with an
    /// error at the key when `valid` says no (`what`: what the key names, `hint`: what it may be).
    pub(super) fn keyed_entry(
        &mut self,
        e: &Entry,
        path: &str,
        valid: bool,
        what: &str,
        hint: &str,
    ) -> Option<String> {
        let p = super::join(path, &e.key);
        self.record(&p, e.value.span);
        if !valid {
            self.err(
                e.key_span,
                &p,
                format!("{what} {} is not valid", super::quote(&e.key)),
                Some(hint),
            );
            return None;
        }
        Some(p)
    }

    pub(super) fn map<'n>(&mut self, n: &'n Node, path: &str) -> Option<&'n [Entry]> {
        match &n.value {
            Value::Map(es) => Some(es),
            _ if n.is_null() => Some(&[]),
            _ => {
                self.wrong_type(n, path, "a mapping (`key: value` lines)");
                None
            }
        }
    }

    pub(super) fn seq<'n>(&mut self, n: &'n Node, path: &str) -> Option<&'n [Node]> {
        match &n.value {
            Value::Seq(v) => Some(v),
            _ if n.is_null() => Some(&[]),
            _ => {
                self.wrong_type(n, path, "a list (`[a, b]` or `- a` lines)");
                None
            }
        }
    }

    pub(super) fn string(&mut self, n: &Node, path: &str) -> Option<String> {
        match &n.value {
            Value::Scalar { text, .. } if !n.is_null() => Some(text.clone()),
            _ => {
                self.wrong_type(n, path, "a string");
                None
            }
        }
    }

    /// `drift: repair | report`.
    pub(super) fn drift_policy(&mut self, n: &Node, path: &str) -> Option<DriftPolicy> {
        match self.string(n, path).as_deref() {
            Some("repair") => Some(DriftPolicy::Repair),
            Some("report") => Some(DriftPolicy::Report),
            Some(other) => {
                self.err(
                    n.span,
                    path,
                    format!("drift {} is not repair or report", quote(other)),
                    Some("`drift: repair` (the default) or `drift: report`"),
                );
                None
            }
            None => None,
        }
    }

    pub(super) fn boolean(&mut self, n: &Node, path: &str) -> Option<bool> {
        if let Value::Scalar { text, plain: true } = &n.value {
            if let Some(b) = yaml::parse_bool(text) {
                return Some(b);
            }
        }
        self.wrong_type(n, path, "true or false");
        None
    }

    /// An integer in `min..=max`; `what` describes the range in PVE's words.
    pub(super) fn int(
        &mut self,
        n: &Node,
        path: &str,
        min: i64,
        max: i64,
        unit: &str,
    ) -> Option<i64> {
        let v = match &n.value {
            Value::Scalar { text, plain: true } => text.parse::<i64>().ok(),
            _ => None,
        };
        let Some(v) = v else {
            self.wrong_type(n, path, &format!("an integer{unit}"));
            return None;
        };
        let field = leaf(path);
        if v < min {
            self.err(
                n.span,
                path,
                format!("{field} must be at least {min}{unit}, got {v}"),
                Some(&format!("PVE accepts {field} from {min} to {max}")),
            );
            None
        } else if v > max {
            self.err(
                n.span,
                path,
                format!("{field} must be at most {max}{unit}, got {v}"),
                Some(&format!("PVE accepts {field} from {min} to {max}")),
            );
            None
        } else {
            Some(v)
        }
    }

    pub(super) fn number(&mut self, n: &Node, path: &str, min: f64, max: f64) -> Option<f64> {
        let v = match &n.value {
            Value::Scalar { text, plain: true } => {
                text.parse::<f64>().ok().filter(|v| v.is_finite())
            }
            _ => None,
        };
        let Some(v) = v else {
            self.wrong_type(n, path, "a number");
            return None;
        };
        if !(min..=max).contains(&v) {
            self.err(
                n.span,
                path,
                format!("{} must be between {min} and {max}, got {v}", leaf(path)),
                None,
            );
            return None;
        }
        Some(v)
    }

    pub(super) fn strings(&mut self, n: &Node, path: &str) -> Option<Vec<(String, Span)>> {
        let items = self.seq(n, path)?;
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match self.string(item, &join(path, &i.to_string())) {
                Some(s) => out.push((s, item.span)),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    pub(super) fn string_map(&mut self, n: &Node, path: &str) -> Option<BTreeMap<String, String>> {
        let es = self.map(n, path)?;
        let mut out = BTreeMap::new();
        for e in es {
            let p = join(path, &e.key);
            if !syntax::is_simple_name(&e.key) {
                self.err(
                    e.key_span,
                    &p,
                    format!(
                        "label key {} has characters outside letters, digits, '.', '_', '-', '/'",
                        quote(&e.key)
                    ),
                    None,
                );
                continue;
            }
            if let Some(v) = self.string(&e.value, &p) {
                out.insert(e.key.clone(), v);
            }
        }
        Some(out)
    }

    pub(super) fn record(&mut self, path: &str, span: Span) {
        self.recorded.push_unsorted(path, span);
    }

    /// Everything but the containers is decoded: keep those positions apart (their sorted
    /// index stays small) and record the containers' from scratch.
    pub(super) fn set_aside_spans(&mut self) {
        self.spans = Spans::from_unsorted(self.recorded.iter_raw());
        self.recorded.clear(); // keeps the room reserved for the containers' paths
    }

    /// All positions, set-aside and recorded, in `spans`.
    pub(super) fn finish_spans(&mut self) {
        let mut all = std::mem::take(&mut self.recorded);
        all.extend_unsorted(self.spans.iter_raw());
        self.spans = all;
    }

    /// Best known position of `path` (see [`Spans::lookup`]): among the sorted positions, or
    /// those of the container being decoded (not sorted yet).
    pub(super) fn lookup(&self, path: &str) -> Span {
        let (spans, rec, start) = (&self.spans, &self.recorded, self.container_start);
        Spans::lookup_by(path, |p| spans.get(p).or_else(|| rec.scan_from(start, p)))
    }
}
