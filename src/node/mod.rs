//! Start-up wiring: the one module that knows every layer and connects them.
//!
//! [`run_agent`] raises the descriptor limit, opens the data directory, binds every
//! listener, builds what the layers share (the runtime's `Shared`, the gossip pools, the
//! agent channel), starts the raft core thread on servers, and one shard thread per core
//! through `shard::spawn_shard`, on which it starts the HTTP and DNS servers and, on shard
//! 0, the gossip drivers, the cluster's loops and the agent. Once every shard serves, it
//! tells systemd `READY=1` (`supervisor`). Then it waits for signals: SIGHUP reloads the
//! configuration through the agent, as `PUT /v1/agent/reload` does, and never stops the
//! process; SIGINT or SIGTERM shut down in order: `STOPPING=1`, gossip leaves, shards stop
//! accepting and finish, then the raft thread syncs its log and exits.
//!
//! Architecture invariant: no other module imports this one except the CLI, and nothing
//! here serves requests; a layer's behaviour lives in that layer.

pub mod supervisor;
pub mod watches;

use crate::api::agent_channel::{agent_channel, AgentCall, AgentChannel, AgentRequest};
use crate::api::server::Server as HttpServer;
use crate::cluster::gossip::GossipDriver;
use crate::cluster::Pools;
use crate::config::AgentConfig;
use crate::dns::server::DnsServer;
use crate::dns::DnsSettings;
use crate::proto::http::HttpLimits;
use crate::shard::exclusive::{self, Transport};
use crate::shard::runtime::{self, Identity, RaftInput, ShardSender, Shared, RAFT_INBOX_CAPACITY};
use crate::shard::{
    peer_transport, raft_driver, raft_id_of, raft_inbox, raise_fd_limit, reuseport_listener,
    reuseport_udp, rpc_server, spawn_shard, Shard, ShardThread,
};
use crate::store::StoreVersion;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The node's UUID, read from `<data_dir>/node-id` or created there (Consul's behaviour).
fn load_or_create_node_id(config: &AgentConfig, data_dir: &Path) -> Result<String, String> {
    if let Some(id) = &config.node_id {
        uuid::Uuid::parse_str(id).map_err(|_| format!("node_id: {id:?} is not a UUID"))?;
        return Ok(id.to_lowercase());
    }
    let path = data_dir.join("node-id");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let id = text.trim().to_string();
            uuid::Uuid::parse_str(&id).map_err(|_| format!("{}: not a UUID", path.display()))?;
            Ok(id)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = uuid::Uuid::new_v4().to_string();
            std::fs::write(&path, &id)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok(id)
        }
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (and the threads it spawns
/// afterwards), so that only [`wait_for_signal`] receives them.
fn block_shutdown_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local, zero-initialised set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Blocks SIGHUP in the calling thread from the very start of `praetor agent`, so a reload
/// asked for while the agent is still starting waits for it to serve instead of killing it
/// (SIGHUP's default action). [`run_agent`] then waits for it with the stop signals.
pub fn defer_reload_signals() {
    // SAFETY: sigset manipulation on a local, zero-initialised set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

fn wait_for_signal(set: &libc::sigset_t) -> i32 {
    let mut signal: libc::c_int = 0;
    // SAFETY: sigwait writes the received signal number into our local.
    unsafe { libc::sigwait(set, &mut signal) };
    signal
}

/// Sleeps up to `duration`; true when SIGINT or SIGTERM arrived meanwhile. A SIGHUP stays
/// pending (it is blocked in this thread): the reload it asks for runs once the agent serves.
fn sleep_unless_stopped(duration: Duration) -> bool {
    // SAFETY: sigset manipulation on a local, zero-initialised set.
    let stop_signals = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    };
    let deadline = Instant::now() + duration;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let timeout = libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        // SAFETY: sigtimedwait reads our set and timeout; the info pointer may be null.
        let signal = unsafe { libc::sigtimedwait(&stop_signals, std::ptr::null_mut(), &timeout) };
        if signal == libc::SIGINT || signal == libc::SIGTERM {
            return true;
        }
    }
}

struct DataDir {
    path: PathBuf,
    /// Removed when dropped (at shutdown, or when the start fails): a `-dev` agent without
    /// `-data-dir` keeps nothing.
    temporary: bool,
}

impl Drop for DataDir {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn prepare_data_dir(config: &AgentConfig) -> Result<DataDir, String> {
    let (path, temporary) = match &config.data_dir {
        Some(dir) => (dir.clone(), false),
        None => (
            std::env::temp_dir().join(format!(
                "praetor-dev-{}-{:08x}",
                std::process::id(),
                rand::random::<u32>()
            )),
            true,
        ),
    };
    std::fs::create_dir_all(&path)
        .map_err(|e| format!("cannot create data dir {}: {e}", path.display()))?;
    Ok(DataDir { path, temporary })
}

/// Listeners one shard serves.
struct ShardListeners {
    http: Vec<std::net::TcpListener>,
    https: Vec<std::net::TcpListener>,
    rpc: Vec<std::net::TcpListener>,
    dns_udp: Vec<std::net::UdpSocket>,
    dns_tcp: Vec<std::net::TcpListener>,
}

/// The longest a graceful leave at shutdown may take before the agent stops anyway.
const LEAVE_ON_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest the shards may take to start serving before the agent reports itself ready
/// anyway (and logs which did not report).
const SHARDS_START_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a SIGHUP waits for the agent to finish a reload (its services' sync
/// included) before logging that it did not.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(60);

/// Binds `addr` once per shard with `SO_REUSEPORT`, refusing an address another process
/// holds or binds at the same moment (`shard::exclusive`).
fn bind_tcp_group(
    addr: SocketAddr,
    shards: usize,
    what: &str,
) -> Result<Vec<std::net::TcpListener>, String> {
    let failed = |e: String| format!("cannot listen for {what} on {addr}: {e}");
    exclusive::probe(addr, Transport::Tcp).map_err(failed)?;
    let group = (0..shards)
        .map(|_| reuseport_listener(addr))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| failed(e.to_string()))?;
    let fds: Vec<_> = group.iter().map(AsRawFd::as_raw_fd).collect();
    exclusive::verify(addr, Transport::Tcp, &fds).map_err(failed)?;
    Ok(group)
}

/// Like [`bind_tcp_group`] for the DNS port's UDP sockets (non-blocking, for monoio).
fn bind_udp_group(
    addr: SocketAddr,
    shards: usize,
    what: &str,
) -> Result<Vec<std::net::UdpSocket>, String> {
    let failed = |e: String| format!("cannot listen for {what} on {addr}: {e}");
    exclusive::probe(addr, Transport::Udp).map_err(failed)?;
    let mut group = Vec::with_capacity(shards);
    for _ in 0..shards {
        let socket = reuseport_udp(addr).map_err(|e| failed(e.to_string()))?;
        socket
            .set_nonblocking(true)
            .map_err(|e| failed(e.to_string()))?;
        group.push(socket);
    }
    let fds: Vec<_> = group.iter().map(AsRawFd::as_raw_fd).collect();
    exclusive::verify(addr, Transport::Udp, &fds).map_err(failed)?;
    Ok(group)
}

// The config layer may not name the raft core, so it keeps its own copy of the default.
const _: () =
    assert!(crate::config::RAFT_LOG_CACHE_BYTES_DEFAULT == crate::raft::LOG_CACHE_BYTES_DEFAULT);

/// The agent's ACL tokens at start: the configuration's, with those persisted in the data
/// directory over them when `acl.enable_token_persistence` is on (Consul's precedence: a
/// persisted token wins, and a token in both is warned about). A tokens file that cannot be
/// read is warned about and the configuration's tokens are used, as Consul does.
fn load_agent_tokens(
    config: &AgentConfig,
    data_dir: &Path,
) -> (
    crate::config::acl::AclTokens,
    Option<crate::config::acl::TokenFile>,
) {
    use crate::config::acl::{PersistedTokens, TokenFile, TOKENS_FILE, TOKENS_FILE_BYTES_MAX};
    let mut tokens = config.acl.tokens.clone();
    if !config.acl.enable_token_persistence {
        return (tokens, None);
    }
    let path = data_dir.join(TOKENS_FILE);
    let read = || -> Result<PersistedTokens, String> {
        let metadata = match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(PersistedTokens::default())
            }
            other => other.map_err(|e| e.to_string())?,
        };
        if metadata.len() > TOKENS_FILE_BYTES_MAX {
            return Err(format!("larger than {TOKENS_FILE_BYTES_MAX} bytes"));
        }
        let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
        PersistedTokens::from_json(&text)
    };
    let persisted = match read() {
        Ok(persisted) => persisted,
        Err(e) => {
            log::warn!(
                "acl: unable to load persisted tokens from {}: {e}",
                path.display()
            );
            PersistedTokens::default()
        }
    };
    for warning in persisted.apply(&mut tokens) {
        log::warn!("{warning}");
    }
    (tokens, Some(TokenFile { path, persisted }))
}

