//! A client agent's tokens: resolved by its servers, compiled here, cached for
//! `acl.token_ttl`.
//!
//! A client agent holds no ACL tables. What it forwards is checked by the server that
//! answers; what it answers itself (`/v1/agent/*`, its gossip views, user events) needs the
//! request's token resolved here. Before such a request is dispatched the HTTP server awaits
//! [`ensure`]: a token not fetched within `acl.token_ttl` is asked of a server with Consul's
//! `ACL.TokenRead` by the token's own secret (a default-consistency read: Consul's agents
//! read stale, but a token created a moment ago must not be cached here as unknown), with
//! `Expanded` set so that one call brings every policy that applies to the token — its
//! own, its roles', and those its identities synthesize (Consul's agent reads the token,
//! then `ACL.PolicyResolve` and `ACL.RoleResolve`; the expanded read answers the same in
//! one round trip). The policies that apply in this agent's datacenter are compiled with
//! its default policy, so the check itself ([`ClientTokens::resolve`], called by
//! `Context::resolve_token`) stays synchronous and costs a hash lookup.
//!
//! When no server answers, `acl.down_policy` decides as it does in Consul: `extend-cache`
//! and `async-cache` keep using a token resolved before and deny one never seen; `deny`
//! denies everything; `allow` allows everything. An unknown token is remembered as unknown
//! for the same TTL (Consul caches that answer too).
//!
//! Bounds: at most [`CLIENT_TOKENS_MAX`] tokens; past that the cache empties and refills.

use super::Context;
use crate::cluster::servers::Retry;
use crate::config::acl::{AclConfig, DownPolicy};
use crate::consul::rpc::acl::{read_resolved_token, TokenGetRequest};
use crate::consul::rpc::QueryOptions;
use crate::shard::rpc_client::CallError;
use crate::store::acl::authorizer::{Authorizer, DefaultPolicy};
use crate::store::acl::builtin::ANONYMOUS_TOKEN_SECRET_ID;
use crate::store::acl::cache::{ResolveError, Resolved};
use crate::store::acl::rules;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most tokens one shard of a client agent keeps.
pub const CLIENT_TOKENS_MAX: usize = 4096;
/// How long a resolution may wait for a server.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

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

    /// Compiles a server's answer: the token's accessor and the rules of the policies that
    /// apply in this datacenter.
    pub fn compile(&self, accessor: &str, rules: &[&str]) -> Result<Resolved, ResolveError> {
        let parsed = rules
            .iter()
            .map(|text| rules::parse(text).map_err(ResolveError::InvalidPolicy))
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
        Ok(Some((accessor, rules))) => {
            let refs: Vec<&str> = rules.iter().map(String::as_str).collect();
            let compiled = tokens.compile(&accessor, &refs);
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

/// Asks a server for the token (`ACL.TokenRead` by its secret, expanded): its accessor and
/// the rules that apply in this datacenter, `None` for a token the servers do not know, or
/// why no server answered.
async fn fetch(ctx: &Context, secret: &str) -> Result<Option<(String, Vec<String>)>, String> {
    // A request without a token is the anonymous token's (never this agent's default: the
    // caller resolved that already).
    let secret = if secret.is_empty() {
        ANONYMOUS_TOKEN_SECRET_ID
    } else {
        secret
    };
    let datacenter = ctx.config().datacenter.clone();
    let body = TokenGetRequest {
        datacenter: &datacenter,
        token_id: secret,
        token_id_type: "secret",
        expanded: true,
        // Not stale, unlike Consul's agents: a token created a moment ago through another
        // server must resolve here at once, not be remembered as unknown for the TTL.
        options: QueryOptions {
            token: secret,
            ..QueryOptions::default()
        },
    }
    .encode();
    let answer = ctx
        .deferred()
        .call_server("ACL.TokenRead", &body, FETCH_TIMEOUT, Retry::Always)
        .await;
    let reply = match answer {
        Ok(reply) => reply,
        // Consul's servers answer an unknown secret either with no token or with this.
        Err(CallError::Remote(text)) if text == "ACL not found" => return Ok(None),
        Err(error) => return Err(error.to_string()),
    };
    let resolved = read_resolved_token(&reply)
        .map_err(|e| format!("malformed answer from the server: {e}"))?;
    let Some(accessor) = resolved.accessor_id else {
        return Ok(None);
    };
    let rules = resolved
        .policies
        .iter()
        .filter(|p| p.datacenters.is_empty() || p.datacenters.contains(&datacenter.as_str()))
        .map(|p| p.rules.to_string())
        .collect();
    Ok(Some((accessor.to_string(), rules)))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let rules = ["key_prefix \"app/\" {\n policy = \"write\"\n}"];
        let compiled = tokens.compile("a1", &rules).unwrap();
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
        deny.store("s", tokens.compile("a1", &rules), start);
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
        assert!(tokens.compile("a", &["key {"]).is_err());
    }
}
