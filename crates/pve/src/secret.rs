//! [`Secret`]: a value (the root password) that must never reach logs, argv, plans or error texts.

use std::fmt;

/// A secret string. `Debug` and `Display` print a mask; only [`Secret::expose`] gives the value, and the driver
/// uses it solely to build stdin bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself. Callers must not log or format it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(******)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(crate::runner::REDACTED)
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Secret::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_printed() {
        let s = Secret::new("hunter22");
        assert!(!format!("{s:?} {s}").contains("hunter22"));
        assert_eq!(s.expose(), "hunter22");
    }
}
