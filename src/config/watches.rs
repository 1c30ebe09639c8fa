//! The `watches` key: watch plans the agent runs for its configuration, with Consul's
//! fields — `type` (`key`, `keyprefix`, `services`, `nodes`, `service`, `checks`, `event`)
//! and its parameters (`key`, `prefix`, `service`, `tag`, `passingonly`, `state`, `name`),
//! `datacenter`, `token`, and the handler: `args` (a command run directly) or `handler` (a
//! command line for the shell, Consul's older form). `handler_type = "http"` is accepted and
//! warned about: praetor's watches run commands. As in Consul (`watch.ParseExempt`), a
//! parameter the watch type does not take is refused (`Invalid parameters: [keyy]`) and the
//! parameters' types are not converted. Pure: no I/O.

use serde_json::{Map, Value};

/// The watch types Consul's agent runs.
const WATCH_TYPES: &[&str] = &[
    "key",
    "keyprefix",
    "services",
    "nodes",
    "service",
    "checks",
    "event",
];

/// How a watch's handler is run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchHandler {
    /// `handler`: one command line, run by the shell.
    Shell(String),
    /// `args`: a program and its arguments, run directly.
    Exec(Vec<String>),
}

/// One watch plan, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchConfig {
    pub watch_type: String,
    /// `key`, `prefix`, `service`, `state`, `name`, `datacenter`, `token`, as given.
    pub params: Vec<(String, String)>,
    pub tags: Vec<String>,
    pub passing_only: bool,
    pub handler: WatchHandler,
}

/// The string parameters a watch may carry, in the order they are passed on.
const STRING_PARAMS: &[&str] = &[
    "key",
    "prefix",
    "service",
    "state",
    "name",
    "datacenter",
    "token",
];

/// The parameters every watch takes, whatever its type.
const COMMON_PARAMS: &[&str] = &[
    "type",
    "datacenter",
    "token",
    "handler_type",
    "http_handler_config",
    "handler",
    "args",
];

/// The parameters each watch type takes besides [`COMMON_PARAMS`] (Consul's watch
/// factories).
fn type_params(watch_type: &str) -> &'static [&'static str] {
    match watch_type {
        "key" => &["stale", "key"],
        "keyprefix" => &["stale", "prefix"],
        "services" | "nodes" => &["stale"],
        "service" => &["stale", "service", "tag", "passingonly"],
        "checks" => &["stale", "service", "state", "tag"],
        "event" => &["name"],
        _ => &[],
    }
}

/// Reads `watches`; a plan praetor cannot run (an HTTP handler) adds a warning and is left
/// out, a malformed one is an error naming its position.
pub fn from_raw(
    raw: &Map<String, Value>,
    warnings: &mut Vec<String>,
) -> Result<Vec<WatchConfig>, String> {
    let list = match raw.get("watches") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list.clone(),
        Some(Value::Object(one)) => vec![Value::Object(one.clone())],
        Some(other) => return Err(format!("watches: expected a list of watches, got {other}")),
    };
    let mut plans = Vec::with_capacity(list.len());
    for (position, entry) in list.iter().enumerate() {
        let failed = |why: String| format!("Failed to parse watch watches[{position}]: {why}");
        let Value::Object(entry) = entry else {
            return Err(failed(format!("expected an object, got {entry}")));
        };
        match parse_one(entry, position, warnings) {
            Ok(Some(plan)) => plans.push(plan),
            Ok(None) => warnings.push(super::not_acted_on(
                &format!("watches[{position}] with handler_type \"http\""),
                "praetor's watches run a command (args or handler); this one is not run",
            )),
            Err(why) => return Err(failed(why)),
        }
    }
    Ok(plans)
}

/// One plan of `watches`: its type and keys checked as Consul checks them; `None` for an
/// HTTP-handler plan, which is warned about and not run.
fn parse_one(
    entry: &Map<String, Value>,
    position: usize,
    warnings: &mut Vec<String>,
) -> Result<Option<WatchConfig>, String> {
    let watch_type = watch_type_of(entry)?;
    match entry.get("stale") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => warnings.push(super::not_acted_on(
            &format!("watches[{position}].stale = true"),
            "watch plans read with the default consistency",
        )),
        Some(_) => return Err("Expecting stale to be a boolean".to_string()),
    }
    match entry.get("handler_type").and_then(Value::as_str) {
        None | Some("script") => {}
        Some("http") => return Ok(None),
        Some(other) => return Err(format!("Handler type '{other}' not recognized")),
    }
    let params = string_params(entry, &watch_type)?;
    let tags = match entry.get("tag") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(tag)) => vec![tag.clone()],
        Some(Value::Array(tags)) => tags
            .iter()
            .map(|t| {
                t.as_str()
                    .map(str::to_string)
                    .ok_or("tag: expected strings")
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(format!("tag: expected a string or a list, got {other}")),
    };
    let passing_only = match entry.get("passingonly") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("Expecting passingonly to be a boolean".to_string()),
    };
    Ok(Some(WatchConfig {
        watch_type,
        params,
        tags,
        passing_only,
        handler: handler_of(entry)?,
    }))
}

