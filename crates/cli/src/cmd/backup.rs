//! `pxctl backup --out FILE`: the running controller's whole state (admin only), streamed in
//! `pxcontroller backup`'s file format; written to FILE only when complete and its checksum holds.

use std::io::Write;
use std::path::Path;

use pxfleet_proto::v1 as pb;
use sha2::{Digest, Sha256};

use crate::args::BackupArgs;
use crate::client::Client;
use crate::error::{CliError, Result};
use crate::term::Io;

/// The header every backup file starts with (`pxcontroller backup`'s format, version 1).
const MAGIC: &[u8] = b"PXFLEET-BACKUP\n";

/// Whether `data` is a whole backup: the header, and a SHA-256 trailer over everything before it.
pub fn check(data: &[u8]) -> std::result::Result<(), String> {
    if !data.starts_with(MAGIC) || data.len() < MAGIC.len() + 4 + 1 + 32 {
        return Err("the controller's answer is not a pxfleet backup".into());
    }
    let (body, sum) = data.split_at(data.len() - 32);
    if Sha256::digest(body).as_slice() != sum || body.last() != Some(&b'E') {
        return Err("the backup arrived incomplete or damaged (checksum mismatch)".into());
    }
    Ok(())
}

pub async fn run(client: &mut Client, args: &BackupArgs, io: &mut Io<'_>) -> Result<u8> {
    let mut stream = client.api.backup(pb::BackupRequest {}).await?.into_inner();
    let mut data = Vec::new();
    while let Some(chunk) = stream.message().await? {
        data.extend_from_slice(&chunk.data);
    }
    let io_err = |source| CliError::Io {
        action: "writing backup",
        path: args.out.clone(),
        source,
    };
    check(&data)
        .map_err(|why| io_err(std::io::Error::new(std::io::ErrorKind::InvalidData, why)))?;
    write_atomically(&args.out, &data).map_err(io_err)?;
    writeln!(
        io.out,
        "backup {}: {} bytes, sha256 {}",
        args.out.display(),
        data.len(),
        hex::encode(&data[data.len() - 32..])
    )?;
    Ok(0)
}

fn write_atomically(out: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".partial.{}", std::process::id()));
    let tmp = out.with_file_name(name);
    let r = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, out)
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_whole_backup_passes() {
        let mut body = MAGIC.to_vec();
        body.extend_from_slice(&1u32.to_be_bytes());
        body.push(b'E');
        let mut file = body.clone();
        file.extend_from_slice(&Sha256::digest(&body));
        assert_eq!(check(&file), Ok(()));
        assert!(check(&file[..file.len() - 1]).is_err());
        assert!(check(b"<html>")
            .unwrap_err()
            .contains("not a pxfleet backup"));
    }
}
