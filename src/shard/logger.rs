//! A minimal `log` backend writing Consul-style lines to stderr:
//! `2026-11-21T09:22:33.123Z [INFO]  agent: message`.
//!
//! Each line is formatted into one buffer and written with a single `write` so that lines from
//! different threads never interleave.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

struct StderrLogger {
    level: log::LevelFilter,
}

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= self.level && metadata.target().starts_with("praetor")
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let level = match record.level() {
            log::Level::Error => "[ERROR] ",
            log::Level::Warn => "[WARN]  ",
            log::Level::Info => "[INFO]  ",
            log::Level::Debug => "[DEBUG] ",
            log::Level::Trace => "[TRACE] ",
        };
        let line = format!(
            "{} {}{}\n",
            utc_timestamp(SystemTime::now()),
            level,
            record.args()
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// Installs the logger; `level` is Consul's `log_level` (trace, debug, info, warn, err).
pub fn init(level: &str) -> Result<(), String> {
    let filter = match level.to_ascii_lowercase().as_str() {
        "trace" => log::LevelFilter::Trace,
        "debug" => log::LevelFilter::Debug,
        "info" => log::LevelFilter::Info,
        "warn" | "warning" => log::LevelFilter::Warn,
        "err" | "error" => log::LevelFilter::Error,
        "off" => log::LevelFilter::Off,
        other => {
            return Err(format!(
                "log_level: unknown level {other:?} (trace, debug, info, warn, err)"
            ))
        }
    };
    let logger = Box::leak(Box::new(StderrLogger { level: filter }));
    // A second init (tests) keeps the first logger, which is harmless.
    let _ = log::set_logger(logger);
    log::set_max_level(filter);
    Ok(())
}

/// RFC 3339 UTC timestamp with milliseconds, computed without a date library.
pub fn utc_timestamp(time: SystemTime) -> String {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since_epoch.as_secs();
    let millis = since_epoch.subsec_millis();
    let days = (seconds / 86_400) as i64;
    let second_of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        second_of_day / 3600,
        (second_of_day / 60) % 60,
        second_of_day % 60
    )
}

/// Converts days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's method).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps() {
        assert_eq!(utc_timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_252_953_123);
        assert_eq!(utc_timestamp(t), "2026-11-21T09:22:33.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(utc_timestamp(leap), "2000-02-29T00:00:00.000Z");
    }
}
