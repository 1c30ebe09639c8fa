//! The agent's LAN gossip pool and what the cluster learns from it.
//!
//! Every agent joins the LAN pool (serf on `serf_lan`) with the tags Consul sets — `role`
//! (`consul` for servers, `node` for clients), `dc`, `id` (node UUID), `port` (server RPC
//! port), `expect` (`bootstrap_expect`), version tags — so a real Consul or serf agent sees
//! what it expects. `-join`/`-retry-join` take a peer's serf LAN address (`host` or
//! `host:port`), as Consul's do.
//!
//! Servers find each other through the pool: [`member_watch`] turns gossip membership into
//! [`ServerInfo`]s and hands the list to the raft core thread, which bootstraps with
//! `bootstrap_expect` and keeps the Raft configuration in line with it. On a client agent,
//! [`client_router`] keeps the server manager ([`servers`]) in line with the pool instead.

use crate::cluster::gossip::{gossip_pair, DriverConfig, GossipDriver, GossipHandle};
use crate::cluster::router::Router;
use crate::cluster::servers;
use crate::config::AgentConfig;
use crate::gossip::{GossipConfig, GossipEvent, MemberInfo, MemberStatus};
use crate::proto::rpc::kind;
use crate::shard::forward::ForwardPool;
use crate::shard::runtime::{ClusterStatus, RaftInput, ServerInfo, ShardMessage, Shared};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// First retry of a failed join; doubles up to `retry_interval` (Consul's default: 30 s).
const JOIN_RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_INTERVAL_DEFAULT: Duration = Duration::from_secs(30);
/// How often the server list is recomputed even without events (events can be dropped).
const SERVER_REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// The tags Consul puts on a LAN member.
pub fn lan_tags(config: &AgentConfig, node_id: &str) -> BTreeMap<String, String> {
    let mut tags = BTreeMap::new();
    let mut set = |k: &str, v: String| {
        tags.insert(k.to_string(), v);
    };
    set(
        "role",
        if config.server { "consul" } else { "node" }.to_string(),
    );
    set("dc", config.datacenter.clone());
    set("segment", String::new());
    set("id", node_id.to_string());
    set("vsn", "2".to_string());
    set("vsn_min", "2".to_string());
    set("vsn_max", "3".to_string());
    set("build", format!("{}:praetor", crate::CONSUL_API_VERSION));
    if config.server {
        set("port", config.ports.server.max(0).to_string());
        set("raft_vsn", "3".to_string());
        if config.bootstrap_expect > 0 {
            set("expect", config.bootstrap_expect.to_string());
        }
        if config.bootstrap {
            set("bootstrap", "1".to_string());
        }
        if config.ports.serf_wan >= 0 {
            set("wan_join_port", config.ports.serf_wan.to_string());
        }
    }
    set("ft_fs", "1".to_string());
    set("ft_si", "1".to_string());
    tags
}

/// Decodes the `encrypt` key (base64 AES key, 16/24/32 bytes).
pub fn encryption_keys(config: &AgentConfig) -> Result<Vec<Vec<u8>>, String> {
    use base64::Engine;
    match config.raw_str("encrypt") {
        None | Some("") => Ok(Vec::new()),
        Some(text) => {
            let key = base64::engine::general_purpose::STANDARD
                .decode(text.trim())
                .map_err(|e| format!("encrypt: invalid base64 key: {e}"))?;
            if ![16, 24, 32].contains(&key.len()) {
                return Err(format!(
                    "encrypt: key must be 16, 24 or 32 bytes, got {}",
                    key.len()
                ));
            }
            Ok(vec![key])
        }
    }
}

/// The keyring and memberlist's two switches for rolling encryption in (Consul's
/// `encrypt_verify_incoming` / `encrypt_verify_outgoing`, both pools alike): with outgoing
/// off, an agent holding the key still sends plaintext; with incoming off, it still reads
/// plaintext (and anything the key opens). Without a key both are moot.
fn set_encryption(gossip: &mut GossipConfig, config: &AgentConfig) -> Result<(), String> {
    gossip.keys = encryption_keys(config)?;
    gossip.gossip_verify_incoming = config.tls.encrypt_verify_incoming;
    gossip.gossip_verify_outgoing = config.tls.encrypt_verify_outgoing;
    Ok(())
}

