//! Whether a move can be `pct migrate`: PVE migrates a container only between nodes of one cluster, and only
//! when every volume's datastore (rootfs and volume mount points) is on the target node with `rootdir` content
//! (pve-container `PVE::LXC::Migrate::prepare`; a shared storage counts when the target reports it too). A move
//! that cannot migrate is planned as a replacement whose reason says why, before anything happens.

use std::collections::BTreeMap;

use crate::observed::ObservedContainer;
use crate::world::NodeFacts;

/// What the planner knows of the nodes, by name: their cluster and datastores (from the agents' inventories).
/// A move from or to a node it knows nothing of is not checked: it is planned as a migration.
pub type Nodes = BTreeMap<String, NodeFacts>;

/// Why observed `o` cannot migrate from its node to `to` (a sentence for the plan), or `None` when it can or
/// when either node is unknown. The datastores are those of its rootfs and volume mount points as observed.
pub(crate) fn blocker(nodes: &Nodes, o: &ObservedContainer, to: &str) -> Option<String> {
    let rootfs = o.config.datastore_id.iter().map(String::as_str);
    let volumes = o
        .config
        .mount_points
        .iter()
        .filter_map(|m| m.mount.datastore());
    why_not_migrate(nodes, &o.node, to, rootfs.chain(volumes))
}

/// Why a container on node `from` whose volumes are on `datastores` cannot be migrated to `to`, or `None` when
/// it can, or when either node is unknown (nothing to check against).
pub fn why_not_migrate<'a>(
    nodes: &Nodes,
    from: &str,
    to: &str,
    datastores: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let (src, dst) = (nodes.get(from)?, nodes.get(to)?);
    let cross = "pct migrate cannot cross clusters";
    match (&src.cluster, &dst.cluster) {
        (Some(a), Some(b)) if a == b => {}
        (Some(a), Some(b)) => return Some(format!("{to} is in cluster {b}, not {a}: {cross}")),
        (Some(a), None) => {
            return Some(format!(
                "{to} is a standalone node, not in cluster {a}: {cross}"
            ))
        }
        (None, Some(b)) => {
            return Some(format!(
                "{to} is in cluster {b}, {from} is a standalone node: {cross}"
            ))
        }
        (None, None) => {
            return Some(format!(
                "{from} and {to} are standalone nodes: pct migrate moves a container only within a cluster"
            ))
        }
    }
    for ds in datastores {
        match dst.datastores.get(ds) {
            None => return Some(format!("datastore {ds} is not on {to}")),
            Some(f) if !f.content.contains("rootdir") => {
                return Some(format!(
                    "datastore {ds} on {to} does not hold containers (no rootdir content)"
                ))
            }
            Some(_) => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::MemoryWorld;

    fn nodes() -> Nodes {
        MemoryWorld::default()
            .with_node(
                "mk1",
                &[("local-lvm", &["rootdir"]), ("fast", &["rootdir"])],
                &["vmbr0"],
            )
            .with_node(
                "mk2",
                &[("local-lvm", &["rootdir"]), ("iso", &["iso"])],
                &["vmbr0"],
            )
            .with_node(
                "mk3",
                &[("local-lvm", &["rootdir"]), ("fast", &["rootdir"])],
                &["vmbr0"],
            )
            .with_node("solo", &[("local-lvm", &["rootdir"])], &["vmbr0"])
            .in_cluster("mk1", "A")
            .in_cluster("mk2", "A")
            .in_cluster("mk3", "B")
            .nodes
    }

    #[test]
    fn within_one_cluster_with_the_datastores_it_migrates() {
        assert_eq!(why_not_migrate(&nodes(), "mk1", "mk2", ["local-lvm"]), None);
        // Nothing known of a node: nothing to refuse.
        assert_eq!(why_not_migrate(&nodes(), "mk1", "mk9", ["fast"]), None);
    }

    #[test]
    fn each_reason_names_the_node_and_what_is_missing() {
        let n = nodes();
        let why =
            |from, to, ds: &[&str]| why_not_migrate(&n, from, to, ds.iter().copied()).unwrap();
        assert_eq!(
            why("mk1", "mk3", &["local-lvm"]),
            "mk3 is in cluster B, not A: pct migrate cannot cross clusters"
        );
        assert_eq!(
            why("mk1", "solo", &[]),
            "solo is a standalone node, not in cluster A: pct migrate cannot cross clusters"
        );
        assert_eq!(
            why("solo", "mk1", &[]),
            "mk1 is in cluster A, solo is a standalone node: pct migrate cannot cross clusters"
        );
        assert_eq!(
            why("mk1", "mk2", &["local-lvm", "fast"]),
            "datastore fast is not on mk2"
        );
        assert_eq!(
            why("mk1", "mk2", &["iso"]),
            "datastore iso on mk2 does not hold containers (no rootdir content)"
        );
    }
}
