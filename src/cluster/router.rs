//! The WAN router: how a server reaches the servers of another datacenter.
//!
//! Every server joins the WAN pool with Consul's tags (`role = consul`, `dc`, `port`), so
//! the pool's membership names every datacenter's servers. [`wan_router`] turns it into one
//! [`ServerManager`] per remote datacenter — the same list a client agent keeps of its own
//! servers (`servers.rs`): the server in use first, a failed one rotated to the end, new
//! ones appended in a random order, rebalanced on Consul's jittered interval by pinging —
//! and [`Router::call_typed`] makes one of Consul's typed calls on a server of a datacenter
//! through it (a yamux stream of the shard's connection to that server, as Consul's
//! `forwardDC` hands a call on), failing over within `rpc_hold_timeout` exactly as a
//! client's [`servers::call_typed`] does.
//!
//! A typed call naming another datacenter (a KV, catalog or health read with `?dc=<other>`)
//! reaches here from the typed endpoints (`api::rpc`). [`Router::forward`] carries the
//! rest in praetor's frames: the other `?dc=` requests (`api::server`), a prepared query's
//! failover executions and a DNS question about another datacenter, each one forwarded HTTP
//! request answered by the remote server's own dispatch path.
//!
//! What a datacenter is reached through is a [`Path`]. Today every datacenter is reached
//! directly (a server's RPC port, TLS under `verify_outgoing` with that datacenter's server
//! name); federation through mesh gateways would add a second kind of path whose hops are
//! gateways, and callers of [`Router::forward`] would not change.
//!
//! The pure parts ([`wan_servers`], [`order_by_distance`]) take gossip membership and
//! coordinates as arguments. Invariants: the local datacenter has no path (its requests
//! never leave the datacenter); a datacenter has a route while the pool shows any of its
//! servers not left, is routable while one of them is alive, and is listed exactly while it
//! has a route (the list and the routes are one view).

use crate::cluster::gossip::GossipHandle;
use crate::cluster::pools::{self, server_of};
use crate::cluster::servers::{self, Retry, Server, ServerManager};
use crate::gossip::coordinate::{distance_seconds, Coordinate};
use crate::gossip::{GossipEvent, MemberInfo, MemberStatus};
use crate::shard::forward::ForwardPool;
use crate::shard::rpc_client::{CallError, RpcClient};
use crate::shard::runtime::Shared;
use arc_swap::ArcSwap;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Consul's answer when no server of a datacenter is known.
pub const NO_PATH: &str = "No path to datacenter";
/// Most datacenters the router keeps; a WAN pool carrying more server tags than this is
/// misconfigured or hostile, and the rest are ignored.
pub const DATACENTERS_MAX: usize = 512;
/// How often the routes are recomputed even without membership events (events can be
/// dropped, and failed servers recover silently).
const ROUTE_REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// How one remote datacenter is reached.
pub enum Path {
    /// Straight to its servers' RPC ports, one of them in use at a time.
    Direct(ServerManager),
}

/// Where a connection to another datacenter's server is dialed ([`Router::dial_target`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DialTarget {
    /// The server's own RPC port.
    Server(SocketAddr),
    /// A mesh gateway of that datacenter, asked for server `node` by SNI.
    Gateway { gateway: SocketAddr, node: String },
}

impl Path {
    fn servers(&self) -> &ServerManager {
        match self {
            Path::Direct(servers) => servers,
        }
    }
}

/// One remote datacenter as the router knows it.
pub struct Datacenter {
    pub name: String,
    pub path: Path,
    /// When the list is next shuffled and pinged (written by the router task only).
    rebalance_at: std::sync::Mutex<Instant>,
}

/// The remote datacenters a server can reach, shared by every shard. Reads are lock-free
/// (one atomic load); only the router task swaps in a new map.
pub struct Router {
    local_datacenter: String,
    /// The WAN pool, on servers running one: coordinates for the distance order.
    wan: Option<GossipHandle>,
    /// Every other datacenter with a server in the WAN pool, by name.
    remote: ArcSwap<BTreeMap<String, Arc<Datacenter>>>,
    /// `connect.enable_mesh_gateway_wan_federation`: calls to other datacenters go through
    /// mesh gateways instead of straight to their servers.
    through_gateways: bool,
    /// With `through_gateways`: the gateways that may carry a call to each datacenter, as
    /// the gateway locator chose them last (`agent::federation`).
    gateways: ArcSwap<BTreeMap<String, Vec<SocketAddr>>>,
}

