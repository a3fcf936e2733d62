//! Storage-backed mount points (`mpN: STORAGE:VOLUME,mp=/path`) on the lxc backend: each volume is a sparse
//! image file holding ext4 (made the first time it is mounted, so a volume added by `pct set` gets its file
//! system at the next start), mounted through pvesim's own loop device on `<lxcdir>/mpN` while the container
//! runs, and bound into the container at its path by an `lxc.mount.entry` (`config::render`). Growth is online
//! through the loop device (`super::grow`). Bind mounts of host directories need none of this.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::rootfs::{self, Mounted};
use super::LxcError;
use crate::node::Node;

/// One volume mount point: its option key (`mp0`), its image file, and where it is mounted on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeMount {
    pub key: String,
    pub image: PathBuf,
    pub host_dir: PathBuf,
}

/// The storage-backed mount points of `opts`, in slot order. `dir` is the container's LXC directory.
pub fn of(
    node: &Node,
    vmid: u32,
    opts: &std::collections::BTreeMap<String, String>,
    dir: &Path,
) -> Result<Vec<VolumeMount>, LxcError> {
    let mut keys: Vec<(u32, &String, &String)> = opts
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("mp")?.parse::<u32>().ok()?, k, v)))
        .collect();
    keys.sort_by_key(|(n, _, _)| *n);
    let mut out = Vec::new();
    for (_, k, v) in keys {
        let vol = v
            .split(',')
            .next()
            .unwrap_or("")
            .trim_start_matches("volume=");
        if vol.starts_with('/') || !vol.contains(':') {
            continue; // a bind mount of a host directory
        }
        let image = crate::storage::volume_path(node, vol).map_err(|e| LxcError::Ct {
            vmid,
            msg: format!("{k}: {e}"),
        })?;
        out.push(VolumeMount {
            key: k.clone(),
            image,
            host_dir: host_dir(dir, k),
        });
    }
    Ok(out)
}

/// Where mount point `key` of the container in `dir` is mounted on the host while it runs.
pub fn host_dir(dir: &Path, key: &str) -> PathBuf {
    dir.join(key)
}

/// Whether `image` holds an ext2/3/4 file system (the superblock's magic 0xEF53 at byte 1080).
pub fn has_fs(image: &Path) -> bool {
    let mut magic = [0u8; 2];
    fs::File::open(image)
        .and_then(|mut f| {
            f.seek(SeekFrom::Start(1080))?;
            f.read_exact(&mut magic)
        })
        .is_ok()
        && magic == [0x53, 0xEF]
}

/// Mounts every volume mount point (making its file system first when it has none, its root owned by
/// `owner`) and leaves them mounted for the container. On an error the ones mounted so far are released.
pub fn mount_all(mounts: &[VolumeMount], owner: u32) -> Result<(), LxcError> {
    for (i, m) in mounts.iter().enumerate() {
        let r = (|| {
            if !has_fs(&m.image) {
                rootfs::mkfs(&m.image, owner)?;
            }
            Mounted::image(&m.image, &m.host_dir).map(Mounted::keep)
        })();
        if let Err(e) = r {
            release_all(&mounts[..i]);
            return Err(e);
        }
    }
    Ok(())
}

/// Unmounts the mount points in `mounts` and detaches their loop devices (errors are logged).
pub fn release_all(mounts: &[VolumeMount]) {
    for m in mounts {
        if let Err(e) = rootfs::release(&m.host_dir) {
            tracing::warn!(dir = %m.host_dir.display(), error = %e, "releasing a mount point volume");
        }
    }
}

/// Unmounts every `mpN` directory under the container's LXC directory (whatever the config says now).
pub fn release_dir(dir: &Path) -> Result<(), LxcError> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Ok(());
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name
            .strip_prefix("mp")
            .is_some_and(|n| n.parse::<u32>().is_ok())
        {
            rootfs::release(&e.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_without_ext4_has_no_fs() {
        let d = tempfile::tempdir().unwrap();
        let img = d.path().join("vm-100-disk-1.raw");
        fs::File::create(&img).unwrap().set_len(1 << 20).unwrap();
        assert!(!has_fs(&img));
        let mut bytes = vec![0u8; 2048];
        bytes[1080] = 0x53;
        bytes[1081] = 0xEF;
        fs::write(&img, bytes).unwrap();
        assert!(has_fs(&img));
        assert!(!has_fs(&d.path().join("missing")));
    }
}
