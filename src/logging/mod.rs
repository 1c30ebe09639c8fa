//! The agent's `log` backend: every record is formatted once as Consul's hclog formats it and
//! goes to up to three places — stderr, the log file (`-log-file`, rotated by
//! [`super::log_file`]) and the live `/v1/agent/monitor` sessions.
//!
//! Text lines are `2026-11-21T09:22:33.123Z [INFO]  agent: message`; JSON lines (`-log-json`,
//! `?logjson`) carry hclog's keys `@level`, `@message`, `@module` and `@timestamp` (module:
//! the `agent:`/`gossip:` prefix praetor's messages start with, else `agent`).
//!
//! The level of stderr and the file changes at runtime (a reload sets `log_level`); each
//! monitor session has a level of its own, so `log::max_level` is the most verbose of them
//! all and a record is formatted only when someone takes it. A monitor session receives lines
//! over a bounded channel and never slows the thread that logs: a full channel drops the
//! line and counts it, as Consul's monitor does. A session ends when its receiver is
//! dropped; the logger forgets it at the next line it would have taken (or when the next
//! session starts) and logs how many lines it lost. Each output line is written with a single
//! `write`, so lines from different threads never interleave.
//!
//! Invariant: logging never blocks on a reader (stderr and the file are the only writes,
//! monitors are `try_send`), and nothing here logs while holding one of its own locks.

mod file;

use file::LogFile;
use std::fmt::Write as _;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Lines a monitor session may have waiting before newer ones are dropped (Consul's
/// monitor buffer holds 512).
pub const MONITOR_LINES_MAX: usize = 512;
/// Monitor sessions one agent serves at once; more are refused rather than slowing logging.
pub const MONITOR_SESSIONS_MAX: usize = 64;

/// Where and how the agent logs, from `log_level`, `log_json` and `log_file`.
pub struct LogSettings<'a> {
    pub level: &'a str,
    pub json: bool,
    pub file: Option<&'a crate::config::process::LogFileConfig>,
}

struct Monitor {
    level: log::LevelFilter,
    json: bool,
    lines: flume::Sender<Vec<u8>>,
    dropped: u64,
}

struct Logger {
    /// The level of stderr and the file, as `log::LevelFilter as usize`.
    level: AtomicUsize,
    json: AtomicBool,
    file: Mutex<Option<LogFile>>,
    monitors: Mutex<Vec<Monitor>>,
    /// `monitors.len()`, read without the lock on every record.
    monitor_count: AtomicUsize,
}

static LOGGER: Logger = Logger {
    level: AtomicUsize::new(log::LevelFilter::Info as usize),
    json: AtomicBool::new(false),
    file: Mutex::new(None),
    monitors: Mutex::new(Vec::new()),
    monitor_count: AtomicUsize::new(0),
};

fn filter_from_usize(value: usize) -> log::LevelFilter {
    match value {
        0 => log::LevelFilter::Off,
        1 => log::LevelFilter::Error,
        2 => log::LevelFilter::Warn,
        3 => log::LevelFilter::Info,
        4 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    }
}

/// Consul's log levels (`trace`, `debug`, `info`, `warn`, `err`/`error`), any letter case.
pub fn parse_level(level: &str) -> Option<log::LevelFilter> {
    match level.to_ascii_lowercase().as_str() {
        "trace" => Some(log::LevelFilter::Trace),
        "debug" => Some(log::LevelFilter::Debug),
        "info" => Some(log::LevelFilter::Info),
        "warn" | "warning" => Some(log::LevelFilter::Warn),
        "err" | "error" => Some(log::LevelFilter::Error),
        "off" => Some(log::LevelFilter::Off),
        _ => None,
    }
}

fn level_error(level: &str) -> String {
    format!("log_level: unknown level {level:?} (trace, debug, info, warn, err)")
}

