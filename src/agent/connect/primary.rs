//! A secondary datacenter's calls to its primary, for the Connect CA and the federation
//! states: the one place where such a request leaves this datacenter.
//!
//! Four of Consul's typed calls, each naming the primary as its `Datacenter` and sent
//! through the WAN router (`cluster::router`, a yamux stream of this shard's connection to
//! one of the primary's servers, as Consul's `forwardDC` sends them): `ConnectCA.Roots` (a
//! blocking read of the primary's trusted roots) and `ConnectCA.SignIntermediate` (the
//! primary's active root signing this datacenter's intermediate); `FederationState.List` (a
//! blocking read of every datacenter's state, for replication) and `FederationState.Apply`
//! (this datacenter's state, from anti-entropy). Each carries `acl.tokens.replication`,
//! else the agent's token.
//!
//! What comes back is checked here for shape only (bounded decoders, `consul::rpc`): the
//! caller checks the intermediate against the roots before it trusts either. Roots arrive
//! without keys (the primary never sends them).

use crate::agent::Agent;
use crate::cluster::servers::Retry;
use crate::consul::rpc::catalog::DcSpecificRequest;
use crate::consul::rpc::connect_ca::{read_ca_roots_whole, CaSignRequest};
use crate::consul::rpc::federation_state::{read_states_reply, ApplyRequest};
use crate::consul::rpc::{decode_error, QueryOptions};
use crate::store::federation::FederationState;
use crate::store::mesh::ca::CaRoot;
use std::time::Duration;

/// How long one blocking read of the primary's roots waits for a change (Consul's
/// replication uses the server's query time; a minute bounds how long a local change —
/// a new key type in the CA configuration — waits for the next round).
pub const ROOTS_WAIT: Duration = Duration::from_secs(60);
/// How long a call may take beyond its wait: the WAN hop, failover among the primary's
/// servers, and the signature.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// The primary's roots as `ConnectCA.Roots` answered them.
#[derive(Clone, Debug, Default)]
pub struct PrimaryRoots {
    /// The answer's index: the next blocking read waits past it.
    pub index: u64,
    pub trust_domain: String,
    pub active_root_id: String,
    /// Without keys, in the primary's order; `active` as the primary marks it.
    pub roots: Vec<CaRoot>,
}

impl PrimaryRoots {
    /// The primary's active root, if it has one.
    pub fn active(&self) -> Option<&CaRoot> {
        self.roots
            .iter()
            .find(|r| r.active && *r.id == self.active_root_id)
    }
}

/// Reads the primary's roots, blocking until they change past `min_index` (or
/// [`ROOTS_WAIT`] passes).
pub async fn roots(agent: &Agent, primary: &str, min_index: u64) -> Result<PrimaryRoots, String> {
    let reply = blocking_read(agent, primary, "ConnectCA.Roots", min_index).await?;
    let (meta, roots) = read_ca_roots_whole(&reply)
        .map_err(|e| format!("bad roots answer from the primary datacenter: {e}"))?;
    Ok(PrimaryRoots {
        index: meta.index,
        trust_domain: roots.trust_domain,
        active_root_id: roots.active_root_id,
        roots: roots.roots,
    })
}

/// A blocking read of the primary (a `DCSpecificRequest`), waiting past `min_index` for at
/// most [`ROOTS_WAIT`]: the reply's body, else the primary's refusal as the error.
async fn blocking_read(
    agent: &Agent,
    primary: &str,
    method: &'static str,
    min_index: u64,
) -> Result<bytes::Bytes, String> {
    let token = token(agent);
    let body = DcSpecificRequest {
        datacenter: primary,
        node_meta_filters: Vec::new(),
        options: QueryOptions {
            token: &token,
            min_query_index: min_index,
            max_query_time_ns: ROOTS_WAIT.as_nanos() as i64,
            ..QueryOptions::default()
        },
    }
    .encode();
    call(agent, primary, method, &body, ROOTS_WAIT + CALL_TIMEOUT).await
}

/// Asks the primary to sign `csr_pem` (this datacenter's intermediate CSR), with the
/// replication token (else the agent's): the primary requires `operator:write`. The signed
/// certificate's PEM.
pub async fn sign_intermediate(
    agent: &Agent,
    primary: &str,
    csr_pem: &str,
) -> Result<String, String> {
    let token = token(agent);
    let body = CaSignRequest {
        datacenter: primary,
        csr: csr_pem,
        token: &token,
    }
    .encode();
    // Signing twice does no harm: a lost answer is asked for again.
    let reply = call(
        agent,
        primary,
        "ConnectCA.SignIntermediate",
        &body,
        CALL_TIMEOUT,
    )
    .await
    .map_err(|e| {
        format!("Primary datacenter refused to sign our intermediate CA certificate: {e}")
    })?;
    let pem = crate::proto::msgpack::Reader::new(&reply)
        .str()
        .map_err(|e| format!("bad signing answer: {}", decode_error(e)))?;
    if pem.is_empty() {
        return Err("the primary's signing answer has no certificate".to_string());
    }
    Ok(pem.to_string())
}

/// Every datacenter's federation state as the primary has them, blocking until they change
/// past `min_index` (or [`ROOTS_WAIT`] passes): `(index, states)`.
pub async fn federation_states(
    agent: &Agent,
    primary: &str,
    min_index: u64,
) -> Result<(u64, Vec<FederationState>), String> {
    let reply = blocking_read(agent, primary, "FederationState.List", min_index).await?;
    let (meta, states) = read_states_reply(&reply)
        .map_err(|e| format!("bad federation states: {}", decode_error(e)))?;
    Ok((meta.index, states))
}

/// Upserts this datacenter's federation state in the primary (with the replication token,
/// else the agent's: the primary requires `operator:write`).
pub async fn apply_federation_state(
    agent: &Agent,
    primary: &str,
    state: &FederationState,
) -> Result<(), String> {
    let token = token(agent);
    let body = ApplyRequest {
        datacenter: primary,
        op: "upsert",
        state: Some(state.clone()),
        token: &token,
    }
    .encode();
    // An upsert applied twice is the same row: a lost answer is asked for again.
    call(agent, primary, "FederationState.Apply", &body, CALL_TIMEOUT)
        .await
        .map_err(|e| {
            format!("the primary datacenter refused this datacenter's federation state: {e}")
        })?;
    Ok(())
}

/// The token a call to the primary carries: `acl.tokens.replication` (Consul's choice for
/// a secondary's CA calls), else the agent's; empty (anonymous) with ACLs off.
fn token(agent: &Agent) -> String {
    let shard = &agent.shard;
    if !shard.config().acl.enabled {
        return String::new();
    }
    let Ok(tokens) = shard.shared().acl_tokens.read() else {
        return String::new();
    };
    tokens
        .replication
        .clone()
        .or_else(|| tokens.agent.clone())
        .or_else(|| tokens.default.clone())
        .unwrap_or_default()
}

/// One typed call on a server of `primary`; every call here reads or is safe to repeat,
/// so a lost answer is asked for again on another of its servers.
async fn call(
    agent: &Agent,
    primary: &str,
    method: &'static str,
    body: &[u8],
    timeout: Duration,
) -> Result<bytes::Bytes, String> {
    agent
        .pools
        .router
        .call_typed(
            &agent.shard.rpc,
            primary,
            method,
            body,
            timeout,
            Retry::Always,
        )
        .await
        .map_err(|e| e.to_string())
}
