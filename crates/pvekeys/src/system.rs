//! The values PVE's schema takes for a container's system options (pve-container's `LXC/Config.pm`).

/// The architectures PVE's `arch` takes.
pub const ARCHES: &[&str] = &["amd64", "i386", "arm64", "armhf", "riscv32", "riscv64"];
/// The console modes PVE's `cmode` takes.
pub const CMODES: &[&str] = &["tty", "console", "shell"];
/// The most ttys PVE's `tty` gives a container.
pub const MAX_TTY: u32 = 6;