/// Installs the logger with its outputs. Opening the log file is the only thing that can
/// fail besides a bad level; both are startup errors.
pub fn init(settings: &LogSettings) -> Result<(), String> {
    let filter = parse_level(settings.level).ok_or_else(|| level_error(settings.level))?;
    let file = match settings.file {
        Some(config) => Some(
            LogFile::open(config, SystemTime::now())
                .map_err(|e| format!("Failed to setup logging: {e}"))?,
        ),
        None => None,
    };
    *LOGGER.file.lock().unwrap_or_else(|p| p.into_inner()) = file;
    LOGGER.json.store(settings.json, Ordering::Relaxed);
    LOGGER.level.store(filter as usize, Ordering::Relaxed);
    // A second init (tests) keeps the first registration, which is this same logger.
    let _ = log::set_logger(&LOGGER);
    refresh_max_level();
    Ok(())
}

/// Changes the level of stderr and the file (a reload's `log_level`). Returns the previous
/// level.
pub fn set_level(level: &str) -> Result<log::LevelFilter, String> {
    let filter = parse_level(level).ok_or_else(|| level_error(level))?;
    let previous = LOGGER.level.swap(filter as usize, Ordering::Relaxed);
    refresh_max_level();
    Ok(filter_from_usize(previous))
}

/// The level of stderr and the file.
pub fn level() -> log::LevelFilter {
    filter_from_usize(LOGGER.level.load(Ordering::Relaxed))
}

/// `log::max_level` is the most verbose of the base level and every monitor's, so records
/// nobody takes are never formatted.
fn refresh_max_level() {
    let monitors = LOGGER.monitors.lock().unwrap_or_else(|p| p.into_inner());
    let most = monitors
        .iter()
        .map(|m| m.level)
        .fold(level(), std::cmp::max);
    log::set_max_level(most);
}

/// Starts a `/v1/agent/monitor` session: lines at `level` arrive on the returned channel
/// as they are logged, until it is dropped. `None` when [`MONITOR_SESSIONS_MAX`] are
/// already running.
pub fn monitor(level: log::LevelFilter, json: bool) -> Option<flume::Receiver<Vec<u8>>> {
    let (sender, lines) = flume::bounded(MONITOR_LINES_MAX);
    let ended = {
        let mut monitors = LOGGER.monitors.lock().unwrap_or_else(|p| p.into_inner());
        let ended = forget_ended(&mut monitors);
        if monitors.len() >= MONITOR_SESSIONS_MAX {
            return None;
        }
        monitors.push(Monitor {
            level,
            json,
            lines: sender,
            dropped: 0,
        });
        LOGGER
            .monitor_count
            .store(monitors.len(), Ordering::Release);
        ended
    };
    refresh_max_level();
    report_ended(&ended);
    Some(lines)
}

/// Removes the sessions whose receiver is gone; returns the lines each had lost.
fn forget_ended(monitors: &mut Vec<Monitor>) -> Vec<u64> {
    let mut ended = Vec::new();
    monitors.retain(|m| {
        let live = !m.lines.is_disconnected();
        if !live {
            ended.push(m.dropped);
        }
        live
    });
    LOGGER
        .monitor_count
        .store(monitors.len(), Ordering::Release);
    ended
}

/// Logs, outside the logger's locks, how many lines ended sessions lost.
fn report_ended(ended: &[u64]) {
    for dropped in ended.iter().filter(|d| **d > 0) {
        log::warn!("agent: Dropped logs during monitor request: dropped_count={dropped}");
    }
}

/// The parts of one record both formats are built from.
struct Entry<'a> {
    time: SystemTime,
    level: log::Level,
    /// The whole message, as the text format prints it (`agent: …`).
    message: &'a str,
}

