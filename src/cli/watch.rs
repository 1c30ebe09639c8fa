//! `praetor watch -type key|keyprefix|services|nodes|service|checks|event …`: Consul's
//! `consul watch`.
//!
//! A watch runs a blocking query against the view it names and, whenever the answer changes
//! (the index moves and the data differs), runs the handler with the data as JSON on its
//! stdin and `CONSUL_INDEX` in its environment. The handler is `-handler CMD` or the trailing
//! arguments, run through `$SHELL -c` (or `/bin/sh -c`) unless `-shell=false`. A failing
//! handler ends the watch with exit code 1, as Consul's does. Without a handler, the current
//! data is printed as indented JSON once and the command exits, as Consul's does.
//!
//! The data is what Consul's watch hands over: one KV entry (or `null`) for `key`, the entry
//! list for `keyprefix`, the service map for `services`, node list for `nodes`, health
//! entries for `service`, checks for `checks`, and for `event` only the events newer than the
//! last one delivered. Field order is the agent's own (the answer is compacted, not
//! re-encoded).

use super::client::{encode_path, encode_query_value, Client, Response};
use super::HttpFlags;
use clap::{ArgAction, Args};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// First pause after a failed query; doubles up to [`RETRY_WAIT_MAX`].
const RETRY_WAIT_FIRST: Duration = Duration::from_secs(1);
const RETRY_WAIT_MAX: Duration = Duration::from_secs(20);

#[derive(Args, Debug)]
pub struct WatchArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// What to watch: key, keyprefix, services, nodes, service, checks or event.
    #[arg(long = "type")]
    pub watch_type: Option<String>,
    /// The key a `-type key` watch follows.
    #[arg(long)]
    pub key: Option<String>,
    /// The key prefix a `-type keyprefix` watch follows.
    #[arg(long)]
    pub prefix: Option<String>,
    /// The service a `-type service` watch follows.
    #[arg(long)]
    pub service: Option<String>,
    /// Service tag filter (repeatable).
    #[arg(long)]
    pub tag: Vec<String>,
    /// Only passing instances (`-type service`).
    #[arg(long)]
    pub passingonly: bool,
    /// Check state for `-type checks` (default: any).
    #[arg(long)]
    pub state: Option<String>,
    /// Event name for `-type event`.
    #[arg(long)]
    pub name: Option<String>,
    /// The handler command (the trailing arguments work too).
    #[arg(long)]
    pub handler: Option<String>,
    /// Run the handler through a shell (`-shell=false` to exec it directly).
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    pub shell: bool,
    /// The handler, as trailing arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub child: Vec<String>,
}

/// What a watch queries and how it turns an answer into handler data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Path and query, without `index`/`wait`.
    pub target: String,
    pub kind: PlanKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanKind {
    /// The answer is a one-element list; the data is that element, `null` on 404.
    SingleKey,
    /// The answer is the data; `null` on 404.
    Whole,
    /// Events: only those after the last delivered one.
    Events,
}

/// Builds the query of a watch from its flags, with Consul's errors for missing ones.
pub fn plan(args: &WatchArgs) -> Result<Plan, String> {
    let kind = args
        .watch_type
        .as_deref()
        .ok_or("Must specify watch type")?;
    let mut query: Vec<String> = Vec::new();
    let target = match kind {
        "key" => {
            let key = args
                .key
                .as_deref()
                .filter(|k| !k.is_empty())
                .ok_or("Must specify a single key to watch")?;
            return Ok(Plan {
                target: format!("/v1/kv/{}", encode_path(key)),
                kind: PlanKind::SingleKey,
            });
        }
        "keyprefix" => {
            let prefix = args
                .prefix
                .as_deref()
                .ok_or("Must specify a single prefix to watch")?;
            query.push("recurse".into());
            format!("/v1/kv/{}", encode_path(prefix))
        }
        "services" => "/v1/catalog/services".to_string(),
        "nodes" => "/v1/catalog/nodes".to_string(),
        "service" => {
            let service = args
                .service
                .as_deref()
                .filter(|s| !s.is_empty())
                .ok_or("Must specify a single service to watch")?;
            for tag in &args.tag {
                query.push(format!("tag={}", encode_query_value(tag)));
            }
            if args.passingonly {
                query.push("passing=1".into());
            }
            format!("/v1/health/service/{}", encode_path(service))
        }
        "checks" => match (&args.service, &args.state) {
            (Some(_), Some(_)) => {
                return Err("Cannot specify service and state".to_string());
            }
            (Some(service), None) => format!("/v1/health/checks/{}", encode_path(service)),
            (None, state) => format!(
                "/v1/health/state/{}",
                encode_path(state.as_deref().unwrap_or("any"))
            ),
        },
        "event" => {
            if let Some(name) = args.name.as_deref().filter(|n| !n.is_empty()) {
                query.push(format!("name={}", encode_query_value(name)));
            }
            let target = with_query("/v1/event/list", &query);
            return Ok(Plan {
                target,
                kind: PlanKind::Events,
            });
        }
        other => return Err(format!("Unsupported watch type: {other}")),
    };
    Ok(Plan {
        target: with_query(&target, &query),
        kind: PlanKind::Whole,
    })
}