impl Router {
    pub fn new(local_datacenter: &str, wan: Option<GossipHandle>) -> Router {
        Router {
            local_datacenter: local_datacenter.to_string(),
            wan,
            remote: ArcSwap::from_pointee(BTreeMap::new()),
            through_gateways: false,
            gateways: ArcSwap::from_pointee(BTreeMap::new()),
        }
    }

    /// This router dials other datacenters through mesh gateways
    /// (`connect.enable_mesh_gateway_wan_federation`).
    pub fn through_mesh_gateways(mut self) -> Router {
        self.through_gateways = true;
        self
    }

    /// Whether calls to other datacenters go through mesh gateways.
    pub fn dials_through_gateways(&self) -> bool {
        self.through_gateways
    }

    /// Replaces the gateways that may carry a call to each datacenter (the locator's
    /// current choice); at most [`DATACENTERS_MAX`] datacenters are kept.
    pub fn set_gateways(&self, by_datacenter: BTreeMap<String, Vec<SocketAddr>>) {
        debug_assert!(
            self.through_gateways,
            "only a gateway-federated router uses gateways"
        );
        let kept = by_datacenter.into_iter().take(DATACENTERS_MAX).collect();
        self.gateways.store(Arc::new(kept));
    }

    /// One gateway toward `datacenter`, chosen at random among the locator's.
    pub fn pick_gateway(&self, datacenter: &str) -> Option<SocketAddr> {
        let gateways = self.gateways.load();
        let candidates = gateways.get(datacenter)?;
        if candidates.is_empty() {
            return None;
        }
        Some(candidates[rand::random_range(0..candidates.len())])
    }

    /// The other datacenters the locator gave gateways for (gateway mode), by name.
    pub fn gateway_datacenters(&self) -> Vec<String> {
        let gateways = self.gateways.load();
        gateways
            .iter()
            .filter(|(datacenter, found)| {
                **datacenter != self.local_datacenter && !found.is_empty()
            })
            .map(|(datacenter, _)| datacenter.clone())
            .collect()
    }

    pub fn local_datacenter(&self) -> &str {
        &self.local_datacenter
    }

    /// The remote datacenter `name`, if the WAN pool shows a server of it.
    pub fn datacenter(&self, name: &str) -> Option<Arc<Datacenter>> {
        self.remote.load().get(name).cloned()
    }

    /// Where a connection of its own (a snapshot's) to a server of `datacenter` goes: the
    /// server the router would call now, or — with WAN federation through mesh gateways —
    /// a gateway the locator picked, with that server's node name for the SNI. `None` when
    /// the datacenter, its servers or (in gateway mode) its gateways are unknown.
    pub fn dial_target(&self, datacenter: &str) -> Option<DialTarget> {
        let route = self.datacenter(datacenter)?;
        let servers = route.path.servers();
        let addr = servers.pick()?;
        if !self.through_gateways {
            return Some(DialTarget::Server(addr));
        }
        Some(DialTarget::Gateway {
            node: server_node(servers, addr, datacenter)?,
            gateway: self.pick_gateway(datacenter)?,
        })
    }

    /// Every known datacenter, this one included, by name.
    pub fn datacenters(&self) -> Vec<String> {
        let mut names: Vec<String> = self.remote.load().keys().cloned().collect();
        names.push(self.local_datacenter.clone());
        names.sort();
        names.dedup();
        names
    }