impl Entry<'_> {
    fn text_line(&self) -> Vec<u8> {
        let label = match self.level {
            log::Level::Error => "[ERROR] ",
            log::Level::Warn => "[WARN]  ",
            log::Level::Info => "[INFO]  ",
            log::Level::Debug => "[DEBUG] ",
            log::Level::Trace => "[TRACE] ",
        };
        let mut line = String::with_capacity(32 + self.message.len());
        line.push_str(&utc_timestamp(self.time));
        line.push(' ');
        line.push_str(label);
        line.push_str(self.message);
        line.push('\n');
        line.into_bytes()
    }

    /// hclog's JSON line: keys in Go's sorted map order, microsecond timestamp.
    fn json_line(&self) -> Vec<u8> {
        let level = match self.level {
            log::Level::Error => "error",
            log::Level::Warn => "warn",
            log::Level::Info => "info",
            log::Level::Debug => "debug",
            log::Level::Trace => "trace",
        };
        let (module, message) = split_module(self.message);
        let mut line = String::with_capacity(96 + self.message.len());
        line.push_str("{\"@level\":\"");
        line.push_str(level);
        line.push_str("\",\"@message\":");
        push_json_string(&mut line, message);
        line.push_str(",\"@module\":");
        push_json_string(&mut line, module);
        line.push_str(",\"@timestamp\":\"");
        line.push_str(&utc_timestamp_micros(self.time));
        line.push_str("\"}\n");
        line.into_bytes()
    }
}

/// Longest `module:` prefix taken as hclog's `@module`.
const MODULE_CHARS_MAX: usize = 32;

/// Splits `gossip: joined 3 nodes` into (`gossip`, `joined 3 nodes`). A message without
/// such a prefix belongs to the `agent` module and is kept whole.
fn split_module(message: &str) -> (&str, &str) {
    if let Some((module, rest)) = message.split_once(": ") {
        let is_module = !module.is_empty()
            && module.len() <= MODULE_CHARS_MAX
            && module
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if is_module {
            return (module, rest);
        }
    }
    ("agent", message)
}

/// Appends `text` as a JSON string literal.
fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.target().starts_with("praetor") && metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let to_outputs = record.level() <= level();
        let to_monitors = self.monitor_count.load(Ordering::Acquire) > 0;
        if !to_outputs && !to_monitors {
            return;
        }
        let formatted;
        let message = match record.args().as_str() {
            Some(text) => text,
            None => {
                formatted = record.args().to_string();
                formatted.as_str()
            }
        };
        let entry = Entry {
            time: SystemTime::now(),
            level: record.level(),
            message,
        };
        // Each format at most once per record, whoever needs it.
        let mut text: Option<Vec<u8>> = None;
        let mut json: Option<Vec<u8>> = None;
        if to_outputs {
            let line = if self.json.load(Ordering::Relaxed) {
                json.get_or_insert_with(|| entry.json_line())
            } else {
                text.get_or_insert_with(|| entry.text_line())
            };
            let _ = std::io::stderr().lock().write_all(line);
            let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(file) = file.as_mut() {
                // A failing disk must not stop the agent; stderr still has the line.
                let _ = file.write_line(line, entry.time);
            }
        }
        if to_monitors {
            let mut monitors = self.monitors.lock().unwrap_or_else(|p| p.into_inner());
            let mut any_ended = false;
            for monitor in monitors.iter_mut() {
                if record.level() > monitor.level {
                    continue;
                }
                let line = if monitor.json {
                    json.get_or_insert_with(|| entry.json_line()).clone()
                } else {
                    text.get_or_insert_with(|| entry.text_line()).clone()
                };
                match monitor.lines.try_send(line) {
                    Ok(()) => {}
                    Err(flume::TrySendError::Full(_)) => monitor.dropped += 1,
                    Err(flume::TrySendError::Disconnected(_)) => any_ended = true,
                }
            }
            if any_ended {
                let ended = forget_ended(&mut monitors);
                drop(monitors);
                refresh_max_level();
                report_ended(&ended);
            }
        }
    }

    fn flush(&self) {}
}

/// RFC 3339 UTC timestamp with milliseconds, computed without a date library.
pub fn utc_timestamp(time: SystemTime) -> String {
    let (date_time, nanos) = utc_parts(time);
    format!("{date_time}.{:03}Z", nanos / 1_000_000)
}

/// RFC 3339 UTC timestamp with microseconds, as hclog's JSON lines carry it.
pub fn utc_timestamp_micros(time: SystemTime) -> String {
    let (date_time, nanos) = utc_parts(time);
    format!("{date_time}.{:06}Z", nanos / 1_000)
}