/// Runs an agent until SIGINT/SIGTERM. Returns an error line for startup failures.
///
/// The phases run in order and each hands the next a struct: [`prepare`] (files, TLS,
/// identity), [`wire`] (the channels and state the threads share), [`open_store`] (the
/// Raft log on servers), [`bind_all`] (every socket, before any thread starts),
/// [`start_threads`], then [`serve_until_signal`], which shuts down in order.
pub fn run_agent(config: AgentConfig) -> Result<(), String> {
    let prepared = prepare(config)?;
    let Wired {
        lan,
        wan,
        raft_tx,
        raft_rx,
        shard_senders,
        shard_receivers,
        shared,
        pools,
        agent_channel,
        agent_calls,
    } = wire(&prepared)?;
    let opened = open_store(&prepared, raft_rx, shard_senders, &shared)?;
    let bound = bind_all(&prepared, lan, wan, &agent_channel, &opened.initial_version)?;
    let running = start_threads(
        &prepared,
        opened,
        bound,
        ThreadShares {
            shared: shared.clone(),
            shard_receivers,
            pools: pools.clone(),
            agent_channel: agent_channel.clone(),
            agent_calls,
        },
    )?;
    serve_until_signal(prepared, running, shared, pools, agent_channel, raft_tx)
}

/// What the agent settled before it wires anything: its files, TLS, identity and sizes.
struct Prepared {
    fd_limit: u64,
    /// SIGINT, SIGTERM and SIGHUP, blocked in every thread so one waiter takes them.
    signals: libc::sigset_t,
    config: Arc<AgentConfig>,
    tls: Arc<crate::tls::TlsConfigurator>,
    data_dir: DataDir,
    node_id: String,
    /// At least one: `shards = 0` means one per available core.
    shard_count: usize,
    advertise: IpAddr,
    rpc_address: SocketAddr,
    faults: Arc<peer_transport::Faults>,
    /// Last, so that on a startup error it is removed after the data directory is released,
    /// as when it was the first local of `run_agent`.
    pid_file: Option<supervisor::PidFile>,
}

/// Phase one: signals blocked, pid file written, TLS and telemetry ready, the data
/// directory locked and the node's id read or created.
fn prepare(config: AgentConfig) -> Result<Prepared, String> {
    let fd_limit = raise_fd_limit();
    let signals = block_shutdown_signals();
    let config = Arc::new(config);
    // Written first, as Consul does, so a supervisor can signal the agent while it starts.
    let pid_file = config
        .process
        .pid_file
        .as_deref()
        .map(supervisor::PidFile::write)
        .transpose()?;
    if !config.server && config.retry_join.is_empty() && config.start_join.is_empty() {
        log::warn!(
            "agent: a client agent without -join or -retry-join knows no server until one joins it"
        );
    }
    let tls = prepare_tls_and_telemetry(&config)?;
    let data_dir = prepare_data_dir(&config)?;
    let node_id = load_or_create_node_id(&config, &data_dir.path)?;
    let shard_count = match config.shards {
        0 => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        n => n,
    };
    debug_assert!(shard_count > 0, "an agent runs at least one shard");
    let advertise = config.advertise();
    let rpc_address = SocketAddr::new(advertise, config.ports.server.max(0) as u16);
    Ok(Prepared {
        fd_limit,
        signals,
        config,
        tls,
        data_dir,
        node_id,
        shard_count,
        advertise,
        rpc_address,
        faults: Arc::new(peer_transport::Faults::default()),
        pid_file,
    })
}

/// A gossip pool's shared handle and the driver shard 0 runs.
type Pool = (crate::cluster::gossip::GossipHandle, GossipDriver);

/// What the threads share, built before any of them starts.
struct Wired {
    /// The LAN pool, served by shard 0; none when `ports.serf_lan` is negative.
    lan: Option<Pool>,
    wan: Option<Pool>,
    raft_tx: raft_inbox::RaftInbox,
    raft_rx: raft_inbox::RaftInboxReceiver,
    /// One sender and one receiver per shard, in shard order.
    shard_senders: Vec<ShardSender>,
    shard_receivers: Vec<runtime::ShardReceiver>,
    shared: Arc<Shared>,
    pools: Arc<Pools>,
    agent_channel: AgentChannel,
    agent_calls: flume::Receiver<AgentCall>,
}

