//! Cluster peering's peer stream (Consul's `PeerStreamService` on the `grpc_tls` port,
//! package `hashicorp.consul.internal.peerstream`), on the gRPC thread:
//!
//! - **`ExchangeSecret`** ([`service`]): a dialer trades the token's one-time establishment
//!   secret for a long-lived stream secret; the acceptor's leader writes it as the peering's
//!   pending stream secret through Raft (the establishment secret is consumed, so a token
//!   works once).
//! - **`StreamResources`** ([`service`] accepts, [`dialer`] dials): the dialer's leader
//!   connects to an address from the token over TLS, trusting the token's CA and expecting
//!   its server name, and opens the stream with `Open{PeerID, StreamSecretID}`; the
//!   acceptor admits it by the stream secret (a pending one becomes active). Both sides then
//!   mark the peering `ACTIVE`, send heartbeats every 15 s and call the stream broken after
//!   2 min of silence; a broken stream marks the peering `FAILING` and the dialer dials
//!   again with backoff; deleting the peering on one side sends `Terminated` and the other
//!   side marks its peering `TERMINATED`.
//! - **Replication** on an open stream: each side subscribes to exported services; each
//!   sends what its `exported-services` entry exports to the other ([`machine::exports_for`])
//!   and sends again when the exported instances, their health or the entry change (the
//!   session watches the store); the receiver writes what it imports through Raft into
//!   `store::peering`'s imported services and ACKs each resource (NACKs what it cannot
//!   write). Resources travel as Consul's protobufs ([`pbservice`]).
//! - The acceptor presents a certificate for `server.<dc>.peering.<trust domain>` signed by
//!   the Connect CA when a client asks for that name by SNI ([`certs`]).
//!
//! The decisions (what to send on which message or tick, admission, backoff, the row a
//! state change writes) are pure and unit-tested in [`machine`]; this module's other files
//! move bytes and proposals. Only the leader dials and accepts; writes go through the
//! agent's Raft proposals ([`crate::xds::feed::AgentSource::propose`]). Trust bundles
//! and server addresses are not replicated: see `docs/peering.md`.
//!
//! Bounds: every message at most [`MESSAGE_BYTES_MAX`]; [`SEND_QUEUE`] messages queued per
//! stream; one session per peering (a new `Open` for the same peering ends the old one);
//! at most [`crate::store::peering::PEERINGS_MAX`] streams.

pub mod certs;
pub mod dialer;
pub mod machine;
pub mod messages;
pub mod pbservice;
pub mod service;
pub mod session;

use super::feed::{AgentSource, StoreFeed};
use crate::store::peering::{self, PeeringOp, PeeringState};
use crate::store::Command;
use machine::StatusUpdate;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// Largest peer stream message either side decodes or encodes, in bytes (Consul's gRPC
/// servers take messages up to 50 MiB; a service's instances with their checks fit in far
/// less).
pub const MESSAGE_BYTES_MAX: usize = 8 << 20;
/// Messages queued for one stream before its task waits for the other side to read.
pub const SEND_QUEUE: usize = 16;
/// How often a streaming or dialing side asks whether this server still leads.
pub const LEADERSHIP_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// How long an acceptor waits for a new stream's `Open`.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// What the stream's tasks share: the store versions, the agent (leadership, proposals),
/// this cluster's datacenter, and the session registry.
pub struct Shared {
    pub store: StoreFeed,
    pub agent: AgentSource,
    pub datacenter: String,
    /// Local peering ID → the live session's number and the sender whose drop ends it.
    sessions: Mutex<HashMap<String, (u64, oneshot::Sender<()>)>>,
    next_session: AtomicU64,
}

impl Shared {
    pub fn new(store: StoreFeed, agent: AgentSource, datacenter: String) -> Arc<Shared> {
        Arc::new(Shared {
            store,
            agent,
            datacenter,
            sessions: Mutex::new(HashMap::new()),
            next_session: AtomicU64::new(1),
        })
    }

    /// Registers a new session for peering `id`, ending the one before it (a dialer that
    /// dialed again after a half-open connection). The receiver resolves when a later
    /// session replaces this one; the number releases it ([`Shared::release`]).
    pub fn register(&self, id: &str) -> Result<(u64, oneshot::Receiver<()>), String> {
        let (tx, rx) = oneshot::channel();
        let number = self.next_session.fetch_add(1, Ordering::Relaxed);
        let mut sessions = self.sessions.lock().expect("session registry lock");
        if !sessions.contains_key(id) && sessions.len() >= peering::PEERINGS_MAX {
            return Err(format!(
                "this server streams with at most {} peers",
                peering::PEERINGS_MAX
            ));
        }
        sessions.insert(id.to_string(), (number, tx));
        Ok((number, rx))
    }

    /// Forgets session `number` of peering `id` if it is still the registered one.
    pub fn release(&self, id: &str, number: u64) {
        let mut sessions = self.sessions.lock().expect("session registry lock");
        if sessions.get(id).is_some_and(|(n, _)| *n == number) {
            sessions.remove(id);
        }
    }

    /// Writes peering `id` in `state` with `update` merged, when that says something new
    /// (see [`machine::with_state`]); a refused write is logged, as the next state change
    /// or heartbeat writes again.
    pub async fn mark(&self, id: &str, state: PeeringState, update: StatusUpdate) {
        let tables = self.store.current();
        let Some(row) = peering::get_by_id(&tables, id) else {
            return;
        };
        let Some(next) = machine::with_state(row, state, &update) else {
            return;
        };
        let name = next.name.clone();
        let command = Command::Peering(PeeringOp::Write {
            peering: Box::new(next),
            secrets: None,
        });
        if let Err(reason) = self.agent.propose(&command).await {
            log::warn!(
                "peering: could not mark peering {name:?} {}: {reason}",
                state.as_str()
            );
        }
    }
}

/// Now as Go's RFC 3339 text, for the stream status fields.
pub fn now_text() -> String {
    let ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(i64::MAX as u128) as i64);
    crate::proto::rfc3339::format_ns(ns)
}
