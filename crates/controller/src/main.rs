//! `pxcontroller`: argument parsing and logging setup only; everything else is in the library.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use pxfleet_controller::{config, pki, Config};

#[derive(Parser)]
#[command(
    name = "pxcontroller",
    version,
    about = "pxfleet controller: fleet state, planning, dispatch to agents"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create the CA, the server certificate, the first admin bundle and its pxctl config.
    Init {
        #[arg(long, default_value = config::DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        /// Names (DNS or IP) for the server certificate, comma-separated; localhost and 127.0.0.1 are added.
        #[arg(long, value_delimiter = ',')]
        san: Vec<String>,
        /// Controller URL written into the admin's pxctl config (default: https://<first SAN>:8443).
        #[arg(long)]
        url: Option<String>,
    },
    /// Serve.
    Run {
        #[arg(long, default_value = config::DEFAULT_CONFIG_PATH)]
        config: PathBuf,
    },
    /// Reissue the server certificate with new names (same CA, new key); restart the controller to use it.
    ///
    /// Nodes and users keep their certificates: they trust the CA, not this certificate. The previous
    /// certificate and key are kept as server.pem.old and server.key.old. localhost and 127.0.0.1 are
    /// always added.
    ReissueServerCert {
        #[arg(long, default_value = config::DEFAULT_CONFIG_PATH)]
        config: PathBuf,
        /// The complete list of names (DNS or IP) for the new certificate, comma-separated or repeated.
        #[arg(long, value_delimiter = ',', required = true)]
        san: Vec<String>,
    },
    /// Rotate the CA with an overlap (docs/security.md, "CA rotation"): `prepare`, then `switch`.
    ///
    /// prepare: makes the next CA and pki/ca-bundle.pem (current + next); install the bundle as ca.pem on
    /// every node and for every pxctl user, then restart the agents.
    /// switch: the next CA signs from now on (old one kept as pki/ca-old.pem), the server certificate is
    /// reissued by it; add extra_client_cas = ["pki/ca-old.pem"] to [tls] and restart the controller.
    #[command(verbatim_doc_comment)]
    RotateCa {
        #[arg(value_enum)]
        step: RotateStep,
        #[arg(long, default_value = config::DEFAULT_CONFIG_PATH)]
        config: PathBuf,
    },
    /// Create the key that seals secrets at rest, if it does not exist yet (0600; prints its id). The
    /// controller also creates it on first start when it can write there.
    SealKey {
        /// The key file (default: `seal_key` of the config, i.e. seal.key next to controller.toml).
        #[arg(long)]
        file: Option<PathBuf>,
        #[arg(long, default_value = config::DEFAULT_CONFIG_PATH)]
        config: PathBuf,
    },
    /// Write the whole controller state (every tree of the store; secrets stay sealed) to a file.
    ///
    /// Takes the data dir's lock, so it needs the controller stopped (it refuses a held data dir). The seal
    /// key and the PKI files are not in the backup: keep copies of them apart.
    Backup {
        #[arg(long, default_value = config::DEFAULT_CONFIG_PATH)]
        config: PathBuf,
        /// The backup file to write (replaced atomically).
        #[arg(long, required_unless_present = "s3")]
        out: Option<PathBuf>,
        /// Upload it to `[backup.s3]` of the config (as PREFIXpxfleet-TIME.pxbackup), too.
        #[arg(long)]
        s3: bool,
    },
    /// Restore the state from a backup file into the data dir (the controller stopped; refuses a data dir that
    /// already has a store unless --force). The file is verified completely before anything is written.
    Restore {
        #[arg(long, default_value = config::DEFAULT_CONFIG_PATH)]
        config: PathBuf,
        /// The backup file written by `pxcontroller backup`.
        #[arg(long, required_unless_present = "from_s3")]
        from: Option<PathBuf>,
        /// Instead of --from: the object KEY in `[backup.s3]` of the config.
        #[arg(long, value_name = "KEY", conflicts_with = "from")]
        from_s3: Option<String>,
        /// Replace the data dir's existing store.
        #[arg(long)]
        force: bool,
    },
    /// Check a configuration file and exit.
    ValidateConfig { file: PathBuf },
    /// Everything on loopback: a controller, N agents and N simulated PVE nodes, until Ctrl-C.
    Dev(pxfleet_controller::dev::DevArgs),
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum RotateStep {
    Prepare,
    Switch,
}

/// Threads of the blocking pool (reconcile passes, batches of agent messages): enough for the store's work to
/// overlap, few enough that a thousand agents' batches do not each get a thread (and a malloc arena).
const BLOCKING_THREADS: usize = 16;