/// Phase two: the gossip pools (not yet bound), the raft inbox, one channel per shard,
/// the runtime's `Shared` and the agent channel.
fn wire(prepared: &Prepared) -> Result<Wired, String> {
    let config = &prepared.config;
    let lan = if config.ports.serf_lan >= 0 {
        Some(crate::cluster::pools::lan_pool(config, &prepared.node_id)?)
    } else {
        None
    };
    let wan = crate::cluster::pools::wan_pool(config, &prepared.node_id)?;
    let (raft_tx, raft_rx) = raft_inbox::raft_inbox(RAFT_INBOX_CAPACITY, prepared.faults.clone())
        .map_err(|e| format!("cannot create the raft inbox: {e}"))?;
    let (shard_senders, shard_receivers): (Vec<_>, Vec<_>) = (0..prepared.shard_count)
        .map(|_| runtime::shard_channel())
        .unzip();
    let shared = shared_state(
        config,
        &prepared.node_id,
        raft_tx.clone(),
        prepared.shard_count,
        &prepared.tls,
        prepared.faults.clone(),
        &prepared.data_dir.path,
    );
    let pools = Arc::new(Pools {
        lan: lan.as_ref().map(|(handle, _)| handle.clone()),
        wan: wan.as_ref().map(|(handle, _)| handle.clone()),
        events: Arc::default(),
        servers: Arc::default(),
        router: Arc::new({
            let router = crate::cluster::router::Router::new(
                &config.datacenter,
                wan.as_ref().map(|(handle, _)| handle.clone()),
            );
            if config.connect.mesh_gateway_wan_federation {
                router.through_mesh_gateways()
            } else {
                router
            }
        }),
    });
    let (agent_channel, agent_calls) = agent_channel();
    Ok(Wired {
        lan,
        wan,
        raft_tx,
        raft_rx,
        shard_senders,
        shard_receivers,
        shared,
        pools,
        agent_channel,
        agent_calls,
    })
}

/// The store the agent starts from, and who runs it.
struct Opened {
    /// The raft thread's driver on a server; none on a client agent.
    driver: Option<raft_driver::RaftDriver>,
    /// On a client agent, the shard senders shard 0 routes store-bound requests through.
    client_senders: Option<Vec<ShardSender>>,
    initial_version: StoreVersion,
}

/// Phase three: servers run the raft core thread over their log; client agents have no
/// log and forward every store-bound request to a server they learn about through gossip.
fn open_store(
    prepared: &Prepared,
    raft_rx: raft_inbox::RaftInboxReceiver,
    shard_senders: Vec<ShardSender>,
    shared: &Arc<Shared>,
) -> Result<Opened, String> {
    let config = &prepared.config;
    let (driver, client_senders, initial_version) = open_raft(
        config,
        &prepared.data_dir.path,
        &prepared.node_id,
        prepared.rpc_address,
        raft_rx,
        shard_senders,
        shared,
        prepared.faults.clone(),
    )?;
    debug_assert_eq!(driver.is_some(), config.server, "only servers run raft");
    debug_assert_eq!(client_senders.is_some(), !config.server);
    // A server that neither bootstraps nor expects peers waits until a cluster adds it, as
    // Consul's does; Consul's Raft says so once, when its first election is due, in these
    // words. A server with a log of its own already knows its peers.
    let bootstraps = config.dev_mode || config.bootstrap || config.bootstrap_expect > 0;
    if config.server && !bootstraps && initial_version.index == 0 {
        log::warn!("raft: no known peers, aborting election");
    }
    shared
        .published_index
        .store(initial_version.index, Ordering::Release);
    Ok(Opened {
        driver,
        client_senders,
        initial_version,
    })
}

/// Every socket bound, and what was started on them before the shards.
struct BoundAll {
    listeners: Vec<ShardListeners>,
    /// The gossip drivers, their ports bound.
    lan: Option<GossipDriver>,
    wan: Option<GossipDriver>,
    xds: Option<crate::xds::XdsThread>,
    xds_feed: Option<crate::xds::feed::StoreFeed>,
    dns_settings: Arc<DnsSettings>,
}

/// Phase four: binds every listener before starting threads, so that a port conflict is a
/// clean startup error rather than a half-started agent, then starts the gRPC thread.
fn bind_all(
    prepared: &Prepared,
    mut lan: Option<Pool>,
    mut wan: Option<Pool>,
    agent_channel: &AgentChannel,
    initial_version: &StoreVersion,
) -> Result<BoundAll, String> {
    let config = &prepared.config;
    let Bound {
        shards: listeners,
        grpc: grpc_listeners,
        grpc_tls: grpc_tls_listeners,
    } = bind_listeners(
        config,
        &prepared.tls,
        prepared.shard_count,
        prepared.advertise,
    )?;
    debug_assert_eq!(listeners.len(), prepared.shard_count);
    // The gossip pools' ports too: one that cannot be bound stops the agent here, as it
    // stops Consul, instead of the agent running on without the pool.
    if let Some((_, driver)) = lan.as_mut() {
        driver.bind("serf LAN")?;
    }
    if let Some((_, driver)) = wan.as_mut() {
        driver.bind("serf WAN")?;
    }
    let (xds, xds_feed) = start_xds(
        config,
        &prepared.tls,
        grpc_listeners,
        grpc_tls_listeners,
        agent_channel,
        initial_version,
    )?;
    let dns_settings = Arc::new(DnsSettings::new(
        config.dns.clone(),
        crate::dns::resolve::LocalAgent {
            node_name: config.node_name.clone(),
            datacenter: config.datacenter.clone(),
            address: prepared.advertise,
        },
    ));
    Ok(BoundAll {
        listeners,
        lan: lan.map(|(_, driver)| driver),
        wan: wan.map(|(_, driver)| driver),
        xds,
        xds_feed,
        dns_settings,
    })
}

/// The handles from [`wire`] the shard threads take.
struct ThreadShares {
    shared: Arc<Shared>,
    shard_receivers: Vec<runtime::ShardReceiver>,
    pools: Arc<Pools>,
    agent_channel: AgentChannel,
    agent_calls: flume::Receiver<AgentCall>,
}

/// The threads the agent started, and how it hears that the shards serve.
struct Running {
    raft_thread: Option<std::thread::JoinHandle<()>>,
    shard_threads: Vec<std::thread::JoinHandle<()>>,
    xds: Option<crate::xds::XdsThread>,
    /// Each shard's id, once its servers are spawned on its runtime.
    serving: std::sync::mpsc::Receiver<usize>,
}

