//! Backups in S3-compatible storage (Garage, MinIO, ...): `[backup.s3]` in controller.toml names the endpoint,
//! bucket, region, path-style addressing, an object key prefix and the file holding the credentials. The object
//! is the backup file itself ([`crate::backup`]'s format), named `PREFIXpxfleet-YYYYMMDDTHHMMSSZ.pxbackup`.

use std::path::{Path, PathBuf};

use s3::creds::Credentials;
use s3::{Bucket, Region};
use serde::Deserialize;

/// `[backup]` of controller.toml.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct BackupConfig {
    /// Where `pxcontroller backup --s3` puts the backup (and `restore --from-s3` takes it from).
    pub s3: Option<S3Config>,
    /// A backup of the running controller every so often (`30m`, `6h`, `1d`), into `dir` (and to `s3` when
    /// configured); none when unset ([`crate::backup::schedule`]).
    pub every: Option<String>,
    /// Where scheduled backups go; default `DATA_DIR/backups`.
    pub dir: Option<PathBuf>,
    /// How many scheduled backups `dir` keeps (the oldest are removed); default 7.
    pub keep: Option<usize>,
}

impl BackupConfig {
    /// The schedule's interval; an error names what is wrong with `every`.
    pub fn interval(&self) -> Result<Option<std::time::Duration>, String> {
        let Some(e) = self.every.as_deref() else {
            return Ok(None);
        };
        pxfleet_common::parse_duration(e)
            .map(Some)
            .map_err(|e| e.to_string())
    }
}

/// `[backup.s3]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    /// The service's URL, e.g. `https://garage.example.net:3900` or `http://127.0.0.1:9000`.
    pub endpoint: String,
    pub bucket: String,
    /// Signing region (Garage: its `s3_region`; MinIO: `us-east-1`).
    #[serde(default = "default_region")]
    pub region: String,
    /// Path-style addressing (`ENDPOINT/BUCKET/KEY`), as Garage and MinIO want; false for virtual-host style.
    #[serde(default = "default_true")]
    pub path_style: bool,
    /// Prepended to the object names, e.g. `pxfleet/`.
    #[serde(default)]
    pub prefix: String,
    /// A TOML file with `access_key_id` and `secret_access_key` (keep it 0600); the keys are never logged.
    pub credentials_file: PathBuf,
}

fn default_region() -> String {
    "us-east-1".into()
}

fn default_true() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialsFile {
    access_key_id: String,
    secret_access_key: String,
}

#[derive(Debug, thiserror::Error)]
pub enum S3BackupError {
    #[error("S3 credentials file {}: {why}", path.display())]
    Credentials { path: PathBuf, why: String },
    #[error("S3 {what} {url}: {source}")]
    S3 {
        what: &'static str,
        url: String,
        #[source]
        source: s3::error::S3Error,
    },
}

impl S3Config {
    /// The object's URL, for messages.
    pub fn url(&self, key: &str) -> String {
        format!(
            "{}/{}/{}",
            self.endpoint.trim_end_matches('/'),
            self.bucket,
            key
        )
    }

    /// The object name for a backup taken at `unix_ms`.
    pub fn key_for(&self, unix_ms: u64) -> String {
        format!("{}{}", self.prefix, Self::file_name(unix_ms))
    }

    /// `pxfleet-YYYYMMDDTHHMMSSZ.pxbackup` for a backup taken at `unix_ms`.
    pub fn file_name(unix_ms: u64) -> String {
        let t = time::OffsetDateTime::from_unix_timestamp((unix_ms / 1000) as i64)
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
        format!(
            "pxfleet-{:04}{:02}{:02}T{:02}{:02}{:02}Z.pxbackup",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        )
    }

    fn bucket(&self) -> Result<Box<Bucket>, S3BackupError> {
        let creds = load_credentials(&self.credentials_file)?;
        let region = Region::Custom {
            region: self.region.clone(),
            endpoint: self.endpoint.trim_end_matches('/').to_string(),
        };
        let bucket =
            Bucket::new(&self.bucket, region, creds).map_err(|source| S3BackupError::S3 {
                what: "bucket",
                url: self.url(""),
                source,
            })?;
        Ok(if self.path_style {
            bucket.with_path_style()
        } else {
            bucket
        })
    }

    /// Uploads `data` as object `key`.
    pub async fn put(&self, key: &str, data: &[u8]) -> Result<(), S3BackupError> {
        self.bucket()?
            .put_object(key, data)
            .await
            .map_err(|source| S3BackupError::S3 {
                what: "upload to",
                url: self.url(key),
                source,
            })?;
        Ok(())
    }

    /// Downloads object `key`.
    pub async fn get(&self, key: &str) -> Result<Vec<u8>, S3BackupError> {
        let r = self
            .bucket()?
            .get_object(key)
            .await
            .map_err(|source| S3BackupError::S3 {
                what: "download of",
                url: self.url(key),
                source,
            })?;
        Ok(r.bytes().to_vec())
    }
}

fn load_credentials(path: &Path) -> Result<Credentials, S3BackupError> {
    let err = |why: String| S3BackupError::Credentials {
        path: path.to_path_buf(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    // the message of a TOML error may quote the line: never a secret in an error
    let c: CredentialsFile = toml::from_str(&text).map_err(|_| {
        err("expected TOML with access_key_id = \"...\" and secret_access_key = \"...\"".into())
    })?;
    Credentials::new(
        Some(&c.access_key_id),
        Some(&c.secret_access_key),
        None,
        None,
        None,
    )
    .map_err(|e| err(e.to_string()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_s3_section_parses_with_defaults_and_unknown_fields_are_refused() {
        let cfg: crate::Config = toml::from_str(
            "[backup.s3]\nendpoint = \"http://127.0.0.1:3900\"\nbucket = \"b\"\ncredentials_file = \"/etc/pxcontroller/s3.toml\"\n",
        )
        .unwrap();
        let s3 = cfg.backup.s3.unwrap();
        assert_eq!(
            (s3.region.as_str(), s3.path_style, s3.prefix.as_str()),
            ("us-east-1", true, "")
        );
        assert_eq!(s3.url("k"), "http://127.0.0.1:3900/b/k");
        assert!(toml::from_str::<crate::Config>("[backup.s3]\nendpoint = \"x\"\nbucket = \"b\"\ncredentials_file = \"c\"\nsecret = \"s\"\n").is_err());
        assert!(crate::Config::default().backup.s3.is_none());
    }
}
