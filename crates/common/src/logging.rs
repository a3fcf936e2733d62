//! Logging setup shared by the three binaries: `tracing` events formatted as text on stderr, filtered by the
//! `PXFLEET_LOG` environment variable (`EnvFilter` syntax: `info`, `pxfleet_agent=debug,warn`, ...).

use tracing_subscriber::filter::{EnvFilter, LevelFilter};

/// The environment variable holding the log filter.
pub const LOG_ENV: &str = "PXFLEET_LOG";

/// The filter for `value` (the variable's contents, if set): its directives, or `default` when it is unset or
/// empty. Invalid directives are skipped (with a note on stderr), the valid ones kept.
pub fn env_filter(value: Option<&str>, default: LevelFilter) -> EnvFilter {
    EnvFilter::builder()
        .with_default_directive(default.into())
        .parse_lossy(value.unwrap_or_default())
}

/// Installs the global subscriber: text on stderr, filtered by `PXFLEET_LOG` (else `default`, e.g.
/// `LevelFilter::INFO` for the daemons, `LevelFilter::ERROR` for pxctl). A second call does nothing.
pub fn init(default: LevelFilter) {
    let value = std::env::var(LOG_ENV).ok();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(env_filter(value.as_deref(), default))
        .with_writer(std::io::stderr)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_empty_uses_the_default() {
        assert_eq!(
            env_filter(None, LevelFilter::INFO).max_level_hint(),
            Some(LevelFilter::INFO)
        );
        assert_eq!(
            env_filter(Some(""), LevelFilter::ERROR).max_level_hint(),
            Some(LevelFilter::ERROR)
        );
    }

    #[test]
    fn directives_replace_the_default() {
        let f = env_filter(Some("debug"), LevelFilter::INFO);
        assert_eq!(f.max_level_hint(), Some(LevelFilter::DEBUG));
        let f = env_filter(Some("pxfleet_agent=trace,warn"), LevelFilter::INFO);
        assert_eq!(f.max_level_hint(), Some(LevelFilter::TRACE));
        assert!(f.to_string().contains("pxfleet_agent=trace"), "{f}");
    }

    #[test]
    fn invalid_directives_are_skipped() {
        let f = env_filter(Some("pxfleet_cli=debug,=[[bad"), LevelFilter::ERROR);
        assert!(f.to_string().contains("pxfleet_cli=debug"), "{f}");
        assert!(!f.to_string().contains("bad"), "{f}");
    }

    #[test]
    fn init_twice_is_harmless() {
        init(LevelFilter::WARN);
        init(LevelFilter::WARN);
        tracing::warn!("logged once the subscriber is set");
    }
}