/// Phase five: the raft thread (on servers) and one shard thread per core.
fn start_threads(
    prepared: &Prepared,
    opened: Opened,
    bound: BoundAll,
    shares: ThreadShares,
) -> Result<Running, String> {
    let raft_thread = match opened.driver {
        Some(driver) => Some(
            std::thread::Builder::new()
                .name("praetor-raft".into())
                .spawn(move || driver.run())
                .map_err(|e| format!("cannot start the raft thread: {e}"))?,
        ),
        None => None,
    };
    let (serving_tx, serving) = std::sync::mpsc::channel::<usize>();
    let shard_threads = start_shards(
        ShardStart {
            shared: shares.shared,
            version: opened.initial_version,
            inboxes: shares.shard_receivers,
            listeners: bound.listeners,
            serving: serving_tx,
        },
        ShardZero {
            gossip: bound.lan,
            gossip_wan: bound.wan,
            client_router: opened.client_senders,
            agent_calls: Some(shares.agent_calls),
            xds_feed: bound.xds_feed,
        },
        EveryShard {
            dns_settings: bound.dns_settings,
            pools: shares.pools,
            agent_channel: shares.agent_channel,
        },
    )?;
    debug_assert_eq!(shard_threads.len(), prepared.shard_count);
    log_started(
        &prepared.config,
        &prepared.node_id,
        prepared.shard_count,
        prepared.rpc_address,
        &prepared.data_dir.path,
        prepared.fd_limit,
    );
    Ok(Running {
        raft_thread,
        shard_threads,
        xds: bound.xds,
        serving,
    })
}

/// Phase six: once every shard serves, starts the watch plans and tells systemd
/// `READY=1`; then serves until SIGINT or SIGTERM and shuts down in order.
fn serve_until_signal(
    prepared: Prepared,
    running: Running,
    shared: Arc<Shared>,
    pools: Arc<Pools>,
    agent_channel: AgentChannel,
    raft_tx: raft_inbox::RaftInbox,
) -> Result<(), String> {
    wait_until_serving(&running.serving, prepared.shard_count);
    // Watch plans query the agent's own HTTP API: they start once it serves.
    let watches = watches::WatchSupervisor::start(&prepared.config, shared.clone())?;
    if let Ok(mut listeners) = shared.reload_listeners.lock() {
        listeners.push(watches.listener());
    }
    match supervisor::notify("READY=1") {
        Ok(true) => log::debug!("agent: told systemd READY=1"),
        Ok(false) => {}
        Err(error) => log::warn!("agent: {error}"),
    }
    let signal = wait_for_shutdown_signal(&prepared.signals, &agent_channel);
    shut_down(Stopping {
        signal,
        watches,
        pools,
        shared,
        xds: running.xds,
        shard_threads: running.shard_threads,
        raft_tx,
        raft_thread: running.raft_thread,
        data_dir: prepared.data_dir,
        pid_file: prepared.pid_file,
    })
}

/// What must hold before anything starts: certificate, key and CA files read (a missing or
/// mismatched file stops the agent as it stops Consul), metric names fixed, and on a client
/// agent with auto-encrypt its certificate obtained.
fn prepare_tls_and_telemetry(
    config: &Arc<AgentConfig>,
) -> Result<Arc<crate::tls::TlsConfigurator>, String> {
    let tls = Arc::new(crate::tls::TlsConfigurator::new(
        &config.tls,
        crate::tls::Identity::of(config),
    )?);
    for warning in &tls.current().warnings {
        log::warn!("{warning}");
    }
    // Metric names and filters are fixed before any thread records.
    crate::agent::telemetry::configure(config)?;
    crate::api::routes::register_metric_series();
    // Auto-encrypt: a client agent gets its certificate before it serves anything.
    if !config.server && config.tls.auto_tls() {
        let not_after = crate::agent::auto_encrypt::bootstrap(config, &tls, &|pause| {
            sleep_unless_stopped(pause)
        })?;
        crate::agent::auto_encrypt::spawn_renewal(config.clone(), tls.clone(), not_after)?;
    }
    Ok(tls)
}

/// What every thread of the agent shares (the runtime's `Shared`), with the agent tokens
/// persisted in the data directory, if any.
fn shared_state(
    config: &Arc<AgentConfig>,
    node_id: &str,
    raft_tx: raft_inbox::RaftInbox,
    shard_count: usize,
    tls: &Arc<crate::tls::TlsConfigurator>,
    faults: Arc<peer_transport::Faults>,
    data_dir: &Path,
) -> Arc<Shared> {
    let (acl_tokens, acl_token_file) = load_agent_tokens(config, data_dir);
    Arc::new(Shared {
        config: config.clone(),
        identity: Identity {
            node_id: node_id.to_string(),
            raft_id: raft_id_of(node_id),
        },
        raft_inbox: raft_tx,
        published_index: AtomicU64::new(0),
        shutting_down: AtomicBool::new(false),
        shard_count,
        http_limits: HttpLimits::default(),
        started_at: Instant::now(),
        clock_origin: Instant::now(),
        lease_until_ms: AtomicU64::new(0),
        last_leader_contact_ms: AtomicU64::new(0),
        faults,
        rpc_address: SocketAddr::new(config.advertise(), config.ports.server.max(0) as u16),
        tls: tls.clone(),
        acl_tokens: std::sync::RwLock::new(acl_tokens),
        acl_token_file: acl_token_file.map(std::sync::Mutex::new),
        exit_error: std::sync::OnceLock::new(),
        node_meta: arc_swap::ArcSwap::from_pointee(config.node_meta.clone()),
        reload_listeners: std::sync::Mutex::new(Vec::new()),
        wan_gossip_pool: std::sync::OnceLock::new(),
    })
}

/// On a server, opens the Raft log (recovering the store from it) for the raft thread to
/// run; a client agent has no log, and its shard 0 routes every shard's store-bound requests
/// to a server instead, so it gets the shard senders back and an empty store.
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn open_raft(
    config: &AgentConfig,
    data_dir: &Path,
    node_id: &str,
    rpc_address: SocketAddr,
    raft_rx: raft_inbox::RaftInboxReceiver,
    shard_senders: Vec<ShardSender>,
    shared: &Arc<Shared>,
    faults: Arc<peer_transport::Faults>,
) -> Result<
    (
        Option<raft_driver::RaftDriver>,
        Option<Vec<ShardSender>>,
        StoreVersion,
    ),
    String,
