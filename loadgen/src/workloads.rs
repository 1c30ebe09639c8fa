//! The HTTP workloads: what each scenario's connections send and how answers are judged.
//!
//! A workload is per connection, so it may keep state (a session ID, a register/deregister
//! toggle) without sharing. Requests that never change are encoded once and reused; the
//! rest are re-encoded into the same buffer, so the request path does not allocate.

use base64::Engine as _;

use crate::config::{Consistency, RegisterVia, RunConfig, Scenario};
use crate::http::{encode_path, encode_request, encode_request_with_token};
use crate::httprun::{HttpWorkload, Verdict};
use crate::net::Target;

const JSON: Option<&str> = Some("application/json");

/// The value written by PUTs: `bytes` printable bytes.
pub fn value_of(bytes: usize) -> Vec<u8> {
    (0..bytes).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Key `i` of a run spread over `keys` keys.
pub fn key_name(config: &RunConfig, i: usize) -> String {
    if config.keys <= 1 {
        config.key.clone()
    } else {
        format!("{}-{i}", config.key)
    }
}

/// The query string of a Consul KV request: the consistency mode and `dc`, if any.
fn kv_query(config: &RunConfig) -> String {
    let mut params: Vec<String> = Vec::new();
    match config.consistency {
        Consistency::Default => {}
        Consistency::Stale => params.push("stale".into()),
        Consistency::Consistent => params.push("consistent".into()),
    }
    if let Some(dc) = &config.datacenter {
        params.push(format!("dc={dc}"));
    }
    if params.is_empty() {
        String::new()
    } else {
        format!("?{}", params.join("&"))
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Encodes a KV read of `key`: Consul GET (with `token`, if any) or etcd range.
pub fn encode_kv_get(
    out: &mut Vec<u8>,
    config: &RunConfig,
    target: &Target,
    key: &str,
    token: Option<&str>,
) {
    if config.etcd {
        // etcd: linearizable unless stale was asked for (serializable reads any member's view).
        let serializable = config.consistency == Consistency::Stale;
        let body = format!(
            r#"{{"key":"{}","serializable":{serializable}}}"#,
            b64(key.as_bytes())
        );
        encode_request(
            out,
            "POST",
            "/v3/kv/range",
            &target.authority,
            JSON,
            body.as_bytes(),
        );
    } else {
        let path = format!("/v1/kv/{}{}", encode_path(key), kv_query(config));
        encode_request_with_token(out, "GET", &path, &target.authority, None, b"", token);
    }
}

/// Encodes a KV write of `value` to `key`: Consul PUT (with `token`, if any) or etcd put.
pub fn encode_kv_put(
    out: &mut Vec<u8>,
    config: &RunConfig,
    target: &Target,
    key: &str,
    value: &[u8],
    token: Option<&str>,
) {
    if config.etcd {
        let body = format!(
            r#"{{"key":"{}","value":"{}"}}"#,
            b64(key.as_bytes()),
            b64(value)
        );
        encode_request(
            out,
            "POST",
            "/v3/kv/put",
            &target.authority,
            JSON,
            body.as_bytes(),
        );
    } else {
        let dc = config
            .datacenter
            .as_ref()
            .map_or(String::new(), |dc| format!("?dc={dc}"));
        let path = format!("/v1/kv/{}{dc}", encode_path(key));
        encode_request_with_token(out, "PUT", &path, &target.authority, None, value, token);
    }
}

/// A tiny xorshift generator: cheap, deterministic per connection, no dependency.
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Reads or writes, over one or many keys.
pub struct KvWorkload {
    config: RunConfig,
    target: Target,
    value: Vec<u8>,
    /// Fraction of reads (1.0 for kv-get, 0.0 for kv-put).
    read_ratio: f64,
    /// The request never changes (one key, one kind): encode once.
    fixed: bool,
    next_key: usize,
    rng: XorShift,
    /// The ACL token this connection sends (`--token`/`--tokens-file`, by connection).
    token: Option<String>,
    /// With `--tokens-rotate`: the index in `config.tokens` of the next request's token.
    next_token: usize,
}

impl KvWorkload {
    pub fn new(config: &RunConfig, target: &Target, conn_index: usize) -> Self {
        let read_ratio = match config.scenario {
            Scenario::KvGet => 1.0,
            Scenario::KvPut => 0.0,
            _ => config.read_ratio,
        };
        KvWorkload {
            config: config.clone(),
            target: target.clone(),
            value: value_of(config.value_bytes),
            read_ratio,
            fixed: config.keys <= 1
                && (read_ratio == 1.0 || read_ratio == 0.0)
                && !config.tokens_rotate,
            // Connections start at different keys so they spread from the first request.
            next_key: conn_index % config.keys.max(1),
            rng: XorShift::new(conn_index as u64 + 1),
            token: config.token_for(conn_index).map(str::to_string),
            next_token: conn_index,
        }
    }
}

impl HttpWorkload for KvWorkload {
    fn next_request(&mut self, request: &mut Vec<u8>) -> bool {
        if self.fixed && !request.is_empty() {
            return true;
        }
        request.clear();
        let key = key_name(&self.config, self.next_key);
        self.next_key = (self.next_key + 1) % self.config.keys.max(1);
        let read = self.read_ratio >= 1.0
            || (self.read_ratio > 0.0 && self.rng.next_f64() < self.read_ratio);
        let rotated = (self.config.tokens_rotate && !self.config.tokens.is_empty()).then(|| {
            let count = self.config.tokens.len();
            let index = self.next_token % count;
            self.next_token = (index + self.config.connections.max(1)) % count;
            index
        });
        let token = match rotated {
            Some(index) => Some(self.config.tokens[index].as_str()),
            None => self.token.as_deref(),
        };
        if read {
            encode_kv_get(request, &self.config, &self.target, &key, token);
        } else {
            encode_kv_put(
                request,
                &self.config,
                &self.target,
                &key,
                &self.value,
                token,
            );
        }
        true
    }

    fn on_response(&mut self, status: u16, _body: &[u8]) -> Verdict {
        Verdict::from_status(status)
    }
}

/// IPv4 address of synthetic instance `i`: 10.0.0.1 upward, one per instance.
pub fn instance_address(i: usize) -> String {
    let n = i as u32 + 1;
    format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff)
}

/// One synthetic service instance to register.
#[derive(Clone, Copy, Debug)]
pub struct Instance<'a> {
    pub service: &'a str,
    pub id: &'a str,
    /// Catalog node the instance lives on (ignored by agent registrations).
    pub node: &'a str,
    /// Numbers the node's and the instance's addresses.
    pub node_index: usize,
    pub index: usize,
}

/// The path and body that register `instance` with one passing check: through the agent
/// (a TTL check, so `/v1/agent/check/fail/service:<id>` can flip it) or the catalog.
pub fn registration(via: RegisterVia, instance: &Instance<'_>) -> (&'static str, String) {
    let Instance {
        service,
        id,
        node,
        node_index,
        index,
    } = *instance;
    let address = instance_address(index);
    let node_address = instance_address(node_index);
    match via {
        RegisterVia::Agent => (
            "/v1/agent/service/register",
            format!(
                r#"{{"ID":"{id}","Name":"{service}","Address":"{address}","Port":8080,"Check":{{"CheckID":"service:{id}","Name":"{id} ttl","TTL":"86400s","Status":"passing"}}}}"#
            ),
        ),
        RegisterVia::Catalog => (
            "/v1/catalog/register",
            format!(
                r#"{{"Node":"{node}","Address":"{node_address}","Service":{{"ID":"{id}","Service":"{service}","Address":"{address}","Port":8080}},"Check":{{"Node":"{node}","CheckID":"service:{id}","Name":"{id} check","Status":"passing","ServiceID":"{id}"}}}}"#
            ),
        ),
    }
}

/// Path and body that deregister instance `id` (on `node` for the catalog).
pub fn deregistration(via: RegisterVia, id: &str, node: &str) -> (String, String) {
    match via {
        RegisterVia::Agent => (
            format!("/v1/agent/service/deregister/{}", encode_path(id)),
            String::new(),
        ),
        RegisterVia::Catalog => (
            "/v1/catalog/deregister".to_string(),
            format!(r#"{{"Node":"{node}","ServiceID":"{id}"}}"#),
        ),
    }
}

/// Registers and deregisters one instance per connection, alternately. One operation is one
/// registration (the register call); deregistrations are requests but not operations.
pub struct ChurnWorkload {
    /// The connection's registration and deregistration requests, built once: they never
    /// change, and building them per request (as the KV workload does not) would spend
    /// the load generator's share of the cores on formatting.
    register_request: Vec<u8>,
    deregister_request: Vec<u8>,
    registered: bool,
    /// The request in flight is a registration.
    in_flight_register: bool,
}

impl ChurnWorkload {
    pub fn new(config: &RunConfig, target: &Target, conn_index: usize) -> Self {
        let id = format!("{}-churn-{conn_index}", config.service);
        let node = format!("loadgen-churn-{conn_index}");
        let instance = Instance {
            service: &config.service,
            id: &id,
            node: &node,
            node_index: conn_index,
            index: conn_index,
        };
        let mut register_request = Vec::new();
        let (path, body) = registration(config.via, &instance);
        encode_request(
            &mut register_request,
            "PUT",
            path,
            &target.authority,
            JSON,
            body.as_bytes(),
        );
        let mut deregister_request = Vec::new();
        let (path, body) = deregistration(config.via, &id, &node);
        let content_type = if body.is_empty() { None } else { JSON };
        encode_request(
            &mut deregister_request,
            "PUT",
            &path,
            &target.authority,
            content_type,
            body.as_bytes(),
        );
        ChurnWorkload {
            register_request,
            deregister_request,
            registered: false,
            in_flight_register: false,
        }
    }
}

impl HttpWorkload for ChurnWorkload {
    fn next_request(&mut self, request: &mut Vec<u8>) -> bool {
        request.clear();
        self.in_flight_register = !self.registered;
        if self.in_flight_register {
            request.extend_from_slice(&self.register_request);
        } else {
            request.extend_from_slice(&self.deregister_request);
        }
        self.in_flight_register
    }

    fn on_response(&mut self, status: u16, _body: &[u8]) -> Verdict {
        if !(200..300).contains(&status) {
            return Verdict::BAD_STATUS;
        }
        self.registered = self.in_flight_register;
        if self.in_flight_register {
            Verdict::OK
        } else {
            Verdict::OK_STEP
        }
    }

    fn on_failure(&mut self) {
        // Unknown whether the write applied; deregistering next is safe either way.
        self.registered = true;
    }
}

/// `GET /v1/health/service/<svc>[?passing]` (or any fixed GET).
pub struct FixedGetWorkload {
    request: Vec<u8>,
}

impl FixedGetWorkload {
    pub fn new(target: &Target, path: &str) -> Self {
        let mut request = Vec::new();
        encode_request(&mut request, "GET", path, &target.authority, None, b"");
        FixedGetWorkload { request }
    }

    pub fn health(config: &RunConfig, target: &Target) -> Self {
        Self::new(target, &health_path(config, &config.service))
    }
}

/// The health query path for `service` with the run's `?passing` choice.
pub fn health_path(config: &RunConfig, service: &str) -> String {
    let query = match (config.effective_passing(), config.pretty) {
        (true, true) => "?passing&pretty",
        (true, false) => "?passing",
        (false, true) => "?pretty",
        (false, false) => "",
    };
    format!("/v1/health/service/{}{query}", encode_path(service))
}

impl HttpWorkload for FixedGetWorkload {
    fn next_request(&mut self, request: &mut Vec<u8>) -> bool {
        if request.is_empty() {
            request.extend_from_slice(&self.request);
        }
        true
    }

    fn on_response(&mut self, status: u16, _body: &[u8]) -> Verdict {
        Verdict::from_status(status)
    }
}

/// Session lock cycles: create a session, acquire a key with it, release, destroy. One
/// operation is one full cycle. Each connection has its own lock key, so cycles measure the
/// write path, not contention.
///
/// The key is new for every workload (`<lock-key>-<pid>.<instance>-<conn>`): a run that ends
/// mid-cycle leaves a session (no TTL) holding its key, and a later run on the same key
/// would only count refusals.
pub struct SessionWorkload {
    target: Target,
    lock_path: String,
    step: SessionStep,
    session: String,
}

/// Numbers the session workloads of this process, so each gets lock keys of its own.
static NEXT_SESSION_WORKLOAD: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SessionStep {
    Create,
    Acquire,
    Release,
    Destroy,
}

impl SessionWorkload {
    pub fn new(config: &RunConfig, target: &Target, conn_index: usize) -> Self {
        SessionWorkload {
            target: target.clone(),
            lock_path: format!(
                "/v1/kv/{}-{}.{}-{conn_index}",
                encode_path(&config.lock_key),
                std::process::id(),
                NEXT_SESSION_WORKLOAD.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ),
            step: SessionStep::Create,
            session: String::new(),
        }
    }
}

/// The `"ID"` of a session-create answer (`{"ID":"…"}`).
pub fn session_id_of(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let id = value.get("ID")?.as_str()?;
    (!id.is_empty() && id.len() <= 128).then(|| id.to_string())
}

impl HttpWorkload for SessionWorkload {
    fn next_request(&mut self, request: &mut Vec<u8>) -> bool {
        request.clear();
        let authority = &self.target.authority;
        match self.step {
            SessionStep::Create => {
                let body = br#"{"Name":"loadgen","LockDelay":"0s","Behavior":"release"}"#;
                encode_request(request, "PUT", "/v1/session/create", authority, JSON, body);
            }
            SessionStep::Acquire => {
                let path = format!("{}?acquire={}", self.lock_path, self.session);
                encode_request(request, "PUT", &path, authority, None, b"held");
            }
            SessionStep::Release => {
                let path = format!("{}?release={}", self.lock_path, self.session);
                encode_request(request, "PUT", &path, authority, None, b"free");
            }
            SessionStep::Destroy => {
                let path = format!("/v1/session/destroy/{}", self.session);
                encode_request(request, "PUT", &path, authority, None, b"");
            }
        }
        self.step == SessionStep::Create
    }

    fn wants_body(&self) -> bool {
        true
    }

    fn on_response(&mut self, status: u16, body: &[u8]) -> Verdict {
        if !(200..300).contains(&status) {
            // Start over; a session left behind is destroyed by its own cycle never again,
            // but sessions without TTL are cheap and bounded by the error count.
            self.step = SessionStep::Create;
            return Verdict::BAD_STATUS;
        }
        let trimmed = body.trim_ascii();
        match self.step {
            SessionStep::Create => match session_id_of(body) {
                Some(id) => {
                    self.session = id;
                    self.step = SessionStep::Acquire;
                    Verdict::OK_STEP
                }
                None => Verdict::BAD_ANSWER,
            },
            SessionStep::Acquire | SessionStep::Release if trimmed != b"true" => {
                // Not acquired (or not released): clean the session up and count the failure.
                self.step = SessionStep::Destroy;
                Verdict::BAD_ANSWER
            }
            SessionStep::Acquire => {
                self.step = SessionStep::Release;
                Verdict::OK_STEP
            }
            SessionStep::Release => {
                self.step = SessionStep::Destroy;
                Verdict::OK_STEP
            }
            SessionStep::Destroy => {
                self.step = SessionStep::Create;
                Verdict::OK
            }
        }
    }

    fn on_failure(&mut self) {
        // Unknown whether the last step applied; destroying is safe in every state that has
        // a session, and a create that failed has none.
        self.step = if self.session.is_empty() || self.step == SessionStep::Create {
            SessionStep::Create
        } else {
            SessionStep::Destroy
        };
    }
}

/// One `PUT /v1/txn` of `--txn-ops` KV `set` operations per request, on keys of this
/// connection's own (`<key>-<conn>-<i>`), so a transaction's cost is measured, not conflicts.
/// The body never changes, so the request is encoded once.
pub struct TxnWorkload {
    request: Vec<u8>,
}

impl TxnWorkload {
    pub fn new(config: &RunConfig, target: &Target, conn_index: usize) -> Self {
        let value = b64(&value_of(config.value_bytes));
        let ops: Vec<serde_json::Value> = (0..config.txn_ops)
            .map(|i| {
                serde_json::json!({"KV": {
                    "Verb": "set",
                    "Key": format!("{}-{conn_index}-{i}", config.key),
                    "Value": value,
                }})
            })
            .collect();
        let body = serde_json::Value::Array(ops).to_string();
        let mut request = Vec::new();
        encode_request(
            &mut request,
            "PUT",
            "/v1/txn",
            &target.authority,
            JSON,
            body.as_bytes(),
        );
        TxnWorkload { request }
    }
}

impl HttpWorkload for TxnWorkload {
    fn next_request(&mut self, request: &mut Vec<u8>) -> bool {
        if request.is_empty() {
            request.extend_from_slice(&self.request);
        }
        true
    }

    fn on_response(&mut self, status: u16, _body: &[u8]) -> Verdict {
        Verdict::from_status(status)
    }
}

/// `POST /v1/agent/connect/authorize` of the SPIFFE URI `--key` connecting to `--service`;
/// an answer counts when it is 200 and carries `Authorized`.
pub struct AuthorizeWorkload {
    request: Vec<u8>,
}

impl AuthorizeWorkload {
    pub fn new(config: &RunConfig, target: &Target) -> Self {
        let body = serde_json::json!({
            "Target": config.service,
            "ClientCertURI": config.key,
        })
        .to_string();
        let mut request = Vec::new();
        encode_request(
            &mut request,
            "POST",
            "/v1/agent/connect/authorize",
            &target.authority,
            JSON,
            body.as_bytes(),
        );
        AuthorizeWorkload { request }
    }
}

impl HttpWorkload for AuthorizeWorkload {
    fn next_request(&mut self, request: &mut Vec<u8>) -> bool {
        if request.is_empty() {
            request.extend_from_slice(&self.request);
        }
        true
    }

    fn wants_body(&self) -> bool {
        true
    }

    fn on_response(&mut self, status: u16, body: &[u8]) -> Verdict {
        if status != 200 {
            return Verdict::from_status(status);
        }
        if body.windows(12).any(|w| w == b"\"Authorized\"") {
            Verdict::OK
        } else {
            Verdict::BAD_ANSWER
        }
    }
}

/// The workload factory for the HTTP scenarios.
pub fn make_workload(
    config: &RunConfig,
    target: &Target,
    conn_index: usize,
) -> Box<dyn HttpWorkload> {
    match config.scenario {
        Scenario::KvGet | Scenario::KvPut | Scenario::KvMixed => {
            Box::new(KvWorkload::new(config, target, conn_index))
        }
        Scenario::CatalogChurn => Box::new(ChurnWorkload::new(config, target, conn_index)),
        Scenario::HealthQuery => Box::new(FixedGetWorkload::health(config, target)),
        Scenario::SessionLocks => Box::new(SessionWorkload::new(config, target, conn_index)),
        Scenario::Txn => Box::new(TxnWorkload::new(config, target, conn_index)),
        Scenario::ConnectAuthorize => Box::new(AuthorizeWorkload::new(config, target)),
        Scenario::BlockingFanout
        | Scenario::Dns
        | Scenario::Register
        | Scenario::TcpStream
        | Scenario::TcpConnect => {
            unreachable!("{} is not a request-loop scenario", config.scenario.name())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::parse_target;

    fn target() -> Target {
        parse_target("http://127.0.0.1:8500").unwrap()
    }

    fn text(bytes: &[u8]) -> String {
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn kv_get_is_encoded_once_and_reused() {
        let mut config = RunConfig::new(Scenario::KvGet);
        config.key = "a b".into();
        config.consistency = Consistency::Stale;
        let mut w = KvWorkload::new(&config, &target(), 0);
        let mut req = Vec::new();
        assert!(w.next_request(&mut req));
        assert!(text(&req).starts_with("GET /v1/kv/a%20b?stale HTTP/1.1\r\n"));
        let before = req.clone();
        w.next_request(&mut req);
        assert_eq!(req, before);
        assert_eq!(w.on_response(200, b""), Verdict::OK);
        assert_eq!(w.on_response(404, b""), Verdict::BAD_STATUS);
    }

    #[test]
    fn rotating_tokens_use_every_token_across_the_connections() {
        let mut config = RunConfig::new(Scenario::KvGet);
        config.key = "k".into();
        config.connections = 2;
        config.tokens = (0..5).map(|i| format!("t{i}")).collect();
        let sent = |w: &mut KvWorkload| {
            let mut req = Vec::new();
            w.next_request(&mut req);
            let head = text(&req);
            let line = head
                .lines()
                .find(|l| l.starts_with("X-Consul-Token: "))
                .unwrap();
            line["X-Consul-Token: ".len()..].to_string()
        };
        let mut one = KvWorkload::new(&config, &target(), 0);
        assert_eq!(sent(&mut one), "t0");
        assert_eq!(
            sent(&mut one),
            "t0",
            "without rotation a connection keeps its token"
        );
        config.tokens_rotate = true;
        let mut first = KvWorkload::new(&config, &target(), 0);
        let mut second = KvWorkload::new(&config, &target(), 1);
        let a: Vec<String> = (0..5).map(|_| sent(&mut first)).collect();
        let b: Vec<String> = (0..3).map(|_| sent(&mut second)).collect();
        assert_eq!(a, ["t0", "t2", "t4", "t1", "t3"]);
        assert_eq!(b, ["t1", "t3", "t0"]);
    }

    #[test]
    fn kv_requests_name_the_datacenter_when_asked() {
        let mut config = RunConfig::new(Scenario::KvGet);
        config.key = "k".into();
        config.datacenter = Some("dc2".into());
        let mut req = Vec::new();
        KvWorkload::new(&config, &target(), 0).next_request(&mut req);
        assert!(text(&req).starts_with("GET /v1/kv/k?dc=dc2 HTTP/1.1\r\n"));
        config.consistency = Consistency::Stale;
        let mut req = Vec::new();
        KvWorkload::new(&config, &target(), 0).next_request(&mut req);
        assert!(text(&req).starts_with("GET /v1/kv/k?stale&dc=dc2 HTTP/1.1\r\n"));
        config.scenario = Scenario::KvPut;
        let mut req = Vec::new();
        KvWorkload::new(&config, &target(), 0).next_request(&mut req);
        assert!(text(&req).starts_with("PUT /v1/kv/k?dc=dc2 HTTP/1.1\r\n"));
    }

    #[test]
    fn etcd_requests_are_base64_json() {
        let mut config = RunConfig::new(Scenario::KvPut);
        config.etcd = true;
        config.key = "k".into();
        config.value_bytes = 3;
        let mut w = KvWorkload::new(&config, &target(), 0);
        let mut req = Vec::new();
        w.next_request(&mut req);
        let t = text(&req);
        assert!(t.starts_with("POST /v3/kv/put HTTP/1.1\r\n"), "{t}");
        assert!(t.ends_with(r#"{"key":"aw==","value":"YWJj"}"#), "{t}");
        config.scenario = Scenario::KvGet;
        config.consistency = Consistency::Stale;
        let mut req = Vec::new();
        KvWorkload::new(&config, &target(), 0).next_request(&mut req);
        assert!(text(&req).ends_with(r#"{"key":"aw==","serializable":true}"#));
    }

    #[test]
    fn keys_rotate_and_mixed_respects_the_ratio() {
        let mut config = RunConfig::new(Scenario::KvMixed);
        config.keys = 3;
        config.read_ratio = 0.75;
        let mut w = KvWorkload::new(&config, &target(), 1);
        let mut gets = 0;
        let mut keys = std::collections::HashSet::new();
        for _ in 0..4000 {
            let mut req = Vec::new();
            w.next_request(&mut req);
            let t = text(&req);
            if t.starts_with("GET") {
                gets += 1;
            }
            keys.insert(t.split_whitespace().nth(1).unwrap().to_string());
        }
        assert!((2800..3200).contains(&gets), "{gets} gets of 4000");
        assert!(keys.contains("/v1/kv/loadgen/key-0") && keys.contains("/v1/kv/loadgen/key-2"));
    }

    #[test]
    fn churn_alternates_and_counts_registrations() {
        let mut config = RunConfig::new(Scenario::CatalogChurn);
        config.via = RegisterVia::Agent;
        let mut w = ChurnWorkload::new(&config, &target(), 7);
        let mut req = Vec::new();
        assert!(w.next_request(&mut req));
        assert!(text(&req).starts_with("PUT /v1/agent/service/register "));
        assert!(text(&req).contains(r#""ID":"web-churn-7""#));
        assert_eq!(w.on_response(200, b""), Verdict::OK);
        assert!(!w.next_request(&mut req));
        assert!(text(&req).starts_with("PUT /v1/agent/service/deregister/web-churn-7 "));
        assert_eq!(w.on_response(200, b""), Verdict::OK_STEP);
        assert!(w.next_request(&mut req));
        w.on_failure();
        assert!(
            !w.next_request(&mut req),
            "after a failed register, deregister first"
        );
    }

    #[test]
    fn session_cycle() {
        let config = RunConfig::new(Scenario::SessionLocks);
        let mut w = SessionWorkload::new(&config, &target(), 3);
        let mut req = Vec::new();
        assert!(w.next_request(&mut req));
        assert!(text(&req).starts_with("PUT /v1/session/create "));
        assert_eq!(w.on_response(200, br#"{"ID":"abc-1"}"#), Verdict::OK_STEP);
        assert!(!w.next_request(&mut req));
        let acquire = text(&req);
        let path = acquire.split_whitespace().nth(1).unwrap();
        let (key, query) = path.split_once('?').unwrap();
        assert!(
            key.starts_with("/v1/kv/loadgen/lock-") && key.ends_with("-3"),
            "{key}"
        );
        assert_eq!(query, "acquire=abc-1");
        let other = SessionWorkload::new(&config, &target(), 3);
        assert_ne!(
            other.lock_path, w.lock_path,
            "every workload has a key of its own"
        );
        assert_eq!(w.on_response(200, b"true"), Verdict::OK_STEP);
        w.next_request(&mut req);
        assert!(text(&req).starts_with(&format!("PUT {key}?release=abc-1 ")));
        assert_eq!(w.on_response(200, b"true\n"), Verdict::OK_STEP);
        w.next_request(&mut req);
        assert!(text(&req).starts_with("PUT /v1/session/destroy/abc-1 "));
        assert_eq!(w.on_response(200, b"true"), Verdict::OK);
        // A lock that is not acquired is a protocol error and the session is destroyed.
        w.next_request(&mut req);
        w.on_response(200, br#"{"ID":"s2"}"#);
        w.next_request(&mut req);
        assert_eq!(w.on_response(200, b"false"), Verdict::BAD_ANSWER);
        w.next_request(&mut req);
        assert!(text(&req).starts_with("PUT /v1/session/destroy/s2 "));
        assert_eq!(w.on_response(200, b"{}"), Verdict::OK);
        assert_eq!(session_id_of(b"not json"), None);
    }

    #[test]
    fn txn_sets_are_one_json_array_of_connection_owned_keys() {
        let mut config = RunConfig::new(Scenario::Txn);
        config.key = "t".into();
        config.txn_ops = 3;
        config.value_bytes = 2;
        let mut w = TxnWorkload::new(&config, &target(), 7);
        let mut req = Vec::new();
        assert!(w.next_request(&mut req));
        let t = text(&req);
        assert!(t.starts_with("PUT /v1/txn HTTP/1.1\r\n"), "{t}");
        let body: serde_json::Value =
            serde_json::from_str(t.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        let ops = body.as_array().unwrap();
        assert_eq!(ops.len(), 3);
        assert_eq!(ops[2]["KV"]["Key"], "t-7-2");
        assert_eq!(ops[0]["KV"]["Verb"], "set");
        assert_eq!(ops[0]["KV"]["Value"], "YWI=");
        assert_eq!(w.on_response(409, b""), Verdict::BAD_STATUS);
    }

    #[test]
    fn registration_bodies_are_json() {
        for via in [RegisterVia::Agent, RegisterVia::Catalog] {
            let instance = Instance {
                service: "web",
                id: "web-1",
                node: "n1",
                node_index: 0,
                index: 1,
            };
            let (_, body) = registration(via, &instance);
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert!(v.is_object());
            let (_, body) = deregistration(via, "web-1", "n1");
            if !body.is_empty() {
                serde_json::from_str::<serde_json::Value>(&body).unwrap();
            }
        }
        assert_eq!(instance_address(0), "10.0.0.1");
        assert_eq!(instance_address(65535), "10.1.0.0");
    }
}
