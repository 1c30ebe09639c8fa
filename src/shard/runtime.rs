//! One shard's context: its store version, watch registry and pending requests, plus the
//! handles it shares with the raft core thread.
//!
//! A shard is a single thread running a monoio runtime. Everything in [`Shard`] is
//! thread-local (`Rc`, `RefCell`, `Cell`): request handling takes no locks. The only
//! cross-thread traffic is the bounded channel of [`ShardMessage`]s from the raft core (new
//! versions, results of this shard's requests, status), the bounded raft inbox, and a few
//! atomics in [`Shared`] (published index, leader lease, last leader contact).
//!
//! Invariant: a shard's version index never decreases, and a request's result is delivered in
//! the same message as (or after) the version that contains it, so a client that saw its write
//! acknowledged reads it back on the same shard. For other shards, [`Shard::catch_up`] drains
//! any published version before a read; the raft core publishes the index before it queues
//! the batch, so an index a read sees is always one it can wait for.

use crate::config::AgentConfig;
use crate::proto::http::HttpLimits;
pub use crate::replica::{
    shard_of_request, AppliedBatch, ClusterStatus, OperatorOp, PeerHealth, ProposalResult,
    RaftServer, ServerInfo,
};
use crate::shard::watch::{WatchId, WatchRegistry, WatchSet};
use crate::store::StoreVersion;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Capacity of each shard's inbound channel from the raft core.
pub const SHARD_CHANNEL_CAPACITY: usize = 4096;
/// Longest a read waits for a batch whose index the raft core already published. Only a
/// stuck core reaches it; the read is then answered from what the shard has, and logged.
const CATCH_UP_WAIT_MAX: Duration = Duration::from_secs(5);
/// Capacity of the raft core's inbox (proposals and peer messages from all shards).
pub const RAFT_INBOX_CAPACITY: usize = 65_536;
/// Most requests one shard may have waiting on the raft core.
pub const PENDING_REQUESTS_MAX: usize = 65_536;
/// Most version observers one shard runs: one per layer that keeps per-shard state derived
/// from the version (DNS and HTTP today), so a registration repeated by mistake fails at
/// start-up instead of adding work to every applied batch.
const VERSION_OBSERVERS_MAX: usize = 8;

/// Identity of this agent, fixed at startup.
#[derive(Clone, Debug)]
pub struct Identity {
    pub node_id: String,
    pub raft_id: u64,
}

/// What the raft core sends each shard.
pub enum ShardMessage {
    Applied(Arc<AppliedBatch>, Vec<(u64, ProposalResult)>),
    Status(Arc<ClusterStatus>),
}

/// The raft core's end of one shard's channel.
///
/// Every message is queued, but the shard is woken (its doorbell rung) only when it must act
/// now: a status change, results of its requests, a change set while it has parked queries,
/// or a queue half full. An idle shard — every shard of a follower nobody queries — thus
/// costs no thread wake-up per applied batch; it drains the queue the next time it serves
/// anything ([`Shard::catch_up`] runs before every read) or within its poll interval.
///
/// A shard parking its first query and the core publishing a batch race; both sides order
/// their flag and index accesses with sequentially consistent fences, so either the core
/// sees `wants_changes` and rings, or the shard sees the new published index and drains.
#[derive(Clone)]
pub struct ShardSender {
    messages: flume::Sender<ShardMessage>,
    doorbell: flume::Sender<()>,
    wants_changes: Arc<AtomicBool>,
}

/// The shard's end of its channel from the raft core.
pub struct ShardReceiver {
    messages: flume::Receiver<ShardMessage>,
    doorbell: flume::Receiver<()>,
    wants_changes: Arc<AtomicBool>,
}

pub fn shard_channel() -> (ShardSender, ShardReceiver) {
    let (messages_tx, messages_rx) = flume::bounded(SHARD_CHANNEL_CAPACITY);
    // One pending ring is enough: the shard drains everything when it answers.
    let (doorbell_tx, doorbell_rx) = flume::bounded(1);
    let wants_changes = Arc::new(AtomicBool::new(false));
    (
        ShardSender {
            messages: messages_tx,
            doorbell: doorbell_tx,
            wants_changes: wants_changes.clone(),
        },
        ShardReceiver {
            messages: messages_rx,
            doorbell: doorbell_rx,
            wants_changes,
        },
    )
}

impl ShardSender {
    /// Queues a message the shard must act on now, and wakes it.
    pub fn send(&self, message: ShardMessage) -> Result<(), flume::SendError<ShardMessage>> {
        self.messages.send(message)?;
        self.ring();
        Ok(())
    }

