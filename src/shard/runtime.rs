//! One shard's context: its store version, watch registry and pending writes, plus the
//! handles it shares with the raft core thread.
//!
//! A shard is a single thread running a monoio runtime. Everything in [`Shard`] is
//! thread-local (`Rc`, `RefCell`, `Cell`): request handling takes no locks. The only
//! cross-thread traffic is the bounded channel of [`ShardMessage`]s from the raft core (new
//! versions, results of this shard's writes, status) and the bounded raft inbox.
//!
//! Invariant: a shard's version index never decreases, and a write's result is delivered in
//! the same message as (or after) the version that contains it, so a client that saw its write
//! acknowledged reads it back on the same shard. For other shards, [`Shard::catch_up`] drains
//! any published version before a default-consistency read.

use crate::api::{ApiError, Consistency, QueryMeta};
use crate::config::AgentConfig;
use crate::proto::http::HttpLimits;
use crate::shard::watch::{WatchId, WatchRegistry, WatchSet};
use crate::store::{Change, CommandResult, StoreVersion};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// Capacity of each shard's inbound channel from the raft core.
pub const SHARD_CHANNEL_CAPACITY: usize = 4096;
/// Capacity of the raft core's inbox (proposals and peer messages from all shards).
pub const RAFT_INBOX_CAPACITY: usize = 65_536;
/// Most writes one shard may have in flight; further writes get 503 until some complete.
pub const PENDING_WRITES_MAX: usize = 65_536;

/// Leadership and membership as the raft core last published it.
#[derive(Clone, Debug, Default)]
pub struct ClusterStatus {
    pub is_leader: bool,
    /// The leader's server RPC address, or empty when no leader is known.
    pub leader_rpc_address: String,
    pub leader_name: String,
    pub term: u64,
    pub commit_index: u64,
    pub voter_rpc_addresses: Vec<String>,
}

/// Identity of this agent, fixed at startup.
#[derive(Clone, Debug)]
pub struct Identity {
    pub node_id: String,
    pub raft_id: u64,
}

/// What the raft core sends each shard.
pub enum ShardMessage {
    Applied(Arc<AppliedBatch>, Vec<(u64, CommandResult)>),
    Status(Arc<ClusterStatus>),
}

/// One applied batch, shared by every shard.
pub struct AppliedBatch {
    pub version: StoreVersion,
    pub changes: Vec<Change>,
}

/// What shards send the raft core.
pub enum RaftInput {
    Propose {
        request_id: u64,
        payload: bytes::Bytes,
    },
    Shutdown,
}

/// State shared by every thread of the agent.
pub struct Shared {
    pub config: Arc<AgentConfig>,
    pub identity: Identity,
    pub raft_inbox: flume::Sender<RaftInput>,
    /// Index of the newest version the raft core has sent to every shard.
    pub published_index: AtomicU64,
    pub shutting_down: AtomicBool,
    pub shard_count: usize,
    pub http_limits: HttpLimits,
    pub started_at: Instant,
}

/// A write waiting for its command to be applied.
struct PendingWrite {
    result: Option<CommandResult>,
    waker: Option<Waker>,
}

pub struct Shard {
    pub id: usize,
    shared: Arc<Shared>,
    version: RefCell<StoreVersion>,
    status: RefCell<Arc<ClusterStatus>>,
    watches: RefCell<WatchRegistry>,
    pending: RefCell<HashMap<u64, PendingWrite, ahash::RandomState>>,
    next_request: Cell<u64>,
    inbox: flume::Receiver<ShardMessage>,
    /// DNS answer cache and scratch space; invalidated by every applied change set.
    pub dns: RefCell<crate::dns::ShardDns>,
}

impl Shard {
    pub fn new(
        id: usize,
        shared: Arc<Shared>,
        version: StoreVersion,
        inbox: flume::Receiver<ShardMessage>,
    ) -> Rc<Shard> {
        Rc::new(Shard {
            id,
            shared,
            version: RefCell::new(version),
            status: RefCell::new(Arc::new(ClusterStatus::default())),
            watches: RefCell::new(WatchRegistry::new()),
            pending: RefCell::new(HashMap::default()),
            next_request: Cell::new(1),
            inbox,
            dns: RefCell::new(crate::dns::ShardDns::new(rand::random::<u64>() ^ id as u64)),
        })
    }

    pub fn config(&self) -> &AgentConfig {
        &self.shared.config
    }
    pub fn identity(&self) -> &Identity {
        &self.shared.identity
    }
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
    pub fn http_limits(&self) -> &HttpLimits {
        &self.shared.http_limits
    }
    pub fn shard_count(&self) -> usize {
        self.shared.shard_count
    }
    pub fn cluster_status(&self) -> Arc<ClusterStatus> {
        self.status.borrow().clone()
    }
    pub fn is_leader(&self) -> bool {
        self.status.borrow().is_leader
    }
    pub fn shutting_down(&self) -> bool {
        self.shared.shutting_down.load(Ordering::Relaxed)
    }
    /// Index of this shard's current version.
    pub fn local_index(&self) -> u64 {
        self.version.borrow().index
    }
    pub fn current_version(&self) -> StoreVersion {
        self.version.borrow().clone()
    }
    pub fn parked_queries(&self) -> usize {
        self.watches.borrow().waiter_count()
    }