    /// Every datacenter the router knows nearest first by the WAN pool's coordinates
    /// (Consul's `GetDatacentersByDistance`): this one first (distance zero), then the
    /// others by the median estimated round trip from this server to their servers; a
    /// datacenter without coordinates last; equal distances by name.
    ///
    /// The datacenters are the router's own, not the pool's membership read afresh: a
    /// datacenter is listed from the step in which the router gave it a route, never
    /// before (`/v1/catalog/datacenters` listed a new datacenter up to a refresh interval
    /// before `?dc=` could reach it).
    pub fn datacenters_by_distance(&self) -> Vec<String> {
        let Some(wan) = &self.wan else {
            return vec![self.local_datacenter.clone()];
        };
        let routes = self.remote.load();
        let members: Vec<MemberInfo> = wan
            .members()
            .iter()
            .filter(|m| {
                server_of(m).is_some_and(|s| {
                    s.datacenter == self.local_datacenter || routes.contains_key(&s.datacenter)
                })
            })
            .cloned()
            .collect();
        let coordinates = wan.coordinates();
        let local = wan.local_coordinate();
        let mut ordered = order_by_distance(
            &self.local_datacenter,
            &members,
            &|name| coordinates.get(name).cloned(),
            &local,
        );
        // A route whose servers all left the pool since the router's last step: listed
        // last, as it still has a route until the next one.
        for name in routes.keys() {
            if !ordered.contains(name) {
                ordered.push(name.clone());
            }
        }
        debug_assert!(ordered
            .iter()
            .all(|dc| *dc == self.local_datacenter || routes.contains_key(dc)));
        ordered
    }

    /// The remote datacenters nearest first, without this one: prepared-query failover's
    /// `NearestN` candidates.
    pub fn other_datacenters_by_distance(&self) -> Vec<String> {
        self.datacenters_by_distance()
            .into_iter()
            .filter(|dc| *dc != self.local_datacenter)
            .collect()
    }

    /// Makes one of Consul's typed calls on a server of `datacenter` over `client` (the
    /// calling shard's yamux connections, byte 4 as Consul's connection pool dials),
    /// failing over among that datacenter's servers as [`servers::call_typed`] does: the
    /// same call a client agent makes to its own servers, as Consul's `forwardDC` hands the
    /// call on unchanged. `NO_PATH` as the answer's error at once when no server of it is
    /// alive.
    pub async fn call_typed(
        &self,
        client: &RpcClient,
        datacenter: &str,
        method: &str,
        body: &[u8],
        timeout: Duration,
        retry: Retry,
    ) -> Result<bytes::Bytes, CallError> {
        debug_assert_ne!(
            datacenter, self.local_datacenter,
            "the local datacenter is never routed to"
        );
        let no_path = || CallError::Remote(NO_PATH.to_string());
        let route = self.datacenter(datacenter).ok_or_else(no_path)?;
        match &route.path {
            Path::Direct(servers) => {
                if servers.pick().is_none() {
                    return Err(no_path());
                }
                if self.through_gateways {
                    return self
                        .call_through_gateways(
                            servers, client, datacenter, method, body, timeout, retry,
                        )
                        .await;
                }
                servers::call_typed_in(
                    servers,
                    client,
                    Some(datacenter),
                    method,
                    body,
                    timeout,
                    retry,
                )
                .await
            }
        }
    }

    /// [`Router::call_typed`] when datacenters federate through mesh gateways (Consul's
    /// `DialRPCViaMeshGateway`): the server in use is reached through one of the gateways
    /// the locator chose, asking for that server by its name; failover among the servers
    /// is the direct path's, and each attempt picks a gateway afresh.
    #[allow(clippy::too_many_arguments)]
    async fn call_through_gateways(
        &self,
        servers: &ServerManager,
        client: &RpcClient,
        datacenter: &str,
        method: &str,
        body: &[u8],
        timeout: Duration,
        retry: Retry,
    ) -> Result<bytes::Bytes, CallError> {
        let transport = |reason: String, sent: bool| CallError::Transport { reason, sent };
        servers::with_failover(servers, retry, async |addr| {
            let Some(node) = server_node(servers, addr, datacenter) else {
                return Err(transport(format!("server {addr} left the list"), false));
            };
            let Some(gateway) = self.pick_gateway(datacenter) else {
                let reason = format!("no mesh gateway is known to reach datacenter {datacenter:?}");
                return Err(transport(reason, false));
            };
            client
                .call_through_gateway(gateway, &node, datacenter, method, body, timeout)
                .await
                .map_err(|error| match error {
                    CallError::Transport { reason, sent } => {
                        transport(format!("through mesh gateway {gateway}: {reason}"), sent)
                    }
                    remote => remote,
                })
        })
        .await
    }