fn with_query(path: &str, query: &[String]) -> String {
    if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", query.join("&"))
    }
}

/// Removes the whitespace outside strings: the compact form of the agent's answer, keeping
/// its field order.
pub fn compact_json(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for &b in text {
        if in_string {
            out.push(b);
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b' ' | b'\n' | b'\r' | b'\t' => {}
            b'"' => {
                in_string = true;
                out.push(b);
            }
            _ => out.push(b),
        }
    }
    out
}

/// The elements of a compact top-level JSON array, as text.
pub fn array_elements(compact: &[u8]) -> Vec<&[u8]> {
    let mut elements = Vec::new();
    if compact.first() != Some(&b'[') || compact.last() != Some(&b']') {
        return elements;
    }
    let inner = &compact[1..compact.len() - 1];
    let (mut depth, mut start, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for (i, &b) in inner.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                elements.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < inner.len() {
        elements.push(&inner[start..]);
    }
    elements
}

pub use crate::consul::user_event::event_id_to_index;

/// Turns one answer into the handler data (compact JSON).
pub fn data_of(kind: PlanKind, response: &Response, last_index: u64) -> Vec<u8> {
    if response.status == 404 {
        return b"null".to_vec();
    }
    let compact = compact_json(&response.body);
    match kind {
        PlanKind::Whole => compact,
        PlanKind::SingleKey => array_elements(&compact)
            .first()
            .map(|e| e.to_vec())
            .unwrap_or_else(|| b"null".to_vec()),
        PlanKind::Events => {
            let elements = array_elements(&compact);
            // Deliver only what follows the last event already delivered, if it is listed.
            let seen = elements.iter().position(|e| {
                serde_json::from_slice::<serde_json::Value>(e)
                    .ok()
                    .and_then(|v| v["ID"].as_str().and_then(event_id_to_index))
                    == Some(last_index)
            });
            let fresh = match seen {
                Some(at) if last_index != 0 => &elements[at + 1..],
                _ => &elements[..],
            };
            let mut out = b"[".to_vec();
            for (i, e) in fresh.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(e);
            }
            out.push(b']');
            out
        }
    }
}

fn run_handler(command: &[String], shell: bool, index: u64, data: &[u8]) -> Result<(), String> {
    let mut child = if shell {
        let shell_path = std::env::var("SHELL")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "/bin/sh".to_string());
        let mut c = Command::new(shell_path);
        c.arg("-c").arg(command.join(" "));
        c
    } else {
        let mut c = Command::new(&command[0]);
        c.args(&command[1..]);
        c
    };
    let mut child = child
        .env("CONSUL_INDEX", index.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("Error executing handler: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A handler that does not read its input is fine.
        let _ = stdin.write_all(data);
        let _ = stdin.write_all(b"\n");
    }
    let status = child
        .wait()
        .map_err(|e| format!("Error executing handler: {e}"))?;
    if !status.success() {
        return Err(format!("Error executing handler: {status}"));
    }
    Ok(())
}

