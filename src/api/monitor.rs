//! `GET /v1/agent/monitor`: the agent's log lines, streamed as they are written.
//!
//! `?loglevel=` picks the lines (Consul's levels in any case, `INFO` by default; any other
//! value is a 400 with Consul's `Unknown log level: <level>`), `?logjson` asks for hclog's
//! JSON lines instead of text. The level is the session's own: a monitor at `debug` sees
//! debug lines of an agent that logs at `info`. Lines are not replayed: the stream starts
//! with the first line written after the request. A session costs a bounded channel in the
//! logger (`shard::logging::monitor`), whose receiving end the streamed answer holds; a
//! client that reads too slowly loses lines rather than slowing the agent, and the agent
//! logs how many when the session ends.

use super::{ApiError, Context, Outcome, Reply, Request, StreamOp};
use crate::logging;

/// The levels Consul's monitor accepts (`logging.ValidateLogLevel`), in any letter case.
fn monitor_level(text: &str) -> Option<log::LevelFilter> {
    match text.to_ascii_uppercase().as_str() {
        "TRACE" | "DEBUG" | "INFO" | "WARN" | "ERR" | "ERROR" => logging::parse_level(text),
        _ => None,
    }
}

pub fn monitor(_ctx: &Context, request: &Request, _reply: &mut Reply) -> Result<Outcome, ApiError> {
    let level_text = request
        .query
        .get("loglevel")
        .filter(|l| !l.is_empty())
        .unwrap_or("INFO");
    let level = monitor_level(level_text)
        .ok_or_else(|| ApiError::bad_request(format!("Unknown log level: {level_text}")))?;
    let json = request.query.has("logjson");
    let chunks = logging::monitor(level, json).ok_or_else(|| {
        ApiError::Status(
            503,
            format!(
                "too many monitor sessions: this agent serves at most {}",
                logging::MONITOR_SESSIONS_MAX
            ),
        )
    })?;
    Ok(Outcome::Stream(StreamOp {
        content_type: "text/plain; charset=utf-8",
        chunks,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_consuls() {
        assert_eq!(monitor_level("err"), Some(log::LevelFilter::Error));
        assert_eq!(monitor_level("Debug"), Some(log::LevelFilter::Debug));
        assert_eq!(monitor_level("off"), None);
        assert_eq!(monitor_level("warning"), None);
    }
}
