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

impl ManagedMark {
    /// The description line that carries this mark.
    pub fn description_line(&self) -> String {
        format!(
            "{MANAGED_LINE_PREFIX} fleet={} name={}",
            self.fleet, self.name
        )
    }

    /// Finds the mark in a PVE description (any line; `%0A`-decoding is the caller's job). `None` when the
    /// container is not ours.
    pub fn from_description(description: &str) -> Option<ManagedMark> {
        description.lines().find_map(|line| {
            let rest = line.trim().strip_prefix(MANAGED_LINE_PREFIX)?;
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
                fleet: fleet?,
                name: name?,
            })
        })
    }

    /// The description without the mark line (what the fleet file's `description` corresponds to).
    pub fn strip_from_description(description: &str) -> Option<String> {
        let kept: Vec<&str> = description
            .lines()
            .filter(|l| !l.trim().starts_with(MANAGED_LINE_PREFIX))
            .collect();
        let text = kept.join("\n");
        let text = text.trim_end();
        (!text.is_empty()).then(|| text.to_owned())
    }

    /// The description to write: the mark first, then the user's own text.
    pub fn description(&self, user: Option<&str>) -> String {
        match user {
            Some(u) if !u.trim().is_empty() => {
                format!("{}\n{}\n", self.description_line(), u.trim_end())
            }
            _ => format!("{}\n", self.description_line()),
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
}
