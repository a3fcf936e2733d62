//! Where a command writes and how it asks: [`Io`] bundles stdout, stderr, colour and the [`Confirm`]er, so
//! tests run commands against buffers and a scripted answer. On a real terminal [`TerminalConfirm`] asks on
//! stderr and reads stdin; when stdin is not a terminal it refuses with a hint to pass `-y`.

use std::io::{BufRead, IsTerminal, Write};

use crate::error::{CliError, Result};

/// Asks the user a yes/no question.
pub trait Confirm {
    /// `question` is one line such as "Apply these changes to fleet dev?"; `flag_hint` names the flag that
    /// skips the question (for the refusal when nobody can answer).
    fn confirm(&mut self, question: &str, flag_hint: &str) -> Result<bool>;
}

/// Asks on the process's terminal.
#[derive(Debug, Default)]
pub struct TerminalConfirm;

impl Confirm for TerminalConfirm {
    fn confirm(&mut self, question: &str, flag_hint: &str) -> Result<bool> {
        if !std::io::stdin().is_terminal() {
            return Err(CliError::NotConfirmed(format!(
                "confirmation needed but stdin is not a terminal; pass {flag_hint} to proceed without asking"
            )));
        }
        let mut err = std::io::stderr().lock();
        write!(err, "{question} Only 'yes' is accepted: ")?;
        err.flush()?;
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        Ok(matches!(line.trim(), "yes" | "y"))
    }
}

/// A fixed answer (tests); `None` behaves like a non-interactive stdin.
#[derive(Debug, Default)]
pub struct Scripted(pub Option<bool>);

impl Confirm for Scripted {
    fn confirm(&mut self, _question: &str, flag_hint: &str) -> Result<bool> {
        self.0.ok_or_else(|| {
            CliError::NotConfirmed(format!(
                "confirmation needed but stdin is not a terminal; pass {flag_hint} to proceed without asking"
            ))
        })
    }
}

/// A command's output channels.
pub struct Io<'a> {
    /// Results (plans, tables, JSON, progress lines).
    pub out: &'a mut dyn Write,
    /// Diagnostics, hints, warnings.
    pub err: &'a mut dyn Write,
    /// ANSI colour in plan text.
    pub colour: bool,
    pub confirm: &'a mut dyn Confirm,
}
