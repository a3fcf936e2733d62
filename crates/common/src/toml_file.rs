//! TOML configuration files: read and deserialize one, with errors that name `file:line:column` (the span
//! toml reports, turned into a 1-based line and a column counted in characters).

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// Why a TOML file could not be read or deserialized.
#[derive(Debug, thiserror::Error)]
pub enum TomlFileError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
}

/// Reads `path` and deserializes it.
pub fn load<T: DeserializeOwned>(path: &Path) -> Result<T, TomlFileError> {
    parse(path, &read(path)?)
}

/// Reads `path` as text (the error names the file).
pub fn read(path: &Path) -> Result<String, TomlFileError> {
    std::fs::read_to_string(path).map_err(|source| TomlFileError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Deserializes `text`; `path` only names the file in the error.
pub fn parse<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, TomlFileError> {
    toml::from_str(text).map_err(|e| {
        let (line, column) = e
            .span()
            .map(|s| line_column(text, s.start))
            .unwrap_or((1, 1));
        TomlFileError::Parse {
            path: path.to_path_buf(),
            line,
            column,
            message: e.message().trim().to_string(),
        }
    })
}

/// The 1-based line and column (in characters) of byte `offset` in `text`.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Conf {
        name: String,
        #[serde(default)]
        count: u32,
    }

    #[test]
    fn line_and_column_count_characters() {
        assert_eq!(line_column("", 0), (1, 1));
        assert_eq!(line_column("ab\ncd", 3), (2, 1));
        assert_eq!(line_column("ab\ncd", 4), (2, 2));
        assert_eq!(line_column("é = 1\nx", 2), (1, 2));
        assert_eq!(line_column("é = 1\nx", 3), (1, 3));
        assert_eq!(line_column("ab", 99), (1, 3));
        // inside a multi-byte character: the character's own column
        assert_eq!(line_column("é", 1), (1, 1));
    }

    #[test]
    fn parses_and_names_file_line_column() {
        let ok: Conf = parse(Path::new("c.toml"), "name = \"a\"\ncount = 2\n").unwrap();
        assert_eq!(
            ok,
            Conf {
                name: "a".into(),
                count: 2
            }
        );
        let err = parse::<Conf>(Path::new("c.toml"), "name = \"a\"\ncont = 2\n").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("c.toml:2:1: "), "{msg}");
        assert!(msg.contains("cont"), "{msg}");
        let err = parse::<Conf>(Path::new("c.toml"), "name = \"a\"\ncount = \"x\"\n").unwrap_err();
        assert!(err.to_string().starts_with("c.toml:2:9: "), "{err}");
        assert!(!err.to_string().ends_with('\n'), "{err:?}");
    }

    #[test]
    fn load_reads_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "name = \"b\"\n").unwrap();
        assert_eq!(load::<Conf>(&path).unwrap().name, "b");
        let err = load::<Conf>(&dir.path().join("none.toml")).unwrap_err();
        assert!(matches!(err, TomlFileError::Read { .. }), "{err}");
        assert!(err.to_string().contains("none.toml"), "{err}");
    }
}
