//! A client agent's tokens: resolved by its servers, compiled here, cached for
//! `acl.token_ttl`.
//!
//! A client agent holds no ACL tables. What it forwards is checked by the server that
//! answers; what it answers itself (`/v1/agent/*`, its gossip views, user events) needs the
//! request's token resolved here. Before such a request is dispatched the HTTP server awaits
//! [`ensure`]: a token not fetched within `acl.token_ttl` is asked of a server
//! (`GET` [`RULES_PATH`], answered by `api::acl::client_rules` with the token's accessor and
//! the texts of its effective rules) and compiled with this agent's default policy, so the
//! check itself ([`ClientTokens::resolve`], called by `Context::resolve_token`) stays
//! synchronous and costs a hash lookup.
//!
//! When no server answers, `acl.down_policy` decides as it does in Consul: `extend-cache`
//! and `async-cache` keep using a token resolved before and deny one never seen; `deny`
//! denies everything; `allow` allows everything. An unknown token is remembered as unknown
//! for the same TTL (Consul caches that answer too).
//!
//! Bounds: at most [`CLIENT_TOKENS_MAX`] tokens; past that the cache empties and refills.

use super::Context;
use crate::cluster::servers::{self, Retry};
use crate::config::acl::{AclConfig, DownPolicy};
use crate::proto::rpc::kind;
use crate::store::acl::authorizer::{Authorizer, DefaultPolicy};
use crate::store::acl::cache::{ResolveError, Resolved};
use crate::store::acl::rules;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where a server answers a client agent's token resolution.
pub const RULES_PATH: &str = "/v1/internal/praetor/acl/rules";
/// Most tokens one shard of a client agent keeps.
pub const CLIENT_TOKENS_MAX: usize = 4096;
/// How long a resolution may wait for a server.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer accepted (a token's rules are at most a few policies of 128 KiB).
const ANSWER_BYTES_MAX: usize = 16 << 20;

struct Entry {
    resolved: Result<Resolved, ResolveError>,
    fetched_at: Instant,
}

/// One shard's resolved tokens.
pub struct ClientTokens {
    entries: HashMap<String, Entry>,
    /// The last fetch found no server: the down policy stands in for the servers.
    servers_down: bool,
    token_ttl: Duration,
    down_policy: DownPolicy,
    default_policy: DefaultPolicy,
}

impl ClientTokens {
    pub fn new(config: &AclConfig) -> ClientTokens {
        ClientTokens {
            entries: HashMap::new(),
            servers_down: false,
            token_ttl: config.token_ttl,
            down_policy: config.down_policy,
            default_policy: config.default_policy,
        }
    }

    /// Whether `secret` must be (re)fetched before a request that carries it is checked.
    pub fn needs_fetch(&self, secret: &str, now: Instant) -> bool {
        self.entries
            .get(secret)
            .is_none_or(|e| now.duration_since(e.fetched_at) >= self.token_ttl)
    }

    /// Records a server's answer.
    pub fn store(&mut self, secret: &str, resolved: Result<Resolved, ResolveError>, now: Instant) {
        if self.entries.len() >= CLIENT_TOKENS_MAX && !self.entries.contains_key(secret) {
            self.entries.clear();
        }
        self.servers_down = false;
        self.entries.insert(
            secret.to_string(),
            Entry {
                resolved,
                fetched_at: now,
            },
        );
    }

    /// Records that no server could be asked.
    pub fn fetch_failed(&mut self) {
        self.servers_down = true;
    }

    /// The token as last resolved, or what the down policy grants without one.
    pub fn resolve(&self, secret: &str) -> Result<Resolved, ResolveError> {
        let cached_counts = !self.servers_down
            || matches!(
                self.down_policy,
                DownPolicy::ExtendCache | DownPolicy::AsyncCache
            );
        match self.entries.get(secret) {
            Some(entry) if cached_counts => entry.resolved.clone(),
            _ => Ok(self.down_answer()),
        }
    }

    /// Everything allowed under `down_policy = "allow"` while servers are away; otherwise
    /// everything denied (a token never resolved, or `down_policy = "deny"`).
    fn down_answer(&self) -> Resolved {
        let policy = if self.servers_down && self.down_policy == DownPolicy::Allow {
            DefaultPolicy::Allow
        } else {
            DefaultPolicy::Deny
        };
        Resolved {
            accessor_id: Arc::from(""),
            secret_id: Arc::from(""),
            authorizer: Arc::new(Authorizer::default_only(policy)),
        }
    }

    /// Compiles a server's answer (`{"AccessorID": …, "Rules": [text, …]}`).
    pub fn compile(&self, answer: &serde_json::Value) -> Result<Resolved, ResolveError> {
        let invalid = |e: String| ResolveError::InvalidPolicy(e);
        let accessor = answer["AccessorID"]
            .as_str()
            .ok_or_else(|| invalid("a token without an AccessorID".to_string()))?;
        let parsed = answer["Rules"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|text| rules::parse(text.as_str().unwrap_or("")).map_err(invalid))
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&rules::PolicyRules> = parsed.iter().collect();
        Ok(Resolved {
            accessor_id: Arc::from(accessor),
            secret_id: Arc::from(""),
            authorizer: Arc::new(Authorizer::compile(&refs, self.default_policy)),
        })
    }
}

