//! Start-up wiring: the one module that knows every layer and connects them.
//!
//! [`run_agent`] raises the descriptor limit, opens the data directory, binds every
//! listener, builds what the layers share (the runtime's `Shared`, the gossip pools, the
//! agent channel), starts the raft core thread on servers, and one shard thread per core
//! through `shard::spawn_shard`, on which it starts the HTTP and DNS servers and, on shard
//! 0, the gossip drivers, the cluster's loops and the agent. Then it waits for SIGINT or
//! SIGTERM and shuts down in order: gossip leaves, shards stop accepting and finish, then
//! the raft thread syncs its log and exits.
//!
//! Architecture invariant: no other module imports this one except the CLI, and nothing
//! here serves requests; a layer's behaviour lives in that layer.

use crate::api::agent_local::{agent_channel, AgentCall, AgentChannel};
use crate::api::server::Server as HttpServer;
use crate::cluster::gossip::GossipDriver;
use crate::cluster::Pools;
use crate::config::AgentConfig;
use crate::dns::server::DnsServer;
use crate::dns::DnsSettings;
use crate::proto::http::HttpLimits;
use crate::shard::runtime::{self, Identity, RaftInput, ShardSender, Shared, RAFT_INBOX_CAPACITY};
use crate::shard::{
    peer_transport, raft_driver, raft_id_of, raft_inbox, raise_fd_limit, reuseport_listener,
    reuseport_udp, rpc_server, spawn_shard, Shard, ShardThread,
};
use std::net::{IpAddr, SocketAddr};
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

fn wait_for_signal(set: &libc::sigset_t) -> i32 {
    let mut signal: libc::c_int = 0;
    // SAFETY: sigwait writes the received signal number into our local.
    unsafe { libc::sigwait(set, &mut signal) };
    signal
}

/// Sleeps up to `duration`; true when SIGINT or SIGTERM arrived meanwhile (a SIGHUP is
/// consumed: there is nothing to reload yet).
fn sleep_unless_stopped(set: &libc::sigset_t, duration: Duration) -> bool {
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
        let signal = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &timeout) };
        if signal == libc::SIGINT || signal == libc::SIGTERM {
            return true;
        }
    }
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
    https: Vec<std::net::TcpListener>,
    rpc: Vec<std::net::TcpListener>,
    dns_udp: Vec<std::net::UdpSocket>,
    dns_tcp: Vec<std::net::TcpListener>,
}

/// The longest a graceful leave at shutdown may take before the agent stops anyway.
const LEAVE_ON_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(15);

