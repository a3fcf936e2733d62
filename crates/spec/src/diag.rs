//! Diagnostics: one error in a fleet file, with file:line:column, the field path, what is wrong
//! and (as a hint) what would be right. All of a file's diagnostics are collected and reported
//! together.

use std::fmt;

use crate::model::Span;

/// One problem found in a fleet file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Diagnostic {
    /// The file as the user named it.
    pub file: String,
    /// 1-based.
    pub line: u32,
    /// 1-based, in characters.
    pub column: u32,
    /// Field path such as `containers.web-1.memory`; empty for errors of the YAML syntax itself.
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// What would be right, when there is something useful to say.
    pub hint: Option<String>,
}

impl Diagnostic {
    pub fn new(
        file: &str,
        span: Span,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Diagnostic {
            file: file.to_owned(),
            line: span.line,
            column: span.column,
            path: path.into(),
            message: message.into(),
            hint: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn span(&self) -> Span {
        Span {
            line: self.line,
            column: self.column,
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

/// All the problems of one file (never empty when returned as an error), in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq, thiserror::Error)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }

    /// Sort by position (stable, so diagnostics at one position keep their order) and drop exact
    /// duplicates.
    pub fn sort(&mut self) {
        self.0.sort_by_key(|d| (d.line, d.column));
        self.0.dedup();
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// The closest of `candidates` to `word`, if close enough to be a plausible typo: a small edit
/// distance (1 for short words, 2 otherwise), a prefix (`mem` -> `memory`), or a high
/// Jaro-Winkler similarity.
pub fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let max_edits = if word.chars().count() <= 4 { 1 } else { 2 };
    let mut best: Option<(&str, f64)> = None;
    for c in candidates {
        let d = strsim::damerau_levenshtein(word, c);
        let jw = strsim::jaro_winkler(word, c);
        let prefix = word.len() >= 3 && c.starts_with(word);
        let close = d <= max_edits || prefix || jw >= 0.9;
        let score = if prefix { jw + 1.0 } else { jw };
        if close && best.is_none_or(|(_, s)| score > s) {
            best = Some((c, score));
        }
    }
    best.map(|(c, _)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_has_position_path_and_hint() {
        let d = Diagnostic::new(
            "fleet.yaml",
            Span {
                line: 7,
                column: 13,
            },
            "containers.web-1.memory",
            "memory must be at least 16 (MiB), got 8",
        )
        .with_hint("PVE refuses less than 16 MiB");
        assert_eq!(
            d.to_string(),
            "fleet.yaml:7:13: containers.web-1.memory: memory must be at least 16 (MiB), got 8\n  hint: PVE refuses less than 16 MiB"
        );
    }

    #[test]
    fn suggestions() {
        assert_eq!(did_you_mean("memroy", &["memory", "swap"]), Some("memory"));
        assert_eq!(
            did_you_mean("ip_adress", &["ip_address", "gateway"]),
            Some("ip_address")
        );
        assert_eq!(did_you_mean("zzzzzz", &["memory", "swap"]), None);
        assert_eq!(did_you_mean("mem", &["mtu", "memory"]), Some("memory"));
        assert_eq!(did_you_mean("cpu", &["mtu", "cores"]), None);
    }
}