/// Makes sure `secret` is resolved (fetched within the TTL, or the down policy recorded)
/// before a request carrying it is checked on this client agent.
pub async fn ensure(ctx: &Context, secret: &str) {
    let tokens = ctx.client_tokens();
    if !tokens.borrow().needs_fetch(secret, Instant::now()) {
        return;
    }
    let answer = fetch(ctx, secret).await;
    let mut tokens = tokens.borrow_mut();
    match answer {
        Ok(Some(value)) => {
            let compiled = tokens.compile(&value);
            tokens.store(secret, compiled, Instant::now());
        }
        Ok(None) => tokens.store(secret, Err(ResolveError::NotFound), Instant::now()),
        Err(reason) => {
            log::warn!(
                "acl: could not resolve a token with the servers ({reason}); acl.down_policy applies"
            );
            tokens.fetch_failed();
        }
    }
}

/// Asks a server for the token's rules: `Some(answer)`, `None` for an unknown token, or why
/// no server answered.
async fn fetch(ctx: &Context, secret: &str) -> Result<Option<serde_json::Value>, String> {
    let mut request = format!("GET {RULES_PATH} HTTP/1.1\r\nHost: praetor\r\n");
    if !secret.is_empty() && !secret.contains(['\r', '\n']) {
        request.push_str(&format!("X-Consul-Token: {secret}\r\n"));
    }
    request.push_str("\r\n");
    let frame = servers::call(
        ctx.servers(),
        ctx.forward_client(),
        kind::FORWARD_HTTP,
        request.as_bytes(),
        FETCH_TIMEOUT,
        Retry::Always,
    )
    .await?;
    let (status, body) = servers::forwarded_http_answer(&frame)?;
    if body.len() > ANSWER_BYTES_MAX {
        return Err(format!("answer larger than {ANSWER_BYTES_MAX} bytes"));
    }
    match status {
        200 => serde_json::from_slice(body)
            .map(Some)
            .map_err(|e| format!("malformed answer from the server: {e}")),
        403 if body == b"ACL not found" => Ok(None),
        status => Err(format!(
            "the server answered {status}: {}",
            String::from_utf8_lossy(body)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(down_policy: DownPolicy) -> AclConfig {
        AclConfig {
            enabled: true,
            default_policy: DefaultPolicy::Deny,
            down_policy,
            token_ttl: Duration::from_secs(30),
            ..AclConfig::default()
        }
    }

    #[test]
    fn resolved_tokens_last_their_ttl_and_the_down_policy_decides_without_servers() {
        let start = Instant::now();
        let mut tokens = ClientTokens::new(&config(DownPolicy::ExtendCache));
        assert!(tokens.needs_fetch("s", start));
        let answer =
            json!({"AccessorID": "a1", "Rules": ["key_prefix \"app/\" {\n policy = \"write\"\n}"]});
        let compiled = tokens.compile(&answer).unwrap();
        tokens.store("s", Ok(compiled), start);
        assert!(!tokens.needs_fetch("s", start + Duration::from_secs(29)));
        assert!(tokens.needs_fetch("s", start + Duration::from_secs(30)));
        let resolved = tokens.resolve("s").unwrap();
        assert_eq!(&*resolved.accessor_id, "a1");
        assert!(resolved.authorizer.key_write("app/x").is_ok());
        assert!(resolved.authorizer.key_write("other").is_err());
        // Servers gone: extend-cache keeps the token it had, denies one it never saw.
        tokens.fetch_failed();
        assert!(tokens
            .resolve("s")
            .unwrap()
            .authorizer
            .key_write("app/x")
            .is_ok());
        assert!(tokens
            .resolve("t")
            .unwrap()
            .authorizer
            .key_read("app/x")
            .is_err());
        tokens.store("u", Err(ResolveError::NotFound), start);
        assert_eq!(tokens.resolve("u").unwrap_err(), ResolveError::NotFound);

        let mut deny = ClientTokens::new(&config(DownPolicy::Deny));
        deny.store("s", tokens.compile(&answer), start);
        deny.fetch_failed();
        assert!(deny
            .resolve("s")
            .unwrap()
            .authorizer
            .key_read("app/x")
            .is_err());
        let mut allow = ClientTokens::new(&config(DownPolicy::Allow));
        allow.fetch_failed();
        assert!(allow
            .resolve("t")
            .unwrap()
            .authorizer
            .key_write("x")
            .is_ok());
        assert!(tokens
            .compile(&json!({"AccessorID": "a", "Rules": ["key {"]}))
            .is_err());
    }
}
