//! Template readiness and the digest policy: whether a node can create from a template without seeding first
//! ([`template_ready_on`]), and whether nodes hold different files for one URL template without checksum
//! ([`digest_conflict`]).

use pxfleet_spec::{Checksum, Template, TemplateSource};

use crate::convert;
use crate::model::NodeRecord;

/// Whether template `name` can be created from on node `n` without seeding first.
/// - An appliance: cached (inventory) or seeded.
/// - A clone of a container: always (nothing to seed; the agent's `pct clone` finds the source or fails).
/// - A volume already in storage: listed in the node's inventory, or found there by a seed operation (which only
///   checks; nothing is downloaded).
/// - A URL with a sha256: cached or seeded, unless the digest the node reported differs from the pin.
/// - A URL without checksum: only once the node reported the file's sha256 (a seed operation hashes a cached
///   file without downloading), so nodes can be compared; a seed by an agent that reports no digest counts.
pub fn template_ready_on(n: &NodeRecord, name: &str, t: &Template) -> bool {
    let volid = convert::template_volid(t);
    let seeded = n.seeded.get(name).map(String::as_str) == Some(volid.as_str());
    let cached = n.inventory.templates.contains(&volid);
    match &t.source {
        TemplateSource::Clone { .. } => true,
        // A volume: nothing to download; its seed operation checks that the node has it.
        TemplateSource::Pveam { .. } | TemplateSource::Volume { .. } => seeded || cached,
        TemplateSource::Url { url, checksum } => {
            let reported = n.template_digests.get(url);
            match checksum {
                None => seeded || reported.is_some(),
                Some(Checksum::Sha256(pin)) => {
                    let differs = reported.is_some_and(|r| !r.sha256.eq_ignore_ascii_case(pin));
                    (seeded || cached) && !differs
                }
                Some(Checksum::Sha512(_)) => seeded || cached,
            }
        }
    }
}

/// Two nodes reported different files for one URL template without checksum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestConflict {
    /// The node whose file differs from the first report.
    pub node: String,
    pub sha256: String,
    /// The node that reported the URL first, and its digest.
    pub reference_node: String,
    pub reference_sha256: String,
}

impl DigestConflict {
    /// The error a container on the differing node fails with.
    pub fn message(&self, name: &str, url: &str) -> String {
        format!(
            "template {name} ({url}) has no checksum and differs between nodes: {} has sha256 {}, {} has sha256 {}; \
             the URL served different files. Pin the one you want in fleet.yaml: \
             `templates: {name}: {{url: {url}, sha256: {}}}` and use `template: {name}`",
            self.node, self.sha256, self.reference_node, self.reference_sha256, self.reference_sha256
        )
    }
}

/// Whether `node`'s file for `url` differs from the earliest report of that URL by any node.
pub fn digest_conflict(nodes: &[NodeRecord], node: &str, url: &str) -> Option<DigestConflict> {
    let mine = nodes
        .iter()
        .find(|n| n.name == node)?
        .template_digests
        .get(url)?;
    let (ref_node, reference) = nodes
        .iter()
        .filter_map(|n| n.template_digests.get(url).map(|d| (n.name.as_str(), d)))
        .min_by(|a, b| (a.1.recorded_ms, a.0).cmp(&(b.1.recorded_ms, b.0)))?;
    (ref_node != node && !reference.sha256.eq_ignore_ascii_case(&mine.sha256)).then(|| {
        DigestConflict {
            node: node.to_string(),
            sha256: mine.sha256.clone(),
            reference_node: ref_node.to_string(),
            reference_sha256: reference.sha256.clone(),
        }
    })
}

/// The URL of a template without a declared checksum.
pub(crate) fn unpinned_url(t: &Template) -> Option<&str> {
    match &t.source {
        TemplateSource::Url {
            url,
            checksum: None,
        } => Some(url),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{node, template};

    #[test]
    fn template_readiness_by_source() {
        let mut n = node("n1", 8000);
        let mut t = template();
        n.inventory.templates = vec!["local:vztmpl/ubuntu.tar.xz".into()];
        // without checksum: a cached file is not enough, its digest must be known
        assert!(!template_ready_on(&n, "ubuntu", &t));
        n.template_digests.insert(
            "http://127.0.0.1/ubuntu.tar.xz".into(),
            crate::model::TemplateDigest {
                template: "ubuntu".into(),
                sha256: "aa".repeat(32),
                recorded_ms: 1,
            },
        );
        assert!(template_ready_on(&n, "ubuntu", &t));
        // pinned: cached is enough, unless the node reported another digest
        t.source = pxfleet_spec::TemplateSource::Url {
            url: "http://127.0.0.1/ubuntu.tar.xz".into(),
            checksum: Some(pxfleet_spec::Checksum::Sha256("aa".repeat(32))),
        };
        assert!(template_ready_on(&n, "ubuntu", &t));
        t.source = pxfleet_spec::TemplateSource::Url {
            url: "http://127.0.0.1/ubuntu.tar.xz".into(),
            checksum: Some(pxfleet_spec::Checksum::Sha256("cc".repeat(32))),
        };
        assert!(!template_ready_on(&n, "ubuntu", &t));
        // a clone needs no file: ready on a node with nothing cached, never seeded
        n.inventory.templates.clear();
        t.source = pxfleet_spec::TemplateSource::Clone {
            vm_id: 9000,
            node: "n1".into(),
            full: true,
            datastore_id: None,
        };
        assert!(template_ready_on(&n, "gold", &t));
    }

    #[test]
    fn a_clone_template_goes_to_the_agent_as_its_source_without_a_file() {
        let mut t = template();
        t.source = pxfleet_spec::TemplateSource::Clone {
            vm_id: 9000,
            node: "n1".into(),
            full: false,
            datastore_id: None,
        };
        let c = crate::testutil::container("web");
        let spec = convert::container_spec("dev", &c, 120, &t, None);
        assert_eq!(spec.template_volid, "");
        assert_eq!(
            spec.clone_source,
            Some(pxfleet_proto::v1::CloneSource {
                vm_id: 9000,
                full: false
            })
        );
    }
}
