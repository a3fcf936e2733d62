//! The mark pxfleet leaves on a container it manages: the tag [`MANAGED_TAG`] and a description line
//! `managed-by: pxfleet fleet=NAME name=NAME` ([`ManagedMark`]). This is the one definition: the agent writes
//! and checks it, the spec crate re-exports it for the planner and the controller.

use serde::{Deserialize, Serialize};

/// The tag pxfleet adds to every container it creates.
pub const MANAGED_TAG: &str = "pxfleet";

/// Prefix of the description line that marks a container as pxfleet's: `managed-by: pxfleet fleet=NAME name=NAME`.
pub const MANAGED_LINE_PREFIX: &str = "managed-by: pxfleet";

/// Which fleet and which entry of its file a container belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ManagedMark {
    pub fleet: String,
    pub name: String,
}

/// What PVE keeps of a description it is given (`write_pct_config` then `parse_pct_config`, CONTRACT §3.7): the
/// text split on `\n` as Perl's `split` does (trailing empty lines dropped, empty lines inside kept, nothing
/// trimmed: a line keeps its trailing spaces), each line followed by `\n`. Empty when nothing is left. Both
/// sides of every description comparison go through this, so that what pxfleet wrote is not seen as a change
/// and what was changed by hand is.
pub fn stored_description(text: &str) -> String {
    let mut lines: Vec<&str> = text.split('\n').collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// The user's part of a description as pxfleet writes and compares it: trailing newlines left out (PVE drops
/// trailing empty lines), everything else as given; `None` when nothing but whitespace is left.
pub fn user_description(text: Option<&str>) -> Option<&str> {
    let t = text?.trim_end_matches('\n');
    (!t.trim().is_empty()).then_some(t)
}

/// `description` without its first line that `is_mark` picks, the rest as [`user_description`].
fn without_first_line(description: &str, is_mark: impl Fn(&str) -> bool) -> Option<String> {
    let lines: Vec<&str> = description.split('\n').collect();
    let at = lines.iter().position(|l| is_mark(l));
    let kept: Vec<&str> = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != at)
        .map(|(_, l)| *l)
        .collect();
    user_description(Some(&kept.join("\n"))).map(str::to_owned)
}

impl ManagedMark {
    /// The description line that carries this mark.
    pub fn description_line(&self) -> String {
        format!(
            "{MANAGED_LINE_PREFIX} fleet={} name={}",
            self.fleet, self.name
        )
    }

    /// The mark a single description line carries: `managed-by: pxfleet fleet=F name=N` (surrounding
    /// whitespace allowed, words in any order); `None` for any other line, `managed-by: someone else` included.
    fn from_line(line: &str) -> Option<ManagedMark> {
        let rest = line.trim().strip_prefix(MANAGED_LINE_PREFIX)?;
        if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
            return None;
        }
        let mut fleet = None;
        let mut name = None;
        for word in rest.split_whitespace() {
            if let Some(v) = word.strip_prefix("fleet=") {
                fleet = Some(v.to_owned());
            } else if let Some(v) = word.strip_prefix("name=") {
                name = Some(v.to_owned());
            }
        }
        Some(ManagedMark {
            fleet: fleet.filter(|f| !f.is_empty())?,
            name: name.filter(|n| !n.is_empty())?,
        })
    }

    /// Finds the mark in a PVE description: the first line that is a mark line (`%0A`-decoding is the caller's
    /// job). `None` when the container is not ours.
    pub fn from_description(description: &str) -> Option<ManagedMark> {
        description.split('\n').find_map(Self::from_line)
    }

    /// The description without the mark line (what the fleet file's `description` corresponds to): only the
    /// first mark line is taken out; every other line, one that starts with `managed-by:` included, is the
    /// user's text and is kept as it is ([`user_description`]).
    pub fn strip_from_description(description: &str) -> Option<String> {
        without_first_line(description, |l| Self::from_line(l).is_some())
    }

    /// The description without this mark's own line (the first line that is exactly it), the rest as
    /// [`user_description`]: for a text that may or may not still carry the mark, where another mark-like line
    /// (of the user's own) must stay.
    pub fn strip_own(&self, description: &str) -> Option<String> {
        let own = self.description_line();
        without_first_line(description, |l| l.trim() == own)
    }

    /// The description to write: the mark first, then the user's own text ([`user_description`]).
    pub fn description(&self, user: Option<&str>) -> String {
        match user_description(user) {
            Some(u) => format!("{}\n{u}\n", self.description_line()),
            None => format!("{}\n", self.description_line()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mark_round_trips_and_ignores_foreign_text() {
        let m = ManagedMark {
            fleet: "dev".into(),
            name: "dev-web".into(),
        };
        let d = m.description(Some("Web server"));
        assert_eq!(
            d,
            "managed-by: pxfleet fleet=dev name=dev-web\nWeb server\n"
        );
        assert_eq!(ManagedMark::from_description(&d), Some(m.clone()));
        assert_eq!(ManagedMark::from_description("Web server\n"), None);
        assert_eq!(
            ManagedMark::from_description("managed-by: pxfleet fleet=dev\n"),
            None
        );
        assert_eq!(ManagedMark::from_description(&m.description(None)), Some(m));
    }

    #[test]
    fn mark_round_trips_through_a_description() {
        let m = ManagedMark {
            fleet: "dev".into(),
            name: "web-1".into(),
        };
        let d = format!("Web server\n{}\n", m.description_line());
        assert_eq!(ManagedMark::from_description(&d), Some(m));
        assert_eq!(
            ManagedMark::strip_from_description(&d).as_deref(),
            Some("Web server")
        );
        assert_eq!(ManagedMark::from_description("Web server\n"), None);
        assert_eq!(
            ManagedMark::from_description("managed-by: pxfleet fleet=dev"),
            None
        );
    }

    /// The description edge cases of issue 28: a line ending in a space, a line of the user's own that starts
    /// with `managed-by:` (even a mark-like one), empty lines inside and at the end. What pxfleet writes,
    /// stored and read back as PVE does, strips to exactly the user's text.
    #[test]
    fn user_text_survives_the_round_trip_through_pve() {
        let m = ManagedMark {
            fleet: "f".into(),
            name: "a".into(),
        };
        for user in [
            "ends in a space \nnext",
            "last line ends in spaces  ",
            "managed-by: the ops team\nsecond",
            "managed-by: pxfleet fleet=other name=x",
            "managed-by: pxfleet-ops",
            "\n\nafter two empty lines\n\n\n",
            "tab\tinside\t\n  indented",
            "a\r\nwindows",
        ] {
            let stored = stored_description(&m.description(Some(user)));
            assert_eq!(
                ManagedMark::from_description(&stored),
                Some(m.clone()),
                "{user:?}"
            );
            assert_eq!(
                ManagedMark::strip_from_description(&stored).as_deref(),
                user_description(Some(user)),
                "{user:?}"
            );
        }
        assert_eq!(
            ManagedMark::strip_from_description(&m.description(Some("  \n"))),
            None
        );
        // with or without its own line, the user's mark-like line stays
        let user = "managed-by: pxfleet fleet=x name=y\nmore";
        assert_eq!(
            m.strip_own(&m.description(Some(user))).as_deref(),
            Some(user)
        );
        assert_eq!(m.strip_own(user).as_deref(), Some(user));
        assert_eq!(
            ManagedMark::from_description("managed-by: pxfleet-ops fleet=a name=b\n"),
            None
        );
        assert_eq!(stored_description("a \n\nb"), "a \n\nb\n");
        assert_eq!(stored_description("a\n\n"), "a\n");
        assert_eq!(stored_description(""), "");
    }
}