    /// Processes everything the raft core has sent: new versions (waking the blocking queries
    /// they affect), write results, status.
    pub fn handle_message(&self, message: ShardMessage) {
        match message {
            ShardMessage::Applied(batch, results) => {
                {
                    let mut version = self.version.borrow_mut();
                    debug_assert!(
                        batch.version.index >= version.index,
                        "versions arrive in order"
                    );
                    *version = batch.version.clone();
                }
                if !batch.changes.is_empty() {
                    self.watches.borrow_mut().notify(&batch.changes);
                    self.dns.borrow_mut().cache.invalidate(&batch.changes);
                }
                let mut pending = self.pending.borrow_mut();
                for (request_id, result) in results {
                    if let Some(slot) = pending.get_mut(&request_id) {
                        slot.result = Some(result);
                        if let Some(waker) = slot.waker.take() {
                            waker.wake();
                        }
                    }
                }
            }
            ShardMessage::Status(status) => {
                *self.status.borrow_mut() = status;
            }
        }
    }

    /// Drains published versions this shard has not processed yet, so that a read sees
    /// every write acknowledged on any shard before it started.
    pub fn catch_up(&self) {
        let published = self.shared.published_index.load(Ordering::Acquire);
        if published <= self.local_index() {
            return;
        }
        while let Ok(message) = self.inbox.try_recv() {
            self.handle_message(message);
        }
    }

    /// The receiving end of the raft core's channel; the shard's main task awaits it.
    pub fn inbox(&self) -> &flume::Receiver<ShardMessage> {
        &self.inbox
    }

    /// The version a read of the given consistency must run against, or the error Consul
    /// gives when it cannot be served here.
    pub fn read_version(&self, consistency: Consistency) -> Result<StoreVersion, ApiError> {
        match consistency {
            Consistency::Stale => {}
            Consistency::Leader | Consistency::Consistent => {
                if !self.is_leader() {
                    return Err(ApiError::Internal("No cluster leader".to_string()));
                }
                self.catch_up();
            }
        }
        Ok(self.current_version())
    }

    pub fn query_meta(&self, index: u64, consistency: Consistency) -> QueryMeta {
        let status = self.status.borrow();
        QueryMeta {
            index,
            known_leader: !status.leader_rpc_address.is_empty(),
            last_contact_ms: 0,
            consistency,
        }
    }

    /// Submits a command to the raft core and waits for its result.
    pub async fn propose(&self, payload: Vec<u8>) -> CommandResult {
        if !self.is_leader() {
            return CommandResult::Error("No cluster leader".to_string());
        }
        if self.pending.borrow().len() >= PENDING_WRITES_MAX {
            return CommandResult::Error("too many writes in flight on this shard".to_string());
        }
        let sequence = self.next_request.get();
        self.next_request.set(sequence + 1);
        // The shard id in the top bits lets the raft core route the result back here.
        let request_id = ((self.id as u64) << 48) | (sequence & ((1 << 48) - 1));
        self.pending.borrow_mut().insert(
            request_id,
            PendingWrite {
                result: None,
                waker: None,
            },
        );
        let input = RaftInput::Propose {
            request_id,
            payload: bytes::Bytes::from(payload),
        };
        if self.shared.raft_inbox.send_async(input).await.is_err() {
            self.pending.borrow_mut().remove(&request_id);
            return CommandResult::Error("agent is shutting down".to_string());
        }
        PendingResult {
            shard: self,
            request_id,
        }
        .await
    }

    /// Parks until something in `set` changes. Returns when woken; the caller re-evaluates.
    pub fn watch<'a>(&'a self, set: &WatchSet) -> WatchFuture<'a> {
        let id = self
            .watches
            .borrow_mut()
            .register(set, futures_noop_waker());
        WatchFuture { shard: self, id }
    }
}

/// The request id of a shard-originated proposal identifies its shard.
pub fn shard_of_request(request_id: u64) -> usize {
    (request_id >> 48) as usize
}

struct PendingResult<'a> {
    shard: &'a Shard,
    request_id: u64,
}

impl Future for PendingResult<'_> {
    type Output = CommandResult;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<CommandResult> {
        let mut pending = self.shard.pending.borrow_mut();
        let slot = pending
            .get_mut(&self.request_id)
            .expect("pending write registered before polling");
        if let Some(result) = slot.result.take() {
            pending.remove(&self.request_id);
            return Poll::Ready(result);
        }
        slot.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for PendingResult<'_> {
    fn drop(&mut self) {
        // A connection that goes away stops waiting; the write itself still happens.
        self.shard.pending.borrow_mut().remove(&self.request_id);
    }
}

/// Resolves when the registration fires; releases it when dropped.
pub struct WatchFuture<'a> {
    shard: &'a Shard,
    id: WatchId,
}

impl Future for WatchFuture<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut watches = self.shard.watches.borrow_mut();
        if watches.is_fired(self.id) {
            return Poll::Ready(());
        }
        watches.update_waker(self.id, cx.waker());
        Poll::Pending
    }
}

impl Drop for WatchFuture<'_> {
    fn drop(&mut self) {
        self.shard.watches.borrow_mut().release(self.id);
    }
}

/// A waker that does nothing, used until the watch future is first polled.
fn futures_noop_waker() -> Waker {
    Waker::noop().clone()
}