    /// Brings the routes in line with the WAN pool's membership: new datacenters get a
    /// path, known ones their alive servers, datacenters whose servers all left go.
    /// Returns the datacenters added and removed, for the log.
    fn refresh(&self, members: &[MemberInfo], now: Instant) -> (Vec<String>, Vec<String>) {
        let servers = wan_servers(members, &self.local_datacenter);
        let current = self.remote.load_full();
        let mut next: BTreeMap<String, Arc<Datacenter>> = BTreeMap::new();
        let (mut added, mut removed) = (Vec::new(), Vec::new());
        for (name, alive) in &servers {
            let route = match current.get(name) {
                Some(route) => route.clone(),
                None => {
                    added.push(name.clone());
                    Arc::new(Datacenter {
                        name: name.clone(),
                        path: Path::Direct(ServerManager::default()),
                        rebalance_at: std::sync::Mutex::new(now + first_rebalance_delay()),
                    })
                }
            };
            route.path.servers().set_alive(alive);
            next.insert(name.clone(), route);
        }
        for name in current.keys() {
            if !next.contains_key(name) {
                removed.push(name.clone());
            }
        }
        if !added.is_empty() || !removed.is_empty() {
            self.remote.store(Arc::new(next));
        }
        (added, removed)
    }
}

/// The node name of the server at `addr` among `servers` of `datacenter`, which a gateway
/// is asked for by SNI; `None` once it left the list.
fn server_node(servers: &ServerManager, addr: SocketAddr, datacenter: &str) -> Option<String> {
    let list = servers.list();
    let server = list.servers().iter().find(|server| server.addr == addr)?;
    Some(node_of_wan_member(&server.name, datacenter).to_string())
}

/// A server's node name from its WAN pool name, which is `<node>.<datacenter>` (Consul's
/// `wanfed.SplitNodeName`); a name without the suffix is the node's own.
pub fn node_of_wan_member<'a>(member: &'a str, datacenter: &str) -> &'a str {
    member
        .strip_suffix(datacenter)
        .and_then(|rest| rest.strip_suffix('.'))
        .filter(|node| !node.is_empty())
        .unwrap_or(member)
}

/// A new datacenter's list is first rebalanced after Consul's minimum reuse time.
fn first_rebalance_delay() -> Duration {
    servers::CLIENT_RPC_MIN_REUSE
}

/// The WAN pool's servers of every datacenter but `local`: the alive ones of each
/// datacenter with any server not left (a datacenter whose servers all failed stays known,
/// with an empty list). At most [`DATACENTERS_MAX`] datacenters, the first by name.
pub fn wan_servers(members: &[MemberInfo], local: &str) -> BTreeMap<String, Vec<Server>> {
    let mut out: BTreeMap<String, Vec<Server>> = BTreeMap::new();
    for member in members {
        let Some(server) = server_of(member) else {
            continue;
        };
        if server.left || server.datacenter.is_empty() || server.datacenter == local {
            continue;
        }
        if !out.contains_key(&server.datacenter) && out.len() >= DATACENTERS_MAX {
            continue;
        }
        let list = out.entry(server.datacenter.clone()).or_default();
        if !server.alive {
            continue;
        }
        if let Ok(addr) = server.rpc_address.parse() {
            list.push(Server {
                name: server.name,
                addr,
            });
        }
    }
    assert!(out.len() <= DATACENTERS_MAX);
    debug_assert!(
        !out.contains_key(local),
        "the local datacenter has no route"
    );
    out
}

