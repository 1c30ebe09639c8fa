//! The runtime: shard threads with their pinned monoio runtimes, the channels between them
//! and the raft core thread, store versions, the watch registry, the propose/read plumbing,
//! the raft thread itself with its durable log, sync thread, peer transport and inbox, the
//! :8300 listener and the forwarding RPC client.
//!
//! [`spawn_shard`] starts one shard thread: it pins the thread, builds the monoio runtime
//! and the [`Shard`], lets the layers above spawn their tasks on it (HTTP and DNS servers,
//! the gossip driver, the agent; `crate::node` decides which), then runs the shard's own
//! loops — the inbox from the raft core and the ticker of parked queries — until shutdown.
//!
//! Architecture invariant: the runtime knows nothing of HTTP, DNS, gossip or the agent. What
//! it must hand upwards goes through types it defines: [`Shard::on_new_version`] observers,
//! [`rpc_server::TypedCalls`] for the typed calls agents and other servers make.

pub mod auto_encrypt;
pub mod dial;
pub mod exclusive;
pub mod forward;
pub mod nonblocking;
pub mod peer_transport;
pub mod raft_driver;
pub mod raft_inbox;
pub mod rpc_client;
pub mod rpc_server;
pub mod rpc_typed;
pub mod runtime;
pub mod snapshot_stream;
pub mod telemetry;
pub mod wal;
pub mod wanfed;
pub mod watch;

pub use runtime::Shard;

use crate::store::StoreVersion;
use runtime::{ShardReceiver, Shared};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

/// Listen backlog for every TCP listener.
const LISTEN_BACKLOG: i32 = 4096;
/// io_uring submission queue entries per shard.
const URING_ENTRIES: u32 = 4096;

/// Raises the soft RLIMIT_NOFILE to the hard limit; one process may then hold as many sockets
/// as the machine allows. Returns the new soft limit.
pub fn raise_fd_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
    }
    limit.rlim_cur
}

/// A listening TCP socket with `SO_REUSEPORT`, so every shard binds its own and the kernel
/// spreads connections across them.
pub fn reuseport_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// A UDP socket with `SO_REUSEPORT`, for per-shard DNS listeners.
pub fn reuseport_udp(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let socket = socket2::Socket::new(domain, socket2::Type::DGRAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// The Raft id derived from the node UUID: its first eight bytes, never zero.
pub fn raft_id_of(node_id: &str) -> u64 {
    let uuid = uuid::Uuid::parse_str(node_id).expect("node id validated at startup");
    let bytes = uuid.as_bytes();
    u64::from_be_bytes(bytes[..8].try_into().expect("a UUID has 16 bytes")).max(1)
}

/// What the runtime needs to start one shard thread.
pub struct ShardThread {
    pub id: usize,
    /// The core to pin the thread to, if the machine lets us.
    pub core: Option<core_affinity::CoreId>,
    pub shared: Arc<Shared>,
    /// The version the shard starts from (the raft core's recovered state).
    pub version: StoreVersion,
    pub inbox: ShardReceiver,
}

/// Starts a shard thread: pins it, builds its monoio runtime and its [`Shard`], calls
/// `start` on the runtime so the layers above spawn their tasks, then serves the shard's
/// inbox and watch ticker until shutdown.
pub fn spawn_shard(
    thread: ShardThread,
    start: impl FnOnce(&Rc<Shard>) + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, String> {
    let ShardThread {
        id,
        core,
        shared,
        version,
        inbox,
    } = thread;
    std::thread::Builder::new()
        .name(format!("praetor-shard-{id}"))
        .spawn(move || {
            if let Some(core) = core {
                core_affinity::set_for_current(core);
            }
            // A kernel that refuses cooperative task work (before 6.0, for `SINGLE_ISSUER`) gets the plain ring.
            let mut runtime = match uring_runtime(true).or_else(|_| uring_runtime(false)) {
                Ok(runtime) => runtime,
                // io_uring's rings need physically contiguous pages, which a fragmented
                // host may not have (ENOMEM): serve with epoll rather than not at all.
                Err(error) => {
                    log::warn!("shard {id}: io_uring unavailable ({error}); using epoll");
                    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
                        .enable_timer()
                        .build()
                        .map(Into::into)
                        .expect("building the shard runtime")
                }
            };
            runtime.block_on(async move {
                let shard = Shard::new(id, shared, version, inbox);
                start(&shard);
                monoio::spawn(watch_ticker(shard.clone()));
                shard_main_loop(&shard).await;
            });
        })
        .map_err(|e| format!("cannot start shard thread {id}: {e}"))
}

/// The shard's io_uring runtime. `cooperative` asks the kernel to run a completion's task
/// work when the shard next enters the kernel (it does at every loop turn) instead of
/// interrupting it with an inter-processor signal, and promises that only this thread
/// submits (`SINGLE_ISSUER`). Under a hypervisor each such signal is a costly exit, and a
/// busy shard takes one per completion otherwise; older kernels refuse the flags, and the
/// caller then asks again without them.
fn uring_runtime(
    cooperative: bool,
) -> std::io::Result<
    monoio::FusionRuntime<
        monoio::time::TimeDriver<monoio::IoUringDriver>,
        monoio::time::TimeDriver<monoio::LegacyDriver>,
    >,
> {
    let mut ring = io_uring::IoUring::builder();
    if cooperative {
        ring.setup_coop_taskrun().setup_single_issuer();
    }
    monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .with_entries(URING_ENTRIES)
        .uring_builder(ring)
        .enable_timer()
        .build()
}

/// How often parked blocking queries are checked for expired waits.
const WATCH_TICK: std::time::Duration = std::time::Duration::from_millis(10);

/// Expires parked queries' waits for the whole shard, so that no query needs a timer of its
/// own.
async fn watch_ticker(shard: Rc<Shard>) {
    while !shard.shutting_down() {
        monoio::time::sleep(WATCH_TICK).await;
        shard.expire_watches();
    }
}

/// Receives what the raft core publishes until shutdown. Shutdown is noticed within one
/// poll interval even when nothing is published.
async fn shard_main_loop(shard: &Shard) {
    const SHUTDOWN_POLL: std::time::Duration = std::time::Duration::from_millis(100);
    loop {
        // The poll interval also bounds how long an idle shard leaves batches queued.
        let rung = monoio::time::timeout(SHUTDOWN_POLL, shard.doorbell()).await;
        shard.drain_inbox();
        if let Ok(Err(_)) = rung {
            return;
        }
        if shard.shutting_down() {
            return;
        }
    }
}
