//! Identifiers as PVE's schema checks them, and the owner a volume id names.

/// A storage id as `pve-storage-id` takes it (pve-common `parse_id`): at least 2 characters, a letter first, a
/// letter or digit last, letters, digits, `-`, `_` and `.` between; letters of either case.
pub fn is_storage_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2
        && b[0].is_ascii_alphabetic()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A pool name as `pve-poolid` takes it (`verify_poolname`): up to three `/`-separated levels of letters, digits,
/// `.`, `-`, `_`, each starting with a letter (`create_pool`).
pub fn is_pool_id(s: &str) -> bool {
    let levels: Vec<&str> = s.split('/').collect();
    levels.len() <= 3
        && levels.iter().all(|l| {
            l.starts_with(|c: char| c.is_ascii_alphabetic())
                && l.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        })
}

/// `STORAGE:snippets/FILE`: what PVE's `check_hookscript` accepts by name (the file must also exist on the node
/// and be executable, which only the node can tell).
pub fn is_hookscript_volid(s: &str) -> bool {
    match s.split_once(':') {
        Some((st, name)) => {
            is_storage_id(st)
                && name.strip_prefix("snippets/").is_some_and(|f| {
                    !f.is_empty()
                        && !f.contains([',', ' ', '=', '\n'])
                        && !f.split('/').any(|p| p == "..")
                })
        }
        None => false,
    }
}

/// The vm_id a volume id's name gives as its owner (`local-lvm:vm-100-disk-1`, `local:100/vm-100-disk-1.raw`,
/// `local-zfs:subvol-100-disk-0`, `local-lvm:base-100-disk-0` -> 100), as PVE's `parse_volname` reads it: `pct
/// destroy` frees the volumes a container owns, whoever else mounts them.
pub fn volume_owner(volid: &str) -> Option<u32> {
    let file = volid.split_once(':')?.1.rsplit('/').next()?;
    let rest = ["vm-", "subvol-", "base-"]
        .iter()
        .find_map(|p| file.strip_prefix(p))?;
    rest.split('-').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_ids_follow_pve_parse_id() {
        for ok in ["local", "local-lvm", "Local", "nfs.backup_2", "ab"] {
            assert!(is_storage_id(ok), "{ok}");
        }
        for bad in ["", "a", "1local", "local-", "lo cal", "local:x", "-x"] {
            assert!(!is_storage_id(bad), "{bad}");
        }
    }

    #[test]
    fn pool_names_follow_pve_poolid() {
        for ok in ["web", "prod/web", "a/b/c", "Team_1.x-y"] {
            assert!(is_pool_id(ok), "{ok}");
        }
        for bad in ["", "1web", "a/b/c/d", "with space", "a:b", "prod/9"] {
            assert!(!is_pool_id(bad), "{bad}");
        }
    }

    #[test]
    fn hook_scripts_are_snippets_volumes() {
        assert!(is_hookscript_volid("local:snippets/hook.sh"));
        for bad in [
            "local:vztmpl/hook.sh",
            "/root/hook.sh",
            "local:snippets/",
            "local:snippets/../x",
            "local:snippets/a b",
        ] {
            assert!(!is_hookscript_volid(bad), "{bad}");
        }
    }

    #[test]
    fn volume_owners_as_pve_names_them() {
        assert_eq!(volume_owner("local-lvm:vm-100-disk-1"), Some(100));
        assert_eq!(volume_owner("local:100/vm-100-disk-1.raw"), Some(100));
        assert_eq!(volume_owner("local-zfs:subvol-2820-disk-0"), Some(2820));
        assert_eq!(volume_owner("local-lvm:base-9000-disk-0"), Some(9000));
        assert_eq!(volume_owner("local:iso/debian.iso"), None);
        assert_eq!(volume_owner("/srv/data"), None);
    }
}
