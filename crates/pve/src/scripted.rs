//! A [`Runner`] that answers from a script, for unit tests of argv building and failure handling.
//!
//! Expectations are consumed in order: each call must match the next expected argv (an element equal to
//! [`ScriptedRunner::ANY`] matches any single argument). Every call is recorded with its stdin and, for arguments
//! that name an existing regular file (such as the SSH key temp file), the file's content and mode at call time.
//! Shipped in normal builds (not `cfg(test)`) so other crates' tests can use it.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use crate::runner::{Command, Output, RunError, RunFuture, Runner};

/// A file named by an argument, captured while the command "ran".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedFile {
    pub path: String,
    pub content: Vec<u8>,
    /// Permission bits (`0o600` ...).
    pub mode: u32,
}

/// One recorded call.
#[derive(Clone, Debug)]
pub struct Call {
    /// Full argv, unredacted (tests check that secrets are absent).
    pub argv: Vec<String>,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Duration,
    pub env: Vec<(String, String)>,
    pub files: Vec<CapturedFile>,
}

struct Expectation {
    argv: Vec<String>,
    reply: Result<Output, String>,
}

/// Scripted runner; see the module docs.
#[derive(Default)]
pub struct ScriptedRunner {
    script: Mutex<VecDeque<Expectation>>,
    calls: Mutex<Vec<Call>>,
}

impl ScriptedRunner {
    /// Matches any single argument.
    pub const ANY: &'static str = "\u{0}ANY";

    pub fn new() -> Self {
        Self::default()
    }

    /// Expects `argv` (program first) next, answering `reply`.
    pub fn expect(&self, argv: &[&str], reply: Output) -> &Self {
        self.script
            .lock()
            .expect("script lock")
            .push_back(Expectation {
                argv: argv.iter().map(|s| s.to_string()).collect(),
                reply: Ok(reply),
            });
        self
    }

    /// Expects `argv` next and makes it time out.
    pub fn expect_timeout(&self, argv: &[&str]) -> &Self {
        self.script
            .lock()
            .expect("script lock")
            .push_back(Expectation {
                argv: argv.iter().map(|s| s.to_string()).collect(),
                reply: Err("timeout".into()),
            });
        self
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("calls lock").clone()
    }

    /// Expectations not yet consumed (empty when the script ran to the end).
    pub fn remaining(&self) -> usize {
        self.script.lock().expect("script lock").len()
    }

    fn answer(&self, cmd: Command) -> Result<Output, RunError> {
        let argv = cmd.argv();
        let files = argv
            .iter()
            .filter(|a| a.starts_with('/'))
            .filter_map(|a| capture(a))
            .collect();
        self.calls.lock().expect("calls lock").push(Call {
            argv: argv.clone(),
            stdin: cmd.stdin.clone(),
            timeout: cmd.timeout,
            env: cmd.env.clone(),
            files,
        });
        let shown = cmd.to_string();
        let next = self.script.lock().expect("script lock").pop_front();
        let Some(exp) = next else {
            return Err(RunError::Unexpected {
                argv: shown,
                detail: "script exhausted".into(),
            });
        };
        let matches = exp.argv.len() == argv.len()
            && exp
                .argv
                .iter()
                .zip(&argv)
                .all(|(e, a)| e == Self::ANY || e == a);
        if !matches {
            return Err(RunError::Unexpected {
                argv: shown,
                detail: format!("expected {:?}", exp.argv),
            });
        }
        match exp.reply {
            Ok(o) => Ok(o),
            Err(_) => Err(RunError::Timeout {
                argv: shown,
                after: cmd.timeout,
            }),
        }
    }
}

fn capture(path: &str) -> Option<CapturedFile> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    Some(CapturedFile {
        path: path.to_string(),
        content: std::fs::read(path).ok()?,
        mode: meta.permissions().mode() & 0o7777,
    })
}

impl Runner for ScriptedRunner {
    fn run<'a>(&'a self, cmd: Command) -> RunFuture<'a> {
        let r = self.answer(cmd);
        Box::pin(async move { r })
    }
}
