//! `pxcontroller`: argument parsing and logging setup only; every subcommand is a function of the library
//! ([`pxfleet_controller::admin`], `dev`).

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use pxfleet_controller::{admin, config};

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
    let out = &mut std::io::stdout();
    match Cli::parse().cmd {
        Cmd::Init { data_dir, san, url } => admin::init(&data_dir, &san, url, out)?,
        Cmd::Run { config } => admin::run(&config, stop_signal()).await?,
        Cmd::ReissueServerCert { config, san } => admin::reissue_server_cert(&config, &san, out)?,
        Cmd::RotateCa { step, config } => {
            let step = match step {
                RotateStep::Prepare => admin::RotateStep::Prepare,
                RotateStep::Switch => admin::RotateStep::Switch,
            };
            admin::rotate_ca(&config, step, out)?
        }
        Cmd::Dev(args) => pxfleet_controller::dev::run(args.resolve()?, stop_signal()).await?,
        Cmd::SealKey { file, config } => admin::seal_key(file, &config, out)?,
        Cmd::Backup {
            config,
            out: file,
            s3,
        } => admin::backup(&config, file, s3, out).await?,
        Cmd::Restore {
            config,
            from,
            from_s3,
            force,
        } => admin::restore(&config, from, from_s3, force, out).await?,
        Cmd::ValidateConfig { file } => admin::validate_config(&file, out)?,
    }
    Ok(())
}

/// SIGINT or SIGTERM (what systemd and dev mode send): the daemon stops cleanly on either.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    // the handlers are installed now, at startup, not when the future is first polled
    let stop = pxfleet_common::shutdown_signal("pxcontroller");
    async move {
        stop.await;
    }
}
