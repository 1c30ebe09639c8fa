//! The runtime: shard threads, listeners, the raft core thread and its durable log. This is
//! the only layer that performs I/O or reads the clock.
//!
//! [`run_agent`] raises the descriptor limit, opens the data directory, starts the raft core
//! thread and one monoio shard per core (each pinned, each with its own `SO_REUSEPORT`
//! listeners), then waits for SIGINT or SIGTERM and shuts down in order: shards stop accepting
//! and finish, then the raft thread syncs its log and exits.

pub mod forward;
pub mod logger;
pub mod nonblocking;
pub mod peer_transport;
pub mod raft_driver;
pub mod raft_inbox;
pub mod rpc_server;
pub mod runtime;
pub mod session_timers;
pub mod wal;
pub mod watch;

pub use runtime::Shard;

use crate::config::AgentConfig;
use crate::proto::http::HttpLimits;
use runtime::{Identity, RaftInput, Shared, RAFT_INBOX_CAPACITY};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

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

/// The Raft id derived from the node UUID: its first eight bytes, never zero.
pub fn raft_id_of(node_id: &str) -> u64 {
    let uuid = uuid::Uuid::parse_str(node_id).expect("node id validated at startup");
    let bytes = uuid.as_bytes();
    u64::from_be_bytes(bytes[..8].try_into().expect("a UUID has 16 bytes")).max(1)
}

/// Blocks SIGINT and SIGTERM in the calling thread (and the threads it spawns afterwards),
/// so that only [`wait_for_signal`] receives them.
fn block_shutdown_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local, zero-initialised set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for_signal(set: &libc::sigset_t) -> i32 {
    let mut signal: libc::c_int = 0;
    // SAFETY: sigwait writes the received signal number into our local.
    unsafe { libc::sigwait(set, &mut signal) };
    signal
}

struct DataDir {
    path: PathBuf,
    /// Removed at shutdown: a `-dev` agent without `-data-dir` keeps nothing.
    temporary: bool,
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
    rpc: Vec<std::net::TcpListener>,
    dns_udp: Vec<std::net::UdpSocket>,
    dns_tcp: Vec<std::net::TcpListener>,
}