    pub async fn send_async(
        &self,
        message: ShardMessage,
    ) -> Result<(), flume::SendError<ShardMessage>> {
        self.messages.send_async(message).await?;
        self.ring();
        Ok(())
    }

    /// Queues an applied batch and wakes the shard if it carries results for it or the
    /// queue is half full ([`ShardSender::ring_if_watching`] decides for parked queries once
    /// the published index has moved). Blocking when full is the back-pressure: a shard that
    /// falls behind slows the core; a half-full queue always wakes the shard, so an idle one
    /// cannot block it.
    pub fn queue_applied(&self, batch: Arc<AppliedBatch>, results: Vec<(u64, ProposalResult)>) {
        let urgent = !results.is_empty();
        let _ = self.messages.send(ShardMessage::Applied(batch, results));
        if urgent || self.messages.len() >= SHARD_CHANNEL_CAPACITY / 2 {
            self.ring();
        }
    }

    /// Call after the published index moved past a queued batch with changes.
    pub fn ring_if_watching(&self) {
        fence(Ordering::SeqCst);
        if self.wants_changes.load(Ordering::SeqCst) {
            self.ring();
        }
    }

    fn ring(&self) {
        let _ = self.doorbell.try_send(());
    }
}

/// What shards send the raft core.
pub enum RaftInput {
    Propose {
        request_id: u64,
        payload: bytes::Bytes,
    },
    /// Confirm leadership with a quorum round, answer once applied up to the read index.
    ReadIndex {
        request_id: u64,
    },
    Message {
        from: crate::raft::NodeId,
        message: crate::raft::Message,
    },
    /// The servers gossip currently knows, including this one.
    Servers(Vec<ServerInfo>),
    Operator {
        request_id: u64,
        op: OperatorOp,
    },
    /// A peer's Raft stream, its protocol byte read, for the raft thread to read itself.
    PeerStream {
        socket: crate::shard::raft_inbox::PeerSocket,
        peer: std::net::SocketAddr,
    },
    /// The log sync thread made every write up to this sequence number durable.
    Synced {
        through: u64,
    },
    Shutdown,
}

/// How fresh a read must be: Consul's default, `?stale` and `?consistent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consistency {
    /// Served by the leader while its lease holds.
    Leader,
    /// Served from any server's local state.
    Stale,
    /// Confirmed with a quorum round (ReadIndex) before answering.
    Consistent,
}

impl Consistency {
    /// The name Consul reports in `X-Consul-Effective-Consistency`.
    pub fn as_str(self) -> &'static str {
        match self {
            Consistency::Leader => "leader",
            Consistency::Stale => "stale",
            Consistency::Consistent => "consistent",
        }
    }
}

/// What a shard knows of its leader when it answers a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderContact {
    pub known: bool,
    /// Milliseconds since the leader was last heard from; 0 on the leader.
    pub last_contact_ms: u64,
}

/// How a read must be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadPlan {
    /// From this shard's current version, now.
    Local,
    /// After a ReadIndex quorum round on this (leading) server.
    Barrier,
    /// On the leader.
    Forward,
}

/// State shared by every thread of the agent.
pub struct Shared {
    pub config: Arc<AgentConfig>,
    pub identity: Identity,
    pub raft_inbox: crate::shard::raft_inbox::RaftInbox,
    /// Index of the newest version the raft core is sending to every shard (stored before the
    /// batch is queued, so a shard may briefly see it ahead of its queue).
    pub published_index: AtomicU64,
    pub shutting_down: AtomicBool,
    pub shard_count: usize,
    pub http_limits: HttpLimits,
    pub started_at: Instant,
    /// The raft thread's clock origin; `now_ms` values compare against the atomics below.
    pub clock_origin: Instant,
    /// Leader lease expiry in raft-clock milliseconds; 0 when this server holds no lease.
    pub lease_until_ms: AtomicU64,
    /// When this server last heard from the leader, in raft-clock milliseconds.
    pub last_leader_contact_ms: AtomicU64,
    pub faults: Arc<crate::shard::peer_transport::Faults>,
    /// This server's RPC address as peers reach it.
    pub rpc_address: std::net::SocketAddr,
    /// The TLS configurations of every listener and dialer, swapped whole on reload.
    pub tls: Arc<crate::tls::TlsConfigurator>,
    /// The agent's ACL tokens (`acl.tokens`), as `/v1/agent/token/<type>` last set them.
    pub acl_tokens: std::sync::RwLock<crate::config::acl::AclTokens>,
    /// The tokens file (`acl.enable_token_persistence`), rewritten by
    /// `/v1/agent/token/<type>` under this lock; `None` when persistence is off.
    pub acl_token_file: Option<std::sync::Mutex<crate::config::acl::TokenFile>>,
    /// Why the agent stopped on its own (`-retry-max` exhausted): the process exits with
    /// code 1 and this line, as Consul's agent does.
    pub exit_error: std::sync::OnceLock<String>,
    /// `node_meta` as the last reload left it (the agent's own pairs, without Consul's
    /// reserved `consul-*` keys), for readers on every shard.
    pub node_meta: arc_swap::ArcSwap<Vec<(String, String)>>,
    /// Called, on the agent's thread, with every configuration a reload applied: how the
    /// layers above the agent (`node`'s watch supervisor) follow reloads.
    pub reload_listeners: std::sync::Mutex<Vec<ReloadListener>>,
    /// Where this server's WAN pool listens, once bound, when WAN gossip from other
    /// datacenters may arrive through mesh gateways (`shard::wanfed`); unset otherwise, and
    /// the server port then refuses the WAN gossip ALPN protocols.
    pub wan_gossip_pool: std::sync::OnceLock<std::net::SocketAddr>,
}

