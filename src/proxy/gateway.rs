//! The built-in proxy as a mesh gateway (`praetor connect proxy -gateway=mesh`), and the
//! mesh gateway lookups a sidecar's cross-datacenter upstreams need.
//!
//! A mesh gateway routes mTLS connections between datacenters by the server name of their
//! ClientHello and never terminates TLS: it holds no certificate and sees no plaintext, so
//! the two sidecars at the ends authenticate each other exactly as on a direct path. Per
//! connection it reads the ClientHello (at most [`hello::HELLO_BYTES_MAX`] bytes, within
//! [`HELLO_TIMEOUT`]), picks a destination by its SNI, dials it, writes the bytes it read,
//! then copies both ways with the data plane's copy loop:
//! - `[<subset>.]<service>.default.<this dc>.internal.<trust domain>`: one healthy
//!   Connect-capable instance of the service here (its sidecar, or the service when native);
//! - `<anything>.<other dc>.internal.<trust domain>`: one healthy mesh gateway of that
//!   datacenter, at its WAN address;
//! - with `-expose-servers` (the registration's `consul-wan-federation` meta, Consul's
//!   WAN federation through mesh gateways): `<node>.server.<this dc>.<domain>` goes to that
//!   server's RPC address, `server.<this dc>.<domain>` to any healthy server (the catalog's
//!   `consul` service), and `[<node>.]server.<other dc>.<domain>` to one healthy mesh gateway
//!   of that datacenter; the server's port then sees a native TLS ClientHello whose ALPN
//!   protocol says what follows (`proto::rpc_select`);
//! - anything else, an SNI-less or malformed hello: the connection is closed (a debug line,
//!   as such probes are common and not the gateway's failure).
//!
//! Control: one thread follows, by blocking queries to the local agent, the local services
//! (`/v1/catalog/services`, then each one's `/v1/health/connect/<service>?passing`) and each
//! other datacenter's mesh gateways (`/v1/catalog/datacenters`, polled, then kind
//! `mesh-gateway` services with `?dc=`), and, when it exposes the servers, the passing
//! instances of the `consul` service; every answer swaps an immutable table the data
//! plane reads. The gateway dials local instances from its LAN address's IP and remote
//! gateways from its WAN address's IP when it listens on specific addresses, so the
//! connections it makes carry its own address (what a firewall between zones allows).

use super::data::{dial_from, pipe, serve};
use super::hello::{self, Hello, HELLO_BYTES_MAX};
use super::http::AgentClient;
use super::{
    backoff, service_endpoints, MeshGatewayMode, ProxySettings, ProxyState, RETRY_MIN,
    STARTUP_TIMEOUT, WATCH_SLACK, WATCH_WAIT,
};
use crate::proto::spiffe::percent_encode;
use arc_swap::ArcSwap;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a client may take to send its whole ClientHello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes asked for per read while the ClientHello comes in.
const HELLO_READ_BYTES: usize = 4096;
/// Most destinations tried for one connection when dialing fails.
pub const DIAL_ATTEMPTS_MAX: usize = 3;
/// How often the list of datacenters is reread (`/v1/catalog/datacenters` does not block).
pub const DATACENTERS_POLL: Duration = Duration::from_secs(10);
/// Most other datacenters a gateway follows.
pub const DATACENTERS_MAX: usize = 64;
/// Most local services a gateway follows (one blocking query each).
pub const LOCAL_SERVICES_MAX: usize = 4096;
/// Most mesh gateway service names read per datacenter.
const GATEWAY_NAMES_MAX: usize = 16;
/// How long a blocking query for a datacenter's mesh gateways waits: short, as the names
/// of the gateway services are reread only between two such queries.
pub const GATEWAYS_WATCH_WAIT: Duration = Duration::from_secs(10);

/// The service meta key that marks a mesh gateway for WAN federation (Consul's; the
/// `consul` layer names it too, but the proxy sits beside it, not above it).
const WAN_FEDERATION_META_KEY: &str = "consul-wan-federation";

/// Where connections for each destination go; swapped whole by the control thread.
#[derive(Default)]
struct Routes {
    /// Local service name → its healthy Connect-capable instances.
    services: HashMap<String, Arc<Vec<SocketAddr>>>,
    /// Other datacenter → its healthy mesh gateways' WAN addresses.
    datacenters: HashMap<String, Arc<Vec<SocketAddr>>>,
    /// This datacenter's healthy servers: node name (lower case) → its RPC address. Empty
    /// unless the gateway exposes the servers.
    servers: HashMap<String, Arc<Vec<SocketAddr>>>,
    /// Every address of `servers`, for `server.<dc>.<domain>`.
    any_server: Arc<Vec<SocketAddr>>,
}

/// A server name of Consul's WAN federation: `[<node>.]server.<datacenter>.<domain>`.
#[derive(Debug, PartialEq, Eq)]
struct ServerSni<'a> {
    /// `None`: any server of the datacenter.
    node: Option<&'a str>,
    datacenter: &'a str,
}

