//! How the pure parser reads the files a fleet refers to (`file:` SSH keys): through a
//! [`FileSource`] its caller hands in. The CLI and controller pass the real file system
//! ([`FsFiles`] lives in the CLI); tests pass [`MemFiles`] or [`NoFiles`].

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// Reads a file named by the fleet file. Paths arrive already resolved against the fleet file's
/// directory.
pub trait FileSource {
    fn read(&self, path: &Path) -> io::Result<String>;
}

/// A source with no files at all: every `file:` key is an error.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoFiles;

impl FileSource for NoFiles {
    fn read(&self, path: &Path) -> io::Result<String> {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no files are available here (asked for {})", path.display()),
        ))
    }
}

/// Files held in memory, by exact path.
#[derive(Clone, Debug, Default)]
pub struct MemFiles(pub BTreeMap<PathBuf, String>);

impl MemFiles {
    pub fn with(mut self, path: impl Into<PathBuf>, text: impl Into<String>) -> Self {
        self.0.insert(path.into(), text.into());
        self
    }
}

impl FileSource for MemFiles {
    fn read(&self, path: &Path) -> io::Result<String> {
        self.0
            .get(path)
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "No such file or directory"))
    }
}

/// Resolve a `file:PATH` reference: relative paths are taken next to the fleet file.
pub fn resolve_relative(fleet_file: &str, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        return p.to_path_buf();
    }
    match Path::new(fleet_file).parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(p),
        _ => p.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_resolve_next_to_the_fleet_file() {
        assert_eq!(
            resolve_relative("examples/dev/fleet.yaml", "keys/ops.pub"),
            PathBuf::from("examples/dev/keys/ops.pub")
        );
        assert_eq!(
            resolve_relative("fleet.yaml", "ops.pub"),
            PathBuf::from("ops.pub")
        );
        assert_eq!(
            resolve_relative("x/fleet.yaml", "/etc/k.pub"),
            PathBuf::from("/etc/k.pub")
        );
    }
}
