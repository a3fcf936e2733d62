//! What pxfleet's programs share beyond the protocol, the spec and the PVE driver: [`clock`], the injected
//! clock (wall time and monotonic instants; a manual clock for tests); [`flush`], the
//! group-commit flusher both sled databases (the controller's store, the agent's journal) make writes durable
//! with; [`logging`], the tracing setup of the three binaries; [`shutdown`], the daemons' stop signal;
//! [`toml_file`], TOML config loading with `file:line:column` errors.

pub mod clock;
pub mod duration;
pub mod flush;
pub mod logging;
pub mod shutdown;
pub mod toml_file;

pub use clock::{Clock, ManualClock, Stopwatch};
pub use duration::{parse_duration, DurationError};
pub use flush::{FlushError, Flusher};
pub use shutdown::{shutdown_signal, Shutdown};
pub use toml_file::TomlFileError;
