//! The authorizer cache: SecretID → compiled [`Authorizer`], one per shard, invalidated by
//! change sets with the same precision as blocking queries.
//!
//! A request resolves its token with one hash lookup on a hit. On a miss the token is read
//! from the store version, its effective policies (its own, its roles', its identities' and
//! templated policies', restricted to this datacenter) are compiled, and the result is shared:
//! tokens with the same effective policy set (same policy IDs at the same modify indexes, same
//! identities) share one `Arc<Authorizer>`, so 10,000 tokens of one kind cost one compile.
//! Parsed policies are cached by (ID, modify index) so a policy used by many sets is parsed
//! once.
//!
//! Invalidation ([`AuthorizerCache::invalidate`]) reads the ACL keys of a change set: a token
//! key drops that token's entry, a policy or role key drops every entry that depends on it,
//! and a whole-table change (restore) drops everything. The shard calls it in the same step
//! that installs the version, before serving from it.
//!
//! Bounds: [`AUTHORIZER_CACHE_TOKENS_MAX`] tokens, [`AUTHORIZER_CACHE_BYTES_MAX`] bytes of
//! distinct authorizers, [`PARSED_POLICIES_MAX`] parsed policies. A token that would pass
//! the first two evicts tokens one at a time, chosen by CLOCK (second chance: a hit marks
//! its token, the hand skips and unmarks marked tokens once), until it fits; an authorizer
//! goes with its last token. Emptying the whole cache instead would make every active
//! token miss and recompile at once whenever more tokens are in use than fit — a thrash,
//! not a bound. The parsed-policy cache only serves compiles, so it still empties when full.

use super::authorizer::{Authorizer, DefaultPolicy};
use super::builtin;
use super::rules::{self, PolicyRules};
use super::{
    token_by_secret, AclRowKey, NodeIdentity, Policy, Role, ServiceIdentity, TemplatedPolicy, Token,
};
use crate::store::{Change, ChangeKey, Table, Tables};
use ahash::AHashMap;
use std::sync::Arc;

/// Most tokens the cache holds.
pub const AUTHORIZER_CACHE_TOKENS_MAX: usize = 16_384;
/// Most heap bytes of distinct compiled authorizers the cache holds.
pub const AUTHORIZER_CACHE_BYTES_MAX: usize = 64 << 20;
/// Most parsed policies the cache holds.
pub const PARSED_POLICIES_MAX: usize = 4096;

/// What compilation depends on besides the store: this agent's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileSettings {
    /// Policies restricted to other datacenters, and node identities of other datacenters,
    /// do not apply here.
    pub datacenter: String,
    pub default_policy: DefaultPolicy,
}

/// A resolved token: who it is (for error messages) and what it may do.
///
/// Cloned on every request (a hit hands out the cache's copy), so it holds only shared
/// pointers: a clone is three reference-count increments and no allocation or copy.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub accessor_id: Arc<str>,
    /// The secret the cache resolved (the anonymous token's for an empty one), this shard's
    /// own copy; empty when the resolver does not keep it (a client agent's, the down
    /// policy's answer). Lets a request keep its secret without allocating a copy.
    pub secret_id: Arc<str>,
    pub authorizer: Arc<Authorizer>,
}

/// Why a token could not be resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResolveError {
    /// Unknown or expired token: Consul answers 403 `ACL not found`.
    NotFound,
    /// A stored policy no longer parses (a restore from elsewhere): refused rather than
    /// compiled without it, since a dropped deny rule would grant more.
    InvalidPolicy(String),
}

impl ResolveError {
    pub fn message(&self) -> String {
        match self {
            ResolveError::NotFound => "ACL not found".to_string(),
            ResolveError::InvalidPolicy(reason) => reason.clone(),
        }
    }
}

struct TokenEntry {
    resolved: Resolved,
    /// Its position in [`AuthorizerCache::clock`].
    slot: u32,
    /// Resolved since the CLOCK hand last passed it: it gets a second chance.
    referenced: bool,
    expiration_time_ns: Option<i64>,
    key: Arc<str>,
    /// Policy and role IDs the compiled set read (including links to missing rows, so that
    /// creating them later also invalidates).
    depends_on: Box<[Arc<str>]>,
}