/// Runs an agent until SIGINT/SIGTERM. Returns an error line for startup failures.
pub fn run_agent(config: AgentConfig) -> Result<(), String> {
    let fd_limit = raise_fd_limit();
    let signals = block_shutdown_signals();
    let config = Arc::new(config);
    let (leave_on_terminate, skip_leave_on_interrupt) =
        (config.leave_on_terminate, config.skip_leave_on_interrupt);
    for key in &config.unknown_keys {
        log::warn!("config: ignoring unknown key {key:?}");
    }
    if !config.server && config.retry_join.is_empty() && config.start_join.is_empty() {
        log::warn!(
            "agent: a client agent without -join or -retry-join knows no server until one joins it"
        );
    }
    // Certificate, key and CA files are read before anything starts, so a missing or
    // mismatched file stops the agent as it stops Consul.
    let tls = Arc::new(crate::tls::TlsConfigurator::new(
        &config.tls,
        crate::tls::Identity {
            datacenter: config.datacenter.clone(),
            domain: config.dns.domain.clone(),
            node_name: config.node_name.clone(),
            server: config.server,
        },
    )?);
    for warning in &tls.current().warnings {
        log::warn!("{warning}");
    }
    // Auto-encrypt: a client agent gets its certificate before it serves anything.
    if !config.server && config.tls.auto_tls() {
        let not_after = crate::shard::auto_encrypt::bootstrap(&config, &tls, &|pause| {
            sleep_unless_stopped(&signals, pause)
        })?;
        crate::shard::auto_encrypt::spawn_renewal(config.clone(), tls.clone(), not_after)?;
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
        tls: tls.clone(),
        acl_tokens: std::sync::RwLock::new(config.acl.tokens.clone()),
    });
    let pools = Arc::new(Pools {
        lan: lan.as_ref().map(|(handle, _)| handle.clone()),
        wan: wan.as_ref().map(|(handle, _)| handle.clone()),
        events: Arc::default(),
        servers: Arc::default(),
    });
    let (agent_channel, agent_calls) = agent_channel();
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
            https: Vec::new(),
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
    if config.ports.https >= 0 {
        if tls.server_config(crate::tls::Protocol::Https).is_none() {
            return Err(format!(
                "ports.https = {} needs a certificate: set tls.https.cert_file and key_file (or the same in tls.defaults)",
                config.ports.https
            ));
        }
        for ip in &config.client_addrs {
            let addr = SocketAddr::new(*ip, config.ports.https as u16);
            for shard in listeners.iter_mut() {
                shard.https.push(
                    reuseport_listener(addr)
                        .map_err(|e| format!("cannot listen for HTTPS on {addr}: {e}"))?,
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
    let dns_settings = Arc::new(DnsSettings::new(
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
        let core = if cores.is_empty() {
            None
        } else {
            Some(cores[id % cores.len()])
        };
        let tasks = ShardTasks {
            listeners: shard_listeners,
            gossip: if id == 0 { lan_driver.take() } else { None },
            gossip_wan: if id == 0 { wan_driver.take() } else { None },
            client_router: if id == 0 { client_senders.take() } else { None },
            dns_settings: dns_settings.clone(),
            pools: pools.clone(),
            agent_channel: agent_channel.clone(),
            agent_calls: if id == 0 { agent_calls.take() } else { None },
        };
        let thread = spawn_shard(
            ShardThread {
                id,
                core,
                shared: shared.clone(),
                version: initial_version.clone(),
                inbox,
            },
            move |shard| start_shard_tasks(shard, tasks),
        )?;
        shard_threads.push(thread);
    }

    let http_addrs: Vec<String> = config
        .client_addrs
        .iter()
        .map(|ip| display_addr(*ip, config.ports.http))
        .collect();
    let https_addrs: Vec<String> = config
        .client_addrs
        .iter()
        .map(|ip| display_addr(*ip, config.ports.https))
        .collect();
    let dns_addrs: Vec<String> = config
        .client_addrs
        .iter()
        .map(|ip| display_addr(*ip, config.ports.dns))
        .collect();
    log::info!(
        "agent: started node {:?} ({}) in datacenter {:?}: {} shards, HTTP on {}, HTTPS on {}, DNS on {}, server RPC on {}, data in {}, fd limit {}",
        config.node_name,
        node_id,
        config.datacenter,
        shard_count,
        if config.ports.http >= 0 { http_addrs.join(", ") } else { "(disabled)".to_string() },
        if config.ports.https >= 0 { https_addrs.join(", ") } else { "(disabled)".to_string() },
        if config.ports.dns >= 0 { dns_addrs.join(", ") } else { "(disabled)".to_string() },
        rpc_address,
        data_dir.path.display(),
        fd_limit
    );

    // SIGHUP reloads what can change without a restart: the TLS certificates (Consul also
    // reloads its configuration on SIGHUP; `praetor reload` does the rest).
    let signal = loop {
        let signal = wait_for_signal(&signals);
        if signal != libc::SIGHUP {
            break signal;
        }
        reload_tls(&tls, &config.sources);
    };
    log::info!("agent: caught signal {signal}, shutting down");
    let leave = match signal {
        libc::SIGTERM => leave_on_terminate,
        libc::SIGINT => !skip_leave_on_interrupt,
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

/// Re-reads the configuration's TLS settings and their files and swaps the new certificates
/// in; on any error the ones in use stay, and the error is logged.
pub fn reload_tls(tls: &crate::tls::TlsConfigurator, sources: &crate::config::ConfigSources) {
    let settings = match crate::config::build(sources) {
        Ok(config) => config.tls,
        Err(e) => {
            log::error!("agent: reload: the configuration does not load, TLS unchanged: {e}");
            return;
        }
    };
    match tls.reload(&settings) {
        Ok(generation) => {
            log::info!("agent: reload: TLS certificates loaded (generation {generation})")
        }
        Err(e) => log::error!("agent: reload: TLS unchanged: {e}"),
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
    } = tasks;
    let id = shard.id;
    let shared = shard.shared().clone();
    let http = HttpServer::new(shard.clone(), pools.clone(), agent_channel);
    for listener in listeners.http {
        match monoio::net::TcpListener::from_std(listener) {
            Ok(listener) => {
                monoio::spawn(crate::api::server::accept_loop(http.clone(), listener));
            }
            Err(e) => log::error!("shard {id}: cannot register HTTP listener: {e}"),
        }
    }
    for listener in listeners.https {
        match monoio::net::TcpListener::from_std(listener) {
            Ok(listener) => {
                monoio::spawn(crate::api::server::accept_tls_loop(http.clone(), listener));
            }
            Err(e) => log::error!("shard {id}: cannot register HTTPS listener: {e}"),
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
    if id == 0 && shared.config.server && shared.config.tls.auto_encrypt.allow_tls {
        monoio::spawn(crate::shard::auto_encrypt::agent_ca_keeper(shard.clone()));
    }
    let dns = DnsServer::new(shard.clone(), dns_settings, pools.servers.clone());
    if !listeners.dns_udp.is_empty() || !listeners.dns_tcp.is_empty() {
        dns.start_client_feed();
    }
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
}
