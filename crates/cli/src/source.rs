//! Reading what pxctl sends: a fleet file and the files it refers to (`file:` SSH keys, found by parsing
//! the fleet with the same pure spec code the controller uses), and saved plans (`pxctl plan --out`).
//!
//! A saved plan never holds the fleet's text (which may carry passwords): it records where the fleet file
//! is and a SHA-256 of what was planned; `pxctl submit PLAN.json` re-reads the file, refuses if it changed,
//! and sends it with the plan and the revision it was computed against.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{CliError, Result};

/// A fleet file as sent to the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetSource {
    /// The file as the user named it (diagnostics use it).
    pub file_name: String,
    pub source: String,
    /// Referenced files: keyed both by the path the spec parser asks for (resolved against the fleet file's
    /// directory, given `file_name`) and by the path relative to that directory (as written in the fleet).
    pub files: BTreeMap<String, String>,
}

/// Records every file the parser asks for, reading it from disk.
struct Recorder(RefCell<BTreeMap<PathBuf, String>>);

impl pxfleet_spec::FileSource for Recorder {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        let text = std::fs::read_to_string(path)?;
        self.0.borrow_mut().insert(path.to_path_buf(), text.clone());
        Ok(text)
    }
}

impl FleetSource {
    /// Reads `path` and every file it refers to (missing files are left for the controller to report with
    /// the fleet's line and column).
    pub fn read(path: &str) -> Result<FleetSource> {
        let source = std::fs::read_to_string(path).map_err(|source| CliError::Io {
            action: "reading fleet file",
            path: path.into(),
            source,
        })?;
        Ok(FleetSource::from_text(path, source))
    }

    /// Like [`FleetSource::read`] for text already read.
    pub fn from_text(file_name: &str, source: String) -> FleetSource {
        let rec = Recorder(RefCell::new(BTreeMap::new()));
        // Only the reads matter here; the controller reports the diagnostics.
        let _ = pxfleet_spec::parse_fleet(file_name, &source, &rec);
        let _ = pxfleet_spec::read_policies(file_name, &source, &rec);
        let dir = Path::new(file_name).parent().unwrap_or(Path::new(""));
        let mut files = BTreeMap::new();
        for (p, text) in rec.0.into_inner() {
            if let Ok(rel) = p.strip_prefix(dir) {
                files.insert(rel.to_string_lossy().into_owned(), text.clone());
            }
            files.insert(p.to_string_lossy().into_owned(), text);
        }
        FleetSource {
            file_name: file_name.to_string(),
            source,
            files,
        }
    }

    /// SHA-256 (hex) over the fleet text and every referenced file.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.source.as_bytes());
        for (k, v) in &self.files {
            h.update([0u8]);
            h.update(k.as_bytes());
            h.update([0u8]);
            h.update(v.as_bytes());
        }
        hex::encode(h.finalize())
    }
}

/// Marker and version of the saved-plan document.
pub const SAVED_PLAN_VERSION: u32 = 1;

/// What `pxctl plan --out` writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedPlan {
    /// Always [`SAVED_PLAN_VERSION`]; also how `submit` recognises a saved plan.
    pub pxfleet_saved_plan: u32,
    pub fleet: String,
    /// The fleet revision the plan was computed against; submit is refused if it moved.
    pub base_revision: u64,
    /// The fleet file as named at plan time.
    pub file_name: String,
    /// Its absolute path at plan time.
    pub path: PathBuf,
    /// [`FleetSource::digest`] at plan time.
    pub inputs_sha256: String,
    /// The plan document (schema in docs/plan-json.md).
    pub plan: serde_json::Value,
}