/// Every datacenter with a server in `members` (and `local`), nearest first: `local` at
/// distance zero, the others at the median (the upper middle, as Consul takes it) of the
/// estimated round trips from `origin` to their servers, a server without a coordinate
/// counting as infinitely far; equal distances in name order.
pub fn order_by_distance(
    local: &str,
    members: &[MemberInfo],
    coordinate_of: &dyn Fn(&str) -> Option<Coordinate>,
    origin: &Coordinate,
) -> Vec<String> {
    let mut rtts: HashMap<String, Vec<f64>> = HashMap::new();
    rtts.insert(local.to_string(), vec![0.0]);
    for member in members {
        if member.status == MemberStatus::Left {
            continue;
        }
        let Some(server) = server_of(member) else {
            continue;
        };
        if server.datacenter.is_empty() {
            continue;
        }
        let rtt = if server.datacenter == local {
            0.0
        } else {
            coordinate_of(&member.name).map_or(f64::INFINITY, |c| distance_seconds(origin, &c))
        };
        rtts.entry(server.datacenter).or_default().push(rtt);
    }
    let mut ranked: Vec<(String, f64)> = rtts
        .into_iter()
        .map(|(dc, mut values)| {
            values.sort_by(f64::total_cmp);
            let median = values[values.len() / 2];
            (dc, median)
        })
        .collect();
    ranked.sort_by(|a, b| a.0.cmp(&b.0));
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1));
    debug_assert_eq!(ranked.first().map(|r| r.1), Some(0.0));
    ranked.into_iter().map(|(dc, _)| dc).collect()
}