/// See [`Shared::reload_listeners`].
pub type ReloadListener = Box<dyn Fn(&crate::config::AgentConfig) + Send + Sync>;

impl Shared {
    /// Stops the agent on its own: records why, then raises SIGTERM, which the main thread
    /// handles as an operator's stop (a graceful leave where configured). The first reason
    /// wins.
    pub fn stop_with_error(&self, error: String) {
        log::error!("{error}");
        let _ = self.exit_error.set(error);
        // SAFETY: signalling our own process; the main thread waits for it in sigwait.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    }

    pub fn now_ms(&self) -> u64 {
        self.clock_origin.elapsed().as_millis() as u64
    }

    /// Milliseconds since the leader was last heard from (0 on the leader).
    pub fn last_contact_ms(&self, is_leader: bool) -> u64 {
        if is_leader {
            return 0;
        }
        self.now_ms()
            .saturating_sub(self.last_leader_contact_ms.load(Ordering::Relaxed))
    }
}

/// A request waiting for the raft core.
struct PendingRequest {
    result: Option<ProposalResult>,
    waker: Option<Waker>,
}

pub struct Shard {
    pub id: usize,
    shared: Arc<Shared>,
    version: RefCell<StoreVersion>,
    status: RefCell<Arc<ClusterStatus>>,
    watches: RefCell<WatchRegistry>,
    pending: RefCell<HashMap<u64, PendingRequest, ahash::RandomState>>,
    next_request: Cell<u64>,
    inbox: ShardReceiver,
    /// Connections to other servers for forwarded requests.
    pub forward: crate::shard::forward::ForwardPool,
    /// Connections to servers for Consul's typed calls.
    pub rpc: crate::shard::rpc_client::RpcClient,
    /// What higher layers keep per shard that must follow each new version.
    observers: RefCell<Vec<VersionObserver>>,
}

/// Called with every batch a shard takes in; see [`Shard::on_new_version`].
type VersionObserver = Box<dyn Fn(&AppliedBatch)>;

impl Shard {
    pub fn new(
        id: usize,
        shared: Arc<Shared>,
        version: StoreVersion,
        inbox: ShardReceiver,
    ) -> Rc<Shard> {
        let forward =
            crate::shard::forward::ForwardPool::new(shared.tls.clone(), shared.config.bind_addr);
        let rpc =
            crate::shard::rpc_client::RpcClient::new(shared.tls.clone(), shared.config.bind_addr);
        Rc::new(Shard {
            id,
            shared,
            version: RefCell::new(version),
            status: RefCell::new(Arc::new(ClusterStatus::default())),
            watches: RefCell::new(WatchRegistry::new()),
            pending: RefCell::new(HashMap::default()),
            next_request: Cell::new(1),
            inbox,
            forward,
            rpc,
            observers: RefCell::new(Vec::new()),
        })
    }