/// The plan's type, one of Consul's agent-config watch types, with only the keys it takes.
fn watch_type_of(entry: &Map<String, Value>) -> Result<String, String> {
    let watch_type = entry
        .get("type")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or("Watch type must be specified")?
        .to_string();
    if watch_type.starts_with("connect_") {
        return Err(format!(
            "Watch type {watch_type} is not allowed in agent config"
        ));
    }
    if !WATCH_TYPES.contains(&watch_type.as_str()) {
        return Err(format!("Unsupported watch type: {watch_type}"));
    }
    let mut invalid: Vec<&str> = entry
        .keys()
        .map(String::as_str)
        .filter(|key| !COMMON_PARAMS.contains(key) && !type_params(&watch_type).contains(key))
        .collect();
    if !invalid.is_empty() {
        invalid.sort_unstable();
        return Err(format!("Invalid parameters: [{}]", invalid.join(" ")));
    }
    Ok(watch_type)
}

/// The plan's string parameters, with the one its type requires given.
fn string_params(
    entry: &Map<String, Value>,
    watch_type: &str,
) -> Result<Vec<(String, String)>, String> {
    let mut params = Vec::new();
    for key in STRING_PARAMS {
        if let Some(value) = entry.get(*key).filter(|v| !v.is_null()) {
            let value = value
                .as_str()
                .ok_or_else(|| format!("Expecting {key} to be a string"))?;
            params.push((key.to_string(), value.to_string()));
        }
    }
    let given = |key: &str| params.iter().any(|(k, v)| k == key && !v.is_empty());
    let required = match watch_type {
        "key" => Some(("key", "Must specify a single key to watch")),
        "keyprefix" => Some(("prefix", "Must specify a single prefix to watch")),
        "service" => Some(("service", "Must specify a single service to watch")),
        _ => None,
    };
    if let Some((key, message)) = required {
        if !given(key) {
            return Err(message.to_string());
        }
    }
    Ok(params)
}

/// The plan's handler: a command (`args`) or a shell line (`handler`), exactly one.
fn handler_of(entry: &Map<String, Value>) -> Result<WatchHandler, String> {
    Ok(match (entry.get("args"), entry.get("handler")) {
        (Some(Value::Array(args)), None) if !args.is_empty() => WatchHandler::Exec(
            args.iter()
                .map(|a| {
                    a.as_str()
                        .map(str::to_string)
                        .ok_or("args: expected strings")
                })
                .collect::<Result<_, _>>()?,
        ),
        (None, Some(Value::String(handler))) if !handler.is_empty() => {
            WatchHandler::Shell(handler.clone())
        }
        (Some(_), Some(_)) => return Err("Only one of handler or args may be set".to_string()),
        _ => return Err("Must define a handler: args (a command) or handler".to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(value: Value) -> (Result<Vec<WatchConfig>, String>, Vec<String>) {
        let mut warnings = Vec::new();
        let raw = json!({ "watches": value });
        let result = from_raw(raw.as_object().unwrap(), &mut warnings);
        (result, warnings)
    }

    #[test]
    fn plans_read_with_consuls_fields() {
        let (plans, warnings) = read(json!([
            {"type": "key", "key": "a/b", "args": ["/bin/cat"]},
            {"type": "service", "service": "web", "tag": ["x", "y"], "passingonly": true,
             "handler": "cat >> out", "datacenter": "dc1"},
            {"type": "event", "name": "deploy", "handler_type": "http",
             "http_handler_config": {"path": "http://x"}},
        ]));
        let plans = plans.unwrap();
        assert_eq!(plans.len(), 2);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(
            plans[0].handler,
            WatchHandler::Exec(vec!["/bin/cat".into()])
        );
        assert_eq!(
            plans[0].params,
            vec![("key".to_string(), "a/b".to_string())]
        );
        assert_eq!(plans[1].tags, vec!["x", "y"]);
        assert!(plans[1].passing_only);
        assert_eq!(plans[1].handler, WatchHandler::Shell("cat >> out".into()));
    }

    #[test]
    fn malformed_plans_are_errors() {
        for (watch, expected) in [
            (json!({"args": ["x"]}), "Watch type must be specified"),
            (
                json!({"type": "weather", "args": ["x"]}),
                "Unsupported watch type: weather",
            ),
            (
                json!({"type": "key", "args": ["x"]}),
                "Must specify a single key to watch",
            ),
            (json!({"type": "nodes"}), "Must define a handler"),
            (
                json!({"type": "nodes", "args": ["x"], "handler_type": "ftp"}),
                "Handler type 'ftp'",
            ),
            (
                json!({"type": "key", "keyy": "a", "key": "a", "args": ["x"]}),
                "Invalid parameters: [keyy]",
            ),
            (
                json!({"type": "nodes", "key": "a", "args": ["x"]}),
                "Invalid parameters: [key]",
            ),
            (
                json!({"type": "service", "service": "web", "passingonly": "true", "args": ["x"]}),
                "Expecting passingonly to be a boolean",
            ),
            (
                json!({"type": "key", "key": 5, "args": ["x"]}),
                "Expecting key to be a string",
            ),
            (
                json!({"type": "connect_roots", "args": ["x"]}),
                "Watch type connect_roots is not allowed in agent config",
            ),
        ] {
            let error = read(json!([watch])).0.unwrap_err();
            assert!(
                error.starts_with("Failed to parse watch watches[0]: "),
                "{error}"
            );
            assert!(error.contains(expected), "{error}");
        }
    }
}