/// Builds the LAN pool's handle and driver; the driver runs on shard 0.
pub fn lan_pool(
    config: &AgentConfig,
    node_id: &str,
) -> Result<(GossipHandle, GossipDriver), String> {
    let advertise = config.advertise();
    let port = config.ports.serf_lan.max(0) as u16;
    let mut gossip = GossipConfig::lan(config.node_name.clone(), advertise, port);
    gossip.tags = lan_tags(config, node_id);
    set_encryption(&mut gossip, config)?;
    let ip = config
        .process
        .serf_lan_bind
        .unwrap_or(if config.bind_addr.is_unspecified() {
            config.bind_addr
        } else {
            advertise
        });
    let bind = SocketAddr::new(ip, port);
    Ok(gossip_pair(DriverConfig::new(gossip, bind)))
}

/// Builds a server's WAN pool (`<node>.<dc>` on `serf_wan`, Consul's WAN timings) when
/// it runs one; client agents and `-serf-wan-port=-1` have none.
pub fn wan_pool(
    config: &AgentConfig,
    node_id: &str,
) -> Result<Option<(GossipHandle, GossipDriver)>, String> {
    if !config.server || config.ports.serf_wan < 0 {
        return Ok(None);
    }
    // Other datacenters reach this server at its WAN address (`advertise_addr_wan`).
    let advertise = config.advertise_wan();
    let port = config.ports.serf_wan as u16;
    let name = format!("{}.{}", config.node_name, config.datacenter);
    let mut gossip = GossipConfig::consul_wan(name, advertise, port);
    let mut tags = lan_tags(config, node_id);
    // The WAN pool has no network segments and is itself the WAN join target.
    tags.remove("segment");
    tags.remove("wan_join_port");
    gossip.tags = tags;
    set_encryption(&mut gossip, config)?;
    // Bound where the LAN pool is (a WAN address may be a translated one this host lacks),
    // unless `serf_wan_bind` names the address.
    let ip = config
        .process
        .serf_wan_bind
        .unwrap_or(if config.bind_addr.is_unspecified() {
            config.bind_addr
        } else {
            config.advertise()
        });
    let bind = SocketAddr::new(ip, port);
    Ok(Some(gossip_pair(DriverConfig::new(gossip, bind))))
}

/// A gossip member as a Raft server, if it is one.
pub fn server_of(member: &MemberInfo) -> Option<ServerInfo> {
    if member.tags.get("role").map(String::as_str) != Some("consul") {
        return None;
    }
    let node_id = member.tags.get("id")?.clone();
    uuid::Uuid::parse_str(&node_id).ok()?;
    let port: u16 = member.tags.get("port")?.parse().ok()?;
    Some(ServerInfo {
        raft_id: crate::shard::raft_id_of(&node_id),
        node_id,
        name: member.name.clone(),
        rpc_address: SocketAddr::new(member.addr, port).to_string(),
        datacenter: member.tags.get("dc").cloned().unwrap_or_default(),
        expect: member
            .tags
            .get("expect")
            .and_then(|e| e.parse().ok())
            .unwrap_or(0),
        alive: member.status == MemberStatus::Alive,
        left: member.status == MemberStatus::Left,
    })
}