    /// Runs `observer` with every batch this shard takes in, in the same synchronous step
    /// that installs the batch's version and before woken writers and parked queries run.
    /// Per-shard state of the layers above that depends on the version (the DNS answer
    /// cache, the HTTP server's shared answers) thus never outlives a change to what it
    /// read. An observer must not call back into the shard.
    pub fn on_new_version(&self, observer: impl Fn(&AppliedBatch) + 'static) {
        let mut observers = self.observers.borrow_mut();
        assert!(
            observers.len() < VERSION_OBSERVERS_MAX,
            "shard {}: more than {VERSION_OBSERVERS_MAX} version observers",
            self.id
        );
        observers.push(Box::new(observer));
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
    /// A client agent: no Raft, no store; everything store-bound goes to a server.
    pub fn is_client(&self) -> bool {
        !self.shared.config.server
    }
    pub fn shutting_down(&self) -> bool {
        self.shared.shutting_down.load(Ordering::Relaxed)
    }
    /// Index of this shard's current version.
    pub fn local_index(&self) -> u64 {
        self.version.borrow().index
    }
    /// The newest version this server published (a queued batch is taken in first).
    pub fn current_version(&self) -> StoreVersion {
        self.catch_up();
        self.version_as_is()
    }
    /// The version this shard last took in, without looking for newer ones: for callers
    /// that caught up already and hold shard state that taking in a batch would touch.
    pub fn version_as_is(&self) -> StoreVersion {
        self.version.borrow().clone()
    }
    pub fn parked_queries(&self) -> usize {
        self.watches.borrow().waiter_count()
    }

    /// Processes what the raft core sent: new versions (waking the blocking queries they
    /// affect), results of this shard's requests, status.
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
                // In the same step as the version: nothing a higher layer derived from an
                // older version outlives a change to what it read.
                for observer in self.observers.borrow().iter() {
                    observer(&batch);
                }
                // Writers first: tasks run in wake order, and a write that changed a key with
                // thousands of watchers must not be answered after all of them.
                {
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
                if !batch.changes.is_empty() {
                    self.watches.borrow_mut().notify(&batch.changes);
                }
            }
            ShardMessage::Status(status) => {
                let lost_leadership = self.status.borrow().is_leader && !status.is_leader;
                *self.status.borrow_mut() = status;
                if lost_leadership {
                    // Parked leader reads re-evaluate and learn they must give up.
                    self.watches.borrow_mut().notify_all();
                }
            }
        }
    }

    /// Drains published versions this shard has not processed yet, so that a read sees
    /// every write acknowledged on any shard before it started.
    ///
    /// The raft core moves the published index before it queues the batch to each shard,
    /// so the batch may still be on its way here: then this blocks the shard until it
    /// arrives, which is a moment unless the core thread was preempted mid-publish.
    pub fn catch_up(&self) {
        let published = self.shared.published_index.load(Ordering::Acquire);
        if published <= self.local_index() {
            return;
        }
        self.drain_inbox();
        let deadline = Instant::now() + CATCH_UP_WAIT_MAX;
        while self.local_index() < published {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.inbox.messages.recv_timeout(left) {
                Ok(message) => self.handle_message(message),
                Err(flume::RecvTimeoutError::Disconnected) => return,
                Err(flume::RecvTimeoutError::Timeout) => {
                    log::error!(
                        "shard {}: published index {published} not delivered within {:?}; \
                         answering from index {}",
                        self.id,
                        CATCH_UP_WAIT_MAX,
                        self.local_index()
                    );
                    return;
                }
            }
        }
        self.drain_inbox();
    }

    /// Processes everything queued by the raft core.
    pub fn drain_inbox(&self) {
        while let Ok(message) = self.inbox.messages.try_recv() {
            self.handle_message(message);
        }
        if self.watches.borrow().waiter_count() == 0 {
            // A stale `true` only costs a wake-up; parking sets it again.
            self.inbox.wants_changes.store(false, Ordering::Relaxed);
        }
    }

    /// Waits until the raft core rings this shard's doorbell. Errs once the core is gone.
    pub async fn doorbell(&self) -> Result<(), flume::RecvError> {
        self.inbox.doorbell.recv_async().await
    }

    /// Decides where a read runs. Local default reads need a live leader lease; without
    /// one, and for `?consistent`, the leader first confirms itself with a quorum round.
    /// Stale reads run anywhere unless `max_stale` says this server has been out of touch
    /// with the leader for too long.
    pub fn read_plan(&self, consistency: Consistency, max_stale: Option<Duration>) -> ReadPlan {
        if self.is_client() {
            return ReadPlan::Forward;
        }
        let is_leader = self.is_leader();
        match consistency {
            Consistency::Stale => {
                if let Some(max_stale) = max_stale {
                    let known_leader = !self.status.borrow().leader_rpc_address.is_empty();
                    let out_of_touch =
                        self.shared.last_contact_ms(is_leader) > max_stale.as_millis() as u64;
                    if !is_leader && known_leader && out_of_touch {
                        return ReadPlan::Forward;
                    }
                }
                // Stale may lag the leader, but never this server's own published state:
                // a write acknowledged here is visible to the next read on any shard.
                self.catch_up();
                ReadPlan::Local
            }
            Consistency::Leader if is_leader => {
                if self.shared.now_ms() < self.shared.lease_until_ms.load(Ordering::Acquire) {
                    self.catch_up();
                    ReadPlan::Local
                } else {
                    ReadPlan::Barrier
                }
            }
            Consistency::Consistent if is_leader => ReadPlan::Barrier,
            Consistency::Leader | Consistency::Consistent => ReadPlan::Forward,
        }
    }

