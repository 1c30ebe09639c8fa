//! A secondary datacenter's calls to its primary, for the Connect CA and the federation
//! states: the one place where such a request leaves this datacenter.
//!
//! Four calls: Consul's `ConnectCA.Roots` (a blocking read of the primary's trusted roots)
//! and `ConnectCA.SignIntermediate` (the primary's active root signing this datacenter's
//! intermediate); `FederationState.List` (a blocking read of every datacenter's state, for
//! replication) and `FederationState.Apply` (this datacenter's state, from anti-entropy).
//! Today each travels as an HTTP request through the WAN router
//! (`cluster::router`, a `FORWARD_HTTP` frame answered by a primary server's own API,
//! `/v1/connect/ca/roots` and the internal `SIGN_INTERMEDIATE_PATH`); when servers speak
//! Consul's RPC to each other only this file changes.
//!
//! What comes back is checked here for shape only: the caller checks the intermediate
//! against the roots before it trusts either. Roots arrive without keys (the primary never
//! renders them).

use crate::agent::catalog_client::{forwarded_answer, forwarded_request};
use crate::agent::Agent;
use crate::api::connect::SIGN_INTERMEDIATE_PATH;
use crate::api::federation_state as federation;
use crate::cluster::servers::Retry;
use crate::consul::federation_state;
use crate::proto::rfc3339;
use crate::proto::rpc::kind;
use crate::store::federation::FederationState;
use crate::store::mesh::ca::CaRoot;
use arcstr::ArcStr;
use std::time::Duration;

/// How long one blocking read of the primary's roots waits for a change (Consul's
/// replication uses the server's query time; a minute bounds how long a local change —
/// a new key type in the CA configuration — waits for the next round).
pub const ROOTS_WAIT: Duration = Duration::from_secs(60);
/// How long a call may take beyond its wait: the WAN hop, failover among the primary's
/// servers, and the signature.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// Most roots accepted from the primary: far more than rotation keeps (an active root and
/// the rotated-out ones until they expire); more is a broken or hostile answer.
pub const ROOTS_MAX: usize = 64;