struct SharedEntry {
    authorizer: Arc<Authorizer>,
    users: u32,
}

/// Counters for tests and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub compiles: u64,
    pub parses: u64,
    /// Tokens evicted to stay within the bounds (not counting invalidations).
    pub evictions: u64,
}

/// The cache's bounds: [`AUTHORIZER_CACHE_TOKENS_MAX`] and [`AUTHORIZER_CACHE_BYTES_MAX`]
/// unless a test asks for smaller ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheLimits {
    pub tokens_max: usize,
    /// Heap bytes of distinct compiled authorizers ([`Authorizer::heap_bytes`]).
    pub bytes_max: usize,
}

impl Default for CacheLimits {
    fn default() -> Self {
        CacheLimits {
            tokens_max: AUTHORIZER_CACHE_TOKENS_MAX,
            bytes_max: AUTHORIZER_CACHE_BYTES_MAX,
        }
    }
}

/// The per-shard cache. Not shared between threads: each shard owns one.
pub struct AuthorizerCache {
    settings: CompileSettings,
    limits: CacheLimits,
    tokens: AHashMap<Arc<str>, TokenEntry>,
    /// The cached tokens' secrets in CLOCK order; `tokens[clock[i]].slot == i`.
    clock: Vec<Arc<str>>,
    /// The next slot the CLOCK hand looks at.
    hand: usize,
    secret_by_accessor: AHashMap<Arc<str>, Arc<str>>,
    shared: AHashMap<Arc<str>, SharedEntry>,
    parsed: AHashMap<String, Arc<PolicyRules>>,
    bytes: usize,
    stats: CacheStats,
}

impl AuthorizerCache {
    pub fn new(settings: CompileSettings) -> AuthorizerCache {
        AuthorizerCache::with_limits(settings, CacheLimits::default())
    }