fn main() -> std::process::ExitCode {
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(run()));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The cause chain on one line, for an operator (no backtrace, whatever RUST_BACKTRACE says).
            eprintln!("pxcontroller: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    pxfleet_common::logging::init(tracing::level_filters::LevelFilter::INFO);
    match Cli::parse().cmd {
        Cmd::Init { data_dir, san, url } => {
            let host = san.first().cloned().unwrap_or_else(|| "localhost".into());
            let url = url.unwrap_or_else(|| format!("https://{host}:8443"));
            let r = pki::init(&data_dir, &san, &url)?;
            println!("CA certificate:     {}", r.ca_cert.display());
            println!("CA fingerprint:     {}", r.ca_fingerprint);
            println!("server certificate: {}", r.server_cert.display());
            println!("admin certificate:  {}", r.admin.cert.display());
            println!("admin key:          {}", r.admin.key.display());
            println!("pxctl config:       {}", r.pxctl_config.display());
        }
        Cmd::Run { config } => {
            let cfg = Config::load(&config)?;
            // a second controller on a held data dir is refused before it touches the listen addresses
            drop(pxfleet_controller::datadir::DataDirLock::acquire(
                &cfg.data_dir,
            )?);
            let listener = tokio::net::TcpListener::bind(cfg.listen)
                .await
                .with_context(|| format!("binding {}", cfg.listen))?;
            let metrics = tokio::net::TcpListener::bind(cfg.metrics_listen)
                .await
                .with_context(|| format!("binding {}", cfg.metrics_listen))?;
            pxfleet_controller::run(cfg, listener, metrics, stop_signal()).await?;
        }
        Cmd::ReissueServerCert { config, san } => {
            let cfg = Config::load(&config)?;
            let r = pki::reissue_server(&cfg, &san)?;
            println!("server certificate: {}", r.server_cert.display());
            println!("previous names:     {}", r.old_names.join(", "));
            println!("names:              {}", r.names.join(", "));
            println!("valid until:        {}", r.not_after);
            println!(
                "previous files:     {} (and the key beside it)",
                r.backup_cert.display()
            );
            println!("restart pxcontroller to serve it; agents and pxctl reconnect without new certificates");
        }
        Cmd::RotateCa { step, config } => {
            let cfg = Config::load(&config)?;
            match step {
                RotateStep::Prepare => {
                    let p = pki::rotate_ca_prepare(&cfg)?;
                    println!("next CA:   {}", p.next_cert.display());
                    println!("CA bundle: {} (current + next)", p.bundle.display());
                    println!(
                        "next: install the bundle as ca.pem on every node (/etc/pxagent/ca.pem) and restart pxagent; \
                         give it to pxctl users as their ca.pem; then run `pxcontroller rotate-ca switch`"
                    );
                }
                RotateStep::Switch => {
                    let p = pki::rotate_ca_switch(&cfg)?;
                    println!("previous CA kept as {}", p.old_cert.display());
                    println!(
                        "next: add to the [tls] section of {}:\n  extra_client_cas = [{:?}]\nrestart pxcontroller, \
                         renew the nodes (`pxagent renew`, or wait for their own renewal) and reissue user certificates \
                         (`pxctl user request` / `pxctl user issue`); then remove extra_client_cas, restart, and drop the \
                         old CA from the clients' ca.pem",
                        config.display(),
                        p.old_cert.display().to_string()
                    );
                }
            }
        }
        Cmd::Dev(args) => pxfleet_controller::dev::run(args.resolve()?, stop_signal()).await?,
        Cmd::SealKey { file, config } => {
            let path = match file {
                Some(f) => f,
                None => Config::load(&config)?.seal_key_path(),
            };
            let key = if path.exists() {
                pxfleet_controller::seal::SealKey::load(&path)?
            } else {
                pxfleet_controller::seal::SealKey::create(&path)?
            };
            println!("seal key {}: id {}", path.display(), key.id_hex());
        }
        Cmd::Backup { config, out, s3 } => {
            let cfg = Config::load(&config)?;
            let s3 = match s3 {
                true => Some(cfg.backup.s3.clone().with_context(|| {
                    format!("--s3: no [backup.s3] section in {}", config.display())
                })?),
                false => None,
            };
            let dir = tempfile_dir(&cfg)?;
            let file = out.clone().unwrap_or_else(|| dir.join("upload.pxbackup"));
            let s = pxfleet_controller::backup::backup(&cfg.data_dir, &file)?;
            println!(
                "backup: {} trees, {} entries, {} bytes, sha256 {}",
                s.trees, s.entries, s.bytes, s.sha256
            );
            if out.is_some() {
                println!("written to {}", file.display());
            }
            if let Some(s3) = s3 {
                let data = std::fs::read(&file).with_context(|| file.display().to_string())?;
                let key = s3.key_for(pxfleet_controller::model::now_ms());
                let uploaded = s3.put(&key, &data).await;
                if out.is_none() {
                    let _ = std::fs::remove_file(&file);
                }
                uploaded?;
                println!("uploaded to {} (restore: --from-s3 {key})", s3.url(&key));
            }
        }
        Cmd::Restore {
            config,
            from,
            from_s3,
            force,
        } => {
            let cfg = Config::load(&config)?;
            let s = match (from, from_s3) {
                (Some(from), _) => {
                    pxfleet_controller::backup::restore(&cfg.data_dir, &from, force)?
                }
                (None, Some(key)) => {
                    let s3 = cfg.backup.s3.clone().with_context(|| {
                        format!("--from-s3: no [backup.s3] section in {}", config.display())
                    })?;
                    let data = s3.get(&key).await?;
                    let url = PathBuf::from(s3.url(&key));
                    pxfleet_controller::backup::restore_bytes(&cfg.data_dir, &data, &url, force)?
                }
                (None, None) => anyhow::bail!("give --from FILE or --from-s3 KEY"),
            };
            println!(
                "restored into {}: {} trees, {} entries (sha256 {}); start pxcontroller with the same seal key",
                cfg.db_path().display(),
                s.trees,
                s.entries,
                s.sha256
            );
        }
        Cmd::ValidateConfig { file } => {
            Config::load(&file)?;
            println!("{}: ok", file.display());
        }
    }
    Ok(())
}

/// Where a backup bound only for S3 is written first: the data dir's parent would do, the data dir is simplest.
fn tempfile_dir(cfg: &Config) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(&cfg.data_dir)
        .with_context(|| format!("data dir {}", cfg.data_dir.display()))?;
    Ok(cfg.data_dir.clone())
}

/// SIGINT or SIGTERM (what systemd and dev mode send): the daemon stops cleanly on either.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    // the handlers are installed now, at startup, not when the future is first polled
    let stop = pxfleet_common::shutdown_signal("pxcontroller");
    async move {
        stop.await;
    }
}