> {
    if config.server {
        let raft_id = shared.identity.raft_id;
        let driver_config = raft_driver::RaftDriverConfig {
            data_dir: data_dir.to_path_buf(),
            raft_id,
            node_id: node_id.to_string(),
            node_name: config.node_name.clone(),
            rpc_address: rpc_address.to_string(),
            datacenter: config.datacenter.clone(),
            bootstrap_single: config.dev_mode || config.bootstrap || config.bootstrap_expect == 1,
            bootstrap_expect: config.bootstrap_expect,
            raft_config: crate::raft::RaftConfig {
                trailing_entries: config.raft_trailing_logs_entries,
                log_cache_bytes: config.raft_log_cache_bytes,
                ..crate::raft::RaftConfig::new(raft_id)
            },
            snapshot_threshold_entries: config.raft_snapshot_threshold_entries,
        };
        let (driver, version) = raft_driver::open(
            driver_config,
            raft_rx,
            shard_senders,
            shared.clone(),
            faults,
        )?;
        Ok((Some(driver), None, version))
    } else {
        Ok((
            None,
            Some(shard_senders),
            Arc::new(crate::store::Tables::default()),
        ))
    }
}

/// Every listening socket the agent serves on, bound before any thread starts.
struct Bound {
    /// One set per shard (`SO_REUSEPORT` groups).
    shards: Vec<ShardListeners>,
    /// The gRPC (xDS) listeners, served by the gRPC thread.
    grpc: Vec<std::net::TcpListener>,
    grpc_tls: Vec<std::net::TcpListener>,
}

/// Binds HTTP, HTTPS, server RPC, DNS and gRPC, so a port conflict is a clean startup
/// error rather than a half-started agent.
fn bind_listeners(
    config: &AgentConfig,
    tls: &crate::tls::TlsConfigurator,
    shard_count: usize,
    advertise: IpAddr,
) -> Result<Bound, String> {
    let mut listeners: Vec<ShardListeners> = (0..shard_count)
        .map(|_| ShardListeners {
            http: Vec::new(),
            https: Vec::new(),
            rpc: Vec::new(),
            dns_udp: Vec::new(),
            dns_tcp: Vec::new(),
        })
        .collect();
    if config.ports.http >= 0 {
        for ip in &config.addresses.http {
            let addr = SocketAddr::new(*ip, config.ports.http as u16);
            let group = bind_tcp_group(addr, shard_count, "HTTP")?;
            for (shard, listener) in listeners.iter_mut().zip(group) {
                shard.http.push(listener);
            }
        }
    }
    if config.ports.https >= 0 {
        if tls.server_config(crate::tls::Protocol::Https).is_none() {
            return Err(format!(
                "ports.https = {} needs a certificate: set tls.https.cert_file and key_file (or the same in tls.defaults)",
                config.ports.https
            ));
        }
        for ip in &config.addresses.https {
            let addr = SocketAddr::new(*ip, config.ports.https as u16);
            let group = bind_tcp_group(addr, shard_count, "HTTPS")?;
            for (shard, listener) in listeners.iter_mut().zip(group) {
                shard.https.push(listener);
            }
        }
    }
    if config.server && config.ports.server >= 0 {
        let ip = if config.bind_addr.is_unspecified() {
            config.bind_addr
        } else {
            advertise
        };
        let addr = SocketAddr::new(ip, config.ports.server as u16);
        let group = bind_tcp_group(addr, shard_count, "server RPC")?;
        for (shard, listener) in listeners.iter_mut().zip(group) {
            shard.rpc.push(listener);
        }
    }
    if config.ports.dns >= 0 {
        for ip in &config.addresses.dns {
            let addr = SocketAddr::new(*ip, config.ports.dns as u16);
            let udp = bind_udp_group(addr, shard_count, "DNS (UDP)")?;
            let tcp = bind_tcp_group(addr, shard_count, "DNS (TCP)")?;
            for ((shard, udp), tcp) in listeners.iter_mut().zip(udp).zip(tcp) {
                shard.dns_udp.push(udp);
                shard.dns_tcp.push(tcp);
            }
            if let Some(socket) = listeners.last().and_then(|shard| shard.dns_udp.last()) {
                if let Err(e) = crate::dns::server::spread_datagrams_randomly(socket, shard_count) {
                    log::warn!("dns: datagrams on {addr} are spread by flow hash: {e}");
                }
            }
        }
    }
    // gRPC (Envoy's xDS) on its own thread; its listeners are bound here with the others.
    let mut grpc = Vec::new();
    if config.ports.grpc >= 0 {
        for ip in &config.addresses.grpc {
            let addr = SocketAddr::new(*ip, config.ports.grpc as u16);
            grpc.extend(bind_tcp_group(addr, 1, "gRPC")?);
        }
    }
    let mut grpc_tls = Vec::new();
    if config.ports.grpc_tls >= 0 {
        if tls.server_config(crate::tls::Protocol::Grpc).is_none() {
            return Err(format!(
                "ports.grpc_tls = {} needs a certificate: set tls.grpc.cert_file and key_file (or the same in tls.defaults)",
                config.ports.grpc_tls
            ));
        }
        for ip in &config.addresses.grpc_tls {
            let addr = SocketAddr::new(*ip, config.ports.grpc_tls as u16);
            grpc_tls.extend(bind_tcp_group(addr, 1, "gRPC (TLS)")?);
        }
    }
    Ok(Bound {
        shards: listeners,
        grpc,
        grpc_tls,
    })
}

/// Starts the gRPC server (Envoy's xDS) on its own thread when a gRPC port is bound; the
/// feed is what shard 0 publishes store versions into.
fn start_xds(
    config: &Arc<AgentConfig>,
    tls: &Arc<crate::tls::TlsConfigurator>,
    grpc_listeners: Vec<std::net::TcpListener>,
    grpc_tls_listeners: Vec<std::net::TcpListener>,
    agent_channel: &AgentChannel,
    initial_version: &StoreVersion,
) -> Result<
    (
        Option<crate::xds::XdsThread>,
        Option<crate::xds::feed::StoreFeed>,
    ),
    String,
> {
    let xds_feed = crate::xds::feed::StoreFeed::new(initial_version.clone());
    let xds = if grpc_listeners.is_empty() && grpc_tls_listeners.is_empty() {
        None
    } else {
        let acl = &config.acl;
        let default_policy = acl.default_policy;
        Some(crate::xds::spawn(crate::xds::XdsConfig {
            settings: crate::xds::snapshot::XdsSettings {
                datacenter: config.datacenter.clone(),
                default_allow: !acl.enabled
                    || default_policy == crate::store::acl::authorizer::DefaultPolicy::Allow,
                dns_domain: config.dns.domain.clone(),
                alt_domain: config.dns.alt_domain.clone(),
                node_name: config.node_name.clone(),
                advertise_address: config.advertise().to_string(),
            },
            listeners: grpc_listeners,
            tls: (!grpc_tls_listeners.is_empty()).then(|| {
                let tls = tls.clone();
                Arc::new(move || tls.server_config(crate::tls::Protocol::Grpc))
                    as crate::xds::tls::ConfigSource
            }),
            // Cluster peering's stream is a server's, on its gRPC TLS port.
            peering: config.server && !grpc_tls_listeners.is_empty(),
            // A client agent's store versions come from its servers (`xds::mirror`).
            client: !config.server,
            tls_listeners: grpc_tls_listeners,
            agent: crate::xds::feed::AgentSource::new(agent_channel.clone()),
            store: xds_feed.clone(),
            acl: acl
                .enabled
                .then(|| crate::store::acl::cache::CompileSettings {
                    datacenter: config.datacenter.clone(),
                    default_policy,
                }),
        })?)
    };
    // Shard 0 publishes into the feed on a server only: a client agent's versions are its
    // mirror's.
    let xds_feed = xds.as_ref().filter(|_| config.server).map(|_| xds_feed);
    Ok((xds, xds_feed))
}

