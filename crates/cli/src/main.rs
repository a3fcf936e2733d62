//! `pxctl`: the pxfleet command-line client. Argument parsing and dispatch only; the commands
//! live in the `pxfleet_cli` library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "pxctl",
    version,
    about = "Declarative fleets of LXC containers on Proxmox VE"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check fleet files locally: syntax, types, ranges, addresses, duplicates, templates.
    ///
    /// Every problem of every file is printed on stderr as FILE:LINE:COLUMN: FIELD: message,
    /// with a hint when there is something useful to say. Exit status: 0 when all files are
    /// valid, 1 when any is invalid or unreadable, 2 on a usage error. Checks that need the
    /// cluster (datastores, bridges, vm_ids in use) happen at `pxctl plan` / `submit`.
    Validate {
        /// Fleet files (fleet.yaml); `file:` SSH keys are read relative to each file.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
    },
    /// Show what submitting FILE would change: creates, updates, replacements, destroys.
    ///
    /// Secrets show as (sensitive). Exit status: 1 on error; with --detailed-exitcode, 0 when
    /// nothing would change and 2 when something would.
    Plan {
        /// The fleet file (fleet.yaml).
        #[arg(value_name = "FILE")]
        file: String,
        /// Plan against an empty world (nothing applied, nothing running) without a controller.
        #[arg(long)]
        offline: bool,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t)]
        output: pxfleet_cli::plan::OutputFormat,
        /// Exit 0 when there are no changes, 2 when there are, 1 on error.
        #[arg(long)]
        detailed_exitcode: bool,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("PXFLEET_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Plan {
            file,
            offline,
            output,
            detailed_exitcode,
        } => ExitCode::from(pxfleet_cli::plan::run_stdio(
            file,
            offline,
            output,
            detailed_exitcode,
        )),
        Command::Validate { files } => {
            let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
            match pxfleet_cli::validate::run(
                &files,
                &pxfleet_cli::validate::FsFiles,
                &mut out,
                &mut err,
            ) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    eprintln!("pxctl: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}
