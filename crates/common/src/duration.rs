//! The one way pxfleet reads a duration a person wrote (`pxctl --timeout 10m`, `[backup] every = "6h"`): a whole
//! number and a unit, `s`, `m`, `h` or `d`; a bare number is seconds. More than zero, and not so large that the
//! seconds overflow.

use std::time::Duration;

/// Why a text is no duration; the message says what is expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("{0:?} is not a duration; expected e.g. 90s, 10m, 2h or 1d")]
    NotANumber(String),
    #[error("unknown unit {unit:?} in {text:?}; use s, m, h or d (e.g. 10m)")]
    UnknownUnit { text: String, unit: String },
    #[error("{0:?} must be more than zero and reasonably small")]
    OutOfRange(String),
}

/// `90`, `90s`, `10m`, `2h`, `1d` (surrounding spaces ignored).
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| DurationError::NotANumber(s.to_string()))?;
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => {
            return Err(DurationError::UnknownUnit {
                text: s.to_string(),
                unit: unit.to_string(),
            })
        }
    };
    n.checked_mul(mult)
        .filter(|&secs| secs > 0)
        .map(Duration::from_secs)
        .ok_or_else(|| DurationError::OutOfRange(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_bare_seconds_and_refusals() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration(" 10m "), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86400)));
        assert!(matches!(
            parse_duration("0s"),
            Err(DurationError::OutOfRange(_))
        ));
        assert!(matches!(
            parse_duration("6 hours"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_duration("h"),
            Err(DurationError::NotANumber(_))
        ));
        // would overflow u64 seconds: refused, never a panic or a wrapped value
        assert!(matches!(
            parse_duration("999999999999999999d"),
            Err(DurationError::OutOfRange(_))
        ));
        assert!(matches!(
            parse_duration("99999999999999999999999"),
            Err(DurationError::NotANumber(_))
        ));
    }
}
