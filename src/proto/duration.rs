//! Go-style durations, as Consul accepts them everywhere a time span is configured
//! (`"15s"`, `"15.0s"`, `"0.001s"`, `"1m30s"`, `"250ms"`), and Go's canonical formatting of
//! them (`time.Duration.String`), which Consul echoes back in fields such as a session's `TTL`.
//!
//! Durations are carried as signed nanoseconds, like Go's `time.Duration`, so that every value
//! Go can express round-trips exactly.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationError(pub String);

impl std::fmt::Display for DurationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Longest duration text accepted; Go's own strings never exceed ~30 bytes.
const DURATION_TEXT_BYTES_MAX: usize = 64;

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Parses a Go duration string into signed nanoseconds.
pub fn parse_go_duration_nanos(text: &str) -> Result<i64, DurationError> {
    let err = || DurationError(format!("time: invalid duration {text:?}"));
    if text.len() > DURATION_TEXT_BYTES_MAX {
        return Err(err());
    }
    let mut s = text;
    let mut negative = false;
    if let Some(rest) = s.strip_prefix('-') {
        negative = true;
        s = rest;
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(err());
    }
    let mut total: u128 = 0;
    while !s.is_empty() {
        let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let whole = &s[..digits_end];
        s = &s[digits_end..];
        let mut fraction = "";
        if let Some(rest) = s.strip_prefix('.') {
            let fraction_end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            fraction = &rest[..fraction_end];
            s = &rest[fraction_end..];
        }
        if whole.is_empty() && fraction.is_empty() {
            return Err(err());
        }
        let unit_end = s
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(s.len());
        let unit = &s[..unit_end];
        s = &s[unit_end..];
        let scale = unit_nanos(unit).ok_or_else(|| {
            if unit.is_empty() {
                DurationError(format!("time: missing unit in duration {text:?}"))
            } else {
                DurationError(format!("time: unknown unit {unit:?} in duration {text:?}"))
            }
        })? as u128;
        let whole_value: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| err())?
        };
        let mut part = whole_value.checked_mul(scale).ok_or_else(err)?;
        // The fraction is accurate to the nanosecond; digits beyond what can matter are dropped.
        let mut denominator: u128 = 1;
        let mut fraction_value: u128 = 0;
        for c in fraction.bytes().take(30) {
            fraction_value = fraction_value * 10 + (c - b'0') as u128;
            denominator *= 10;
        }
        part += fraction_value * scale / denominator;
        total = total.checked_add(part).ok_or_else(err)?;
        if total > i64::MAX as u128 {
            return Err(err());
        }
    }
    let value = total as i64;
    Ok(if negative { -value } else { value })
}

/// Parses a Go duration that must not be negative.
pub fn parse_go_duration(text: &str) -> Result<Duration, DurationError> {
    let nanos = parse_go_duration_nanos(text)?;
    if nanos < 0 {
        return Err(DurationError(format!("negative duration {text:?}")));
    }
    Ok(Duration::from_nanos(nanos as u64))
}

/// Formats nanoseconds as Go's `time.Duration.String()` does: `"0s"`, `"1.5s"`, `"1m30s"`,
/// `"2h0m0s"`, `"250ms"`, `"1µs"`.
pub fn format_go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".to_string();
    }
    let negative = nanos < 0;
    let value = nanos.unsigned_abs();
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    if value < 1_000_000_000 {
        // Sub-second: pick the largest unit that keeps an integer part.
        let (unit, scale) = if value < 1_000 {
            ("ns", 1)
        } else if value < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        push_fixed(&mut out, value, scale);
        out.push_str(unit);
        return out;
    }
    let hours = value / 3_600_000_000_000;
    let rest = value % 3_600_000_000_000;
    let minutes = rest / 60_000_000_000;
    let seconds_nanos = rest % 60_000_000_000;
    if hours > 0 {
        out.push_str(&hours.to_string());
        out.push('h');
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&minutes.to_string());
        out.push('m');
    }
    push_fixed(&mut out, seconds_nanos, 1_000_000_000);
    out.push('s');
    out
}

/// Writes `value / scale` with the fractional part's trailing zeros trimmed.
fn push_fixed(out: &mut String, value: u64, scale: u64) {
    out.push_str(&(value / scale).to_string());
    let fraction = value % scale;
    if fraction != 0 {
        let width = scale.ilog10() as usize;
        let digits = format!("{fraction:0width$}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_forms() {
        assert_eq!(parse_go_duration_nanos("15s").unwrap(), 15_000_000_000);
        assert_eq!(parse_go_duration_nanos("15.0s").unwrap(), 15_000_000_000);
        assert_eq!(parse_go_duration_nanos("0.001s").unwrap(), 1_000_000);
        assert_eq!(parse_go_duration_nanos("1m30s").unwrap(), 90_000_000_000);
        assert_eq!(
            parse_go_duration_nanos("1h2m3.5s").unwrap(),
            3_723_500_000_000
        );
        assert_eq!(parse_go_duration_nanos("250ms").unwrap(), 250_000_000);
        assert_eq!(parse_go_duration_nanos("10us").unwrap(), 10_000);
        assert_eq!(parse_go_duration_nanos("10µs").unwrap(), 10_000);
        assert_eq!(parse_go_duration_nanos(".5s").unwrap(), 500_000_000);
        assert_eq!(parse_go_duration_nanos("0").unwrap(), 0);
        assert_eq!(parse_go_duration_nanos("-1s").unwrap(), -1_000_000_000);
    }

    #[test]
    fn rejects_bad_forms() {
        for bad in [
            "",
            "s",
            "15",
            "1x",
            "1.s.",
            "--1s",
            ".s",
            "1e3s",
            "99999999999999999999h",
        ] {
            assert!(parse_go_duration_nanos(bad).is_err(), "{bad:?} should fail");
        }
        assert!(parse_go_duration("-1s").is_err());
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_go_duration(0), "0s");
        assert_eq!(format_go_duration(15_000_000_000), "15s");
        assert_eq!(format_go_duration(1_500_000_000), "1.5s");
        assert_eq!(format_go_duration(90_000_000_000), "1m30s");
        assert_eq!(format_go_duration(7_200_000_000_000), "2h0m0s");
        assert_eq!(format_go_duration(250_000_000), "250ms");
        assert_eq!(format_go_duration(1_000), "1µs");
        assert_eq!(format_go_duration(1_500), "1.5µs");
        assert_eq!(format_go_duration(-15_000_000_000), "-15s");
    }

    #[test]
    fn round_trips() {
        for n in [
            1i64,
            999,
            1_000_001,
            86_400_000_000_000,
            10_000_000_000,
            123_456_789_012,
        ] {
            assert_eq!(parse_go_duration_nanos(&format_go_duration(n)).unwrap(), n);
        }
    }
}