/// The one line that says what the agent serves where.
fn log_started(
    config: &AgentConfig,
    node_id: &str,
    shard_count: usize,
    rpc_address: SocketAddr,
    data_dir: &Path,
    fd_limit: u64,
) {
    let http_addrs: Vec<String> = config
        .addresses
        .http
        .iter()
        .map(|ip| display_addr(*ip, config.ports.http))
        .collect();
    let https_addrs: Vec<String> = config
        .addresses
        .https
        .iter()
        .map(|ip| display_addr(*ip, config.ports.https))
        .collect();
    let dns_addrs: Vec<String> = config
        .addresses
        .dns
        .iter()
        .map(|ip| display_addr(*ip, config.ports.dns))
        .collect();
    let mut grpc_addrs: Vec<String> = Vec::new();
    if config.ports.grpc >= 0 {
        grpc_addrs.extend(
            config
                .addresses
                .grpc
                .iter()
                .map(|ip| display_addr(*ip, config.ports.grpc)),
        );
    }
    if config.ports.grpc_tls >= 0 {
        grpc_addrs.extend(
            config
                .addresses
                .grpc_tls
                .iter()
                .map(|ip| format!("{} (TLS)", display_addr(*ip, config.ports.grpc_tls))),
        );
    }
    log::info!(
        "agent: started node {:?} ({}) in datacenter {:?}: {} shards, HTTP on {}, HTTPS on {}, DNS on {}, gRPC on {}, server RPC on {}, data in {}, fd limit {}",
        config.node_name,
        node_id,
        config.datacenter,
        shard_count,
        if config.ports.http >= 0 { http_addrs.join(", ") } else { "(disabled)".to_string() },
        if config.ports.https >= 0 { https_addrs.join(", ") } else { "(disabled)".to_string() },
        if config.ports.dns >= 0 { dns_addrs.join(", ") } else { "(disabled)".to_string() },
        if grpc_addrs.is_empty() { "(disabled)".to_string() } else { grpc_addrs.join(", ") },
        rpc_address,
        data_dir.display(),
        fd_limit
    );
}

/// Serves until SIGINT or SIGTERM, which it returns. SIGHUP reloads what can change
/// without a restart, exactly as `PUT /v1/agent/reload` does, and never stops the agent.
fn wait_for_shutdown_signal(signals: &libc::sigset_t, agent_channel: &AgentChannel) -> i32 {
    loop {
        let signal = wait_for_signal(signals);
        if signal != libc::SIGHUP {
            return signal;
        }
        log::info!("agent: caught signal: hangup; reloading the configuration");
        reload_through_agent(agent_channel);
    }
}

/// Everything the agent started, handed to [`shut_down`] in one piece.
struct Stopping {
    /// The signal that ended the agent (SIGINT or SIGTERM).
    signal: i32,
    watches: watches::WatchSupervisor,
    pools: Arc<Pools>,
    shared: Arc<Shared>,
    xds: Option<crate::xds::XdsThread>,
    shard_threads: Vec<std::thread::JoinHandle<()>>,
    raft_tx: raft_inbox::RaftInbox,
    raft_thread: Option<std::thread::JoinHandle<()>>,
    data_dir: DataDir,
    pid_file: Option<supervisor::PidFile>,
}

/// Shuts down in order: `STOPPING=1`, the graceful leave Consul's settings ask for, the
/// gRPC server and gossip, the shards (which finish what they accepted), then the raft
/// thread, which syncs its log before it exits.
fn shut_down(stopping: Stopping) -> Result<(), String> {
    let Stopping {
        signal,
        watches,
        pools,
        shared,
        xds,
        shard_threads,
        raft_tx,
        raft_thread,
        data_dir,
        pid_file,
    } = stopping;
    if let Err(error) = supervisor::notify("STOPPING=1") {
        log::warn!("agent: {error}");
    }
    watches.stop();
    log::info!("agent: caught signal {signal}, shutting down");
    let leave = match signal {
        libc::SIGTERM => shared.config.leave_on_terminate,
        libc::SIGINT => !shared.config.skip_leave_on_interrupt,
        _ => false,
    };
    if leave {
        // Leave before anything stops, so the pool hears "left" rather than detecting a
        // failure, and the catalog deregisters this node instead of marking it critical.
        if let Some(gossip) = &pools.lan {
            log::info!("agent: gracefully leaving the LAN pool");
            match gossip.leave_blocking(LEAVE_ON_SHUTDOWN_TIMEOUT) {
                Ok(true) => log::info!("agent: left the LAN pool"),
                Ok(false) => log::warn!(
                    "agent: the graceful leave did not finish within {} s; stopping anyway",
                    LEAVE_ON_SHUTDOWN_TIMEOUT.as_secs()
                ),
                Err(error) => log::warn!("agent: graceful leave failed: {error}"),
            }
        }
    }
    shared.shutting_down.store(true, Ordering::SeqCst);
    if let Some(xds) = xds {
        xds.stop();
    }
    if let Some(gossip) = &pools.lan {
        gossip.shutdown();
    }
    if let Some(gossip) = &pools.wan {
        gossip.shutdown();
    }
    for thread in shard_threads {
        let _ = thread.join();
    }
    let _ = raft_tx.send(RaftInput::Shutdown);
    drop(raft_tx);
    if let Some(raft_thread) = raft_thread {
        let _ = raft_thread.join();
    }
    drop(data_dir);
    drop(pid_file);
    if let Some(error) = shared.exit_error.get() {
        return Err(error.clone());
    }
    log::info!("agent: shutdown complete");
    Ok(())
}

/// What every shard thread starts from; `serving` hears each shard's id once it serves.
struct ShardStart {
    shared: Arc<Shared>,
    version: StoreVersion,
    inboxes: Vec<runtime::ShardReceiver>,
    listeners: Vec<ShardListeners>,
    serving: std::sync::mpsc::Sender<usize>,
}