/// The primary's roots as `/v1/connect/ca/roots` answered them.
#[derive(Clone, Debug, Default)]
pub struct PrimaryRoots {
    /// The answer's `X-Consul-Index`: the next blocking read waits past it.
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

/// The primary's signature on this datacenter's intermediate.
#[derive(Clone, Debug)]
pub struct SignedIntermediate {
    pub pem: String,
    /// The ID of the root that signed it (the primary's active root at that moment).
    pub root_id: String,
}

/// Reads the primary's roots, blocking until they change past `min_index` (or
/// [`ROOTS_WAIT`] passes).
pub async fn roots(agent: &Agent, primary: &str, min_index: u64) -> Result<PrimaryRoots, String> {
    let (index, body) = blocking_get(agent, primary, "/v1/connect/ca/roots", min_index).await?;
    let mut roots = parse_roots(&body)?;
    roots.index = index;
    Ok(roots)
}

/// A blocking read of `path` in the primary, waiting past `min_index` for at most
/// [`ROOTS_WAIT`]: `(X-Consul-Index, body)` of a 200, else the primary's answer as the
/// error.
async fn blocking_get(
    agent: &Agent,
    primary: &str,
    path: &str,
    min_index: u64,
) -> Result<(u64, Vec<u8>), String> {
    let path = format!(
        "{path}?dc={primary}&index={min_index}&wait={}s",
        ROOTS_WAIT.as_secs()
    );
    let (status, index, body) = call(
        agent,
        primary,
        "GET",
        &path,
        b"",
        ROOTS_WAIT + CALL_TIMEOUT,
        Retry::Always,
    )
    .await?;
    if status != 200 {
        return Err(format!(
            "the primary datacenter answered {status}: {}",
            String::from_utf8_lossy(&body).trim()
        ));
    }
    Ok((index, body))
}

/// Asks the primary to sign `csr_pem` (this datacenter's intermediate CSR), with the
/// replication token (else the agent's): the primary requires `operator:write`.
pub async fn sign_intermediate(
    agent: &Agent,
    primary: &str,
    csr_pem: &str,
) -> Result<SignedIntermediate, String> {
    let body = serde_json::json!({ "CSR": csr_pem }).to_string();
    let path = format!("{SIGN_INTERMEDIATE_PATH}?dc={primary}");
    // Signing twice does no harm: a lost answer is asked for again.
    let answer = put(
        agent,
        primary,
        &path,
        body.as_bytes(),
        "Primary datacenter refused to sign our intermediate CA certificate",
    )
    .await?;
    let value: serde_json::Value =
        serde_json::from_slice(&answer).map_err(|e| format!("bad signing answer: {e}"))?;
    let text = |key: &str| value[key].as_str().unwrap_or_default().to_string();
    let signed = SignedIntermediate {
        pem: text("IntermediatePEM"),
        root_id: text("RootID"),
    };
    if signed.pem.is_empty() || signed.root_id.is_empty() {
        return Err("the primary's signing answer has no certificate".to_string());
    }
    Ok(signed)
}

/// Every datacenter's federation state as the primary has them, blocking until they change
/// past `min_index` (or [`ROOTS_WAIT`] passes): `(X-Consul-Index, states)`.
pub async fn federation_states(
    agent: &Agent,
    primary: &str,
    min_index: u64,
) -> Result<(u64, Vec<FederationState>), String> {
    let (index, body) =
        blocking_get(agent, primary, "/v1/internal/federation-states", min_index).await?;
    Ok((index, federation_state::parse_states(&body)?))
}

/// Upserts this datacenter's federation state in the primary (with the replication token,
/// else the agent's: the primary requires `operator:write`).
pub async fn apply_federation_state(
    agent: &Agent,
    primary: &str,
    state: &FederationState,
) -> Result<(), String> {
    let body = format!(
        r#"{{"Op":"upsert","State":{}}}"#,
        federation_state::state_json(state)
    );
    let path = format!("{}?dc={primary}", federation::APPLY_PATH);
    // An upsert applied twice is the same row: a lost answer is asked for again.
    put(
        agent,
        primary,
        &path,
        body.as_bytes(),
        "the primary datacenter refused this datacenter's federation state",
    )
    .await?;
    Ok(())
}

/// A write to the primary that is safe to repeat (sent again when its answer was lost):
/// the body of a 200, else `refusal` with the primary's status and answer.
async fn put(
    agent: &Agent,
    primary: &str,
    path: &str,
    body: &[u8],
    refusal: &str,
) -> Result<Vec<u8>, String> {
    let (status, _, answer) = call(
        agent,
        primary,
        "PUT",
        path,
        body,
        CALL_TIMEOUT,
        Retry::Always,
    )
    .await?;
    if status != 200 {
        return Err(format!(
            "{refusal} ({status}): {}",
            String::from_utf8_lossy(&answer).trim()
        ));
    }
    Ok(answer)
}

/// The token a call to the primary carries: `acl.tokens.replication` (Consul's choice for
/// a secondary's CA calls), else the agent's; none with ACLs off.
fn token(agent: &Agent) -> Option<String> {
    let shard = &agent.shard;
    if !shard.config().acl.enabled {
        return None;
    }
    let tokens = shard.shared().acl_tokens.read().ok()?;
    tokens
        .replication
        .clone()
        .or_else(|| tokens.agent.clone())
        .or_else(|| tokens.default.clone())
        .filter(|t| !t.is_empty() && !t.contains(['\r', '\n']))
}

/// One request to a server of `primary`: `(status, X-Consul-Index, body)`.
async fn call(
    agent: &Agent,
    primary: &str,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
    retry: Retry,
) -> Result<(u16, u64, Vec<u8>), String> {
    let request = forwarded_request(method, path, token(agent).as_deref(), body);
    let frame = agent
        .pools
        .router
        .forward(
            &agent.shard.forward,
            primary,
            kind::FORWARD_HTTP,
            &request,
            timeout,
            retry,
        )
        .await?;
    forwarded_answer(&frame, "the primary datacenter")
}

/// Reads Consul's `IndexedCARoots` JSON into rows without keys.
pub fn parse_roots(body: &[u8]) -> Result<PrimaryRoots, String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("bad roots answer: {e}"))?;
    let text = |v: &serde_json::Value, key: &str| v[key].as_str().unwrap_or_default().to_string();
    let list = match &value["Roots"] {
        serde_json::Value::Array(list) => list.as_slice(),
        serde_json::Value::Null => &[],
        _ => return Err("bad roots answer: Roots is not a list".to_string()),
    };
    if list.len() > ROOTS_MAX {
        return Err(format!(
            "the primary lists {} roots, more than {ROOTS_MAX}",
            list.len()
        ));
    }
    let time = |v: &serde_json::Value, key: &str| {
        rfc3339::parse_ns(v[key].as_str().unwrap_or_default()).map_or(0, |ns| ns / 1_000_000_000)
    };
    let mut roots = Vec::with_capacity(list.len());
    for root in list {
        let intermediates = match &root["IntermediateCerts"] {
            serde_json::Value::Array(certs) => certs
                .iter()
                .filter_map(|c| c.as_str())
                .map(ArcStr::from)
                .collect(),
            _ => Vec::new(),
        };
        let row = CaRoot {
            id: ArcStr::from(text(root, "ID")),
            name: ArcStr::from(text(root, "Name")),
            serial_number: root["SerialNumber"].as_u64().unwrap_or(0),
            signing_key_id: ArcStr::from(text(root, "SigningKeyID")),
            external_trust_domain: ArcStr::from(text(root, "ExternalTrustDomain")),
            not_before_unix_s: time(root, "NotBefore"),
            not_after_unix_s: time(root, "NotAfter"),
            root_cert_pem: ArcStr::from(text(root, "RootCert")),
            intermediate_certs: intermediates,
            active: root["Active"].as_bool().unwrap_or(false),
            private_key_type: ArcStr::from(text(root, "PrivateKeyType")),
            private_key_bits: root["PrivateKeyBits"].as_u64().unwrap_or(0) as u32,
            ..CaRoot::default()
        };
        if row.id.is_empty() || row.root_cert_pem.is_empty() {
            return Err("bad roots answer: a root without an ID or certificate".to_string());
        }
        roots.push(row);
    }
    Ok(PrimaryRoots {
        index: 0,
        trust_domain: text(&value, "TrustDomain"),
        active_root_id: text(&value, "ActiveRootID"),
        roots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_answers_are_read_without_keys_and_bad_ones_refused() {
        let body = br#"{"ActiveRootID":"b","TrustDomain":"c1.consul","Roots":[
            {"ID":"a","Name":"old","RootCert":"pem-a","Active":false,"NotAfter":"2030-01-01T00:00:00Z"},
            {"ID":"b","Name":"new","RootCert":"pem-b","Active":true,"IntermediateCerts":["x"],
             "PrivateKeyType":"ec","PrivateKeyBits":384,"SerialNumber":7}]}"#;
        let roots = parse_roots(body).unwrap();
        assert_eq!(roots.trust_domain, "c1.consul");
        assert_eq!(roots.roots.len(), 2);
        assert_eq!(roots.roots[0].not_after_unix_s, 1_893_456_000);
        let active = roots.active().unwrap();
        assert_eq!(&*active.id, "b");
        assert_eq!(active.intermediate_certs, vec![ArcStr::from("x")]);
        assert_eq!((active.private_key_bits, active.serial_number), (384, 7));
        assert!(active.signing_key_pem.is_empty());
        // The primary before its CA exists.
        let empty = parse_roots(br#"{"ActiveRootID":"","TrustDomain":"","Roots":null}"#).unwrap();
        assert!(empty.active().is_none());
        assert!(parse_roots(b"nope").is_err());
        assert!(parse_roots(br#"{"Roots":[{"ID":"a"}]}"#).is_err());
        assert!(parse_roots(br#"{"Roots":{}}"#).is_err());
    }
}
