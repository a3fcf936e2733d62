//! pxfleet-cli: the library behind `pxctl` (the binary only parses arguments and dispatches
//! here, so tests call the commands directly).
//!
//! Local commands: [`validate`], offline [`plan`]. Client commands (against pxcontroller): [`cmd`], reached
//! through [`run`] with a [`Client`] built from [`config`]; renderings in [`render`], progress in [`progress`].

pub mod args;
pub mod client;
pub mod cmd;
pub mod config;
pub mod error;
pub mod import;
pub mod plan;
pub mod policy;
pub mod progress;
pub mod render;
pub mod source;
pub mod term;
pub mod validate;

pub use client::Client;
pub use error::CliError;

use args::{Command, GlobalArgs};
use error::Result;
use pxfleet_proto::v1 as pb;
use term::Io;

/// Runs one client command against a connected controller; returns the exit status.
pub async fn run(client: &mut Client, command: &Command, io: &mut Io<'_>) -> Result<u8> {
    match command {
        Command::Validate { .. } => Err(CliError::Usage(
            "validate runs locally; call validate::run".into(),
        )),
        Command::Import(_) => Err(CliError::Usage(
            "import runs locally; call import::run".into(),
        )),
        Command::Plan(a) if a.offline => Err(CliError::Usage(
            "--offline plans cannot be saved (--out) or destroy (--destroy); drop --offline to ask the controller"
                .into(),
        )),
        Command::Plan(a) => cmd::remote_plan::run(client, a, io).await,
        Command::Submit(a) => cmd::submit::run(client, a, io).await,
        Command::Get(a) => cmd::get::run(client, a, io).await,
        Command::Describe(c) => cmd::describe::run(client, c, io).await,
        Command::Output(a) => cmd::output::run(client, a, io).await,
        Command::Destroy(a) => cmd::destroy::run(client, a, io).await,
        Command::Adopt(a) => cmd::adopt::run(client, a, io).await,
        Command::Start(a) => cmd::power::run(client, a, pb::PowerAction::Start, io).await,
        Command::Stop(a) => cmd::power::run(client, a, pb::PowerAction::Stop, io).await,
        Command::Restart(a) => cmd::power::run(client, a, pb::PowerAction::Restart, io).await,
        Command::History(a) => cmd::history::run(client, a, io).await,
        Command::Snapshot(c) => cmd::snapshot::run(client, c, io).await,
        Command::Node(c) => cmd::node::run(client, c, io).await,
        Command::User(c) => cmd::user::run(client, c, io).await,
        Command::Audit(a) => cmd::audit::run(client, a, io).await,
        Command::Grant(c) => cmd::grant::run(client, c, io).await,
        Command::Policy(c) => cmd::policy::run(client, c, io).await,
        Command::Backup(a) => cmd::backup::run(client, a, io).await,
    }
}

/// What `pxctl` calls for every client command: resolves the configuration from flags, `PXCTL_*` and the
/// config file, connects, runs `command` on stdout/stderr with the terminal as confirmer, and turns an
/// error into one `error: ...` line on stderr. Returns the exit status.
pub fn run_stdio(global: &GlobalArgs, command: &Command) -> u8 {
    use std::io::IsTerminal;
    let colour = !global.no_color
        && plan::colour_wanted(
            std::io::stdout().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        );
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
    let mut confirm = term::TerminalConfirm;
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CliError::from)
        .and_then(|rt| {
            rt.block_on(async {
                let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
                let settings = config::resolve(
                    &global.overrides(),
                    &|k| std::env::var(k).ok(),
                    home.as_deref(),
                )?;
                let mut client = Client::connect(&settings).await?;
                let mut io = Io {
                    out: &mut out,
                    err: &mut err,
                    colour,
                    confirm: &mut confirm,
                };
                run(&mut client, command, &mut io).await
            })
        });
    use std::io::Write;
    let _ = out.flush();
    match result {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(err, "error: {}", error_chain(&e));
            1
        }
    }
}

/// An error and its sources on one line, each source added only when the message does not already say it
/// (`connecting to https://127.0.0.1:1: transport error: Connection refused (os error 111)`).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let line = error_chain_raw(e);
    render::printable(&line).into_owned()
}

fn error_chain_raw(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = s.source();
    }
    line
}