/// Reads `sni` as a server name under `domain_suffix` (`.consul`), if it is one.
fn server_sni<'a>(sni: &'a str, domain_suffix: &str) -> Option<ServerSni<'a>> {
    let head = sni.strip_suffix(domain_suffix)?;
    let (left, datacenter) = head.rsplit_once('.')?;
    if datacenter.is_empty() {
        return None;
    }
    let node = match left.strip_suffix(".server") {
        Some(node) if !node.is_empty() => Some(node),
        Some(_) => return None,
        None if left == "server" => None,
        None => return None,
    };
    Some(ServerSni { node, datacenter })
}

/// What the gateway's data plane shares with its control thread.
struct Gateway {
    agent: AgentClient,
    datacenter: String,
    /// `.internal.<trust domain>`, lower case: the suffix of every SNI the gateway routes.
    suffix: String,
    lan_source: Option<IpAddr>,
    wan_source: Option<IpAddr>,
    /// `.<domain>` (`.consul`), lower case, when the gateway exposes the servers (Consul's
    /// `-expose-servers`); `None` routes service names only.
    servers_domain: Option<String>,
    routes: ArcSwap<Routes>,
    next: AtomicUsize,
    /// The datacenters whose gateways the federation states name (when the gateway exposes
    /// the servers): those rows win over `?dc=` answers, which under federation through
    /// gateways would need this very route to arrive.
    federated: std::sync::Mutex<HashSet<String>>,
}

/// A route's destinations and the address to dial them from.
struct Route {
    destinations: Arc<Vec<SocketAddr>>,
    source: Option<IpAddr>,
}

impl Gateway {
    /// The destinations for a ClientHello's server name, or why there are none.
    fn route(&self, sni: &str) -> Result<Route, String> {
        if let Some(head) = sni.strip_suffix(&self.suffix) {
            return self.service_route(head);
        }
        let server = self
            .servers_domain
            .as_deref()
            .and_then(|domain| server_sni(sni, domain));
        match server {
            Some(server) => self.server_route(&server),
            None if self.servers_domain.is_some() => {
                Err("neither a name of this trust domain nor a server's".to_string())
            }
            None => Err("not a name of this trust domain".to_string()),
        }
    }

    /// A server name's destinations: a server here, or another datacenter's gateways.
    fn server_route(&self, server: &ServerSni<'_>) -> Result<Route, String> {
        let routes = self.routes.load();
        if server.datacenter != self.datacenter {
            return self.remote_route(&routes, server.datacenter);
        }
        let destinations = match server.node {
            Some(node) => routes
                .servers
                .get(node)
                .ok_or_else(|| format!("no healthy server {node:?} in this datacenter"))?,
            None => &routes.any_server,
        };
        if destinations.is_empty() {
            return Err("no healthy server in this datacenter".to_string());
        }
        Ok(Route {
            destinations: destinations.clone(),
            source: self.lan_source,
        })
    }

    /// One of another datacenter's healthy mesh gateways.
    fn remote_route(&self, routes: &Routes, datacenter: &str) -> Result<Route, String> {
        let destinations = routes
            .datacenters
            .get(datacenter)
            .filter(|d| !d.is_empty())
            .ok_or_else(|| format!("no healthy mesh gateway of datacenter {datacenter:?}"))?;
        Ok(Route {
            destinations: destinations.clone(),
            source: self.wan_source,
        })
    }

    /// A service name's destinations (`head` is the SNI without the trust domain suffix).
    fn service_route(&self, head: &str) -> Result<Route, String> {
        let (rest, datacenter) = head.rsplit_once('.').ok_or("no datacenter in the name")?;
        let routes = self.routes.load();
        if datacenter != self.datacenter {
            return self.remote_route(&routes, datacenter);
        }
        let (rest, namespace) = rest.rsplit_once('.').ok_or("no namespace in the name")?;
        if namespace != "default" {
            return Err(format!("namespace {namespace:?} is not served"));
        }
        // A subset, if any, comes first; its instances are the service's.
        let service = rest.rsplit('.').next().unwrap_or(rest);
        let destinations = routes
            .services
            .get(service)
            .filter(|d| !d.is_empty())
            .ok_or_else(|| format!("no healthy Connect instance of {service:?}"))?;
        Ok(Route {
            destinations: destinations.clone(),
            source: self.lan_source,
        })
    }

    fn update(&self, change: impl Fn(&mut Routes)) {
        self.routes.rcu(|routes| {
            let mut next = Routes {
                services: routes.services.clone(),
                datacenters: routes.datacenters.clone(),
                servers: routes.servers.clone(),
                any_server: routes.any_server.clone(),
            };
            change(&mut next);
            next
        });
    }
}

