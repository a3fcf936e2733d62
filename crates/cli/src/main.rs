//! `pxctl`: the pxfleet command-line client. Argument parsing and dispatch only; the arguments
//! ([`pxfleet_cli::args`]) and the commands live in the `pxfleet_cli` library.

use std::process::ExitCode;

use clap::Parser;
use pxfleet_cli::args::{Cli, Command};

fn main() -> ExitCode {
    pxfleet_common::logging::init(tracing::level_filters::LevelFilter::ERROR);
    let cli = Cli::parse();
    match cli.command {
        Command::Plan(p) if p.offline && p.out.is_none() && !p.destroy => ExitCode::from(
            pxfleet_cli::plan::run_stdio(p.file, true, p.output, p.detailed_exitcode),
        ),
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
        Command::Import(pxfleet_cli::args::ImportCommand::Terraform(a)) => {
            let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
            ExitCode::from(pxfleet_cli::import::run(&a, &mut out, &mut err))
        }
        // Made locally: the key never leaves this machine, and no controller is needed.
        Command::User(pxfleet_cli::args::UserCommand::Request(a)) => {
            let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
            match pxfleet_cli::cmd::user::request(&a, &mut out, &mut err) {
                Ok(code) => ExitCode::from(code),
                Err(e) => {
                    eprintln!("error: {}", pxfleet_cli::error_chain(&e));
                    ExitCode::from(1)
                }
            }
        }
        command => ExitCode::from(pxfleet_cli::run_stdio(&cli.global, &command)),
    }
}
