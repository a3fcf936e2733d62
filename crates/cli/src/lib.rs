//! pxfleet-cli: the library behind `pxctl` (the binary only parses arguments and dispatches
//! here, so tests call the commands directly).

pub mod plan;
pub mod validate;
