//! Source positions: a [`Span`] (line:column) and [`Spans`], the compact map from field path
//! to position kept beside the model so later checks can point at the line that caused them.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A position in a source file, both 1-based (the column counts characters).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Span {
    pub line: u32,
    pub column: u32,
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Source positions by field path (`containers.web-1.memory`, `templates.ubuntu.sha256`,
/// `containers.web-1.extra_interfaces.0.ip_address`). A container whose field came from
/// `defaults` has no entry for it; [`Spans::lookup`] falls back to the parent path, then to
/// `defaults.<field>`.
///
/// Stored compactly (all paths in one string, an index beside it): a 10,000-container file
/// has some 300,000 paths, and one allocation per path would cost more than the parse. The
/// sorted index is built on the first lookup, so parsing never pays for sorting. When a path is
/// given twice, the last position wins. Serializes as a map `path -> {line, column}`.
#[derive(Clone, Debug, Default)]
pub struct Spans {
    arena: String,
    /// `(start, len, span)` into `arena`, in the order given.
    entries: Vec<(u32, u32, Span)>,
    /// `entries` sorted by path, one per path; built on first use.
    sorted: std::sync::OnceLock<Vec<(u32, u32, Span)>>,
}

impl PartialEq for Spans {
    /// Source positions are metadata: reformatting a file does not change the fleet.
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Spans {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of distinct paths.
    pub fn len(&self) -> usize {
        self.sorted().len()
    }

    fn key(&self, e: &(u32, u32, Span)) -> &str {
        &self.arena[e.0 as usize..(e.0 + e.1) as usize]
    }

    fn sorted(&self) -> &[(u32, u32, Span)] {
        self.sorted.get_or_init(|| {
            let mut v = self.entries.clone();
            // by path, later entries (larger arena offset) first, so the dedup keeps the last
            v.sort_unstable_by(|a, b| self.key(a).cmp(self.key(b)).then(b.0.cmp(&a.0)));
            v.dedup_by(|later, first| self.key(later) == self.key(first));
            v
        })
    }

    fn find(&self, path: &str) -> Result<usize, usize> {
        self.sorted().binary_search_by(|e| self.key(e).cmp(path))
    }

    /// Set the position of `path` (replacing an earlier one).
    pub fn insert(&mut self, path: impl AsRef<str>, span: Span) {
        self.push_unsorted(path.as_ref(), span);
    }

    /// Build from `(path, span)` pairs in any order.
    pub fn from_unsorted<S: AsRef<str>>(pairs: impl IntoIterator<Item = (S, Span)>) -> Spans {
        let mut out = Spans::default();
        out.extend_unsorted(pairs);
        out
    }

    /// Add many positions at once.
    pub fn extend_unsorted<S: AsRef<str>>(&mut self, pairs: impl IntoIterator<Item = (S, Span)>) {
        for (p, span) in pairs {
            self.push_unsorted(p.as_ref(), span);
        }
    }

    /// Reserve room for about `paths` more paths of `bytes` bytes in total.
    pub(crate) fn reserve(&mut self, paths: usize, bytes: usize) {
        self.entries.reserve(paths);
        self.arena.reserve(bytes);
    }

    /// Forget all positions, keeping the allocated room.
    pub(crate) fn clear(&mut self) {
        self.arena.clear();
        self.entries.clear();
        self.sorted = std::sync::OnceLock::new();
    }

    /// Number of entries as given (duplicates included); see [`Spans::scan_from`].
    pub(crate) fn raw_len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn push_unsorted(&mut self, path: &str, span: Span) {
        self.sorted = std::sync::OnceLock::new();
        self.entries
            .push((self.arena.len() as u32, path.len() as u32, span));
        self.arena.push_str(path);
    }

    /// Exact position of `path`, if it was written in the file.
    pub fn get(&self, path: &str) -> Option<Span> {
        self.find(path).ok().map(|i| self.sorted()[i].2)
    }

    /// All `(path, span)` in path order, one per path.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Span)> + '_ {
        self.sorted().iter().map(|e| (self.key(e), e.2))
    }

    /// All `(path, span)` in the order given (duplicates included).
    pub(crate) fn iter_raw(&self) -> impl Iterator<Item = (&str, Span)> + '_ {
        self.entries.iter().map(|e| (self.key(e), e.2))
    }

    /// Best position for `path`: the path itself, else the same field under `defaults` for
    /// container fields, else its nearest written ancestor
    /// (`containers.web-1.memory` -> `containers.web-1`), else line 1 column 1.
    pub fn lookup(&self, path: &str) -> Span {
        Spans::lookup_by(path, |p| self.get(p))
    }

    /// [`Spans::lookup`]'s fallback chain over any exact-position getter.
    pub(crate) fn lookup_by(path: &str, get: impl Fn(&str) -> Option<Span>) -> Span {
        if let Some(s) = get(path) {
            return s;
        }
        if let Some(rest) = path.strip_prefix("containers.") {
            // containers.<key>.<field...> -> defaults.<field...>
            if let Some((_, field)) = rest.split_once('.') {
                if let Some(s) = get(&format!("defaults.{field}")) {
                    return s;
                }
            }
        }
        let mut p = path;
        while let Some((parent, _)) = p.rsplit_once('.') {
            if let Some(s) = get(parent) {
                return s;
            }
            p = parent;
        }
        Span { line: 1, column: 1 }
    }

    /// Exact position of `path` among the entries from raw position `start` on, by a linear
    /// scan that does not build the sorted index (the last match wins).
    pub(crate) fn scan_from(&self, start: usize, path: &str) -> Option<Span> {
        self.entries
            .get(start..)?
            .iter()
            .rev()
            .find(|e| self.key(e) == path)
            .map(|e| e.2)
    }
}

impl Serialize for Spans {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for Spans {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m = BTreeMap::<String, Span>::deserialize(d)?;
        Ok(Spans::from_unsorted(m))
    }
}