/// The tasks only shard 0 runs.
struct ShardZero {
    gossip: Option<GossipDriver>,
    gossip_wan: Option<GossipDriver>,
    client_router: Option<Vec<ShardSender>>,
    agent_calls: Option<flume::Receiver<AgentCall>>,
    xds_feed: Option<crate::xds::feed::StoreFeed>,
}

/// What every shard gets a handle to.
#[derive(Clone)]
struct EveryShard {
    dns_settings: Arc<DnsSettings>,
    pools: Arc<Pools>,
    agent_channel: AgentChannel,
}

/// Spawns one shard thread per inbox, pinned to the cores round-robin, each starting its
/// tasks on its runtime; shard 0 also takes the tasks only it runs.
fn start_shards(
    start: ShardStart,
    mut zero: ShardZero,
    every: EveryShard,
) -> Result<Vec<std::thread::JoinHandle<()>>, String> {
    let ShardStart {
        shared,
        version,
        inboxes,
        listeners,
        serving,
    } = start;
    debug_assert_eq!(inboxes.len(), listeners.len(), "one listener set per shard");
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let mut shard_threads = Vec::with_capacity(inboxes.len());
    for (id, (inbox, shard_listeners)) in inboxes.into_iter().zip(listeners).enumerate() {
        let core = if cores.is_empty() {
            None
        } else {
            Some(cores[id % cores.len()])
        };
        let first = id == 0;
        let tasks = ShardTasks {
            listeners: shard_listeners,
            gossip: if first { zero.gossip.take() } else { None },
            gossip_wan: if first { zero.gossip_wan.take() } else { None },
            client_router: if first {
                zero.client_router.take()
            } else {
                None
            },
            dns_settings: every.dns_settings.clone(),
            pools: every.pools.clone(),
            agent_channel: every.agent_channel.clone(),
            agent_calls: if first { zero.agent_calls.take() } else { None },
            xds_feed: if first { zero.xds_feed.take() } else { None },
        };
        let serving = serving.clone();
        let thread = spawn_shard(
            ShardThread {
                id,
                core,
                shared: shared.clone(),
                version: version.clone(),
                inbox,
            },
            move |shard| {
                start_shard_tasks(shard, tasks);
                let _ = serving.send(id);
            },
        )?;
        shard_threads.push(thread);
    }
    Ok(shard_threads)
}

/// Waits (bounded) until every shard has its servers spawned, so `READY=1` means the agent
/// serves: the listeners were bound before, and now every shard accepts on them.
fn wait_until_serving(serving: &std::sync::mpsc::Receiver<usize>, shard_count: usize) {
    let deadline = Instant::now() + SHARDS_START_TIMEOUT;
    let mut started = vec![false; shard_count];
    while started.iter().any(|s| !s) {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match serving.recv_timeout(remaining) {
            Ok(id) => started[id] = true,
            Err(_) => {
                let missing: Vec<usize> = (0..shard_count).filter(|i| !started[*i]).collect();
                log::error!("agent: shards {missing:?} did not start serving");
                return;
            }
        }
    }
}

/// Runs a reload on the agent, as `PUT /v1/agent/reload` does, and waits for it (bounded).
/// The agent logs what changed; a failure is logged here and the configuration in use stays.
fn reload_through_agent(agent: &AgentChannel) {
    let (reply_tx, reply_rx) = flume::bounded(1);
    let call = AgentCall {
        request: AgentRequest::Reload,
        pretty: false,
        reply: reply_tx,
    };
    if agent.tx.send(call).is_err() {
        log::error!("agent: reload: the agent is not running");
        return;
    }
    // The agent logs the outcome, a failure included.
    if reply_rx.recv_timeout(RELOAD_TIMEOUT).is_err() {
        log::error!(
            "agent: reload did not finish within {} s",
            RELOAD_TIMEOUT.as_secs()
        );
    }
}

fn display_addr(ip: IpAddr, port: i32) -> String {
    SocketAddr::new(ip, port.max(0) as u16).to_string()
}

/// What one shard thread runs besides the runtime's own loops.
struct ShardTasks {
    listeners: ShardListeners,
    /// Shard 0 runs the LAN gossip driver.
    gossip: Option<GossipDriver>,
    /// Shard 0 of a server also runs the WAN gossip driver.
    gossip_wan: Option<GossipDriver>,
    /// On a client agent, shard 0 routes every shard to a server.
    client_router: Option<Vec<ShardSender>>,
    dns_settings: Arc<DnsSettings>,
    pools: Arc<Pools>,
    agent_channel: AgentChannel,
    /// Shard 0 runs the agent, which serves the calls of agent endpoints on every shard.
    agent_calls: Option<flume::Receiver<AgentCall>>,
    /// Shard 0 publishes the store versions the gRPC server builds proxy snapshots from.
    xds_feed: Option<crate::xds::feed::StoreFeed>,
}

/// Starts a shard's tasks on its runtime: the HTTP server (which also answers requests
/// forwarded over :8300) and the DNS server on every shard; on shard 0 the gossip drivers,
/// the cluster's loops and the agent.
fn start_shard_tasks(shard: &Rc<Shard>, tasks: ShardTasks) {
    let ShardTasks {
        listeners,
        gossip,
        gossip_wan,
        client_router,
        dns_settings,
        pools,
        agent_channel,
        agent_calls,
        xds_feed,
    } = tasks;
    if let Some(feed) = xds_feed {
        publish_to_xds(shard, feed);
    }
    let shared = shard.shared().clone();
    let http = HttpServer::new(shard.clone(), pools.clone(), agent_channel);
    let ShardListeners {
        http: http_listeners,
        https,
        rpc,
        dns_udp,
        dns_tcp,
    } = listeners;
    start_http(shard, &http, http_listeners, https, rpc);
    if shard.id == 0 && shared.config.server && shared.config.tls.auto_encrypt.allow_tls {
        monoio::spawn(crate::shard::auto_encrypt::agent_ca_keeper(shard.clone()));
    }
    start_dns(shard, &http, dns_settings, &pools, dns_udp, dns_tcp);
    if let (Some(driver), Some(handle)) = (gossip, pools.lan.clone()) {
        start_gossip(shard, &pools, (driver, handle), gossip_wan, client_router);
    }
    if let Some(calls) = agent_calls {
        // The agent (local services, checks, anti-entropy) lives on shard 0.
        monoio::spawn(crate::agent::run(shard.clone(), pools, calls));
    }
}

/// Shard 0 publishes its versions to the gRPC thread; only versions whose changes can
/// concern a proxy wake it.
fn publish_to_xds(shard: &Rc<Shard>, feed: crate::xds::feed::StoreFeed) {
    feed.publish(shard.current_version());
    shard.on_new_version(move |batch| {
        if crate::xds::feed::concerns_proxies(&batch.changes) {
            feed.publish(batch.version.clone());
        }
    });
}