/// The gateway's listeners from its registration: Consul's bind rules for a mesh gateway
/// (`envoy_gateway_bind_addresses`, else the tagged LAN and WAN addresses with
/// `envoy_gateway_bind_tagged_addresses`, else every interface at the service's port).
fn binds(registration: &serde_json::Value) -> Result<Vec<SocketAddr>, String> {
    let config = &registration["Proxy"]["Config"];
    let address = |value: &serde_json::Value| -> Result<SocketAddr, String> {
        let ip = value["Address"].as_str().unwrap_or_default();
        let port = value["Port"].as_u64().unwrap_or(0);
        let ip: IpAddr = ip
            .parse()
            .map_err(|_| format!("the gateway address {ip:?} is not an IP address"))?;
        Ok(SocketAddr::new(ip, port as u16))
    };
    let mut binds = Vec::new();
    if let Some(named) = config["envoy_gateway_bind_addresses"].as_object() {
        for value in named.values() {
            binds.push(address(value)?);
        }
    } else if config["envoy_gateway_bind_tagged_addresses"] == true {
        for name in ["lan", "wan"] {
            let tagged = &registration["TaggedAddresses"][name];
            if tagged.is_object() {
                binds.push(address(tagged)?);
            }
        }
    }
    if binds.is_empty() {
        let port = registration["Port"].as_u64().unwrap_or(0);
        binds.push(SocketAddr::new(IpAddr::from([0, 0, 0, 0]), port as u16));
    }
    binds.sort();
    binds.dedup();
    Ok(binds)
}

/// The IP of a tagged address, when it is a specific one (the source of dials that way).
fn tagged_ip(registration: &serde_json::Value, name: &str) -> Option<IpAddr> {
    registration["TaggedAddresses"][name]["Address"]
        .as_str()
        .and_then(|a| a.parse::<IpAddr>().ok())
        .filter(|ip| !ip.is_unspecified())
}

/// Runs the mesh gateway registered under `id` until the process is stopped.
pub async fn run(settings: &ProxySettings, id: &str) -> Result<i32, String> {
    let agent = settings.agent.clone();
    let answer = agent
        .get(
            &format!("/v1/agent/service/{}", percent_encode(id)),
            WATCH_SLACK,
        )
        .await?;
    if answer.status != 200 {
        return Err(format!(
            "Failed looking up the gateway {id:?}: {}",
            answer.text()
        ));
    }
    let registration = answer.json()?;
    if registration["Kind"] != "mesh-gateway" {
        return Err(format!("service {id:?} is not a mesh gateway"));
    }
    let binds = binds(&registration)?;
    let found = identity(&agent).await?;
    let datacenter = found.datacenter;
    // Consul's `-expose-servers` is this meta key on the registration; the gateway reads it
    // however the gateway was registered.
    let expose_servers = registration["Meta"][WAN_FEDERATION_META_KEY] == "1";
    let gateway = Arc::new(Gateway {
        agent,
        suffix: format!(".internal.{}", found.trust_domain.to_ascii_lowercase()),
        datacenter: datacenter.to_ascii_lowercase(),
        lan_source: tagged_ip(&registration, "lan"),
        wan_source: tagged_ip(&registration, "wan"),
        servers_domain: expose_servers.then(|| format!(".{}", found.domain)),
        routes: ArcSwap::from_pointee(Routes::default()),
        next: AtomicUsize::new(0),
        federated: std::sync::Mutex::default(),
    });
    let threads = match settings.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let listeners: Vec<((), SocketAddr, String)> =
        binds.iter().map(|b| ((), *b, String::new())).collect();
    let serving = gateway.clone();
    serve("gateway", threads, &listeners, move |(), socket, _| {
        let gateway = serving.clone();
        async move { splice(&gateway, socket).await }
    })?;
    log::info!(
        "proxy: mesh gateway {id:?} of datacenter {datacenter:?} listening on {binds:?}, {threads} thread(s){}",
        if expose_servers { ", exposing the servers" } else { "" }
    );
    if expose_servers {
        monoio::spawn(watch_servers(gateway.clone()));
        monoio::spawn(watch_federation_states(gateway.clone()));
    }
    let services = monoio::spawn(watch_services(gateway.clone()));
    watch_datacenters(gateway).await;
    services.await;
    Ok(0)
}

/// Who the gateway serves for: its agent's datacenter and DNS domain, the CA's trust domain.
struct Identity {
    datacenter: String,
    trust_domain: String,
    /// Lower case, without the trailing dot.
    domain: String,
}

