//! Errors of the simulator and how each one is rendered the way the PVE tools render it (text and exit code).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Everything that can go wrong while a simulated tool runs.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// `raise_param_exc`: `400 Parameter verification failed.` plus one `<param>: <message>` line each.
    #[error("400 Parameter verification failed.")]
    Param {
        /// parameter name -> message (sorted; PVE prints them in hash order)
        errors: BTreeMap<String, String>,
    },
    /// Any other HTTP 400 raised while parsing the command line (`unable to parse option`, `not enough arguments`).
    #[error("400 {msg}")]
    BadRequest { msg: String },
    /// A plain Perl `die "message\n"`: the message on stderr, exit 255.
    #[error("{0}")]
    Die(String),
    /// The `half_create` fault: the tool died halfway and nothing was cleaned up. Rendered like [`SimError::Die`].
    #[error("{0}")]
    Killed(String),
    /// pvesh: `No '<cmd>' handler defined for '<path>'`, exit 1.
    #[error("No '{cmd}' handler defined for '{path}'")]
    NoHandler { cmd: String, path: String },
    /// The simulator's own state could not be read or written.
    #[error("pvesim: {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The simulator's state or configuration is not what it should be.
    #[error("pvesim: {path}: {msg}")]
    State { path: PathBuf, msg: String },
    /// Wrong use of `pvesim` itself (not of a simulated tool).
    #[error("pvesim: {0}")]
    Usage(String),
}

impl SimError {
    /// A parameter error for a single parameter.
    pub fn param(name: impl Into<String>, msg: impl Into<String>) -> Self {
        let mut errors = BTreeMap::new();
        errors.insert(name.into(), msg.into());
        SimError::Param { errors }
    }

    /// A plain `die` message.
    pub fn die(msg: impl Into<String>) -> Self {
        SimError::Die(msg.into())
    }

    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SimError::Io {
            path: path.into(),
            source,
        }
    }

    /// Bad simulator state at `path`.
    pub fn state(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        SimError::State {
            path: path.into(),
            msg: msg.into(),
        }
    }

    /// Renders the error as the tool prints it on stderr, with the short usage line appended to HTTP-400
    /// errors as `PVE::Exception::stringify` does.
    pub fn render(&self, usage: Option<&str>) -> String {
        let mut msg = match self {
            SimError::Param { errors } => {
                let mut s = String::from("400 Parameter verification failed.\n");
                for (k, v) in errors {
                    s.push_str(&format!("{k}: {v}\n"));
                }
                s
            }
            other => format!("{other}\n"),
        };
        if matches!(self, SimError::Param { .. } | SimError::BadRequest { .. }) {
            if let Some(u) = usage {
                msg.push_str(u);
                if !msg.ends_with('\n') {
                    msg.push('\n');
                }
            }
        }
        msg
    }

    /// The exit code the real tool uses for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            SimError::NoHandler { .. } => 1,
            SimError::Usage(_) => 2,
            _ => 255,
        }
    }
}

/// Result type of the simulator.
pub type Result<T> = std::result::Result<T, SimError>;