impl SavedPlan {
    /// Recognises a saved plan: `Ok(None)` when `text` is not one (then it is a fleet file).
    pub fn parse(path: &Path, text: &str) -> Result<Option<SavedPlan>> {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
            return Ok(None);
        };
        let bad = |reason: String| CliError::SavedPlan {
            path: path.to_path_buf(),
            reason,
        };
        if v.get("pxfleet_saved_plan").is_none() {
            if v.get("schema_version").is_some() && v.get("actions").is_some() {
                return Err(bad("this is a plan rendering (`-o json`), not a saved plan; save one with `pxctl plan FILE --out PLAN.json`".into()));
            }
            return Ok(None);
        }
        let saved: SavedPlan = serde_json::from_value(v).map_err(|e| bad(e.to_string()))?;
        if saved.pxfleet_saved_plan != SAVED_PLAN_VERSION {
            return Err(bad(format!(
                "version {} is not known to this pxctl (it reads {SAVED_PLAN_VERSION}); plan again",
                saved.pxfleet_saved_plan
            )));
        }
        Ok(Some(saved))
    }

    /// Re-reads the fleet file the plan was made from, refusing if anything changed since.
    pub fn fleet_source(&self, plan_path: &Path) -> Result<FleetSource> {
        let bad = |reason: String| CliError::SavedPlan {
            path: plan_path.to_path_buf(),
            reason,
        };
        let text = std::fs::read_to_string(&self.path)
            .or_else(|_| std::fs::read_to_string(&self.file_name))
            .map_err(|e| {
                bad(format!(
                    "cannot read the fleet file it was made from ({}): {e}",
                    self.path.display()
                ))
            })?;
        let src = FleetSource::from_text(&self.file_name, text);
        if src.digest() != self.inputs_sha256 {
            return Err(bad(format!(
                "{} (or a file it refers to) changed since the plan was saved; run `pxctl plan {} --out {}` again",
                self.file_name,
                self.file_name,
                plan_path.display()
            )));
        }
        Ok(src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLEET: &str = "fleet: dev\ndefaults: {ssh_public_keys: [\"file:keys/ops.pub\"]}\ntemplates:\n  deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}\ncontainers:\n  web-1: {template: deb}\n";
    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ops@example\n";

    #[test]
    fn referenced_files_are_sent_under_both_names() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("keys")).unwrap();
        std::fs::write(dir.path().join("keys/ops.pub"), KEY).unwrap();
        let fleet = dir.path().join("fleet.yaml");
        std::fs::write(&fleet, FLEET).unwrap();
        let src = FleetSource::read(fleet.to_str().unwrap()).unwrap();
        assert_eq!(src.source, FLEET);
        assert_eq!(src.files.get("keys/ops.pub").map(String::as_str), Some(KEY));
        let abs = dir.path().join("keys/ops.pub").display().to_string();
        assert_eq!(src.files.get(&abs).map(String::as_str), Some(KEY));
        // The controller, parsing with the same name and these files, finds the key.
        let files = pxfleet_spec::MemFiles::default().with(&abs, KEY);
        assert!(pxfleet_spec::parse_fleet(&src.file_name, &src.source, &files).is_ok());
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let err = FleetSource::read("/nonexistent/fleet.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("reading fleet file /nonexistent/fleet.yaml: "),
            "{err}"
        );
    }

    #[test]
    fn saved_plan_detects_changes_to_the_fleet() {
        let dir = tempfile::tempdir().unwrap();
        let fleet = dir.path().join("fleet.yaml");
        std::fs::write(&fleet, FLEET).unwrap();
        let src = FleetSource::read(fleet.to_str().unwrap()).unwrap();
        let saved = SavedPlan {
            pxfleet_saved_plan: 1,
            fleet: "dev".into(),
            base_revision: 3,
            file_name: src.file_name.clone(),
            path: fleet.clone(),
            inputs_sha256: src.digest(),
            plan: serde_json::json!({"schema_version": 1}),
        };
        let plan_path = dir.path().join("plan.json");
        let text = serde_json::to_string(&saved).unwrap();
        let back = SavedPlan::parse(&plan_path, &text).unwrap().unwrap();
        assert_eq!(back, saved);
        assert_eq!(back.fleet_source(&plan_path).unwrap(), src);
        std::fs::write(&fleet, FLEET.replace("web-1", "web-2")).unwrap();
        let err = back.fleet_source(&plan_path).unwrap_err().to_string();
        assert!(err.contains("changed since the plan was saved"), "{err}");
        assert!(SavedPlan::parse(&plan_path, FLEET).unwrap().is_none());
        let err = SavedPlan::parse(&plan_path, "{\"schema_version\":1,\"actions\":[]}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a saved plan"), "{err}");
    }
}