/// Registers bound TCP listeners with the shard's runtime and spawns `serve` on each; a
/// listener the runtime refuses is logged, as the agent serves on the others.
fn register_tcp(
    shard_id: usize,
    what: &str,
    listeners: Vec<std::net::TcpListener>,
    serve: impl Fn(monoio::net::TcpListener),
) {
    for listener in listeners {
        match monoio::net::TcpListener::from_std(listener) {
            Ok(listener) => serve(listener),
            Err(e) => log::error!("shard {shard_id}: cannot register {what} listener: {e}"),
        }
    }
}

/// HTTP, HTTPS and the server RPC port (whose forwarded HTTP the same server answers).
fn start_http(
    shard: &Rc<Shard>,
    http: &Rc<HttpServer>,
    http_listeners: Vec<std::net::TcpListener>,
    https: Vec<std::net::TcpListener>,
    rpc: Vec<std::net::TcpListener>,
) {
    let id = shard.id;
    register_tcp(id, "HTTP", http_listeners, |listener| {
        monoio::spawn(crate::api::server::accept_loop(http.clone(), listener));
    });
    register_tcp(id, "HTTPS", https, |listener| {
        monoio::spawn(crate::api::server::accept_tls_loop(http.clone(), listener));
    });
    register_tcp(id, "RPC", rpc, |listener| {
        monoio::spawn(rpc_server::accept_loop(
            shard.clone(),
            http.clone(),
            listener,
        ));
    });
}

/// The DNS server on this shard's UDP sockets and TCP listeners.
fn start_dns(
    shard: &Rc<Shard>,
    http: &Rc<HttpServer>,
    dns_settings: Arc<DnsSettings>,
    pools: &Pools,
    dns_udp: Vec<std::net::UdpSocket>,
    dns_tcp: Vec<std::net::TcpListener>,
) {
    let id = shard.id;
    // A server's DNS executes prepared queries as the typed call this shard serves, and
    // asks another datacenter's servers for their rows through the WAN router.
    let api: crate::dns::elsewhere::LocalApi = {
        let http = http.clone();
        let local_address = shard.shared().rpc_address;
        Rc::new(move |method: &'static str, body: Vec<u8>| {
            let http = http.clone();
            Box::pin(async move {
                use crate::shard::rpc_server::{TypedCall, TypedCalls};
                let call = TypedCall::new(
                    bytes::Bytes::from_static(method.as_bytes()),
                    0,
                    bytes::Bytes::from(body),
                    local_address,
                );
                let answer = http.serve(call).await;
                if answer.error.is_empty() {
                    Ok(answer.body)
                } else {
                    Err(answer.error)
                }
            })
        })
    };
    let dns = DnsServer::new(
        shard.clone(),
        dns_settings,
        pools.servers.clone(),
        api,
        pools.router.clone(),
    );
    if !dns_udp.is_empty() || !dns_tcp.is_empty() {
        dns.start_client_feed();
    }
    for socket in dns_udp {
        match monoio::net::udp::UdpSocket::from_std(socket) {
            Ok(socket) => {
                crate::dns::server::spawn_udp(dns.clone(), socket);
            }
            Err(e) => log::error!("shard {id}: cannot register DNS UDP socket: {e}"),
        }
    }
    register_tcp(id, "DNS TCP", dns_tcp, |listener| {
        monoio::spawn(crate::dns::server::tcp_accept_loop(dns.clone(), listener));
    });
}

/// Runs a gossip driver; the agent does not run on without its pool, as Consul's does not.
fn spawn_gossip_driver(shared: &Arc<Shared>, driver: GossipDriver, pool: &'static str) {
    let stopping = shared.clone();
    monoio::spawn(async move {
        if let Err(e) = driver.run().await {
            stopping.stop_with_error(format!("gossip: {pool} pool stopped: {e}"));
        }
    });
}

/// WAN federation through mesh gateways: the WAN pool sends to other datacenters through
/// the gateways the router's locator picks, and the server port relays what arrives that
/// way into the pool's own sockets.
fn route_wan_gossip_through_gateways(
    shared: &Arc<Shared>,
    driver: &mut GossipDriver,
    router: Arc<crate::cluster::router::Router>,
) {
    if let Some(bound) = driver.bound_address() {
        let pool = crate::shard::wanfed::local_pool_address(bound);
        let first = shared.wan_gossip_pool.set(pool).is_ok();
        debug_assert!(first, "one WAN pool per agent");
    }
    driver.route_through_gateways(crate::cluster::gossip_gateways::GatewaySettings {
        local_datacenter: shared.config.datacenter.clone(),
        pick_gateway: Box::new(move |datacenter| router.pick_gateway(datacenter)),
        runtime: shared.clone(),
    });
}

/// Shard 0's gossip: the LAN driver and the loops over it (server routing on a client
/// agent, member reconcile on a server, user events, joins), and the WAN pool's.
fn start_gossip(
    shard: &Rc<Shard>,
    pools: &Pools,
    (driver, handle): (GossipDriver, crate::cluster::gossip::GossipHandle),
    gossip_wan: Option<GossipDriver>,
    client_router: Option<Vec<ShardSender>>,
) {
    let shared = shard.shared().clone();
    spawn_gossip_driver(&shared, driver, "LAN");
    match client_router {
        // A client agent routes to a server it learns through gossip.
        Some(senders) => {
            monoio::spawn(crate::cluster::pools::client_router(
                shared.clone(),
                handle.clone(),
                senders,
                pools.servers.clone(),
            ));
        }
        None => {
            monoio::spawn(crate::cluster::pools::member_watch(
                shared.clone(),
                handle.clone(),
            ));
        }
    }
    monoio::spawn(crate::cluster::user_events::ingest_loop(
        shard.clone(),
        handle.clone(),
        pools.events.clone(),
    ));
    if let (Some(mut driver), Some(wan)) = (gossip_wan, pools.wan.clone()) {
        if shared.config.connect.mesh_gateway_wan_federation {
            route_wan_gossip_through_gateways(&shared, &mut driver, pools.router.clone());
        }
        spawn_gossip_driver(&shared, driver, "WAN");
        monoio::spawn(crate::cluster::router::wan_router(
            shared.clone(),
            wan.clone(),
            pools.router.clone(),
        ));
        monoio::spawn(crate::cluster::pools::wan_loop(
            shared.clone(),
            handle.clone(),
            wan,
            pools.router.clone(),
        ));
    }
    monoio::spawn(crate::cluster::pools::join_loop(shared, handle));
}
