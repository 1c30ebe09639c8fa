//! Leaf certificates for the services of this agent: made here, kept fresh, served to local
//! proxies through the blocking `/v1/agent/connect/ca/leaf/<service>`.
//!
//! The private key is generated on this agent and never leaves it: only the CSR travels.
//! A server agent signs with its own store's active root (`api::connect::sign_csr`); a
//! client agent sends the CSR to a server as Consul's `ConnectCA.Sign` (with the service's
//! token, else the agent's default one), which the leader signs. Each requested service gets one task that signs its first leaf, then
//! renews it at a random point between 60 % and 90 % of its lifetime — or at once when the
//! active root changes, so a rotation reaches every leaf — and wakes the blocked callers.
//! A leaf's index is the store index it was signed at, and always above the previous
//! leaf's, so a caller blocking on `?index` sees every renewal.
//!
//! A leaf may be asked with extra DNS names (an ingress gateway's hosts, as Consul's leaf
//! request carries `DNSSAN`): each set of names is its own leaf, and a new set for a
//! service replaces the previous set's leaf (its task ends), so a gateway whose hosts
//! change keeps one leaf with names, next to the plain one the HTTP endpoint serves.
//!
//! The roots are followed by one task per agent: on a server through the shard's watch on
//! the roots key, on a client through a blocking `ConnectCA.Roots` on a server.

use crate::agent::signal::Signal;
use crate::agent::Agent;
use crate::api::agent_channel::AgentReply;
use crate::api::connect::{issued_doc, sign_csr, IssuedLeaf};
use crate::cluster::servers::Retry;
use crate::consul::config_entry::doc;
use crate::consul::rpc::catalog::DcSpecificRequest;
use crate::consul::rpc::connect_ca::{read_ca_roots, read_issued_cert, CaSignRequest};
use crate::consul::rpc::QueryOptions;
use crate::proto::spiffe::ServiceId;
use crate::shard::watch::WatchSet;
use crate::store::mesh::ca;
use crate::store::Table;
use crate::tls::connect_ca;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Most services one agent keeps leaves for.
pub const LEAVES_MAX: usize = 4096;
/// A failed signing is retried after this, doubling up to [`SIGN_RETRY_MAX`].
pub const SIGN_RETRY_MIN: Duration = Duration::from_millis(250);
pub const SIGN_RETRY_MAX: Duration = Duration::from_secs(30);
/// How long a client agent's signing request or roots read may take, beyond its wait.
pub const SERVER_CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// How long one blocking roots read on a server waits.
pub const ROOTS_WAIT: Duration = Duration::from_secs(60);
/// Renewal happens at a random point in this fraction of a leaf's lifetime.
const RENEW_AT_MIN: f64 = 0.6;
const RENEW_AT_MAX: f64 = 0.9;

/// A signed leaf and the key made for it.
pub struct Leaf {
    pub issued: IssuedLeaf,
    pub private_key_pem: String,
    /// The index this agent reports for it (strictly increasing per service).
    pub index: u64,
    /// When it is renewed (Unix seconds): drawn once, in 60–90 % of its lifetime.
    pub renew_at_s: i64,
}

#[derive(Default)]
struct Slot {
    /// The service, and the DNS names its leaf carries beyond Consul's own.
    service: String,
    dns_sans: Vec<String>,
    leaf: Option<Rc<Leaf>>,
    /// The last signing failure, answered when no leaf exists yet.
    error: Option<String>,
    /// A token that may sign this service's leaves (client agents send it along).
    token: Option<String>,
}

/// The roots as this agent last saw them.
#[derive(Clone, Debug, Default)]
pub struct RootsView {
    pub trust_domain: String,
    pub active_root_id: String,
    pub index: u64,
}

/// Every leaf of this agent.
#[derive(Default)]
pub struct LeafCerts {
    slots: RefCell<HashMap<String, Slot>>,
    /// Notified when a leaf or the roots change.
    pub changed: Signal,
    pub roots: RefCell<RootsView>,
    roots_task: Cell<bool>,
}

fn unix_now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The slot of `service`'s leaf with `dns_sans` (sorted, without duplicates).
fn slot_key(service: &str, dns_sans: &[String]) -> String {
    if dns_sans.is_empty() {
        service.to_string()
    } else {
        // A newline is in no service name, so keys of different services never meet.
        format!("{service}\n{}", dns_sans.join(","))
    }
}