/// The agent's datacenter and domain and the CA's trust domain, retried until
/// [`STARTUP_TIMEOUT`].
async fn identity(agent: &AgentClient) -> Result<Identity, String> {
    let deadline = std::time::Instant::now() + STARTUP_TIMEOUT;
    let mut retry = RETRY_MIN;
    loop {
        let attempt = async {
            let me = agent.get("/v1/agent/self", WATCH_SLACK).await?;
            if me.status != 200 {
                return Err(format!("agent self: {} {}", me.status, me.text()));
            }
            let me = me.json()?;
            let datacenter = me["Config"]["Datacenter"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let domain = me["DebugConfig"]["DNSDomain"]
                .as_str()
                .unwrap_or("consul")
                .trim_end_matches('.')
                .to_ascii_lowercase();
            let roots = agent.get("/v1/agent/connect/ca/roots", WATCH_SLACK).await?;
            if roots.status != 200 {
                return Err(format!("CA roots: {} {}", roots.status, roots.text()));
            }
            let trust_domain = roots.json()?["TrustDomain"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if datacenter.is_empty() || trust_domain.is_empty() {
                return Err("the agent has no datacenter or the CA no trust domain yet".into());
            }
            Ok(Identity {
                datacenter,
                trust_domain,
                domain,
            })
        };
        match attempt.await {
            Ok(found) => return Ok(found),
            Err(e) if std::time::Instant::now() > deadline => {
                return Err(format!("cannot start: {e}"))
            }
            Err(e) => {
                log::warn!("proxy: waiting for the agent: {e}");
                backoff(&mut retry).await;
            }
        }
    }
}

/// Reads until the received bytes hold a whole ClientHello (or cannot be one).
async fn read_hello(socket: &mut TcpStream) -> (Hello, Vec<u8>) {
    let mut received: Vec<u8> = Vec::with_capacity(HELLO_READ_BYTES);
    loop {
        match hello::parse(&received) {
            Hello::Incomplete => {}
            done => return (done, received),
        }
        let room = (HELLO_BYTES_MAX - received.len()).min(HELLO_READ_BYTES);
        let (result, chunk) = socket.read(Vec::with_capacity(room)).await;
        match result {
            Ok(0) | Err(_) => {
                return (
                    Hello::Invalid("the client closed before its hello"),
                    received,
                )
            }
            Ok(_) => received.extend_from_slice(&chunk),
        }
    }
}

/// One connection: its hello, its route, then the bytes both ways.
async fn splice(gateway: &Gateway, mut socket: TcpStream) -> Result<(), String> {
    let peer = socket.peer_addr().ok();
    let read = monoio::time::timeout(HELLO_TIMEOUT, read_hello(&mut socket)).await;
    let (sni, received) = match read {
        Ok((Hello::Complete(Some(sni)), received)) => (sni, received),
        Ok((Hello::Complete(None), _)) => {
            log::debug!("proxy: gateway connection from {peer:?} closed: no SNI");
            return Ok(());
        }
        Ok((Hello::Invalid(why), _)) => {
            log::debug!("proxy: gateway connection from {peer:?} closed: {why}");
            return Ok(());
        }
        Ok((Hello::Incomplete, _)) | Err(_) => {
            log::debug!(
                "proxy: gateway connection from {peer:?} closed: no ClientHello within {} ms",
                HELLO_TIMEOUT.as_millis()
            );
            return Ok(());
        }
    };
    let route = match gateway.route(&sni) {
        Ok(route) => route,
        Err(why) => {
            log::debug!("proxy: gateway connection for {sni:?} closed: {why}");
            return Ok(());
        }
    };
    let remote = dial_any(&gateway.next, &route.destinations, route.source).await?;
    let (remote_read, mut remote_write) = monoio::io::Splitable::into_split(remote);
    let (result, _) = remote_write.write_all(received).await;
    result.map_err(|e| format!("forwarding the hello for {sni:?}: {e}"))?;
    let (client_read, client_write) = monoio::io::Splitable::into_split(socket);
    pipe(client_read, client_write, remote_read, remote_write).await;
    Ok(())
}

/// Dials the destinations round robin, trying at most [`DIAL_ATTEMPTS_MAX`] of them.
pub async fn dial_any(
    next: &AtomicUsize,
    destinations: &[SocketAddr],
    source: Option<IpAddr>,
) -> Result<TcpStream, String> {
    assert!(!destinations.is_empty(), "a route has destinations");
    let first = next.fetch_add(1, Ordering::Relaxed);
    let mut last = String::new();
    for attempt in 0..destinations.len().min(DIAL_ATTEMPTS_MAX) {
        let to = destinations[(first + attempt) % destinations.len()];
        match dial_from(to, source).await {
            Ok(stream) => return Ok(stream),
            Err(e) => {
                log::debug!("proxy: {e}; trying the next destination");
                last = e;
            }
        }
    }
    Err(last)
}

/// Follows the local services' healthy Connect-capable instances: one watcher per service,
/// started when the service appears and ending after it is gone.
async fn watch_services(gateway: Arc<Gateway>) {
    let watched: Rc<RefCell<HashSet<String>>> = Rc::default();
    let mut retry = RETRY_MIN;
    let mut index = 0;
    loop {
        let path = format!(
            "/v1/catalog/services?index={index}&wait={}s",
            WATCH_WAIT.as_secs()
        );
        let names: HashSet<String> = match gateway.agent.get(&path, WATCH_WAIT + WATCH_SLACK).await
        {
            Ok(answer) if answer.status == 200 => {
                retry = RETRY_MIN;
                index = answer.index;
                let Ok(value) = answer.json() else { continue };
                value
                    .as_object()
                    .into_iter()
                    .flat_map(|m| m.keys().cloned())
                    .take(LOCAL_SERVICES_MAX)
                    .collect()
            }
            Ok(answer) => {
                log::warn!(
                    "proxy: gateway services: {} {}",
                    answer.status,
                    answer.text()
                );
                backoff(&mut retry).await;
                continue;
            }
            Err(e) => {
                log::warn!("proxy: gateway services: {e}");
                backoff(&mut retry).await;
                continue;
            }
        };
        let mut current = watched.borrow_mut();
        current.retain(|name| names.contains(name));
        for name in names {
            if current.insert(name.clone()) {
                monoio::spawn(watch_service(gateway.clone(), watched.clone(), name));
            }
        }
    }
}

async fn watch_service(gateway: Arc<Gateway>, watched: Rc<RefCell<HashSet<String>>>, name: String) {
    let mut retry = RETRY_MIN;
    let mut index = 0;
    while watched.borrow().contains(&name) {
        let path = format!(
            "/v1/health/connect/{}?passing&index={index}&wait={}s",
            percent_encode(&name),
            WATCH_WAIT.as_secs()
        );
        match gateway.agent.get(&path, WATCH_WAIT + WATCH_SLACK).await {
            Ok(answer) if answer.status == 200 => {
                retry = RETRY_MIN;
                index = answer.index;
                let Ok(rows) = answer.json() else { continue };
                let endpoints = Arc::new(service_endpoints(&rows));
                let key = name.to_ascii_lowercase();
                gateway.update(|routes| {
                    routes.services.insert(key.clone(), endpoints.clone());
                });
            }
            Ok(answer) => {
                log::warn!(
                    "proxy: gateway service {name}: {} {}",
                    answer.status,
                    answer.text()
                );
                backoff(&mut retry).await;
            }
            Err(e) => {
                log::warn!("proxy: gateway service {name}: {e}");
                backoff(&mut retry).await;
            }
        }
    }
    let key = name.to_ascii_lowercase();
    gateway.update(|routes| {
        routes.services.remove(&key);
    });
}

/// Follows this datacenter's healthy servers (the passing instances of the `consul`
/// service, at its RPC port) for the server names the gateway exposes.
async fn watch_servers(gateway: Arc<Gateway>) {
    let mut retry = RETRY_MIN;
    let mut index = 0;
    loop {
        let path = format!(
            "/v1/health/service/consul?passing&index={index}&wait={}s",
            WATCH_WAIT.as_secs()
        );
        match gateway.agent.get(&path, WATCH_WAIT + WATCH_SLACK).await {
            Ok(answer) if answer.status == 200 => {
                retry = RETRY_MIN;
                index = answer.index;
                let Ok(rows) = answer.json() else { continue };
                let servers = server_addresses(&rows);
                let any_server =
                    Arc::new(servers.values().flat_map(|a| a.iter().copied()).collect());
                gateway.update(|routes| {
                    routes.servers = servers.clone();
                    routes.any_server = Arc::clone(&any_server);
                });
            }
            Ok(answer) => {
                log::warn!(
                    "proxy: gateway servers: {} {}",
                    answer.status,
                    answer.text()
                );
                backoff(&mut retry).await;
            }
            Err(e) => {
                log::warn!("proxy: gateway servers: {e}");
                backoff(&mut retry).await;
            }
        }
    }
}

/// Node name (lower case) → RPC address, from health rows of the `consul` service.
fn server_addresses(rows: &serde_json::Value) -> HashMap<String, Arc<Vec<SocketAddr>>> {
    let mut servers = HashMap::new();
    for row in rows.as_array().into_iter().flatten() {
        let Some(node) = row["Node"]["Node"].as_str() else {
            continue;
        };
        let one = serde_json::Value::Array(vec![row.clone()]);
        let addresses = service_endpoints(&one);
        if !addresses.is_empty() {
            servers.insert(node.to_ascii_lowercase(), Arc::new(addresses));
        }
    }
    servers
}

/// Follows the federation states' mesh gateways (`/v1/internal/federation-states/
/// mesh-gateways`, this datacenter's replicated copy), as Consul's mesh gateway does when
/// it carries server traffic: every other datacenter named there is reached through the
/// gateways its row lists, at their WAN addresses.
async fn watch_federation_states(gateway: Arc<Gateway>) {
    let mut retry = RETRY_MIN;
    let mut index = 0;
    loop {
        let path = format!(
            "/v1/internal/federation-states/mesh-gateways?index={index}&wait={}s",
            WATCH_WAIT.as_secs()
        );
        match gateway.agent.get(&path, WATCH_WAIT + WATCH_SLACK).await {
            Ok(answer) if answer.status == 200 => {
                retry = RETRY_MIN;
                index = answer.index;
                let Ok(by_datacenter) = answer.json() else {
                    continue;
                };
                let found: HashMap<String, Arc<Vec<SocketAddr>>> = by_datacenter
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(datacenter, rows)| (datacenter.to_ascii_lowercase(), rows))
                    .filter(|(datacenter, _)| *datacenter != gateway.datacenter)
                    .take(DATACENTERS_MAX)
                    .map(|(datacenter, rows)| {
                        let rows = rows.as_array().cloned().unwrap_or_default();
                        (datacenter, Arc::new(gateway_addresses(&rows, "wan")))
                    })
                    .collect();
                if let Ok(mut federated) = gateway.federated.lock() {
                    *federated = found.keys().cloned().collect();
                }
                gateway.update(|routes| {
                    for (datacenter, addresses) in &found {
                        routes
                            .datacenters
                            .insert(datacenter.clone(), addresses.clone());
                    }
                });
            }
            Ok(answer) => {
                log::warn!(
                    "proxy: gateway federation states: {} {}",
                    answer.status,
                    answer.text()
                );
                backoff(&mut retry).await;
            }
            Err(e) => {
                log::warn!("proxy: gateway federation states: {e}");
                backoff(&mut retry).await;
            }
        }
    }
}

/// Follows the list of datacenters and, for each other one, its mesh gateways.
async fn watch_datacenters(gateway: Arc<Gateway>) {
    let mut watched: HashSet<String> = HashSet::new();
    loop {
        match gateway
            .agent
            .get("/v1/catalog/datacenters", WATCH_SLACK)
            .await
        {
            Ok(answer) if answer.status == 200 => {
                let list = answer.json().unwrap_or_default();
                for datacenter in list.as_array().into_iter().flatten() {
                    let Some(datacenter) = datacenter.as_str() else {
                        continue;
                    };
                    let datacenter = datacenter.to_ascii_lowercase();
                    if datacenter == gateway.datacenter || watched.contains(&datacenter) {
                        continue;
                    }
                    if watched.len() >= DATACENTERS_MAX {
                        log::warn!("proxy: gateway follows at most {DATACENTERS_MAX} datacenters; {datacenter:?} is left out");
                        continue;
                    }
                    watched.insert(datacenter.clone());
                    monoio::spawn(watch_remote_gateways(gateway.clone(), datacenter));
                }
            }
            Ok(answer) => log::warn!(
                "proxy: gateway datacenters: {} {}",
                answer.status,
                answer.text()
            ),
            Err(e) => log::warn!("proxy: gateway datacenters: {e}"),
        }
        monoio::time::sleep(DATACENTERS_POLL).await;
    }
}

async fn watch_remote_gateways(gateway: Arc<Gateway>, datacenter: String) {
    let mut retry = RETRY_MIN;
    let mut index = 0;
    loop {
        match mesh_gateways(&gateway.agent, Some(&datacenter), index).await {
            Ok((new_index, rows)) => {
                retry = RETRY_MIN;
                index = new_index;
                let addresses = Arc::new(gateway_addresses(&rows, "wan"));
                let federated = gateway
                    .federated
                    .lock()
                    .is_ok_and(|federated| federated.contains(&datacenter));
                if federated {
                    continue;
                }
                gateway.update(|routes| {
                    routes
                        .datacenters
                        .insert(datacenter.clone(), addresses.clone());
                });
            }
            Err(e) => {
                log::warn!("proxy: mesh gateways of {datacenter}: {e}");
                backoff(&mut retry).await;
            }
        }
    }
}

/// The healthy mesh gateways of a datacenter (the agent's own when `datacenter` is none),
/// as health rows: the names of its `mesh-gateway` services, then their passing instances,
/// blocking on the first name's past `index` for up to [`GATEWAYS_WATCH_WAIT`].
pub async fn mesh_gateways(
    agent: &AgentClient,
    datacenter: Option<&str>,
    index: u64,
) -> Result<(u64, Vec<serde_json::Value>), String> {
    let dc = datacenter.map_or(String::new(), |dc| format!("&dc={}", percent_encode(dc)));
    let filter = percent_encode("ServiceKind == \"mesh-gateway\"");
    let answer = agent
        .get(
            &format!("/v1/catalog/services?filter={filter}{dc}"),
            WATCH_SLACK,
        )
        .await?;
    if answer.status != 200 {
        return Err(format!("{} {}", answer.status, answer.text()));
    }
    let mut names: Vec<String> = answer
        .json()?
        .as_object()
        .into_iter()
        .flat_map(|m| m.keys().cloned())
        .take(GATEWAY_NAMES_MAX)
        .collect();
    names.sort();
    if names.is_empty() {
        monoio::time::sleep(GATEWAYS_WATCH_WAIT).await;
        return Ok((0, Vec::new()));
    }
    let mut rows = Vec::new();
    let mut first_index = 0;
    for (i, name) in names.iter().enumerate() {
        let blocking = if i == 0 {
            format!("&index={index}&wait={}s", GATEWAYS_WATCH_WAIT.as_secs())
        } else {
            String::new()
        };
        let path = format!(
            "/v1/health/service/{}?passing{dc}{blocking}",
            percent_encode(name)
        );
        let answer = agent.get(&path, GATEWAYS_WATCH_WAIT + WATCH_SLACK).await?;
        if answer.status != 200 {
            return Err(format!("{} {}", answer.status, answer.text()));
        }
        if i == 0 {
            first_index = answer.index;
        }
        let value = answer.json()?;
        rows.extend(
            value
                .as_array()
                .into_iter()
                .flatten()
                .filter(|row| row["Service"]["Kind"] == "mesh-gateway")
                .cloned(),
        );
    }
    Ok((first_index, rows))
}

/// Each gateway's tagged address `name` (`lan` or `wan`), else its service address.
pub fn gateway_addresses(rows: &[serde_json::Value], name: &str) -> Vec<SocketAddr> {
    let mut addresses = Vec::new();
    for row in rows {
        let tagged = &row["Service"]["TaggedAddresses"][name];
        let found = tagged["Address"]
            .as_str()
            .and_then(|a| a.parse::<IpAddr>().ok())
            .map(|ip| SocketAddr::new(ip, tagged["Port"].as_u64().unwrap_or(0) as u16));
        match found {
            Some(address) => addresses.push(address),
            None => addresses.extend(service_endpoints(&serde_json::Value::Array(vec![
                row.clone()
            ]))),
        }
    }
    addresses
}

/// The mode of a cross-datacenter upstream from its discovery chain, compiled in the
/// upstream's datacenter with the registration's mode as the override; none when the
/// chain cannot be read (with a warning), the registration's own mode then applying.
async fn chain_mode(state: &ProxyState, i: usize, datacenter: &str) -> MeshGatewayMode {
    let spec = &state.upstreams[i].spec;
    let body = match spec.mesh_gateway_mode.as_deref() {
        Some(mode) => serde_json::json!({"OverrideMeshGateway": {"Mode": mode}}).to_string(),
        None => String::new(),
    };
    let path = format!(
        "/v1/discovery-chain/{}?compile-dc={}",
        percent_encode(&spec.destination),
        percent_encode(datacenter)
    );
    let fallback = || MeshGatewayMode::parse(spec.mesh_gateway_mode.as_deref().unwrap_or(""));
    let answer = match state
        .agent
        .request("POST", &path, body.as_bytes(), WATCH_SLACK)
        .await
    {
        Ok(answer) if answer.status == 200 => answer,
        Ok(answer) => {
            log::warn!(
                "proxy: discovery chain of {}: {} {}",
                spec.destination,
                answer.status,
                answer.text()
            );
            return fallback();
        }
        Err(e) => {
            log::warn!("proxy: discovery chain of {}: {e}", spec.destination);
            return fallback();
        }
    };
    let Ok(value) = answer.json() else {
        return fallback();
    };
    let targets = &value["Chain"]["Targets"];
    let target = targets
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .find(|t| t["Service"] == spec.destination.as_str() && t["Datacenter"] == datacenter);
    match target {
        Some(target) => {
            MeshGatewayMode::parse(target["MeshGateway"]["Mode"].as_str().unwrap_or(""))
        }
        None => fallback(),
    }
}

/// Follows the endpoints of upstream `i` in another datacenter, by its mesh gateway mode:
/// the remote sidecars (`none`), this datacenter's gateways (`local`) or the remote
/// datacenter's (`remote`). Each round rereads the mode, so a changed config entry applies
/// within [`CROSS_DC_WATCH_WAIT`](super::CROSS_DC_WATCH_WAIT).
pub async fn watch_remote_upstream(state: Arc<ProxyState>, i: usize, datacenter: String) {
    let upstream = &state.upstreams[i];
    let mut retry = RETRY_MIN;
    let mut index = 0;
    let mut last_mode = None;
    loop {
        let mode = chain_mode(&state, i, &datacenter).await;
        if last_mode != Some(mode) {
            log::info!(
                "proxy: upstream {} in {datacenter}: mesh gateway mode {mode:?}",
                upstream.spec.destination
            );
            last_mode = Some(mode);
            index = 0;
        }
        let found = match mode {
            MeshGatewayMode::None => {
                let path = format!(
                    "/v1/health/connect/{}?passing&dc={}&index={index}&wait={}s",
                    percent_encode(&upstream.spec.destination),
                    percent_encode(&datacenter),
                    super::CROSS_DC_WATCH_WAIT.as_secs()
                );
                match state
                    .agent
                    .get(&path, super::CROSS_DC_WATCH_WAIT + WATCH_SLACK)
                    .await
                {
                    Ok(answer) if answer.status == 200 => answer
                        .json()
                        .map(|rows| (answer.index, service_endpoints(&rows))),
                    Ok(answer) => Err(format!("{} {}", answer.status, answer.text())),
                    Err(e) => Err(e),
                }
            }
            MeshGatewayMode::Local => mesh_gateways(&state.agent, None, index)
                .await
                .map(|(index, rows)| (index, gateway_addresses(&rows, "lan"))),
            MeshGatewayMode::Remote => mesh_gateways(&state.agent, Some(&datacenter), index)
                .await
                .map(|(index, rows)| (index, gateway_addresses(&rows, "wan"))),
        };
        match found {
            Ok((new_index, endpoints)) => {
                retry = RETRY_MIN;
                index = new_index;
                upstream.endpoints.store(Arc::new(endpoints));
            }
            Err(e) => {
                log::warn!(
                    "proxy: upstream {} in {datacenter}: {e}",
                    upstream.spec.destination
                );
                backoff(&mut retry).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gateway() -> Gateway {
        let mut routes = Routes::default();
        routes.services.insert(
            "db".into(),
            Arc::new(vec!["127.0.0.9:21000".parse().unwrap()]),
        );
        routes.datacenters.insert(
            "dc2".into(),
            Arc::new(vec!["127.0.0.8:8443".parse().unwrap()]),
        );
        Gateway {
            agent: AgentClient {
                addr: "127.0.0.1:1".parse().unwrap(),
                token: None,
            },
            datacenter: "dc1".into(),
            suffix: ".internal.abc.consul".into(),
            lan_source: None,
            wan_source: None,
            servers_domain: None,
            routes: ArcSwap::from_pointee(routes),
            next: AtomicUsize::new(0),
            federated: std::sync::Mutex::default(),
        }
    }

    fn exposing() -> Gateway {
        let mut g = gateway();
        g.servers_domain = Some(".consul".into());
        g.update(|routes| {
            let s1: SocketAddr = "127.0.0.21:8300".parse().unwrap();
            routes.servers.insert("s1".into(), Arc::new(vec![s1]));
            routes.any_server = Arc::new(vec![s1]);
        });
        g
    }

    #[test]
    fn server_names_parse_as_consuls_wan_federation_names() {
        let parse = |sni| server_sni(sni, ".consul");
        assert_eq!(
            parse("s1.server.dc1.consul"),
            Some(ServerSni {
                node: Some("s1"),
                datacenter: "dc1"
            })
        );
        assert_eq!(
            parse("server.dc2.consul"),
            Some(ServerSni {
                node: None,
                datacenter: "dc2"
            })
        );
        for not_a_server in [
            "s1.client.dc1.consul",
            ".server.dc1.consul",
            "server..consul",
            "s1.server.dc1.example",
            "consul",
            "dc1.consul",
        ] {
            assert_eq!(parse(not_a_server), None, "{not_a_server}");
        }
    }

    #[test]
    fn an_exposing_gateway_routes_server_names() {
        let g = exposing();
        let first = |sni: &str| g.route(sni).map(|r| r.destinations[0].to_string());
        assert_eq!(first("s1.server.dc1.consul").unwrap(), "127.0.0.21:8300");
        assert_eq!(first("server.dc1.consul").unwrap(), "127.0.0.21:8300");
        assert_eq!(first("s9.server.dc2.consul").unwrap(), "127.0.0.8:8443");
        assert_eq!(first("server.dc2.consul").unwrap(), "127.0.0.8:8443");
        assert!(first("s2.server.dc1.consul").is_err());
        assert!(first("server.dc3.consul").is_err());
        // Service names still route as before.
        assert_eq!(
            first("db.default.dc1.internal.abc.consul").unwrap(),
            "127.0.0.9:21000"
        );
        // Without -expose-servers a server name is refused.
        assert!(gateway().route("s1.server.dc1.consul").is_err());
        assert!(gateway().route("server.dc2.consul").is_err());
    }

    #[test]
    fn server_addresses_come_from_the_consul_services_rows() {
        let rows = json!([
            {"Node": {"Node": "S1", "Address": "10.0.0.1"}, "Service": {"Address": "", "Port": 8300}},
            {"Node": {"Node": "s2", "Address": "10.0.0.2"}, "Service": {"Address": "10.0.1.2", "Port": 8301}},
            {"Node": {"Address": "10.0.0.3"}, "Service": {"Port": 8300}}
        ]);
        let servers = server_addresses(&rows);
        assert_eq!(servers.len(), 2);
        assert_eq!(servers["s1"][0].to_string(), "10.0.0.1:8300");
        assert_eq!(servers["s2"][0].to_string(), "10.0.1.2:8301");
    }

    #[test]
    fn server_names_route_to_local_services_or_other_datacenters() {
        let g = gateway();
        let local = |sni: &str| g.route(sni).map(|r| r.destinations[0].to_string());
        assert_eq!(
            local("db.default.dc1.internal.abc.consul").unwrap(),
            "127.0.0.9:21000"
        );
        assert_eq!(
            local("v1.db.default.dc1.internal.abc.consul").unwrap(),
            "127.0.0.9:21000"
        );
        assert_eq!(
            local("web.default.dc2.internal.abc.consul").unwrap(),
            "127.0.0.8:8443"
        );
        assert!(local("web.default.dc1.internal.abc.consul").is_err());
        assert!(local("db.default.dc3.internal.abc.consul").is_err());
        assert!(local("db.default.dc1.internal.other.consul").is_err());
        assert!(local("db.team.dc1.internal.abc.consul").is_err());
        assert!(local("example.com").is_err());
    }

    #[test]
    fn binds_follow_consuls_gateway_rules() {
        let tagged = json!({"Port": 8443, "TaggedAddresses": {
            "lan": {"Address": "127.0.0.5", "Port": 8443},
            "wan": {"Address": "127.0.0.5", "Port": 8444}},
            "Proxy": {"Config": {"envoy_gateway_bind_tagged_addresses": true}}});
        assert_eq!(
            binds(&tagged).unwrap(),
            vec![
                "127.0.0.5:8443".parse().unwrap(),
                "127.0.0.5:8444".parse().unwrap()
            ]
        );
        let plain = json!({"Port": 8443});
        assert_eq!(
            binds(&plain).unwrap(),
            vec!["0.0.0.0:8443".parse().unwrap()]
        );
        let named = json!({"Port": 1, "Proxy": {"Config": {"envoy_gateway_bind_addresses":
            {"a": {"Address": "127.0.0.6", "Port": 9000}}}}});
        assert_eq!(
            binds(&named).unwrap(),
            vec!["127.0.0.6:9000".parse().unwrap()]
        );
    }

    #[test]
    fn gateway_addresses_prefer_the_tagged_one() {
        let rows = vec![
            json!({"Node": {"Address": "10.0.0.1"}, "Service": {"Address": "10.0.0.2", "Port": 8443,
                "TaggedAddresses": {"wan": {"Address": "192.0.2.1", "Port": 443}}}}),
            json!({"Node": {"Address": "10.0.0.3"}, "Service": {"Address": "", "Port": 8443}}),
        ];
        assert_eq!(
            gateway_addresses(&rows, "wan"),
            vec![
                "192.0.2.1:443".parse().unwrap(),
                "10.0.0.3:8443".parse().unwrap()
            ]
        );
    }
}