    /// Waits until a quorum confirmed that this server still leads and the shard's version
    /// covers every write committed before the call (ReadIndex). `Applied` when it does;
    /// any other result says why the read cannot be served here.
    pub async fn read_barrier(&self) -> ProposalResult {
        let result = self
            .submit(|request_id| RaftInput::ReadIndex { request_id })
            .await;
        if let ProposalResult::Applied(_) = result {
            self.catch_up();
        }
        result
    }

    /// Whether a leader is known, and milliseconds since it was last heard from (0 on the
    /// leader): what a read reports as Consul's `X-Consul-KnownLeader` and
    /// `X-Consul-LastContact`.
    pub fn leader_contact(&self) -> LeaderContact {
        let status = self.status.borrow();
        LeaderContact {
            known: !status.leader_rpc_address.is_empty(),
            last_contact_ms: self.shared.last_contact_ms(status.is_leader),
        }
    }

    /// Submits a command to the raft core and waits for its result.
    pub async fn propose(&self, payload: Vec<u8>) -> ProposalResult {
        if !self.is_leader() {
            return ProposalResult::NotLeader;
        }
        let payload = bytes::Bytes::from(payload);
        self.submit(move |request_id| RaftInput::Propose {
            request_id,
            payload,
        })
        .await
    }

    /// Sends an operator request to the raft core and waits for its outcome.
    pub async fn operator(&self, op: OperatorOp) -> ProposalResult {
        self.submit(move |request_id| RaftInput::Operator { request_id, op })
            .await
    }

    /// Sends the raft core an input carrying a fresh request id and waits for the result
    /// routed back to this shard under that id.
    async fn submit(&self, input: impl FnOnce(u64) -> RaftInput) -> ProposalResult {
        if self.pending.borrow().len() >= PENDING_REQUESTS_MAX {
            return ProposalResult::Overloaded;
        }
        let sequence = self.next_request.get();
        self.next_request.set(sequence + 1);
        // The shard id in the top bits lets the raft core route the result back here.
        let request_id = crate::replica::request_id(self.id, sequence);
        self.pending.borrow_mut().insert(
            request_id,
            PendingRequest {
                result: None,
                waker: None,
            },
        );
        if self
            .shared
            .raft_inbox
            .send_async(input(request_id))
            .await
            .is_err()
        {
            self.pending.borrow_mut().remove(&request_id);
            return ProposalResult::ShuttingDown;
        }
        PendingResult {
            shard: self,
            request_id,
        }
        .await
    }

    /// Parks until something in `set` changes or `deadline_ms` (on [`Shared::now_ms`]'s
    /// clock) passes. Returns when woken; the caller re-evaluates.
    pub fn watch<'a>(&'a self, set: &WatchSet, deadline_ms: u64) -> WatchFuture<'a> {
        let id = self
            .watches
            .borrow_mut()
            .register(set, Waker::noop().clone(), deadline_ms);
        if !self.inbox.wants_changes.load(Ordering::Relaxed) {
            self.inbox.wants_changes.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            // A batch published before the core could see the flag: take it in now (it may
            // wake this very registration, which the caller then re-evaluates).
            self.catch_up();
        }
        WatchFuture { shard: self, id }
    }

    /// Resolves at `deadline_ms` (on [`Shared::now_ms`]'s clock), through the same
    /// shard-level ticker as parked queries: no timer of its own, and no change wakes it.
    pub fn deadline(&self, deadline_ms: u64) -> WatchFuture<'_> {
        let id = self.watches.borrow_mut().register(
            &WatchSet::new(),
            Waker::noop().clone(),
            deadline_ms,
        );
        WatchFuture { shard: self, id }
    }

    /// Wakes parked queries whose deadline passed; the shard's ticker calls this.
    pub fn expire_watches(&self) -> usize {
        let now = self.shared.now_ms();
        self.watches.borrow_mut().expire(now)
    }
}

struct PendingResult<'a> {
    shard: &'a Shard,
    request_id: u64,
}

impl Future for PendingResult<'_> {
    type Output = ProposalResult;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ProposalResult> {
        let mut pending = self.shard.pending.borrow_mut();
        let slot = pending
            .get_mut(&self.request_id)
            .expect("pending request registered before polling");
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
