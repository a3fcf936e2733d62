//! `pxctl user request|issue|list|revoke`: user certificates. `request` runs locally (the key is made here,
//! 0600, and never sent); `issue`, `list` and `revoke` are admin calls on the controller. `issue` leaves the
//! files a user needs for a working pxctl: the certificate, the CA and a pxctl config naming them.

use std::io::Write;
use std::path::{Path, PathBuf};

use pxfleet_proto::v1 as pb;
use serde::Serialize;

use crate::args::{
    ListFormat, UserCommand, UserIssueArgs, UserListArgs, UserRequestArgs, UserRevokeArgs, UserRole,
};
use crate::client::Client;
use crate::error::{CliError, Result};
use crate::render::{self, table::Table, timestamp};
use crate::term::Io;

pub async fn run(client: &mut Client, cmd: &UserCommand, io: &mut Io<'_>) -> Result<u8> {
    match cmd {
        UserCommand::Request(a) => request(a, io.out, io.err),
        UserCommand::Issue(a) => issue(client, a, io).await,
        UserCommand::List(a) => list(client, a, io).await,
        UserCommand::Revoke(a) => revoke(client, a, io).await,
    }
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CliError {
    let path = path.to_path_buf();
    move |source| CliError::Io {
        action,
        path,
        source,
    }
}

/// `pxctl user request NAME`: NAME.key (0600) and NAME.csr in `--dir`. Needs no controller.
pub fn request(a: &UserRequestArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<u8> {
    // The same rules as the identity the admin will sign (checked here so the user hears it first).
    pxfleet_tls::Identity::user(&a.name, pxfleet_tls::Role::Viewer, &[])?;
    let key_path = a.dir.join(format!("{}.key", a.name));
    let csr_path = a.dir.join(format!("{}.csr", a.name));
    if key_path.exists() && !a.force {
        return Err(CliError::Usage(format!(
            "{} already exists; keep using it, or pass --force to make a new key (the old certificate then \
             stops matching it)",
            key_path.display()
        )));
    }
    let made = pxfleet_tls::generate_key_and_csr(&a.name)?;
    pxfleet_tls::write_file(&key_path, made.key_pem.as_bytes(), pxfleet_tls::KEY_MODE)?;
    pxfleet_tls::write_file(&csr_path, made.csr_pem.as_bytes(), pxfleet_tls::CERT_MODE)?;
    writeln!(out, "{}", csr_path.display())?;
    writeln!(
        err,
        "Wrote the private key {key} (mode 0600; it never leaves this machine) and the request {csr}.\n\
         Send {csr} to an admin of the controller, who runs:\n  \
         pxctl user issue {csr_name} --role viewer|operator|admin [--fleets a,b]\n\
         and sends back {name}.pem, ca.pem and {name}.pxctl.toml. Put them in {dir}, then:\n  \
         pxctl --config {dir}/{name}.pxctl.toml get fleets",
        key = key_path.display(),
        csr = csr_path.display(),
        csr_name = csr_path.file_name().unwrap_or_default().to_string_lossy(),
        name = a.name,
        dir = a.dir.display(),
    )?;
    Ok(0)
}

/// The JSON/YAML form of an issued certificate.
#[derive(Debug, Serialize)]
struct Issued {
    identity: String,
    serial: String,
    expires: Option<String>,
    cert: PathBuf,
    ca: PathBuf,
    pxctl_config: PathBuf,
}

async fn issue(client: &mut Client, a: &UserIssueArgs, io: &mut Io<'_>) -> Result<u8> {
    let csr_pem = std::fs::read_to_string(&a.csr).map_err(io_err("reading", &a.csr))?;
    let name = match &a.name {
        Some(n) => n.clone(),
        None => pxfleet_tls::csr_common_name(&csr_pem)?.ok_or_else(|| {
            CliError::Usage(format!(
                "{} has no common name; pass --name NAME",
                a.csr.display()
            ))
        })?,
    };
    if !a.fleets.is_empty() && a.role != UserRole::Operator {
        return Err(CliError::Usage(
            "--fleets limits an operator; viewers read every fleet and admins change every fleet"
                .into(),
        ));
    }
    let role = match a.role {
        UserRole::Viewer => pb::UserRole::Viewer,
        UserRole::Operator => pb::UserRole::Operator,
        UserRole::Admin => pb::UserRole::Admin,
    };
    let r = client
        .api
        .issue_user_certificate(pb::IssueUserCertificateRequest {
            name: name.clone(),
            role: role as i32,
            fleets: a.fleets.clone(),
            csr_pem,
            validity_days: a.days.unwrap_or(0),
        })
        .await?
        .into_inner();
    let dir = match &a.out_dir {
        Some(d) => d.clone(),
        None => a
            .csr
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(".")),
    };
    let cert = dir.join(format!("{name}.pem"));
    let ca = dir.join("ca.pem");
    let config = dir.join(format!("{name}.pxctl.toml"));
    pxfleet_tls::write_file(&cert, r.cert_pem.as_bytes(), pxfleet_tls::CERT_MODE)?;
    pxfleet_tls::write_file(&ca, r.ca_pem.as_bytes(), pxfleet_tls::CERT_MODE)?;
    let text = format!(
        "# pxctl configuration for {identity} (serial {serial}, valid until {expires}).\n\
         # Relative paths are relative to this file: keep {name}.key, {name}.pem and ca.pem beside it.\n\
         # Use it with `pxctl --config THIS_FILE ...`, or copy all four to ~/.config/pxctl/ as config.toml.\n\
         controller = {url:?}\nca = \"ca.pem\"\ncert = \"{name}.pem\"\nkey = \"{name}.key\"\n",
        identity = r.identity,
        serial = r.serial,
        expires = timestamp(r.not_after_unix_ms).unwrap_or_else(|| "?".into()),
        url = client.url,
    );
    pxfleet_tls::write_file(&config, text.as_bytes(), pxfleet_tls::CERT_MODE)?;
    let rec = Issued {
        identity: r.identity.clone(),
        serial: r.serial.clone(),
        expires: timestamp(r.not_after_unix_ms),
        cert: cert.clone(),
        ca: ca.clone(),
        pxctl_config: config.clone(),
    };
    match a.format {
        ListFormat::Json => io.out.write_all(render::json(&rec).as_bytes())?,
        ListFormat::Yaml => io.out.write_all(
            render::yaml::to_yaml(&serde_json::to_value(&rec).unwrap_or_default()).as_bytes(),
        )?,
        ListFormat::Table => {
            writeln!(io.out, "{}", r.identity)?;
            writeln!(
                io.err,
                "Issued {} (serial {}, valid until {}). Wrote {}, {} and {}.\n\
                 Give these three files to {name}; with {name}.key beside them:\n  \
                 pxctl --config {} get fleets",
                r.identity,
                r.serial,
                rec.expires.as_deref().unwrap_or("?"),
                cert.display(),
                ca.display(),
                config.display(),
                config.file_name().unwrap_or_default().to_string_lossy(),
            )?;
        }
    }
    Ok(0)
}

/// One row of `pxctl user list`.
#[derive(Debug, Serialize)]
pub struct CertRecord {
    pub name: String,
    pub kind: String,
    pub role: Option<String>,
    pub fleets: Vec<String>,
    pub serial: String,
    pub issued: Option<String>,
    pub expires: Option<String>,
    /// valid, expired or revoked.
    pub status: String,
    pub identity: String,
}

fn record(c: &pb::CertificateInfo, now_ms: i64) -> CertRecord {
    let status = if c.revoked {
        "revoked"
    } else if c.not_after_unix_ms > 0 && c.not_after_unix_ms <= now_ms {
        "expired"
    } else {
        "valid"
    };
    CertRecord {
        name: c.name.clone(),
        kind: c.kind.clone(),
        role: (!c.role.is_empty()).then(|| c.role.clone()),
        fleets: c.fleets.clone(),
        serial: c.serial.clone(),
        issued: timestamp(c.issued_unix_ms),
        expires: timestamp(c.not_after_unix_ms),
        status: status.into(),
        identity: c.identity.clone(),
    }
}

fn now_ms() -> i64 {
    pxfleet_common::Clock::system().now_ms() as i64
}

async fn certificates(client: &mut Client) -> Result<Vec<pb::CertificateInfo>> {
    Ok(client
        .api
        .list_certificates(pb::ListCertificatesRequest {})
        .await?
        .into_inner()
        .certificates)
}

async fn list(client: &mut Client, a: &UserListArgs, io: &mut Io<'_>) -> Result<u8> {
    let now = now_ms();
    let recs: Vec<CertRecord> = certificates(client)
        .await?
        .iter()
        .filter(|c| a.all || c.kind == "user")
        .map(|c| record(c, now))
        .collect();
    let text = match a.format {
        ListFormat::Json => render::json(&recs),
        ListFormat::Yaml => {
            render::yaml::to_yaml(&serde_json::to_value(&recs).unwrap_or_default())
        }
        ListFormat::Table if recs.is_empty() => {
            "No certificates. Issue one: pxctl user request NAME, then pxctl user issue NAME.csr --role ROLE\n"
                .into()
        }
        ListFormat::Table => {
            let mut t = Table::new(&[
                "name", "kind", "role", "fleets", "serial", "expires", "status",
            ]);
            for r in &recs {
                t.row(vec![
                    r.name.clone(),
                    r.kind.clone(),
                    r.role.clone().unwrap_or_default(),
                    r.fleets.join(","),
                    r.serial.clone(),
                    r.expires.clone().unwrap_or_default(),
                    r.status.clone(),
                ]);
            }
            t.render()
        }
    };
    io.out.write_all(text.as_bytes())?;
    Ok(0)
}

async fn revoke(client: &mut Client, a: &UserRevokeArgs, io: &mut Io<'_>) -> Result<u8> {
    let certs = certificates(client).await?;
    let wanted = a.target.to_ascii_lowercase().replace(':', "");
    let by_serial: Vec<&pb::CertificateInfo> =
        certs.iter().filter(|c| c.serial == wanted).collect();
    let targets: Vec<&pb::CertificateInfo> = if !by_serial.is_empty() {
        by_serial
    } else {
        let named: Vec<&pb::CertificateInfo> = certs
            .iter()
            .filter(|c| c.kind == "user" && c.name == a.target)
            .collect();
        if named.is_empty() {
            return Err(CliError::Usage(format!(
                "no user and no certificate serial {:?} (see `pxctl user list`; node certificates are revoked \
                 by serial, `pxctl user list --all`)",
                a.target
            )));
        }
        let live: Vec<&pb::CertificateInfo> = named.into_iter().filter(|c| !c.revoked).collect();
        if live.is_empty() {
            writeln!(
                io.err,
                "every certificate of user {} is already revoked",
                a.target
            )?;
            return Ok(0);
        }
        live
    };
    for c in targets {
        client
            .api
            .revoke_certificate(pb::RevokeCertificateRequest {
                serial: c.serial.clone(),
                reason: a.reason.clone(),
            })
            .await?;
        writeln!(io.out, "{}", c.serial)?;
        writeln!(
            io.err,
            "revoked {} (serial {}): refused from its next connection on",
            if c.identity.is_empty() {
                "certificate"
            } else {
                &c.identity
            },
            c.serial
        )?;
    }
    Ok(0)
}