    pub fn with_limits(settings: CompileSettings, limits: CacheLimits) -> AuthorizerCache {
        assert!(limits.tokens_max > 0, "a cache must hold a token");
        AuthorizerCache {
            settings,
            limits,
            tokens: AHashMap::new(),
            clock: Vec::new(),
            hand: 0,
            secret_by_accessor: AHashMap::new(),
            shared: AHashMap::new(),
            parsed: AHashMap::new(),
            bytes: 0,
            stats: CacheStats::default(),
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Number of cached tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Number of distinct compiled authorizers.
    pub fn distinct_authorizers(&self) -> usize {
        self.shared.len()
    }

    /// Heap bytes of the distinct compiled authorizers held (what `bytes_max` bounds).
    pub fn authorizer_bytes(&self) -> usize {
        self.bytes
    }

    /// New settings (a config reload) invalidate every compiled authorizer.
    pub fn set_settings(&mut self, settings: CompileSettings) {
        if settings != self.settings {
            self.settings = settings;
            self.clear();
        }
    }

    pub fn clear(&mut self) {
        self.tokens.clear();
        self.clock.clear();
        self.hand = 0;
        self.secret_by_accessor.clear();
        self.shared.clear();
        self.bytes = 0;
    }

    /// Resolves `secret_id` (empty: the anonymous token) against `tables` at `now_unix_ns`.
    pub fn resolve(
        &mut self,
        tables: &Tables,
        secret_id: &str,
        now_unix_ns: i64,
    ) -> Result<Resolved, ResolveError> {
        // Entries are filed under the secret's key (a UUID in lower case), as the store files
        // them: a secret written in another case finds the same entry.
        let secret = super::secret_key(if secret_id.is_empty() {
            builtin::ANONYMOUS_TOKEN_SECRET_ID
        } else {
            secret_id
        });
        let secret = &*secret;
        if let Some(entry) = self.tokens.get_mut(secret) {
            self.stats.hits += 1;
            entry.referenced = true;
            if entry.expiration_time_ns.is_some_and(|t| t < now_unix_ns) {
                return Err(ResolveError::NotFound);
            }
            return Ok(entry.resolved.clone());
        }
        self.stats.misses += 1;
        // Before the leader has created the anonymous token, anonymous requests get the
        // default policy alone.
        let token = token_for_secret(tables, secret, now_unix_ns).ok_or(ResolveError::NotFound)?;
        let (key, depends_on, rules) = self.effective_rules(tables, &token)?;
        while self.tokens.len() >= self.limits.tokens_max {
            self.evict_one();
        }
        let authorizer = match self.shared.get_mut(&*key) {
            Some(shared) => {
                shared.users += 1;
                shared.authorizer.clone()
            }
            None => {
                self.stats.compiles += 1;
                let refs: Vec<&PolicyRules> = rules.iter().map(|r| &**r).collect();
                let authorizer = Arc::new(Authorizer::compile(&refs, self.settings.default_policy));
                let bytes = authorizer.heap_bytes();
                // Evicting a token frees its authorizer only with its last user, so this
                // may take several; it ends when the cache is empty at the latest (the new
                // authorizer is not in `shared` yet). One authorizer larger than the whole
                // bound is still served, and is the only one held.
                while self.bytes + bytes > self.limits.bytes_max && !self.tokens.is_empty() {
                    self.evict_one();
                }
                self.bytes += bytes;
                self.shared.insert(
                    key.clone(),
                    SharedEntry {
                        authorizer: authorizer.clone(),
                        users: 1,
                    },
                );
                authorizer
            }
        };
        // The shard's own copies, not the store row's `Arc`s: every hit clones them, and the
        // row's counts are shared by every shard resolving the same token (one cache line
        // bouncing between cores on each request).
        let secret: Arc<str> = Arc::from(&*super::secret_key(&token.secret_id));
        let resolved = Resolved {
            accessor_id: Arc::from(&*token.accessor_id),
            secret_id: secret.clone(),
            authorizer,
        };
        self.secret_by_accessor
            .insert(token.accessor_id.clone(), secret.clone());
        let slot = self.clock.len();
        self.clock.push(secret.clone());
        let previous = self.tokens.insert(
            secret,
            TokenEntry {
                resolved: resolved.clone(),
                slot: u32::try_from(slot).expect("tokens_max fits u32"),
                referenced: false,
                expiration_time_ns: token.expiration_time_ns,
                key,
                depends_on,
            },
        );
        debug_assert!(previous.is_none(), "a miss inserts a new entry");
        debug_assert!(self.tokens.len() <= self.limits.tokens_max);
        debug_assert_eq!(self.clock.len(), self.tokens.len());
        Ok(resolved)
    }

    /// Evicts one token by CLOCK: the first unmarked one from the hand on, unmarking the
    /// marked ones it passes (so it stops within one turn and a bit).
    fn evict_one(&mut self) {
        debug_assert!(!self.tokens.is_empty(), "nothing to evict");
        loop {
            if self.hand >= self.clock.len() {
                self.hand = 0;
            }
            let entry = self
                .tokens
                .get_mut(&self.clock[self.hand])
                .expect("every clock slot names a cached token");
            if entry.referenced {
                entry.referenced = false;
                self.hand += 1;
                continue;
            }
            let secret = self.clock[self.hand].clone();
            self.stats.evictions += 1;
            // The last slot moves into the hand's, so the hand looks at it next.
            self.remove_token(&secret);
            return;
        }
    }

    /// Drops what `changes` made stale.
    pub fn invalidate(&mut self, changes: &[Change]) {
        for change in changes.iter().filter(|c| c.table == Table::Acl) {
            match &change.key {
                ChangeKey::All | ChangeKey::Prefix(_) => {
                    self.clear();
                    self.parsed.clear();
                    return;
                }
                ChangeKey::Key(key) => match AclRowKey::parse(key) {
                    AclRowKey::Token(accessor) => {
                        if let Some(secret) = self.secret_by_accessor.get(accessor).cloned() {
                            self.remove_token(&secret);
                        }
                    }
                    AclRowKey::Policy(id) | AclRowKey::Role(id) => {
                        let stale: Vec<Arc<str>> = self
                            .tokens
                            .iter()
                            .filter(|(_, e)| e.depends_on.iter().any(|d| &**d == id))
                            .map(|(secret, _)| secret.clone())
                            .collect();
                        for secret in stale {
                            self.remove_token(&secret);
                        }
                        let prefix = format!("{id}@");
                        self.parsed.retain(|k, _| !k.starts_with(&prefix));
                    }
                    AclRowKey::AuthMethod(_) | AclRowKey::BindingRule(_) | AclRowKey::List => {}
                },
            }
        }
    }

    fn remove_token(&mut self, secret: &Arc<str>) {
        let Some(entry) = self.tokens.remove(secret) else {
            return;
        };
        let slot = entry.slot as usize;
        debug_assert!(Arc::ptr_eq(&self.clock[slot], secret) || self.clock[slot] == *secret);
        self.clock.swap_remove(slot);
        if let Some(moved) = self.clock.get(slot) {
            self.tokens
                .get_mut(moved)
                .expect("every clock slot names a cached token")
                .slot = entry.slot;
        }
        self.secret_by_accessor.remove(&entry.resolved.accessor_id);
        let drop_shared = match self.shared.get_mut(&entry.key) {
            Some(shared) => {
                shared.users -= 1;
                shared.users == 0
            }
            None => false,
        };
        if drop_shared {
            let shared = self.shared.remove(&entry.key).expect("present");
            self.bytes -= shared.authorizer.heap_bytes();
        }
    }

    /// Panics unless the CLOCK ring names exactly the cached tokens, each at its slot, and
    /// the byte count is the sum over the distinct authorizers, within the bounds. O(tokens);
    /// for tests.
    pub fn check_invariants(&self) {
        assert_eq!(self.clock.len(), self.tokens.len());
        for (slot, secret) in self.clock.iter().enumerate() {
            assert_eq!(self.tokens[secret].slot as usize, slot);
        }
        let users: usize = self.shared.values().map(|s| s.users as usize).sum();
        assert_eq!(
            users,
            self.tokens.len(),
            "every token counted as a user once"
        );
        let bytes: usize = self
            .shared
            .values()
            .map(|s| s.authorizer.heap_bytes())
            .sum();
        assert_eq!(bytes, self.bytes);
        assert!(self.tokens.len() <= self.limits.tokens_max);
        assert!(self.bytes <= self.limits.bytes_max || self.shared.len() == 1);
    }

    fn parsed_rules(&mut self, key: String, text: &str) -> Result<Arc<PolicyRules>, String> {
        if let Some(rules) = self.parsed.get(&key) {
            return Ok(rules.clone());
        }
        self.stats.parses += 1;
        let rules = Arc::new(rules::parse(text)?);
        if self.parsed.len() >= PARSED_POLICIES_MAX {
            self.parsed.clear();
        }
        self.parsed.insert(key, rules.clone());
        Ok(rules)
    }

    /// The token's effective rules, the key of that set, and the rows it depends on.
    #[allow(clippy::type_complexity)]
    fn effective_rules(
        &mut self,
        tables: &Tables,
        token: &Token,
    ) -> Result<(Arc<str>, Box<[Arc<str>]>, Vec<Arc<PolicyRules>>), ResolveError> {
        let sources = effective_sources(tables, token, &self.settings.datacenter);
        let mut key_parts: Vec<&str> = Vec::with_capacity(sources.rules.len());
        let mut rules = Vec::with_capacity(sources.rules.len());
        for source in &sources.rules {
            let parsed = self
                .parsed_rules(source.cache_key.clone(), &source.text)
                .map_err(|e| match &source.policy_name {
                    Some(name) => {
                        ResolveError::InvalidPolicy(format!("failed to parse {name:?}: {e}"))
                    }
                    None => ResolveError::InvalidPolicy(e),
                })?;
            key_parts.push(&source.set_key);
            rules.push(parsed);
        }
        key_parts.sort_unstable();
        let key: Arc<str> = Arc::from(key_parts.join("\n"));
        Ok((key, sources.depends_on.into_boxed_slice(), rules))
    }
}

/// One rules text a token's authorizer compiles from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSource {
    /// The rules, HCL or JSON.
    pub text: Arc<str>,
    /// The policy it comes from; `None` for rules an identity or a templated policy
    /// synthesizes.
    pub policy_name: Option<String>,
    /// Where its parse is cached: `<policy id>@<modify index>`, or the synthesized text.
    cache_key: String,
    /// Its part of the key of the whole set (tokens with equal sets share an authorizer).
    set_key: String,
}

/// What a token's authorizer compiles from: every rules text that applies in `datacenter`,
/// and the policy and role IDs read to find them (links to missing rows included, so that
/// creating those rows later invalidates too).
#[derive(Clone, Debug, Default)]
pub struct EffectiveSources {
    pub rules: Vec<RuleSource>,
    pub depends_on: Vec<Arc<str>>,
}

/// The rules of a token's own policies, its roles' policies and the identities and templated
/// policies of both, restricted to `datacenter` — what Consul compiles for it. (A client
/// agent compiles the same set from [`expanded_policies`], which its server sends it.)
pub fn effective_sources(tables: &Tables, token: &Token, datacenter: &str) -> EffectiveSources {
    let applies_here = |dcs: &[String]| dcs.is_empty() || dcs.iter().any(|d| d == datacenter);
    let mut depends_on: Vec<Arc<str>> = Vec::new();
    let mut policy_ids: Vec<Arc<str>> = token.policies.clone();
    let mut services: Vec<&ServiceIdentity> = token.service_identities.iter().collect();
    let mut nodes: Vec<&NodeIdentity> = token.node_identities.iter().collect();
    let mut templated: Vec<&TemplatedPolicy> = token.templated_policies.iter().collect();
    let roles: Vec<_> = token
        .roles
        .iter()
        .inspect(|id| depends_on.push((*id).clone()))
        .filter_map(|id| tables.acl.roles.get(id))
        .collect();
    for role in &roles {
        policy_ids.extend(role.policies.iter().cloned());
        services.extend(role.service_identities.iter());
        nodes.extend(role.node_identities.iter());
        templated.extend(role.templated_policies.iter());
    }
    policy_ids.sort();
    policy_ids.dedup();
    depends_on.extend(policy_ids.iter().cloned());
    let mut rules = Vec::new();
    for id in &policy_ids {
        let Some(policy) = tables.acl.policies.get(id) else {
            continue;
        };
        if !applies_here(&policy.datacenters) {
            continue;
        }
        rules.push(RuleSource {
            text: Arc::from(policy.rules.as_str()),
            policy_name: Some(policy.name.to_string()),
            cache_key: format!("{id}@{}", policy.modify_index),
            set_key: format!("p:{id}@{}", policy.modify_index),
        });
    }
    let mut synthetic: Vec<String> = Vec::new();
    for service in services.iter().filter(|s| applies_here(&s.datacenters)) {
        synthetic.push(builtin::service_identity_rules(&service.service_name));
    }
    for node in nodes.iter().filter(|n| n.datacenter == datacenter) {
        synthetic.push(builtin::node_identity_rules(&node.node_name));
    }
    for t in templated.iter().filter(|t| applies_here(&t.datacenters)) {
        let Some(base) = builtin::templated_policy(&t.template_name) else {
            continue;
        };
        if let Ok(text) = builtin::render_templated_policy(base, t.name.as_deref()) {
            synthetic.push(text);
        }
    }
    synthetic.sort();
    synthetic.dedup();
    for text in synthetic {
        rules.push(RuleSource {
            cache_key: format!("synthetic:{text}"),
            set_key: format!("s:{text}"),
            text: Arc::from(text),
            policy_name: None,
        });
    }
    EffectiveSources { rules, depends_on }
}

/// A token's policies as Consul's `ACL.TokenRead` expands them (`ExpandedTokenInfo`): its
/// own and its roles' stored policies, then one synthesized policy per service identity,
/// node identity and templated policy of either (IDs and names as Consul derives them),
/// each with the datacenters it applies in; and the roles that exist. Unlike
/// [`effective_sources`] nothing is restricted to a datacenter: whoever compiles the set
/// (a client agent) filters by its own.
pub fn expanded_policies(tables: &Tables, token: &Token) -> (Vec<Arc<Policy>>, Vec<Arc<Role>>) {
    let roles: Vec<Arc<Role>> = token
        .roles
        .iter()
        .filter_map(|id| tables.acl.roles.get(id).cloned())
        .collect();
    let mut policy_ids: Vec<&Arc<str>> = token
        .policies
        .iter()
        .chain(roles.iter().flat_map(|r| r.policies.iter()))
        .collect();
    policy_ids.sort();
    policy_ids.dedup();
    let mut policies: Vec<Arc<Policy>> = policy_ids
        .into_iter()
        .filter_map(|id| tables.acl.policies.get(id).cloned())
        .collect();
    let services = token
        .service_identities
        .iter()
        .chain(roles.iter().flat_map(|r| r.service_identities.iter()));
    let nodes = token
        .node_identities
        .iter()
        .chain(roles.iter().flat_map(|r| r.node_identities.iter()));
    let templated = token
        .templated_policies
        .iter()
        .chain(roles.iter().flat_map(|r| r.templated_policies.iter()));
    let mut synthetic: Vec<(String, String, Vec<String>)> = Vec::new();
    for service in services {
        synthetic.push((
            builtin::service_identity_rules(&service.service_name),
            format!(
                "synthetic policy for service identity {:?}",
                service.service_name
            ),
            service.datacenters.clone(),
        ));
    }
    for node in nodes {
        synthetic.push((
            builtin::node_identity_rules(&node.node_name),
            format!("synthetic policy for node identity {:?}", node.node_name),
            vec![node.datacenter.clone()],
        ));
    }
    for t in templated {
        let Some(base) = builtin::templated_policy(&t.template_name) else {
            continue;
        };
        if let Ok(text) = builtin::render_templated_policy(base, t.name.as_deref()) {
            synthetic.push((
                text,
                format!(
                    "synthetic policy generated from templated policy: {}",
                    t.template_name
                ),
                t.datacenters.clone(),
            ));
        }
    }
    synthetic.sort();
    synthetic.dedup();
    for (rules, description, datacenters) in synthetic {
        let id = builtin::synthetic_policy_id(&rules);
        policies.push(Arc::new(Policy {
            name: Arc::from(format!("synthetic-policy-{id}")),
            id: Arc::from(id),
            description,
            rules,
            datacenters,
            hash: Vec::new(),
            create_index: 0,
            modify_index: 0,
        }));
    }
    (policies, roles)
}

/// The token a secret names for resolution: the anonymous token for an empty secret (a stub
/// with no policies before the leader has created it), `None` for an unknown or expired one.
pub fn token_for_secret(tables: &Tables, secret_id: &str, now_unix_ns: i64) -> Option<Arc<Token>> {
    let secret = if secret_id.is_empty() {
        builtin::ANONYMOUS_TOKEN_SECRET_ID
    } else {
        secret_id
    };
    match token_by_secret(tables, secret) {
        Some(token) if token.is_expired(now_unix_ns) => None,
        Some(token) => Some(token.clone()),
        None if secret == builtin::ANONYMOUS_TOKEN_SECRET_ID => Some(Arc::new(anonymous_stub())),
        None => None,
    }
}

fn anonymous_stub() -> Token {
    Token {
        accessor_id: Arc::from(builtin::ANONYMOUS_TOKEN_ACCESSOR_ID),
        secret_id: Arc::from(builtin::ANONYMOUS_TOKEN_SECRET_ID),
        description: builtin::ANONYMOUS_TOKEN_DESCRIPTION.to_string(),
        ..Token::empty()
    }
}
