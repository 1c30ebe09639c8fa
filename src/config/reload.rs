//! What a reload changes. A reload (SIGHUP, `praetor reload`, `PUT /v1/agent/reload`) reads
//! the same sources again; [`changes`] compares the new merged document with the one in use
//! and sorts every changed key into what the running agent takes in — services, checks,
//! watches, `log_level`, `node_meta`, the TLS settings and their files, ACL tokens in the
//! config — and what takes effect only after a restart (ports, addresses, data directory,
//! roles …), so the agent can log both. Pure: no I/O.

use serde_json::{Map, Value};

/// Changed keys, as dotted paths, by what happens to them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadChanges {
    /// Taken in by the running agent.
    pub applied: Vec<String>,
    /// Read, but in effect only after a restart.
    pub needs_restart: Vec<String>,
}

impl ReloadChanges {
    pub fn is_empty(&self) -> bool {
        self.applied.is_empty() && self.needs_restart.is_empty()
    }
}

/// Top-level keys a reload takes in whole.
const RELOADED_KEYS: &[&str] = &[
    "services",
    "checks",
    "watches",
    "log_level",
    "node_meta",
    "tls",
    // The old top-level TLS keys, moved into `tls` as the sources load.
    "ca_file",
    "ca_path",
    "cert_file",
    "key_file",
    "verify_incoming",
    "verify_incoming_rpc",
    "verify_incoming_https",
    "verify_outgoing",
    "verify_server_hostname",
    "tls_min_version",
    "tls_cipher_suites",
    "tls_prefer_server_cipher_suites",
    // Legacy ACL token keys.
    "acl_token",
    "acl_agent_token",
    "acl_agent_master_token",
    "acl_replication_token",
];

/// Nested paths a reload takes in.
const RELOADED_PATHS: &[&str] = &["acl.tokens"];

/// Sections compared key by key, so the message names `ports.http` rather than `ports`.
fn compared_by_key(key: &str) -> bool {
    !matches!(key, "services" | "checks" | "node_meta" | "watches")
}

/// The changed keys between the configuration in use and the one just read.
pub fn changes(in_use: &Map<String, Value>, fresh: &Map<String, Value>) -> ReloadChanges {
    let mut changed = Vec::new();
    changed_paths("", in_use, fresh, 0, &mut changed);
    let mut result = ReloadChanges::default();
    for path in changed {
        let top = path.split('.').next().unwrap_or("");
        if RELOADED_KEYS.contains(&top)
            || RELOADED_PATHS
                .iter()
                .any(|p| path == *p || path.starts_with(&format!("{p}.")))
        {
            result.applied.push(path);
        } else {
            result.needs_restart.push(path);
        }
    }
    result
}

/// Depth to which objects are compared key by key: `acl.tokens` is a reloaded path.
const COMPARE_DEPTH_MAX: usize = 2;

fn changed_paths(
    prefix: &str,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    depth: usize,
    out: &mut Vec<String>,
) {
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let (a, b) = (old.get(key), new.get(key));
        if a == b {
            continue;
        }
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match (a, b) {
            (Some(Value::Object(a)), Some(Value::Object(b)))
                if depth + 1 < COMPARE_DEPTH_MAX && compared_by_key(key) =>
            {
                changed_paths(&path, a, b, depth + 1, out)
            }
            _ => out.push(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn diff(old: Value, new: Value) -> ReloadChanges {
        changes(old.as_object().unwrap(), new.as_object().unwrap())
    }

    #[test]
    fn sorts_changes_by_what_happens_to_them() {
        let changes = diff(
            json!({
                "log_level": "info",
                "ports": {"http": 8500, "dns": 8600},
                "services": [{"name": "a"}],
                "acl": {"tokens": {"default": "x"}, "default_policy": "allow"},
                "datacenter": "dc1",
            }),
            json!({
                "log_level": "debug",
                "ports": {"http": 8501, "dns": 8600},
                "services": [{"name": "a"}, {"name": "b"}],
                "acl": {"tokens": {"default": "y"}, "default_policy": "deny"},
                "datacenter": "dc1",
                "watches": [{"type": "key", "key": "k"}],
            }),
        );
        assert_eq!(
            changes.applied,
            vec!["acl.tokens", "log_level", "services", "watches"]
        );
        assert_eq!(
            changes.needs_restart,
            vec!["acl.default_policy", "ports.http"]
        );
    }

    #[test]
    fn nothing_changed_is_empty() {
        let same = json!({"ports": {"http": 1}, "services": []});
        assert!(diff(same.clone(), same).is_empty());
    }
}