/// `YYYY-MM-DDTHH:MM:SS` and the sub-second nanoseconds.
fn utc_parts(time: SystemTime) -> (String, u32) {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since_epoch.as_secs();
    let days = (seconds / 86_400) as i64;
    let second_of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    (
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
            second_of_day / 3600,
            (second_of_day / 60) % 60,
            second_of_day % 60
        ),
        since_epoch.subsec_nanos(),
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
        let micros = UNIX_EPOCH + Duration::from_micros(1_795_252_953_123_456);
        assert_eq!(utc_timestamp_micros(micros), "2026-11-21T09:22:33.123456Z");
    }

    #[test]
    fn lines_in_both_formats() {
        let entry = Entry {
            time: UNIX_EPOCH + Duration::from_micros(1_795_252_953_123_456),
            level: log::Level::Warn,
            message: "gossip: joined \"a\"\n3 nodes",
        };
        assert_eq!(
            String::from_utf8(entry.text_line()).unwrap(),
            "2026-11-21T09:22:33.123Z [WARN]  gossip: joined \"a\"\n3 nodes\n"
        );
        let json = String::from_utf8(entry.json_line()).unwrap();
        assert_eq!(
            json,
            "{\"@level\":\"warn\",\"@message\":\"joined \\\"a\\\"\\n3 nodes\",\"@module\":\"gossip\",\"@timestamp\":\"2026-11-21T09:22:33.123456Z\"}\n"
        );
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed["@message"], "joined \"a\"\n3 nodes");
    }

    #[test]
    fn modules_are_short_prefixes() {
        assert_eq!(
            split_module("agent: reload: done"),
            ("agent", "reload: done")
        );
        assert_eq!(
            split_module("shard 0: stopped"),
            ("agent", "shard 0: stopped")
        );
        assert_eq!(split_module("no prefix"), ("agent", "no prefix"));
        assert_eq!(split_module("dns.server: up"), ("dns.server", "up"));
    }

    /// Waits (bounded) for a line containing `needle`; other tests may log meanwhile.
    fn received(lines: &flume::Receiver<Vec<u8>>, needle: &str) -> Option<String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while let Ok(line) = lines.recv_deadline(deadline) {
            let line = String::from_utf8(line).unwrap();
            if line.contains(needle) {
                return Some(line);
            }
        }
        None
    }

    #[test]
    fn monitor_sessions_have_their_own_level_and_end_with_their_receiver() {
        init(&LogSettings {
            level: "error",
            json: false,
            file: None,
        })
        .unwrap();
        let debug = monitor(log::LevelFilter::Debug, false).unwrap();
        let info_json = monitor(log::LevelFilter::Info, true).unwrap();
        assert!(log::max_level() >= log::LevelFilter::Debug);
        log::debug!("logger-test: below the base level");
        let line = received(&debug, "logger-test: below the base level").unwrap();
        assert!(
            line.contains("[DEBUG] logger-test: below the base level"),
            "{line}"
        );
        log::info!("logger-test: as JSON");
        let line = received(&info_json, "as JSON").unwrap();
        assert!(
            line.starts_with(
                "{\"@level\":\"info\",\"@message\":\"as JSON\",\"@module\":\"logger-test\""
            ),
            "{line}"
        );
        assert!(info_json
            .try_iter()
            .all(|l| !String::from_utf8_lossy(&l).contains("below the base level")));
        // A session whose receiver is gone is forgotten at the next line it would take.
        let before = LOGGER.monitor_count.load(Ordering::Acquire);
        drop(debug);
        log::debug!("logger-test: nobody reads this");
        assert!(LOGGER.monitor_count.load(Ordering::Acquire) < before);
        drop(info_json);
    }

    #[test]
    fn levels_parse_as_consul_names_them() {
        assert_eq!(parse_level("ERR"), Some(log::LevelFilter::Error));
        assert_eq!(parse_level("Trace"), Some(log::LevelFilter::Trace));
        assert_eq!(parse_level("verbose"), None);
    }
}