/// On a server: keeps the router's routes in line with the WAN pool and rebalances each
/// remote datacenter's list on Consul's interval, until the agent shuts down. Runs on
/// shard 0 with its own connections for the pings.
pub async fn wan_router(shared: Arc<Shared>, wan: GossipHandle, router: Arc<Router>) {
    let events = wan.events();
    let pings = ForwardPool::new(shared.tls.clone(), shared.config.bind_addr);
    let mut routes_log = servers::LogLimiter::new(servers::FAILOVER_LOG_INTERVAL);
    loop {
        let members = wan.members();
        let (added, removed) = router.refresh(&members, Instant::now());
        if !added.is_empty() || !removed.is_empty() {
            if let Some(left_out) = routes_log.allow(Instant::now()) {
                log::info!(
                    "agent: WAN routes: datacenters {added:?} reachable, {removed:?} gone{}",
                    servers::left_out_note(left_out)
                );
            }
        }
        let routes = router.remote.load_full();
        for route in routes.values() {
            let due = {
                let at = route.rebalance_at.lock().map(|at| *at);
                at.is_ok_and(|at| Instant::now() >= at)
            };
            // Through gateways the pings (straight to a server's RPC port) would not
            // arrive; the list then moves only when a call fails.
            if !due || router.through_gateways {
                continue;
            }
            let servers = route.path.servers();
            pools::rebalance(servers, &pings, Some(&route.name)).await;
            let stagger_max = servers::CLIENT_RPC_MIN_REUSE / servers::CLIENT_RPC_JITTER_FRACTION;
            let stagger = stagger_max.mul_f64(rand::random_range(0.0..1.0));
            let interval =
                servers::rebalance_interval(servers.list().servers().len(), members.len(), stagger);
            if let Ok(mut at) = route.rebalance_at.lock() {
                *at = Instant::now() + interval;
            }
        }
        let membership_changed = async {
            // Any membership event is a reason to look again; user events are for others.
            while let Ok(event) = events.recv_async().await {
                if !matches!(event, GossipEvent::User(_) | GossipEvent::Query(_)) {
                    break;
                }
            }
        };
        monoio::select! {
            _ = monoio::time::sleep(ROUTE_REFRESH_INTERVAL) => {},
            _ = membership_changed => {},
        }
        if shared
            .shutting_down
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap as Tags;
    use std::net::{IpAddr, Ipv4Addr};

    fn server(name: &str, dc: &str, last_octet: u8, status: MemberStatus) -> MemberInfo {
        let mut tags = Tags::new();
        tags.insert("role".to_string(), "consul".to_string());
        tags.insert("dc".to_string(), dc.to_string());
        tags.insert("port".to_string(), "8300".to_string());
        tags.insert(
            "id".to_string(),
            format!("00000000-0000-0000-0000-0000000000{last_octet:02x}"),
        );
        MemberInfo {
            name: format!("{name}.{dc}"),
            addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, last_octet)),
            port: 8302,
            tags,
            status,
            protocol_min: 1,
            protocol_max: 5,
            protocol_cur: 2,
            delegate_min: 2,
            delegate_max: 5,
            delegate_cur: 4,
        }
    }

    fn coordinate(x: f64) -> Coordinate {
        let mut c = crate::gossip::coordinate::new_coordinate(&Default::default());
        c.vec[0] = x;
        c.height = 0.0;
        c
    }

    #[test]
    fn a_wan_members_node_name_drops_its_datacenter_suffix() {
        assert_eq!(node_of_wan_member("s1.dc1", "dc1"), "s1");
        assert_eq!(node_of_wan_member("web.prod.dc1", "dc1"), "web.prod");
        // A name without the suffix (or with nothing before it) is the node's own.
        assert_eq!(node_of_wan_member("s1", "dc1"), "s1");
        assert_eq!(node_of_wan_member(".dc1", "dc1"), ".dc1");
        assert_eq!(node_of_wan_member("s1xdc1", "dc1"), "s1xdc1");
    }

    #[test]
    fn wan_servers_group_alive_servers_by_remote_datacenter() {
        let members = vec![
            server("a", "dc1", 1, MemberStatus::Alive),
            server("b", "dc2", 2, MemberStatus::Alive),
            server("c", "dc2", 3, MemberStatus::Failed),
            server("d", "dc3", 4, MemberStatus::Failed),
            server("e", "dc4", 5, MemberStatus::Left),
        ];
        let routes = wan_servers(&members, "dc1");
        assert_eq!(
            routes.keys().map(String::as_str).collect::<Vec<_>>(),
            ["dc2", "dc3"],
            "the local one has no route; a datacenter whose servers left is gone"
        );
        assert_eq!(routes["dc2"].len(), 1);
        assert_eq!(routes["dc2"][0].addr.to_string(), "10.0.0.2:8300");
        assert!(routes["dc3"].is_empty(), "known, but nothing to route to");
    }

    #[test]
    fn routes_follow_membership_and_refuse_unknown_or_dead_datacenters() {
        let router = Router::new("dc1", None);
        let now = Instant::now();
        let (added, removed) = router.refresh(
            &[
                server("b", "dc2", 2, MemberStatus::Alive),
                server("c", "dc3", 3, MemberStatus::Failed),
            ],
            now,
        );
        assert_eq!(added, ["dc2", "dc3"]);
        assert!(removed.is_empty());
        assert_eq!(router.datacenters(), ["dc1", "dc2", "dc3"]);
        let dc2 = router.datacenter("dc2").expect("routed");
        assert_eq!(dc2.path.servers().pick().map(|a| a.port()), Some(8300));
        assert!(router
            .datacenter("dc3")
            .unwrap()
            .path
            .servers()
            .pick()
            .is_none());
        // The same datacenter keeps its list object across refreshes.
        let (added, removed) = router.refresh(&[server("b", "dc2", 2, MemberStatus::Alive)], now);
        assert!(added.is_empty());
        assert_eq!(removed, ["dc3"]);
        assert!(Arc::ptr_eq(&dc2, &router.datacenter("dc2").unwrap()));
        assert!(router.datacenter("dc3").is_none());
        assert!(
            router.datacenter("dc1").is_none(),
            "never a route to itself"
        );
    }

    #[test]
    fn datacenters_order_by_median_round_trip_with_the_local_one_first() {
        let members = vec![
            server("a", "dc1", 1, MemberStatus::Alive),
            server("b1", "far", 2, MemberStatus::Alive),
            server("b2", "far", 3, MemberStatus::Alive),
            server("b3", "far", 4, MemberStatus::Alive),
            server("c1", "near", 5, MemberStatus::Alive),
            server("d1", "blind", 6, MemberStatus::Alive),
            server("e1", "also-near", 7, MemberStatus::Alive),
            server("f1", "gone", 8, MemberStatus::Left),
        ];
        let mut coordinates: HashMap<String, Coordinate> = HashMap::new();
        // One far server is close, but the median of three says far.
        coordinates.insert("b1.far".into(), coordinate(0.001));
        coordinates.insert("b2.far".into(), coordinate(0.5));
        coordinates.insert("b3.far".into(), coordinate(0.6));
        coordinates.insert("c1.near".into(), coordinate(0.01));
        coordinates.insert("e1.also-near".into(), coordinate(0.01));
        let origin = coordinate(0.0);
        let order = order_by_distance(
            "dc1",
            &members,
            &|name| coordinates.get(name).cloned(),
            &origin,
        );
        assert_eq!(order, ["dc1", "also-near", "near", "far", "blind"]);
    }
}
