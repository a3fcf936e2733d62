//! `pxctl validate FILE...`: parse and validate fleet files locally, report every problem of
//! every file on stderr, and say which files are valid on stdout. Nothing is sent anywhere.
//! Warnings (a template without checksum) go to stderr too but leave a file valid.

use std::io::{self, Write};
use std::path::Path;

use pxfleet_spec::{parse_fleet, FileSource, Fleet};

/// The real file system, for `file:` SSH keys (paths arrive resolved next to the fleet file).
#[derive(Clone, Copy, Debug, Default)]
pub struct FsFiles;

impl FileSource for FsFiles {
    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }
}

/// What one file turned out to be.
#[derive(Debug)]
pub enum Outcome {
    Valid(Box<Fleet>),
    /// The problems, already formatted (one diagnostic may span two lines: message and hint).
    Invalid(Vec<String>),
}

/// Validate one file's text.
pub fn validate_text(file: &str, text: &str, files: &dyn FileSource) -> Outcome {
    match parse_fleet(file, text, files) {
        Ok(f) => Outcome::Valid(Box::new(f)),
        Err(d) => Outcome::Invalid(d.iter().map(ToString::to_string).collect()),
    }
}

/// Validate files; write a line per valid file to `out` and every problem to `err`.
/// Returns true when all files are valid.
pub fn run(
    paths: &[String],
    files: &dyn FileSource,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> io::Result<bool> {
    let mut all_ok = true;
    for path in paths {
        let outcome = match std::fs::read_to_string(path) {
            Ok(text) => validate_text(path, &text, files),
            Err(e) => Outcome::Invalid(vec![format!("{path}: cannot read the file: {e}")]),
        };
        match outcome {
            Outcome::Valid(f) => {
                for w in pxfleet_spec::plan::template_warnings(&f) {
                    writeln!(err, "{path}: warning: {w}")?;
                }
                let n = f.containers.len();
                writeln!(
                    out,
                    "{path}: valid (fleet {}, {n} container{})",
                    f.name,
                    if n == 1 { "" } else { "s" }
                )?;
            }
            Outcome::Invalid(problems) => {
                all_ok = false;
                for p in &problems {
                    writeln!(err, "{p}")?;
                }
                let n = problems.len();
                writeln!(
                    err,
                    "{path}: invalid ({n} error{})",
                    if n == 1 { "" } else { "s" }
                )?;
            }
        }
    }
    Ok(all_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_all_errors_and_fails() {
        let dir = std::env::temp_dir().join(format!("pxctl-validate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.yaml");
        std::fs::write(
            &bad,
            "fleet: x\ntemplates: {d: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}}\ncontainers:\n  a: {template: d, memroy: 512, cores: 0}\n",
        )
        .unwrap();
        let good = dir.join("good.yaml");
        std::fs::write(
            &good,
            "fleet: x\ntemplates: {d: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}}\ncontainers:\n  a: {template: d}\n",
        )
        .unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let paths = vec![good.display().to_string(), bad.display().to_string()];
        let ok = run(&paths, &FsFiles, &mut out, &mut err).unwrap();
        assert!(!ok);
        let out = String::from_utf8(out).unwrap();
        let err = String::from_utf8(err).unwrap();
        assert!(
            out.contains("good.yaml: valid (fleet x, 1 container)"),
            "{out}"
        );
        assert!(err.contains("bad.yaml:4:20: containers.a.memroy: unknown field 'memroy'; did you mean 'memory'?"), "{err}");
        assert!(
            err.contains("containers.a.cores: cores must be at least 1, got 0"),
            "{err}"
        );
        assert!(err.contains("bad.yaml: invalid (2 errors)"), "{err}");
        assert!(!err.contains("warning"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_template_without_checksum_is_valid_with_a_warning() {
        let dir = std::env::temp_dir().join(format!("pxctl-validate-w-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("fleet.yaml");
        std::fs::write(
            &f,
            "fleet: x\ncontainers:\n  a: {template_url: https://h.example/u.tar.xz}\n",
        )
        .unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let ok = run(&[f.display().to_string()], &FsFiles, &mut out, &mut err).unwrap();
        assert!(ok);
        let out = String::from_utf8(out).unwrap();
        let err = String::from_utf8(err).unwrap();
        assert!(
            out.contains("fleet.yaml: valid (fleet x, 1 container)"),
            "{out}"
        );
        assert!(
            err.contains("fleet.yaml: warning: template u.tar.xz"),
            "{err}"
        );
        assert!(
            err.contains("containers.a.template_url at line:column 3:")
                && err.contains(
                    "templates: u.tar.xz: {url: https://h.example/u.tar.xz, sha256: <hex>}"
                ),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
