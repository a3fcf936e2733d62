//! Build-time documentation for the `pxctl` Debian package: bash, zsh and fish completions and man pages,
//! generated from pxctl's own clap definition ([`pxfleet_cli::args::Cli`]) so they never drift from the
//! binary. `packaging/build-debs` runs the `pxfleet-gen-docs` binary and installs what it writes.

use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;

/// The name the completions and man pages are written for.
pub const BIN_NAME: &str = "pxctl";

/// Errors while writing the generated files; each names the path.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    #[error("creating directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing {shell} completions into {path}: {source}")]
    Completion {
        shell: Shell,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing man pages into {path}: {source}")]
    Man {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What [`generate`] wrote, by kind, each path inside the output directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Generated {
    /// `completions/pxctl` (bash), `completions/_pxctl` (zsh), `completions/pxctl.fish`.
    pub bash: PathBuf,
    pub zsh: PathBuf,
    pub fish: PathBuf,
    /// `man/pxctl.1` and one `man/pxctl-<subcommand>.1` per subcommand (nested ones too, not clap's
    /// `help` subcommands), sorted.
    pub man_pages: Vec<PathBuf>,
}

/// pxctl's clap command, as the binary builds it.
pub fn pxctl_command() -> clap::Command {
    pxfleet_cli::args::Cli::command()
}

/// Writes completions under `out/completions/` and man pages under `out/man/`, named as Debian installs them.
pub fn generate(mut cmd: clap::Command, out: &Path) -> Result<Generated, GenError> {
    let comp_dir = out.join("completions");
    let man_dir = out.join("man");
    for dir in [&comp_dir, &man_dir] {
        std::fs::create_dir_all(dir).map_err(|source| GenError::CreateDir {
            path: dir.clone(),
            source,
        })?;
    }
    let mut written = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path =
            clap_complete::generate_to(shell, &mut cmd, BIN_NAME, &comp_dir).map_err(|source| {
                GenError::Completion {
                    shell,
                    path: comp_dir.clone(),
                    source,
                }
            })?;
        written.push(path);
    }
    // clap_complete names the bash file `pxctl.bash`; bash-completion looks the command name up.
    let bash = comp_dir.join(BIN_NAME);
    std::fs::rename(&written[0], &bash).map_err(|source| GenError::Completion {
        shell: Shell::Bash,
        path: bash.clone(),
        source,
    })?;
    let mut man_pages = Vec::new();
    cmd.build();
    write_man_pages(&cmd, &man_dir, &mut man_pages)?;
    man_pages.sort();
    Ok(Generated {
        bash,
        zsh: written[1].clone(),
        fish: written[2].clone(),
        man_pages,
    })
}

/// Renders the page of `cmd` (a built command, so subcommands carry their `pxctl-sub` display names) and
/// recurses into its subcommands.
fn write_man_pages(
    cmd: &clap::Command,
    dir: &Path,
    pages: &mut Vec<PathBuf>,
) -> Result<(), GenError> {
    let name = cmd
        .get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_string();
    let path = dir.join(format!("{name}.1"));
    let man_err = |source| GenError::Man {
        path: path.clone(),
        source,
    };
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut page)
        .map_err(man_err)?;
    std::fs::write(&path, page).map_err(man_err)?;
    pages.push(path.clone());
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        write_man_pages(sub, dir, pages)?;
    }
    Ok(())
}