/// Indents compact JSON as Go's `json.MarshalIndent(v, "", "    ")` does, keeping key order.
pub fn indent_json(compact: &[u8]) -> String {
    let mut out = Vec::with_capacity(compact.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let newline = |out: &mut Vec<u8>, depth: usize| {
        out.push(b'\n');
        for _ in 0..depth {
            out.extend_from_slice(b"    ");
        }
    };
    for (i, &b) in compact.iter().enumerate() {
        if in_string {
            out.push(b);
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                out.push(b);
            }
            b'{' | b'[' => {
                out.push(b);
                let empty = matches!(compact.get(i + 1), Some(b'}') | Some(b']'));
                depth += 1;
                if !empty {
                    newline(&mut out, depth);
                }
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if !matches!(compact.get(i.wrapping_sub(1)), Some(b'{') | Some(b'[')) {
                    newline(&mut out, depth);
                }
                out.push(b);
            }
            b',' => {
                out.push(b);
                newline(&mut out, depth);
            }
            b':' => out.extend_from_slice(b": "),
            _ => out.push(b),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn run(args: WatchArgs) -> Result<i32, String> {
    let plan = plan(&args)?;
    let handler: Vec<String> = match &args.handler {
        Some(h) if !h.is_empty() => vec![h.clone()],
        _ => args.child.clone(),
    };
    let client: Client = args.http.client()?;
    client
        .ok("GET", "/v1/agent/self", None)
        .map_err(|e| format!("Error querying Consul agent: {e}"))?;
    // SIGINT and SIGTERM keep their default action: the watch holds nothing to release.
    let mut index = 0u64;
    let mut last_data: Option<Vec<u8>> = None;
    let mut retry_wait = RETRY_WAIT_FIRST;
    loop {
        let separator = if plan.target.contains('?') { '&' } else { '?' };
        let target = format!("{}{separator}index={index}", plan.target);
        let response = match client.request("GET", &target, None) {
            Ok(r) if r.status == 200 || r.status == 404 => r,
            Ok(r) => {
                eprintln!(
                    "Watch error: Unexpected response code: {} ({})",
                    r.status,
                    r.body_text()
                );
                std::thread::sleep(retry_wait);
                retry_wait = (retry_wait * 2).min(RETRY_WAIT_MAX);
                continue;
            }
            Err(e) => {
                eprintln!("Watch error: {e}");
                std::thread::sleep(retry_wait);
                retry_wait = (retry_wait * 2).min(RETRY_WAIT_MAX);
                continue;
            }
        };
        retry_wait = RETRY_WAIT_FIRST;
        let new_index = response
            .header("X-Consul-Index")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        let data = data_of(plan.kind, &response, index);
        let changed = match &last_data {
            None => true,
            Some(previous) => new_index != index && *previous != data,
        };
        // An index that went backwards (a restore, a new cluster) restarts from scratch.
        index = if new_index < index { 0 } else { new_index };
        let empty_events = plan.kind == PlanKind::Events && data == b"[]" && last_data.is_some();
        if changed && !empty_events {
            if handler.is_empty() {
                println!("{}", indent_json(&data));
                return Ok(0);
            }
            if let Err(e) = run_handler(&handler, args.shell, index, &data) {
                eprintln!("{e}");
                return Ok(1);
            }
        }
        last_data = Some(data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> WatchArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            watch: WatchArgs,
        }
        let mut all = vec!["watch"];
        all.extend_from_slice(list);
        Wrapper::try_parse_from(all).unwrap().watch
    }

    #[test]
    fn plans_follow_consuls_watch_types() {
        assert_eq!(
            plan(&args(&["--type", "key", "--key", "a/b c"])).unwrap(),
            Plan {
                target: "/v1/kv/a/b%20c".into(),
                kind: PlanKind::SingleKey
            }
        );
        assert_eq!(
            plan(&args(&["--type", "keyprefix", "--prefix", "p/"]))
                .unwrap()
                .target,
            "/v1/kv/p/?recurse"
        );
        assert_eq!(
            plan(&args(&[
                "--type",
                "service",
                "--service",
                "web",
                "--tag",
                "v1",
                "--passingonly"
            ]))
            .unwrap()
            .target,
            "/v1/health/service/web?tag=v1&passing=1"
        );
        assert_eq!(
            plan(&args(&["--type", "checks"])).unwrap().target,
            "/v1/health/state/any"
        );
        assert_eq!(
            plan(&args(&["--type", "event", "--name", "deploy"]))
                .unwrap()
                .target,
            "/v1/event/list?name=deploy"
        );
        assert!(plan(&args(&["--type", "key"])).is_err());
        assert!(plan(&args(&["--type", "bogus"])).is_err());
    }

    #[test]
    fn answers_compact_and_split_without_reordering() {
        let compact =
            compact_json(b"[\n  {\"Key\": \"a b\", \"Value\": \"x\"},\n  {\"Key\": \"c,]\"}\n]");
        assert_eq!(compact, br#"[{"Key":"a b","Value":"x"},{"Key":"c,]"}]"#);
        let parts = array_elements(&compact);
        assert_eq!(
            parts,
            vec![&br#"{"Key":"a b","Value":"x"}"#[..], br#"{"Key":"c,]"}"#]
        );
        assert!(array_elements(b"[]").is_empty());
        assert_eq!(
            indent_json(br#"[{"Key":"a","Tags":[],"Meta":{}},{"B":[1,2]}]"#),
            "[\n    {\n        \"Key\": \"a\",\n        \"Tags\": [],\n        \"Meta\": {}\n    },\n    {\n        \"B\": [\n            1,\n            2\n        ]\n    }\n]"
        );
        assert_eq!(indent_json(b"null"), "null");
    }

    #[test]
    fn event_ids_map_to_indexes_as_consul_does() {
        let id = "00000000-0000-0001-0000-000000000003";
        assert_eq!(event_id_to_index(id), Some(1 ^ 3));
        assert_eq!(event_id_to_index("short"), None);
    }
}