/// `GET /v1/agent/connect/ca/leaf/<service>` on the agent; `dns_sans` are extra DNS names
/// the leaf carries (none for the HTTP endpoint).
pub async fn serve(
    agent: &Rc<Agent>,
    service: &str,
    dns_sans: &[String],
    min_index: u64,
    wait: Duration,
    token: Option<String>,
    pretty: bool,
) -> AgentReply {
    let leaves = &agent.leaves;
    let mut dns_sans = dns_sans.to_vec();
    dns_sans.sort();
    dns_sans.dedup();
    let key = slot_key(service, &dns_sans);
    let started = ensure_task(agent, service, &dns_sans, token);
    if let Err(reason) = started {
        return AgentReply::text(500, reason);
    }
    let deadline = Instant::now() + wait;
    loop {
        let (leaf, error) = {
            let slots = leaves.slots.borrow();
            let Some(slot) = slots.get(&key) else {
                // Another set of names for the service replaced this one meanwhile.
                return AgentReply::text(500, "the leaf's DNS names were replaced");
            };
            (slot.leaf.clone(), slot.error.clone())
        };
        match leaf {
            Some(leaf) if leaf.index > min_index || Instant::now() >= deadline => {
                return render(&leaf, pretty);
            }
            None if error.is_some() && (min_index == 0 || Instant::now() >= deadline) => {
                return AgentReply::text(500, error.unwrap_or_default());
            }
            None if Instant::now() >= deadline => {
                return AgentReply::text(500, "timed out waiting for the leaf certificate");
            }
            _ => {}
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        let _ = monoio::time::timeout(remaining, leaves.changed.wait()).await;
    }
}

fn render(leaf: &Leaf, pretty: bool) -> AgentReply {
    let mut body = issued_doc(&leaf.issued, Some(&leaf.private_key_pem));
    body.set("CreateIndex", doc::Doc::Int(leaf.index as i64));
    body.set("ModifyIndex", doc::Doc::Int(leaf.index as i64));
    let compact = body.to_json();
    let mut out = Vec::with_capacity(compact.len() + 256);
    if pretty {
        doc::indent(compact.as_bytes(), &mut out);
    } else {
        out.extend_from_slice(compact.as_bytes());
    }
    let mut reply = AgentReply::json(200, out);
    reply.headers = format!(
        "X-Consul-Index: {}\r\nX-Consul-KnownLeader: true\r\nX-Consul-LastContact: 0\r\n",
        leaf.index.max(1)
    )
    .into_bytes();
    reply
}

/// Makes the slot of the service's leaf with `dns_sans` and starts its task (and the
/// roots task) if not yet running; a slot of the same service with other names is
/// dropped.
fn ensure_task(
    agent: &Rc<Agent>,
    service: &str,
    dns_sans: &[String],
    token: Option<String>,
) -> Result<(), String> {
    let leaves = &agent.leaves;
    let key = slot_key(service, dns_sans);
    {
        let mut slots = leaves.slots.borrow_mut();
        if let Some(slot) = slots.get_mut(&key) {
            if token.is_some() {
                slot.token = token;
            }
            return Ok(());
        }
        if !dns_sans.is_empty() {
            slots
                .retain(|k, slot| *k == key || slot.service != service || slot.dns_sans.is_empty());
        }
        if slots.len() >= LEAVES_MAX {
            return Err(format!(
                "this agent keeps leaves for at most {LEAVES_MAX} services"
            ));
        }
        slots.insert(
            key.clone(),
            Slot {
                service: service.to_string(),
                dns_sans: dns_sans.to_vec(),
                token,
                ..Default::default()
            },
        );
    }
    if !leaves.roots_task.replace(true) {
        monoio::spawn(follow_roots(agent.clone()));
    }
    monoio::spawn(keep_fresh(agent.clone(), key));
    Ok(())
}

/// Reads the roots once: from the local store on a server, else from a server with
/// `ConnectCA.Roots` (blocking past `index`).
async fn read_roots(agent: &Agent, index: u64) -> Result<RootsView, String> {
    let body = DcSpecificRequest {
        datacenter: "",
        node_meta_filters: Vec::new(),
        options: QueryOptions {
            min_query_index: index,
            max_query_time_ns: ROOTS_WAIT.as_nanos() as i64,
            ..QueryOptions::default()
        },
    }
    .encode();
    let answer = agent
        .client
        .server_call(
            "ConnectCA.Roots",
            &body,
            ROOTS_WAIT + SERVER_CALL_TIMEOUT,
            Retry::Always,
        )
        .await;
    match answer {
        None => {
            agent.shard.catch_up();
            let version = agent.shard.current_version();
            let state = &version.mesh.ca;
            Ok(RootsView {
                trust_domain: state.trust_domain().unwrap_or_default(),
                active_root_id: state
                    .active_root()
                    .map(|r| r.id.to_string())
                    .unwrap_or_default(),
                index: ca::roots_index(&version),
            })
        }
        Some(Err(e)) => Err(format!("roots read failed: {e}")),
        Some(Ok(reply)) => {
            let (meta, view) =
                read_ca_roots(&reply).map_err(|e| format!("bad roots answer: {e}"))?;
            Ok(RootsView {
                trust_domain: view.trust_domain.to_string(),
                active_root_id: view.active_root_id.to_string(),
                index: meta.index,
            })
        }
    }
}

/// Follows the roots and notifies the leaf tasks when the active root changes.
async fn follow_roots(agent: Rc<Agent>) {
    let leaves = &agent.leaves;
    let mut retry = SIGN_RETRY_MIN;
    let mut index = 0;
    loop {
        if agent.shard.shutting_down() {
            return;
        }
        match read_roots(&agent, index).await {
            Ok(view) => {
                retry = SIGN_RETRY_MIN;
                index = view.index;
                let changed = {
                    let mut current = leaves.roots.borrow_mut();
                    let changed = current.active_root_id != view.active_root_id
                        || current.trust_domain != view.trust_domain;
                    *current = view;
                    changed
                };
                if changed {
                    leaves.changed.notify_all();
                }
            }
            Err(e) => {
                log::debug!("connect: reading the CA roots failed: {e}");
                monoio::time::sleep(retry).await;
                retry = (retry * 2).min(SIGN_RETRY_MAX);
                continue;
            }
        }
        if agent.client.version().is_some() {
            // On a server: park on the roots key until it changes (or a minute passes).
            let watch =
                WatchSet::new().key(Table::ConnectCa, Arc::<str>::from(ca::ROOTS_WATCH_KEY));
            let deadline = agent.shard.shared().now_ms() + ROOTS_WAIT.as_millis() as u64;
            let current = ca::roots_index(&agent.shard.current_version());
            if current <= index {
                agent.shard.watch(&watch, deadline).await;
            }
        }
    }
}

/// Signs a fresh leaf for `service`.
async fn sign(
    agent: &Agent,
    service: &str,
    dns_sans: &[String],
    token: Option<&str>,
) -> Result<(IssuedLeaf, String), String> {
    let (trust_domain, active_root_id, key_bits) = {
        let roots = agent.leaves.roots.borrow();
        (
            roots.trust_domain.clone(),
            roots.active_root_id.clone(),
            256,
        )
    };
    if trust_domain.is_empty() {
        return Err("Connect CA roots are not available yet".to_string());
    }
    let datacenter = agent.config.borrow().datacenter.clone();
    let id = ServiceId::new(&trust_domain, &datacenter, service);
    let (csr, key) = connect_ca::make_leaf_csr(&id, &trust_domain, key_bits, dns_sans)?;
    // The service's token, else the agent's default one, as Consul's agent signs.
    let default_token = agent
        .shard
        .shared()
        .acl_tokens
        .read()
        .ok()
        .and_then(|tokens| tokens.default.clone());
    let token = token
        .filter(|t| !t.is_empty())
        .or(default_token.as_deref())
        .unwrap_or("");
    let body = CaSignRequest {
        datacenter: "",
        csr: &csr,
        token,
    }
    .encode();
    // A sign that may have reached the leader is not sent again: the next try signs anew.
    let remote = agent
        .client
        .server_call("ConnectCA.Sign", &body, SERVER_CALL_TIMEOUT, Retry::NotSent)
        .await;
    let issued = match remote {
        None => {
            agent.shard.catch_up();
            let version = agent.shard.current_version();
            sign_csr(&version, &datacenter, &csr, unix_now_s()).map_err(|e| match e {
                crate::api::ApiError::BadRequest(m) | crate::api::ApiError::Internal(m) => m,
                other => format!("{other:?}"),
            })?
        }
        Some(Err(e)) => return Err(e.to_string()),
        Some(Ok(reply)) => {
            let cert = read_issued_cert(&reply).map_err(|e| format!("bad signing answer: {e}"))?;
            IssuedLeaf {
                signed: connect_ca::SignedLeaf {
                    cert_pem: String::new(),
                    serial_number: cert.serial_number.to_string(),
                    service: cert.service.to_string(),
                    service_uri: cert.service_uri.to_string(),
                    valid_after_unix_s: cert.valid_after_unix_s,
                    valid_before_unix_s: cert.valid_before_unix_s,
                },
                chain_pem: cert.cert_pem.to_string(),
                // `IssuedCert` does not name its root: the one active when the agent asked.
                // Should the servers rotate meanwhile, the roots' change signs again.
                root_id: active_root_id,
                index: cert.index,
            }
        }
    };
    Ok((issued, key))
}

/// When a leaf valid over `[after, before]` is renewed: a random point in 60–90 % of it.
fn renew_at_s(after: i64, before: i64) -> i64 {
    let lifetime = (before - after).max(1) as f64;
    let fraction = RENEW_AT_MIN + rand::random::<f64>() * (RENEW_AT_MAX - RENEW_AT_MIN);
    after + (lifetime * fraction) as i64
}

/// Keeps the leaf of slot `key` signed and fresh, for as long as the agent runs and the
/// slot exists.
async fn keep_fresh(agent: Rc<Agent>, key: String) {
    let leaves = &agent.leaves;
    let mut retry = SIGN_RETRY_MIN;
    loop {
        if agent.shard.shutting_down() {
            return;
        }
        let (current, token, service, dns_sans) = {
            let slots = leaves.slots.borrow();
            let Some(slot) = slots.get(&key) else {
                return;
            };
            (
                slot.leaf.clone(),
                slot.token.clone(),
                slot.service.clone(),
                slot.dns_sans.clone(),
            )
        };
        let active_root = leaves.roots.borrow().active_root_id.clone();
        let due = match &current {
            None => true,
            Some(leaf) => {
                (!active_root.is_empty() && leaf.issued.root_id != active_root)
                    || unix_now_s() >= leaf.renew_at_s
            }
        };
        if due && !active_root.is_empty() {
            match sign(&agent, &service, &dns_sans, token.as_deref()).await {
                Ok((issued, private_key_pem)) => {
                    retry = SIGN_RETRY_MIN;
                    let previous = current.as_ref().map_or(0, |l| l.index);
                    let index = issued.index.max(previous + 1);
                    let renew_at_s = renew_at_s(
                        issued.signed.valid_after_unix_s,
                        issued.signed.valid_before_unix_s,
                    );
                    let leaf = Rc::new(Leaf {
                        issued,
                        private_key_pem,
                        index,
                        renew_at_s,
                    });
                    {
                        let mut slots = leaves.slots.borrow_mut();
                        let Some(slot) = slots.get_mut(&key) else {
                            return;
                        };
                        slot.leaf = Some(leaf);
                        slot.error = None;
                    }
                    log::debug!("connect: signed a leaf certificate for {service:?}");
                    leaves.changed.notify_all();
                    continue;
                }
                Err(e) => {
                    log::warn!("connect: signing a leaf for {service:?} failed: {e}");
                    match leaves.slots.borrow_mut().get_mut(&key) {
                        Some(slot) => slot.error = Some(e),
                        None => return,
                    }
                    leaves.changed.notify_all();
                    monoio::time::sleep(retry).await;
                    retry = (retry * 2).min(SIGN_RETRY_MAX);
                    continue;
                }
            }
        }
        // Sleep until the renewal point, a roots change or a minute, whichever comes first.
        let sleep = match &current {
            Some(leaf) => Duration::from_secs((leaf.renew_at_s - unix_now_s()).clamp(1, 60) as u64),
            None => Duration::from_millis(200),
        };
        let _ = monoio::time::timeout(sleep, leaves.changed.wait()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_falls_between_sixty_and_ninety_percent_of_the_lifetime() {
        for _ in 0..100 {
            let at = renew_at_s(1000, 2000);
            assert!((1600..=1900).contains(&at), "{at}");
        }
    }
}