/// Keeps the raft core thread's view of the servers current.
pub async fn member_watch(shared: Arc<Shared>, handle: GossipHandle) {
    let events = handle.events();
    let mut last: Vec<ServerInfo> = Vec::new();
    loop {
        let _ = monoio::time::timeout(SERVER_REFRESH_INTERVAL, async {
            // Any membership event is a reason to recompute; user events are for others.
            while let Ok(event) = events.recv_async().await {
                if !matches!(event, GossipEvent::User(_) | GossipEvent::Query(_)) {
                    break;
                }
            }
        })
        .await;
        if shared
            .shutting_down
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        let mut servers: Vec<ServerInfo> = handle.members().iter().filter_map(server_of).collect();
        servers.sort_by_key(|s| s.raft_id);
        if servers != last && shared.config.server {
            last = servers.clone();
            if shared
                .raft_inbox
                .send_async(RaftInput::Servers(servers))
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

/// Joins the LAN pool: `start_join` addresses once, `retry_join` addresses until one
/// succeeds, with backoff from one second up to `retry_interval`, at most `retry_max` times
/// (then the agent exits with code 1, as Consul's).
pub async fn join_loop(shared: Arc<Shared>, handle: GossipHandle) {
    let config = &shared.config;
    let joins = Joins {
        start: config.start_join.clone(),
        retry: config.retry_join.clone(),
        retry_interval: raw_duration(config, "retry_interval"),
        retry_max: raw_count(config, "retry_max"),
        flags: ("-join", "-retry-join"),
    };
    joins.run(&shared, &handle).await
}

/// What to join and how to retry: the LAN pool's keys, or the WAN pool's `*_wan` ones.
struct Joins {
    start: Vec<String>,
    retry: Vec<String>,
    retry_interval: Duration,
    /// 0: no limit.
    retry_max: u64,
    /// The flag names, for the log.
    flags: (&'static str, &'static str),
}

fn raw_duration(config: &AgentConfig, key: &str) -> Duration {
    config
        .raw_str(key)
        .and_then(|t| crate::proto::duration::parse_go_duration(t).ok())
        .unwrap_or(RETRY_INTERVAL_DEFAULT)
}

fn raw_count(config: &AgentConfig, key: &str) -> u64 {
    config.raw.get(key).and_then(|v| v.as_u64()).unwrap_or(0)
}

fn raw_list(config: &AgentConfig, key: &str) -> Vec<String> {
    match config.raw.get(key) {
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        Some(serde_json::Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    }
}

impl Joins {
    async fn run(&self, shared: &Shared, handle: &GossipHandle) {
        let (start_flag, retry_flag) = self.flags;
        if !self.start.is_empty() {
            match handle.join(&self.start).await {
                Ok(n) => log::info!("agent: joined {n} nodes via {start_flag}"),
                Err(e) => log::warn!("agent: {start_flag} failed: {e}"),
            }
        }
        if self.retry.is_empty() {
            return;
        }
        let mut delay = JOIN_RETRY_FIRST.min(self.retry_interval);
        let mut attempts = 0u64;
        loop {
            attempts += 1;
            match handle.join(&self.retry).await {
                Ok(n) if n > 0 => {
                    log::info!("agent: joined {n} nodes via {retry_flag}");
                    return;
                }
                Ok(_) => log::warn!("agent: {retry_flag} reached no node; retrying in {delay:?}"),
                Err(e) => log::warn!("agent: {retry_flag} failed: {e}; retrying in {delay:?}"),
            }
            if self.retry_max > 0 && attempts >= self.retry_max {
                // Consul's agent exits with code 1 once `retry_max` attempts failed.
                // Consul's lines: "max join retry exhausted" and "max join -wan retry
                // exhausted".
                let pool = if retry_flag.ends_with("-wan") {
                    " -wan"
                } else {
                    ""
                };
                shared.stop_with_error(format!(
                    "agent: max join{pool} retry exhausted, exiting ({attempts} attempts)"
                ));
                return;
            }
            monoio::time::sleep(delay).await;
            delay = (delay * 2).min(self.retry_interval);
        }
    }
}

/// The datacenter's servers that gossip shows alive, as the server manager takes them.
fn alive_servers(members: &[MemberInfo], datacenter: &str) -> Vec<servers::Server> {
    members
        .iter()
        .filter_map(server_of)
        .filter(|s| s.alive && s.datacenter == datacenter)
        .filter_map(|s| {
            Some(servers::Server {
                addr: s.rpc_address.parse().ok()?,
                name: s.name,
            })
        })
        .collect()
}

/// On a client agent: keeps the server manager's list in line with gossip, rebalances it
/// on Consul's jittered interval, and tells every shard which server is in use (their
/// `ClusterStatus` names it as the leader they forward to; the requests themselves pick
/// from the manager, which may have rotated past it a moment earlier).
pub async fn client_router(
    shared: Arc<Shared>,
    handle: GossipHandle,
    shards: Vec<crate::shard::runtime::ShardSender>,
    manager: Arc<servers::ServerManager>,
) {
    let events = handle.events();
    let changes = manager.changes();
    // The router's own connections, for rebalance pings.
    let pings = ForwardPool::new(shared.tls.clone(), shared.config.bind_addr);
    let mut told: Option<(Option<SocketAddr>, Vec<SocketAddr>)> = None;
    let mut switch_log = servers::LogLimiter::new(servers::FAILOVER_LOG_INTERVAL);
    // Consul's first rebalance comes after the minimum reuse time.
    let mut rebalance_at = Instant::now() + servers::CLIENT_RPC_MIN_REUSE;
    loop {
        let members = handle.members();
        manager.set_alive(&alive_servers(&members, &shared.config.datacenter));
        if Instant::now() >= rebalance_at {
            rebalance(&manager, &pings, None).await;
            let stagger_max = servers::CLIENT_RPC_MIN_REUSE / servers::CLIENT_RPC_JITTER_FRACTION;
            let stagger = stagger_max.mul_f64(rand::random_range(0.0..1.0));
            let interval =
                servers::rebalance_interval(manager.list().servers().len(), members.len(), stagger);
            rebalance_at = Instant::now() + interval;
        }
        let list = manager.list();
        let view = (
            list.pick().map(|s| s.addr),
            list.servers().iter().map(|s| s.addr).collect::<Vec<_>>(),
        );
        if told.as_ref() != Some(&view) {
            // The first words are about the first server found, not the empty start.
            let first_look = told.is_none() && view.0.is_none();
            if !first_look && told.as_ref().map(|t| t.0) != Some(view.0) {
                // While servers come and go this could repeat often: a line now and then.
                let allowed = switch_log.allow(Instant::now());
                match (list.pick(), allowed) {
                    (Some(server), Some(left_out)) => log::info!(
                        "agent: forwarding to server {} ({}){}",
                        server.name,
                        server.addr,
                        servers::left_out_note(left_out)
                    ),
                    (None, Some(_)) => log::warn!("agent: no Consul servers known"),
                    (Some(server), None) => {
                        log::debug!("agent: forwarding to server {}", server.name)
                    }
                    (None, None) => log::debug!("agent: no Consul servers known"),
                }
            }
            let status = Arc::new(ClusterStatus {
                leader_rpc_address: view.0.map(|a| a.to_string()).unwrap_or_default(),
                leader_name: list.pick().map(|s| s.name.clone()).unwrap_or_default(),
                voter_rpc_addresses: view.1.iter().map(|a| a.to_string()).collect(),
                ..ClusterStatus::default()
            });
            for shard in &shards {
                let _ = shard.send_async(ShardMessage::Status(status.clone())).await;
            }
            told = Some(view);
        }
        let wait =
            SERVER_REFRESH_INTERVAL.min(rebalance_at.saturating_duration_since(Instant::now()));
        let membership_changed = async {
            // Any membership event is a reason to look again; user events are for others.
            while let Ok(event) = events.recv_async().await {
                if !matches!(event, GossipEvent::User(_) | GossipEvent::Query(_)) {
                    break;
                }
            }
        };
        monoio::select! {
            _ = monoio::time::sleep(wait) => {},
            _ = membership_changed => {},
            _ = changes.recv_async() => {},
        }
        if shared
            .shutting_down
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
    }
}

/// Consul's `RebalanceServers`: shuffles the list and moves the first server that answers a
/// ping to the front; when none answers the list stays as it is. `datacenter` names the
/// servers' datacenter when it is not this agent's (the WAN router's lists).
pub(crate) async fn rebalance(
    manager: &servers::ServerManager,
    pings: &ForwardPool,
    datacenter: Option<&str>,
) {
    let order = manager.list().shuffled(&mut |n| rand::random_range(0..n));
    let mut healthy = None;
    for server in &order {
        match pings
            .call_checked_in(
                datacenter,
                server.addr,
                kind::PING,
                b"",
                servers::PING_TIMEOUT,
            )
            .await
            .map_err(|failure| failure.reason)
        {
            Ok(frame) if frame.kind == kind::PONG => {
                healthy = Some(server);
                break;
            }
            Ok(_) => log::debug!("agent: server {} answered a ping oddly", server.name),
            Err(e) => log::debug!("agent: pinging server {} failed: {e}", server.name),
        }
    }
    if healthy.is_none() && !order.is_empty() {
        log::debug!("agent: no server answered during the rebalance");
    }
    manager.rebalanced(&order, healthy);
}

/// Where a server federated through mesh gateways joins another datacenter's WAN pool:
/// memberlist's `name/address` with the name `*.<datacenter>` (any server of it, which the
/// pool routes through a gateway by that name) and a placeholder address from TEST-NET-1
/// that is never dialed, as Consul's agent joins its primary (`192.0.2.2`, slot 0). Each
/// datacenter joined at once needs a `slot` of its own, since the pool maps the address to
/// the name until the join is done.
pub fn join_address_through_gateways(datacenter: &str, slot: usize, port: u16) -> String {
    debug_assert!(slot < JOIN_PLACEHOLDER_SLOTS);
    format!("*.{datacenter}/192.0.2.{}:{port}", 2 + slot)
}

/// Placeholder addresses for joins through gateways: 192.0.2.2 to 192.0.2.201.
const JOIN_PLACEHOLDER_SLOTS: usize = 200;

/// Federated through gateways, each other datacenter the locator knows gateways for but of
/// which the WAN pool shows no alive server is joined through them (`*.<datacenter>`,
/// placeholder slots from 1): how a server that restarted, or a primary that lost sight of
/// a secondary, finds the other datacenters again, where Consul's servers rejoin from their
/// serf snapshot (praetor keeps none).
async fn rejoin_through_gateways(wan: &GossipHandle, router: &Router, port: u16) {
    let members = wan.members();
    let datacenters = router.gateway_datacenters();
    for (slot, datacenter) in datacenters
        .iter()
        .enumerate()
        .take(JOIN_PLACEHOLDER_SLOTS - 1)
    {
        let seen = members.iter().any(|member| {
            member.status == MemberStatus::Alive
                && member.tags.get("dc").is_some_and(|dc| dc == datacenter)
        });
        if seen {
            continue;
        }
        let address = join_address_through_gateways(datacenter, slot + 1, port);
        match wan.join(&[address]).await {
            Ok(joined) => log::info!(
                "agent: joined {joined} server(s) of datacenter {datacenter:?} through mesh gateways"
            ),
            Err(e) => log::debug!(
                "agent: joining datacenter {datacenter:?} through mesh gateways failed: {e}"
            ),
        }
    }
}

/// How often a server checks that every server of its datacenter is in the WAN pool.
const WAN_FLOOD_INTERVAL: Duration = Duration::from_secs(5);

/// A server's WAN pool upkeep: joins `start_join_wan` once and `retry_join_wan` until one
/// succeeds (backing off up to `retry_interval_wan`, at most `retry_max_wan` times), and
/// floods the datacenter's servers from the LAN pool into the WAN pool through their
/// `wan_join_port` tags, as Consul's flood joiner does, so every server of a datacenter is
/// in the WAN pool without configuration.
///
/// Federated through mesh gateways, a secondary instead joins its primary through them
/// ([`join_address_through_gateways`]) until it succeeds, as in Consul, whose configuration
/// refuses WAN join addresses in that mode; and every 5 s any server joins a datacenter
/// whose gateways it knows but none of whose servers it sees alive
/// (`rejoin_through_gateways`).
pub async fn wan_loop(
    shared: Arc<Shared>,
    lan: GossipHandle,
    wan: GossipHandle,
    router: Arc<Router>,
) {
    let config = &shared.config;
    let through_gateways = config.connect.mesh_gateway_wan_federation;
    let retry = if !through_gateways {
        raw_list(config, "retry_join_wan")
    } else if config.pending.primary_datacenter != config.datacenter {
        vec![join_address_through_gateways(
            &config.pending.primary_datacenter,
            0,
            config.ports.serf_wan.max(0) as u16,
        )]
    } else {
        Vec::new()
    };
    let joins = Joins {
        start: raw_list(config, "start_join_wan"),
        retry,
        retry_interval: raw_duration(config, "retry_interval_wan"),
        retry_max: raw_count(config, "retry_max_wan"),
        flags: ("-join-wan", "-retry-join-wan"),
    };
    let joiner = wan.clone();
    let joining = shared.clone();
    monoio::spawn(async move { joins.run(&joining, &joiner).await });
    let datacenter = config.datacenter.clone();
    loop {
        if shared
            .shutting_down
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        let wan_members = wan.members();
        for member in lan.members().iter() {
            let Some(server) = server_of(member) else {
                continue;
            };
            if !server.alive || server.datacenter != datacenter || member.name == lan.local_name() {
                continue;
            }
            let wan_name = format!("{}.{}", member.name, datacenter);
            if wan_members.iter().any(|m| m.name == wan_name) {
                continue;
            }
            let Some(port) = member
                .tags
                .get("wan_join_port")
                .and_then(|p| p.parse::<u16>().ok())
            else {
                continue;
            };
            let address = SocketAddr::new(member.addr, port).to_string();
            if let Err(e) = wan.join(&[address]).await {
                log::debug!("agent: WAN flood join of {wan_name} failed: {e}");
            }
        }
        if through_gateways {
            rejoin_through_gateways(&wan, &router, config.ports.serf_wan.max(0) as u16).await;
        }
        monoio::time::sleep(WAN_FLOOD_INTERVAL).await;
    }
}