/// Runs an agent until SIGINT/SIGTERM. Returns an error line for startup failures.
pub fn run_agent(config: AgentConfig) -> Result<(), String> {
    let fd_limit = raise_fd_limit();
    let signals = block_shutdown_signals();
    let config = Arc::new(config);
    for key in &config.unknown_keys {
        log::warn!("config: ignoring unknown key {key:?}");
    }
    if !config.server && config.retry_join.is_empty() && config.start_join.is_empty() {
        log::warn!(
            "agent: a client agent without -join or -retry-join knows no server until one joins it"
        );
    }
    let data_dir = prepare_data_dir(&config)?;
    let node_id = load_or_create_node_id(&config, &data_dir.path)?;
    let raft_id = raft_id_of(&node_id);
    let shard_count = match config.shards {
        0 => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        n => n,
    };
    let advertise = config.advertise();
    let rpc_address = SocketAddr::new(advertise, config.ports.server.max(0) as u16);
    let faults = Arc::new(peer_transport::Faults::default());

    // Gossip: the LAN pool, served by shard 0.
    let lan = if config.ports.serf_lan >= 0 {
        Some(crate::cluster::pools::lan_pool(&config, &node_id)?)
    } else {
        None
    };

    let wan = crate::cluster::pools::wan_pool(&config, &node_id)?;

    let (raft_tx, raft_rx) = raft_inbox::raft_inbox(RAFT_INBOX_CAPACITY, faults.clone())
        .map_err(|e| format!("cannot create the raft inbox: {e}"))?;
    let mut shard_senders = Vec::with_capacity(shard_count);
    let mut shard_receivers = Vec::with_capacity(shard_count);
    for _ in 0..shard_count {
        let (tx, rx) = runtime::shard_channel();
        shard_senders.push(tx);
        shard_receivers.push(rx);
    }
    let shared = Arc::new(Shared {
        config: config.clone(),
        identity: Identity {
            node_id: node_id.clone(),
            raft_id,
        },
        raft_inbox: raft_tx.clone(),
        published_index: AtomicU64::new(0),
        shutting_down: AtomicBool::new(false),
        shard_count,
        http_limits: HttpLimits::default(),
        started_at: Instant::now(),
        clock_origin: Instant::now(),
        lease_until_ms: AtomicU64::new(0),
        last_leader_contact_ms: AtomicU64::new(0),
        faults: faults.clone(),
        rpc_address,
    });
    let pools = Arc::new(crate::cluster::Pools {
        lan: lan.as_ref().map(|(handle, _)| handle.clone()),
        wan: wan.as_ref().map(|(handle, _)| handle.clone()),
        events: Arc::default(),
    });
    let (agent_channel, agent_calls) = crate::api::agent_local::agent_channel();
    let mut agent_calls = Some(agent_calls);

    // Servers run the raft core thread; client agents have no log and forward every
    // store-bound request to a server they learn about through gossip.
    let mut client_senders = None;
    let (driver, initial_version) = if config.server {
        let driver_config = raft_driver::RaftDriverConfig {
            data_dir: data_dir.path.clone(),
            raft_id,
            node_id: node_id.clone(),
            node_name: config.node_name.clone(),
            rpc_address: rpc_address.to_string(),
            datacenter: config.datacenter.clone(),
            bootstrap_single: config.dev_mode || config.bootstrap || config.bootstrap_expect == 1,
            bootstrap_expect: config.bootstrap_expect,
            raft_config: crate::raft::RaftConfig {
                trailing_entries: config.raft_trailing_logs_entries,
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
        (Some(driver), version)
    } else {
        client_senders = Some(shard_senders);
        (None, Arc::new(crate::store::Tables::default()))
    };
    shared
        .published_index
        .store(initial_version.index, Ordering::Release);

    // Bind every listener before starting threads, so that a port conflict is a clean
    // startup error rather than a half-started agent.
    let mut listeners: Vec<ShardListeners> = (0..shard_count)
        .map(|_| ShardListeners {
            http: Vec::new(),
            rpc: Vec::new(),
            dns_udp: Vec::new(),
            dns_tcp: Vec::new(),
        })
        .collect();
    if config.ports.http >= 0 {
        for ip in &config.client_addrs {
            let addr = SocketAddr::new(*ip, config.ports.http as u16);
            for shard in listeners.iter_mut() {
                shard.http.push(
                    reuseport_listener(addr)
                        .map_err(|e| format!("cannot listen for HTTP on {addr}: {e}"))?,
                );
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
        for shard in listeners.iter_mut() {
            shard.rpc.push(
                reuseport_listener(addr)
                    .map_err(|e| format!("cannot listen for server RPC on {addr}: {e}"))?,
            );
        }
    }
    if config.ports.dns >= 0 {
        for ip in &config.client_addrs {
            let addr = SocketAddr::new(*ip, config.ports.dns as u16);
            for shard in listeners.iter_mut() {
                let udp = reuseport_udp(addr)
                    .map_err(|e| format!("cannot listen for DNS (UDP) on {addr}: {e}"))?;
                udp.set_nonblocking(true)
                    .map_err(|e| format!("cannot configure the DNS socket on {addr}: {e}"))?;
                shard.dns_udp.push(udp);
                shard.dns_tcp.push(
                    reuseport_listener(addr)
                        .map_err(|e| format!("cannot listen for DNS (TCP) on {addr}: {e}"))?,
                );
            }
            if let Some(socket) = listeners.last().and_then(|shard| shard.dns_udp.last()) {
                if let Err(e) = crate::dns::server::spread_datagrams_randomly(socket, shard_count) {
                    log::warn!("dns: datagrams on {addr} are spread by flow hash: {e}");
                }
            }
        }
    }
    let dns_settings = Arc::new(crate::dns::DnsSettings::new(
        config.dns.clone(),
        crate::dns::resolve::LocalAgent {
            node_name: config.node_name.clone(),
            datacenter: config.datacenter.clone(),
            address: advertise,
        },
    ));

    let raft_thread = match driver {
        Some(driver) => Some(
            std::thread::Builder::new()
                .name("praetor-raft".into())
                .spawn(move || driver.run())
                .map_err(|e| format!("cannot start the raft thread: {e}"))?,
        ),
        None => None,
    };

    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let mut shard_threads = Vec::with_capacity(shard_count);
    let mut lan_driver = lan.map(|(_, driver)| driver);
    let mut wan_driver = wan.map(|(_, driver)| driver);
    for (id, (inbox, shard_listeners)) in shard_receivers.into_iter().zip(listeners).enumerate() {
        let shared = shared.clone();
        let dns_settings = dns_settings.clone();
        let version = initial_version.clone();
        let core = if cores.is_empty() {
            None
        } else {
            Some(cores[id % cores.len()])
        };
        let gossip = if id == 0 { lan_driver.take() } else { None };
        let gossip_wan = if id == 0 { wan_driver.take() } else { None };
        let router = if id == 0 { client_senders.take() } else { None };
        let agent_calls = if id == 0 { agent_calls.take() } else { None };
        let (pools, agent_channel) = (pools.clone(), agent_channel.clone());
        let thread = std::thread::Builder::new()
            .name(format!("praetor-shard-{id}"))
            .spawn(move || {
                if let Some(core) = core {
                    core_affinity::set_for_current(core);
                }
                run_shard(ShardStart {
                    id,
                    shared,
                    version,
                    inbox,
                    listeners: shard_listeners,
                    gossip,
                    gossip_wan,
                    client_router: router,
                    dns_settings,
                    pools,
                    agent_channel,
                    agent_calls,
                });
            })
            .map_err(|e| format!("cannot start shard thread {id}: {e}"))?;
        shard_threads.push(thread);
    }

    let http_addrs: Vec<String> = config
        .client_addrs
        .iter()
        .map(|ip| display_addr(*ip, config.ports.http))
        .collect();
    let dns_addrs: Vec<String> = config
        .client_addrs
        .iter()
        .map(|ip| display_addr(*ip, config.ports.dns))
        .collect();
    log::info!(
        "agent: started node {:?} ({}) in datacenter {:?}: {} shards, HTTP on {}, DNS on {}, server RPC on {}, data in {}, fd limit {}",
        config.node_name,
        node_id,
        config.datacenter,
        shard_count,
        if config.ports.http >= 0 { http_addrs.join(", ") } else { "(disabled)".to_string() },
        if config.ports.dns >= 0 { dns_addrs.join(", ") } else { "(disabled)".to_string() },
        rpc_address,
        data_dir.path.display(),
        fd_limit
    );

    let signal = wait_for_signal(&signals);
    log::info!("agent: caught signal {signal}, shutting down");
    shared.shutting_down.store(true, Ordering::SeqCst);
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
    if data_dir.temporary {
        let _ = std::fs::remove_dir_all(&data_dir.path);
    }
    log::info!("agent: shutdown complete");
    Ok(())
}

fn display_addr(ip: IpAddr, port: i32) -> String {
    SocketAddr::new(ip, port.max(0) as u16).to_string()
}

/// Everything one shard thread starts with.
struct ShardStart {
    id: usize,
    shared: Arc<Shared>,
    version: crate::store::StoreVersion,
    inbox: runtime::ShardReceiver,
    listeners: ShardListeners,
    /// Shard 0 runs the LAN gossip driver.
    gossip: Option<crate::cluster::gossip::GossipDriver>,
    /// Shard 0 of a server also runs the WAN gossip driver.
    gossip_wan: Option<crate::cluster::gossip::GossipDriver>,
    /// On a client agent, shard 0 routes every shard to a server.
    client_router: Option<Vec<runtime::ShardSender>>,
    dns_settings: Arc<crate::dns::DnsSettings>,
    pools: Arc<crate::cluster::Pools>,
    agent_channel: crate::api::agent_local::AgentChannel,
    /// Shard 0 runs the agent, which serves the calls of agent endpoints on every shard.
    agent_calls: Option<flume::Receiver<crate::api::agent_local::AgentCall>>,
}

/// One shard thread: a monoio runtime serving its listeners until shutdown. Shard 0 also
/// runs the gossip driver and the tasks that act on membership.
fn run_shard(start: ShardStart) {
    let ShardStart {
        id,
        shared,
        version,
        inbox,
        listeners,
        gossip,
        gossip_wan,
        client_router,
        dns_settings,
        pools,
        agent_channel,
        agent_calls,
    } = start;
    let mut runtime = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .with_entries(URING_ENTRIES)
        .enable_timer()
        .build()
        .expect("building the shard runtime");
    runtime.block_on(async move {
        let shard = Shard::new(id, shared.clone(), version, inbox);
        let http = crate::api::server::Server::new(shard.clone(), pools.clone(), agent_channel);
        for listener in listeners.http {
            match monoio::net::TcpListener::from_std(listener) {
                Ok(listener) => {
                    monoio::spawn(crate::api::server::accept_loop(http.clone(), listener));
                }
                Err(e) => log::error!("shard {id}: cannot register HTTP listener: {e}"),
            }
        }
        for listener in listeners.rpc {
            match monoio::net::TcpListener::from_std(listener) {
                Ok(listener) => {
                    monoio::spawn(rpc_server::accept_loop(
                        shard.clone(),
                        http.clone(),
                        listener,
                    ));
                }
                Err(e) => log::error!("shard {id}: cannot register RPC listener: {e}"),
            }
        }
        let dns = crate::dns::server::DnsServer::new(shard.clone(), dns_settings);
        for socket in listeners.dns_udp {
            match monoio::net::udp::UdpSocket::from_std(socket) {
                Ok(socket) => {
                    crate::dns::server::spawn_udp(dns.clone(), socket);
                }
                Err(e) => log::error!("shard {id}: cannot register DNS UDP socket: {e}"),
            }
        }
        for listener in listeners.dns_tcp {
            match monoio::net::TcpListener::from_std(listener) {
                Ok(listener) => {
                    monoio::spawn(crate::dns::server::tcp_accept_loop(dns.clone(), listener));
                }
                Err(e) => log::error!("shard {id}: cannot register DNS TCP listener: {e}"),
            }
        }
        if let (Some(driver), Some(handle)) = (gossip, pools.lan.clone()) {
            monoio::spawn(async move {
                if let Err(e) = driver.run().await {
                    log::error!("gossip: LAN pool stopped: {e}");
                }
            });
            match client_router {
                // A client agent routes to a server it learns through gossip.
                Some(senders) => {
                    monoio::spawn(crate::cluster::pools::client_router(
                        shared.clone(),
                        handle.clone(),
                        senders,
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
            if let (Some(driver), Some(wan)) = (gossip_wan, pools.wan.clone()) {
                monoio::spawn(async move {
                    if let Err(e) = driver.run().await {
                        log::error!("gossip: WAN pool stopped: {e}");
                    }
                });
                monoio::spawn(crate::cluster::pools::wan_loop(
                    shared.clone(),
                    handle.clone(),
                    wan,
                ));
            }
            monoio::spawn(crate::cluster::pools::join_loop(
                shared.config.clone(),
                handle,
            ));
        }
        if let Some(calls) = agent_calls {
            // The agent (local services, checks, anti-entropy) lives on shard 0.
            monoio::spawn(crate::agent::run(shard.clone(), pools, calls));
        }
        monoio::spawn(watch_ticker(shard.clone()));
        shard_main_loop(&shard).await;
    });
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
