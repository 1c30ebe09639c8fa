//! `praetor connect envoy`: Consul's `consul connect envoy` for sidecar proxies. It finds
//! the proxy's registration on the local agent, writes Consul's Envoy bootstrap
//! (`xds::bootstrap`) and either prints it (`-bootstrap`) or execs Envoy with it.
//!
//! The bootstrap carries the ACL token, so it never appears on Envoy's command line: it is
//! written into a pipe whose read end Envoy inherits, and Envoy reads it from
//! `/dev/fd/<n>` (Consul hands it over through a named pipe for the same reason). Envoy
//! versions outside the supported range are refused with Consul's message unless
//! `-ignore-envoy-compatibility` is given.

use super::HttpFlags;
use crate::xds::bootstrap::{self, BootstrapArgs};
use clap::Args;
use serde_json::{json, Value};
use std::net::ToSocketAddrs;

/// Consul's default admin listener.
const ADMIN_BIND_DEFAULT: &str = "localhost:19000";
/// Consul's default admin access log.
const ADMIN_ACCESS_LOG_DEFAULT: &str = "/dev/null";
/// Consul's default gRPC port when the agent does not say.
const GRPC_PORT_DEFAULT: u16 = 8502;
/// Largest bootstrap handed through the pipe (the pipe is grown to hold it whole, so the
/// write never waits for a reader that has not started yet).
const BOOTSTRAP_BYTES_MAX: usize = 1 << 20;

/// `connect envoy`: Consul's flags.
#[derive(Args, Debug)]
pub struct EnvoyArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// The ID of a service instance on the local agent this proxy is the sidecar of
    /// (default: $CONNECT_SIDECAR_FOR).
    #[arg(long = "sidecar-for")]
    pub sidecar_for: Option<String>,
    /// The proxy's ID on the local agent (default: $CONNECT_PROXY_ID).
    #[arg(long = "proxy-id")]
    pub proxy_id: Option<String>,
    /// The address:port of Envoy's admin server.
    #[arg(long = "admin-bind", default_value = ADMIN_BIND_DEFAULT)]
    pub admin_bind: String,
    /// Where Envoy writes its admin access log.
    #[arg(long = "admin-access-log-path", default_value = ADMIN_ACCESS_LOG_DEFAULT)]
    pub admin_access_log_path: String,
    /// Print the bootstrap instead of running Envoy.
    #[arg(long)]
    pub bootstrap: bool,
    /// The agent's gRPC address (`host:port`, `http://…`, `https://…`; default:
    /// $CONSUL_GRPC_ADDR).
    #[arg(long = "grpc-addr")]
    pub grpc_addr: Option<String>,
    /// The CA file Envoy verifies the agent's gRPC TLS certificate with (default:
    /// $CONSUL_GRPC_CACERT).
    #[arg(long = "grpc-ca-file")]
    pub grpc_ca_file: Option<String>,
    /// The Envoy binary (default: `envoy` on $PATH).
    #[arg(long = "envoy-binary")]
    pub envoy_binary: Option<String>,
    /// Accepted as Consul accepts it: a legacy flag that changes nothing.
    #[arg(long = "envoy-version", default_value = crate::xds::ENVOY_VERSIONS[0])]
    pub envoy_version: String,
    /// Run an Envoy version outside the supported range anyway.
    #[arg(long = "ignore-envoy-compatibility")]
    pub ignore_envoy_compatibility: bool,
    /// The kind of gateway to run: `ingress`, `terminating`, `mesh` or `api`.
    #[arg(long)]
    pub gateway: Option<String>,
    /// Deprecated: `-gateway=mesh`.
    #[arg(long = "mesh-gateway")]
    pub mesh_gateway: bool,
    /// Register the gateway with the local agent before starting Envoy.
    #[arg(long)]
    pub register: bool,
    /// The name the gateway registers under (default: its kind, `ingress-gateway`…).
    #[arg(long)]
    pub service: Option<String>,
    /// The gateway's LAN address, `<ip>[:<port>]` (default port 8443).
    #[arg(long)]
    pub address: Option<String>,
    /// The gateway's WAN address, `<ip>[:<port>]` (default port 8443).
    #[arg(long = "wan-address")]
    pub wan_address: Option<String>,
    /// A bind address `<name>=<ip>:<port>` instead of the default rules (repeatable).
    #[arg(long = "bind-address")]
    pub bind_address: Vec<String>,
    /// Expose the servers for WAN federation through this mesh gateway.
    #[arg(long = "expose-servers")]
    pub expose_servers: bool,
    /// How long the gateway's check may be critical before the agent deregisters it.
    #[arg(long = "deregister-after-critical", default_value = DEREGISTER_AFTER_CRITICAL_DEFAULT)]
    pub deregister_after_critical: String,
    /// Arguments after `--`, passed to Envoy.
    #[arg(last = true)]
    pub envoy_args: Vec<String>,
}

/// Consul's default port of a gateway address given without one.
const GATEWAY_PORT_DEFAULT: u16 = 8443;
/// Consul's default `-deregister-after-critical`.
const DEREGISTER_AFTER_CRITICAL_DEFAULT: &str = "6h";
/// Consul's interval of a registered gateway's TCP check.
const GATEWAY_CHECK_INTERVAL: &str = "10s";

/// The service kind of a `-gateway` value, as Consul names them.
pub(crate) fn gateway_kind(gateway: &str) -> Result<&'static str, String> {
    match gateway {
        "api" => Ok("api-gateway"),
        "mesh" => Ok("mesh-gateway"),
        "terminating" => Ok("terminating-gateway"),
        "ingress" => Ok("ingress-gateway"),
        _ => Err("Gateway must be one of: api, terminating, mesh, or ingress".to_string()),
    }
}

/// A gateway address flag, `<host>:<port>` or an IP alone (Consul's `ServiceAddressValue`:
/// a name is taken with a port, and then refused as not bindable when registering).
fn gateway_address(raw: &str) -> Result<(String, u16), String> {
    match raw.rsplit_once(':') {
        Some((host, port))
            if !host.is_empty() && (host.starts_with('[') || !host.contains(':')) =>
        {
            let port: u16 = port
                .parse()
                .map_err(|_| format!("Error parsing port {port:?}: invalid syntax"))?;
            Ok((
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string(),
                port,
            ))
        }
        _ if raw.parse::<std::net::IpAddr>().is_ok() => Ok((raw.to_string(), GATEWAY_PORT_DEFAULT)),
        _ => Err(format!("Error parsing address {raw:?}: not an IP address")),
    }
}

/// Whether this host has `ip` on one of its interfaces (Consul's `canBind`): loopback
/// addresses and any address a socket binds to.
fn can_bind(ip: &str) -> bool {
    let Ok(ip) = ip.parse::<std::net::IpAddr>() else {
        return false;
    };
    std::net::TcpListener::bind((ip, 0)).is_ok()
}

/// Registers the gateway with the local agent (Consul's `-register`): its kind and name,
/// the LAN and WAN tagged addresses, a TCP check on the LAN address, and Consul's bind
/// settings in `Proxy.Config`.
pub(crate) fn register_gateway(
    client: &super::client::Client,
    args: &EnvoyArgs,
    kind: &str,
    name: &str,
    id: &str,
) -> Result<(), String> {
    let (lan_ip, lan_port) = match args.address.as_deref().filter(|a| !a.is_empty()) {
        Some(raw) => {
            let (ip, port) = gateway_address(raw)?;
            (Some(ip), port)
        }
        None => (None, GATEWAY_PORT_DEFAULT),
    };
    let wan = match args.wan_address.as_deref().filter(|a| !a.is_empty()) {
        Some(raw) => Some(gateway_address(raw)?),
        None => None,
    };
    let mut tagged = serde_json::Map::new();
    if let Some(ip) = &lan_ip {
        tagged.insert("lan".into(), json!({"Address": ip, "Port": lan_port}));
    }
    if let Some((ip, port)) = &wan {
        tagged.insert("wan".into(), json!({"Address": ip, "Port": port}));
    }
    let mut config = serde_json::Map::new();
    if !args.bind_address.is_empty() {
        let mut binds = serde_json::Map::new();
        for raw in &args.bind_address {
            let (bind_name, address) = raw
                .split_once('=')
                .ok_or_else(|| format!("Missing \"=\" in argument: {raw}"))?;
            let (ip, port) = gateway_address(address)?;
            binds.insert(bind_name.into(), json!({"Address": ip, "Port": port}));
        }
        config.insert("envoy_gateway_no_default_bind".into(), json!(true));
        config.insert("envoy_gateway_bind_addresses".into(), Value::Object(binds));
    } else if lan_ip.as_deref().is_some_and(can_bind)
        && wan.as_ref().is_some_and(|(ip, _)| can_bind(ip))
    {
        config.insert("envoy_gateway_no_default_bind".into(), json!(true));
        config.insert("envoy_gateway_bind_tagged_addresses".into(), json!(true));
    } else if let Some(ip) = lan_ip.as_deref().filter(|ip| !can_bind(ip)) {
        return Err(format!("The LAN address \"{ip}\" will not be bindable. Either set a bindable address or override the bind addresses with -bind-address"));
    }
    let check_ip = lan_ip.clone().unwrap_or_else(|| "127.0.0.1".to_string());
    let check_address = match check_ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(_)) => format!("[{check_ip}]:{lan_port}"),
        _ => format!("{check_ip}:{lan_port}"),
    };
    let mut registration = json!({
        "Kind": kind,
        "ID": id,
        "Name": name,
        "Address": lan_ip.clone().unwrap_or_default(),
        "Port": lan_port,
        "TaggedAddresses": tagged,
        "Check": {
            "Name": format!("{kind} listening"),
            "TCP": check_address,
            "Interval": GATEWAY_CHECK_INTERVAL,
            "DeregisterCriticalServiceAfter": args.deregister_after_critical,
        },
    });
    if !config.is_empty() {
        registration["Proxy"] = json!({ "Config": config });
    }
    if args.expose_servers {
        registration["Meta"] = json!({"consul-wan-federation": "1"});
    }
    let body = registration.to_string();
    client
        .ok("PUT", "/v1/agent/service/register", Some(body.as_bytes()))
        .map_err(|e| format!("Error registering service \"{name}\": {e}"))?;
    if !args.bootstrap {
        println!("Registered service: {name}");
    }
    Ok(())
}

/// The ID of the one gateway of `kind` registered with the local agent (Consul's
/// `LookupGatewayProxy`), and its name.
pub(crate) fn lookup_gateway(
    client: &super::client::Client,
    kind: &str,
) -> Result<(String, String), String> {
    let response = client
        .ok("GET", "/v1/agent/services", None)
        .map_err(|e| format!("Failed looking up {kind} instances: {e}"))?;
    let services: Value = serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
    let found: Vec<(String, String)> = services
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, s)| s["Kind"] == kind)
        .map(|(id, s)| {
            (
                id.clone(),
                s["Service"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    match found.as_slice() {
        [] => Err(format!("No {kind} services registered with this agent")),
        [one] => Ok(one.clone()),
        _ => Err(format!(
            "Cannot lookup the {kind}'s proxy ID because multiple are registered with the agent"
        )),
    }
}

/// Finds the one `connect-proxy` registered for `service_id` (Consul's
/// `LookupProxyIDForSidecar`).
pub(crate) fn proxy_for_sidecar(
    client: &super::client::Client,
    service_id: &str,
) -> Result<String, String> {
    let response = client
        .ok("GET", "/v1/agent/services", None)
        .map_err(|e| format!("Failed looking up sidecar proxy info for {service_id}: {e}"))?;
    let services: Value = serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
    let mut ids: Vec<String> = services
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, s)| {
            s["Kind"] == "connect-proxy" && s["Proxy"]["DestinationServiceID"] == service_id
        })
        .map(|(id, _)| id.clone())
        .collect();
    ids.sort();
    match ids.len() {
        0 => Err(format!("No sidecar proxy registered for {service_id}")),
        1 => Ok(ids.remove(0)),
        _ => Err(format!(
            "More than one sidecar proxy registered for {service_id}.\n    Start proxy with -proxy-id and one of the following IDs: {}",
            ids.join(", ")
        )),
    }
}

/// The agent's gRPC address, and whether it speaks TLS: `-grpc-addr`, else the port the
/// agent reports in `/v1/agent/self` (its TLS port first) on `localhost`.
pub(crate) fn grpc_address(
    client: &super::client::Client,
    flag: Option<&str>,
) -> Result<(String, u16, bool), String> {
    let (text, mut tls) = match flag.filter(|a| !a.is_empty()) {
        Some(addr) => (addr.to_string(), false),
        None => {
            let (port, tls) = agent_grpc_port(client).unwrap_or((GRPC_PORT_DEFAULT, false));
            (format!("localhost:{port}"), tls)
        }
    };
    let lower = text.to_ascii_lowercase();
    if lower.starts_with("https://") {
        tls = true;
    }
    if lower.starts_with("unix://") {
        return Err("praetor's agent serves gRPC on TCP only, not on a Unix socket".to_string());
    }
    let host_port = text
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_start_matches("HTTP://")
        .trim_start_matches("HTTPS://");
    let (host, port) = host_port.rsplit_once(':').ok_or_else(|| {
        format!("Invalid Consul HTTP address: address {host_port}: missing port in address")
    })?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("Invalid Consul HTTP address: invalid port {port:?}"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip = resolve_ip(host).map_err(|e| format!("Failed to resolve agent address: {e}"))?;
    Ok((ip, port, tls))
}

fn agent_grpc_port(client: &super::client::Client) -> Option<(u16, bool)> {
    let response = client.ok("GET", "/v1/agent/self", None).ok()?;
    let me: Value = serde_json::from_slice(&response.body).ok()?;
    let ports = &me["xDS"]["Ports"];
    if let Some(tls) = ports["TLS"].as_i64().filter(|p| *p > 0) {
        return Some((tls as u16, true));
    }
    if let Some(plain) = ports["Plaintext"].as_i64().filter(|p| *p > 0) {
        return Some((plain as u16, false));
    }
    if let Some(port) = me["xDS"]["Port"].as_i64().filter(|p| *p > 0) {
        return Some((port as u16, false));
    }
    me["DebugConfig"]["GRPCPort"]
        .as_i64()
        .filter(|p| *p > 0)
        .map(|p| (p as u16, false))
}

fn resolve_ip(host: &str) -> Result<String, String> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(ip.to_string());
    }
    (host, 0)
        .to_socket_addrs()
        .map_err(|e| format!("lookup {host}: {e}"))?
        .find(|a| a.is_ipv4())
        .map(|a| a.ip().to_string())
        .ok_or_else(|| format!("lookup {host}: no address"))
}

/// Builds the bootstrap from the flags and the agent's answers.
fn bootstrap_args(args: &EnvoyArgs) -> Result<BootstrapArgs, String> {
    let client = args.http.client()?;
    let env = super::client::process_env;
    let flag_or_env = |flag: &Option<String>, name: &str| {
        flag.clone().filter(|v| !v.is_empty()).or_else(|| env(name))
    };
    let proxy_id = flag_or_env(&args.proxy_id, "CONNECT_PROXY_ID");
    let sidecar_for = flag_or_env(&args.sidecar_for, "CONNECT_SIDECAR_FOR");
    let gateway = gateway_from_flags(args)?;
    let gateway_kind = gateway.as_deref().map(gateway_kind).transpose()?;
    let mut gateway_name = gateway_kind.map(|kind| {
        args.service
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| kind.to_string())
    });
    let proxy_id =
        match (&proxy_id, &sidecar_for, gateway_kind) {
            (Some(id), _, _) if !id.is_empty() => id.clone(),
            (_, Some(service), _) if !service.is_empty() => proxy_for_sidecar(&client, service)?,
            (_, _, Some(kind)) if !args.register => {
                let (id, name) = lookup_gateway(&client, kind)?;
                gateway_name = Some(name);
                id
            }
            (_, _, Some(_)) => gateway_name.clone().unwrap_or_default(),
            _ => return Err(
                "No proxy ID specified. One of -proxy-id, -sidecar-for, or -gateway is required"
                    .to_string(),
            ),
        };
    if args.register {
        let (Some(kind), Some(name)) = (gateway_kind, gateway_name.as_deref()) else {
            return Err("Auto-Registration can only be used for gateways".to_string());
        };
        register_gateway(&client, args, kind, name, &proxy_id)?;
    }
    let path = format!(
        "/v1/agent/service/{}",
        super::client::encode_path(&proxy_id)
    );
    let response = client
        .ok("GET", &path, None)
        .map_err(|e| format!("failed fetch proxy config from local agent: {e}"))?;
    let service: Value = serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
    let kind = service["Kind"].as_str().unwrap_or_default();
    let served = match kind {
        "connect-proxy" => service["Proxy"].is_object(),
        _ => kind.ends_with("-gateway"),
    };
    if !served {
        return Err("service is not a Connect proxy or gateway".to_string());
    }
    warn_unserved_kinds(kind);
    let destination = service["Proxy"]["DestinationServiceName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let source = if destination.is_empty() {
        service["Service"].as_str().unwrap_or_default().to_string()
    } else {
        destination.clone()
    };
    let (admin_ip, admin_port) = admin_address(&args.admin_bind)?;
    let grpc_addr = flag_or_env(&args.grpc_addr, "CONSUL_GRPC_ADDR");
    let (agent_address, agent_port, tls) = grpc_address(&client, grpc_addr.as_deref())?;
    let agent_ca_pem = if tls { Some(agent_ca(args)?) } else { None };
    let datacenter = service["Datacenter"].as_str().unwrap_or("dc1").to_string();
    let proxy_config = service["Proxy"]["Config"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    warn_unapplied_bootstrap_settings(&proxy_config);
    let config = crate::xds::bootstrap_config::parse(&proxy_config, &env)?;
    let ready_bind = if kind == "ingress-gateway" {
        Some(ingress_ready_bind(&service)?)
    } else {
        None
    };
    Ok(BootstrapArgs {
        config,
        ready_bind,
        proxy_cluster: if !destination.is_empty() {
            destination
        } else if kind.ends_with("-gateway") {
            source.clone()
        } else {
            proxy_id.clone()
        },
        proxy_id,
        proxy_source_service: source,
        datacenter,
        agent_address,
        agent_port,
        agent_ca_pem,
        admin_access_log_path: args.admin_access_log_path.clone(),
        admin_bind_address: admin_ip,
        admin_bind_port: admin_port,
        token: client.options.token.clone().unwrap_or_default(),
    })
}

/// The gateway kind the flags ask for: `-gateway`, or the deprecated `-mesh-gateway` (not
/// both); `-expose-servers` only for a mesh gateway being registered. Consul's errors.
fn gateway_from_flags(args: &EnvoyArgs) -> Result<Option<String>, String> {
    if args.mesh_gateway && args.gateway.is_some() {
        return Err(
            "The mesh-gateway flag is deprecated and cannot be used alongside the gateway flag"
                .to_string(),
        );
    }
    let gateway = if args.mesh_gateway {
        Some("mesh".to_string())
    } else {
        args.gateway.clone().filter(|g| !g.is_empty())
    };
    if args.expose_servers {
        if gateway.as_deref() != Some("mesh") {
            return Err("'-expose-servers' can only be used for mesh gateways".to_string());
        }
        if !args.register {
            return Err("'-expose-servers' requires '-register'".to_string());
        }
    }
    Ok(gateway)
}

/// Warns about what the proxy's registration asks that praetor's Envoy configuration does
/// not serve: an API gateway.
fn warn_unserved_kinds(kind: &str) {
    if kind == "api-gateway" {
        eprintln!(
            "[WARN]  connect envoy: praetor does not configure Envoy as a {kind} yet: it will get no listeners"
        );
    }
}

/// The bootstrap keys of `Proxy.Config` praetor does not apply (a Go template replacing
/// the whole bootstrap, the telemetry collector): say so rather than drop them silently.
/// The other `envoy_*` keys either shape the bootstrap or are the agent's (xDS) to apply
/// or warn about.
fn warn_unapplied_bootstrap_settings(config: &serde_json::Map<String, Value>) {
    let unapplied = crate::xds::bootstrap_config::unapplied_keys(config);
    if !unapplied.is_empty() {
        eprintln!(
            "[WARN]  connect envoy: Proxy.Config {} accepted but not applied to the bootstrap",
            unapplied.join(", ")
        );
    }
}

/// `-admin-bind` as an address and port, with Consul's errors.
fn admin_address(admin_bind: &str) -> Result<(String, u16), String> {
    let (admin_host, admin_port) = admin_bind.rsplit_once(':').ok_or_else(|| {
        format!("Invalid Consul HTTP address: address {admin_bind}: missing port in address")
    })?;
    let admin_port: u16 = admin_port
        .parse()
        .map_err(|_| format!("Invalid Consul HTTP address: invalid port {admin_port:?}"))?;
    let admin_ip = resolve_ip(admin_host.trim_start_matches('[').trim_end_matches(']'))
        .map_err(|e| format!("Failed to resolve admin bind address: {e}"))?;
    Ok((admin_ip, admin_port))
}

/// The CA Envoy trusts for the agent's gRPC TLS port: `-grpc-ca-file`, `CONSUL_GRPC_CACERT`,
/// `-ca-file` or `CONSUL_CACERT`, in that order; empty when none is given.
fn agent_ca(args: &EnvoyArgs) -> Result<String, String> {
    let file = args
        .grpc_ca_file
        .clone()
        .filter(|v| !v.is_empty())
        .or_else(|| super::client::process_env("CONSUL_GRPC_CACERT"))
        .or_else(|| args.http.ca_file.clone())
        .or_else(|| super::client::process_env("CONSUL_CACERT"));
    match file {
        Some(path) => {
            std::fs::read_to_string(&path).map_err(|e| format!("Error reading CA file {path}: {e}"))
        }
        None => Ok(String::new()),
    }
}

/// Consul gives an ingress gateway a readiness listener at its LAN address (the
/// registration's address and port), where its TCP check looks.
fn ingress_ready_bind(service: &Value) -> Result<(String, u16), String> {
    let address = service["Address"]
        .as_str()
        .filter(|a| !a.is_empty())
        .unwrap_or("127.0.0.1");
    let port = service["Port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
        .unwrap_or(GATEWAY_PORT_DEFAULT);
    Ok((resolve_ip(address)?, port))
}

/// The version `envoy --version` reports (`…/1.38.3/Clean/RELEASE/BoringSSL`).
fn envoy_version(binary: &str) -> Result<String, String> {
    let output = std::process::Command::new(binary)
        .arg("--version")
        .output()
        .map_err(|e| format!("Couldn't get envoy version for compatibility check: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    // `<path>  version: <commit>/<x.y.z>/<state>/<build>/<TLS library>`: the path may hold
    // numbers of its own, so only what follows `version:` counts.
    let reported = text
        .split_once("version:")
        .map_or(&*text, |(_, v)| v)
        .trim();
    reported
        .split('/')
        .find(|part| {
            let parts: Vec<&str> = part.split('.').collect();
            parts.len() == 3
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
        .ok_or_else(|| {
            format!(
                "Couldn't get envoy version for compatibility check: unexpected output {:?}",
                text.trim()
            )
        })
}

/// Consul's check: the version's minor release lies between the oldest and the newest
/// supported ones. The message names the unsupported minor release (`1.30.x`).
pub fn check_envoy_version(version: &str) -> Result<(), String> {
    let minor_of = |v: &str| -> Option<(u32, u32)> {
        let mut parts = v.split('.');
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    };
    let Some(asked) = minor_of(version) else {
        return Err(format!("There was an error checking the compatibility of the envoy version: Malformed version: {version}"));
    };
    let supported: Vec<(u32, u32)> = crate::xds::ENVOY_VERSIONS
        .iter()
        .filter_map(|v| minor_of(v))
        .collect();
    let newest = supported.iter().max().copied().unwrap_or(asked);
    let oldest = supported.iter().min().copied().unwrap_or(asked);
    if asked >= oldest && asked <= newest {
        return Ok(());
    }
    Err(format!(
        "Envoy version {}.{}.x is not supported. If there is a reason you need to use this version of envoy use the ignore-envoy-compatibility flag. Using an unsupported version of Envoy is not recommended and your experience may vary. For more information on compatibility see https://developer.hashicorp.com/consul/docs/connect/proxies/envoy#envoy-and-consul-client-agent",
        asked.0, asked.1
    ))
}

fn find_binary(flag: Option<&str>) -> Result<String, String> {
    if let Some(path) = flag.filter(|p| !p.is_empty()) {
        return Ok(path.to_string());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("envoy");
        if let Ok(meta) = std::fs::metadata(&candidate) {
            use std::os::unix::fs::PermissionsExt;
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                return Ok(candidate.to_string_lossy().into_owned());
            }
        }
    }
    Err(
        "Couldn't find envoy binary: exec: \"envoy\": executable file not found in $PATH"
            .to_string(),
    )
}

/// Writes `bootstrap` into a new pipe and returns its read end, left open across `exec`.
fn bootstrap_pipe(bootstrap: &[u8]) -> Result<i32, String> {
    if bootstrap.len() > BOOTSTRAP_BYTES_MAX {
        return Err(format!(
            "the bootstrap is larger than {BOOTSTRAP_BYTES_MAX} bytes"
        ));
    }
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into our array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!(
            "cannot create the bootstrap pipe: {}",
            std::io::Error::last_os_error()
        ));
    }
    let (read_end, write_end) = (fds[0], fds[1]);
    // SAFETY: fcntl on a descriptor we own; growing the pipe lets the whole bootstrap in
    // before Envoy reads it.
    unsafe {
        libc::fcntl(
            write_end,
            libc::F_SETPIPE_SZ,
            BOOTSTRAP_BYTES_MAX as libc::c_int,
        )
    };
    let mut written = 0;
    while written < bootstrap.len() {
        // SAFETY: writes from our buffer to a descriptor we own.
        let n = unsafe {
            libc::write(
                write_end,
                bootstrap[written..].as_ptr().cast(),
                bootstrap.len() - written,
            )
        };
        if n <= 0 {
            let error = std::io::Error::last_os_error();
            // SAFETY: closing descriptors we own.
            unsafe {
                libc::close(read_end);
                libc::close(write_end);
            }
            return Err(format!("cannot write the bootstrap pipe: {error}"));
        }
        written += n as usize;
    }
    // SAFETY: closing our write end makes Envoy see the end of the bootstrap; clearing
    // close-on-exec on the read end lets Envoy inherit it.
    unsafe {
        libc::close(write_end);
        libc::fcntl(read_end, libc::F_SETFD, 0);
    }
    Ok(read_end)
}

pub fn run(args: EnvoyArgs) -> Result<i32, String> {
    let bootstrap_args = bootstrap_args(&args)?;
    let document = bootstrap::generate(&bootstrap_args);
    let text = serde_json::to_string_pretty(&document).map_err(|e| e.to_string())?;
    if args.bootstrap {
        println!("{text}");
        return Ok(0);
    }
    let binary = find_binary(args.envoy_binary.as_deref())?;
    if !args.ignore_envoy_compatibility {
        let version = envoy_version(&binary)?;
        check_envoy_version(&version)?;
    }
    let fd = bootstrap_pipe(text.as_bytes())?;
    use std::os::unix::process::CommandExt;
    let error = std::process::Command::new(&binary)
        .arg("--config-path")
        .arg(format!("/dev/fd/{fd}"))
        .args(&args.envoy_args)
        .exec();
    Err(format!("failed to exec envoy: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_addresses_read_as_consuls_flag() {
        assert_eq!(
            gateway_address("10.0.0.1:443").unwrap(),
            ("10.0.0.1".to_string(), 443)
        );
        assert_eq!(
            gateway_address("10.0.0.1").unwrap(),
            ("10.0.0.1".to_string(), GATEWAY_PORT_DEFAULT)
        );
        assert_eq!(
            gateway_address("[::1]:21000").unwrap(),
            ("::1".to_string(), 21000)
        );
        assert_eq!(gateway_address("::1").unwrap(), ("::1".to_string(), 8443));
        assert_eq!(
            gateway_address("gw.example:443").unwrap(),
            ("gw.example".to_string(), 443)
        );
        assert!(gateway_address("gw.example")
            .unwrap_err()
            .contains("not an IP address"));
        assert!(gateway_address("10.0.0.1:http").is_err());
        assert!(!can_bind("gw.example"));
        assert!(can_bind("127.0.0.1"));
    }

    #[test]
    fn versions_outside_the_supported_minor_releases_are_refused() {
        assert!(check_envoy_version("1.38.3").is_ok());
        assert!(check_envoy_version("1.38.9").is_ok());
        assert!(check_envoy_version("1.35.0").is_ok());
        let err = check_envoy_version("1.30.2").unwrap_err();
        assert!(
            err.starts_with("Envoy version 1.30.x is not supported."),
            "{err}"
        );
        assert!(check_envoy_version("1.39.0").is_err());
        assert!(check_envoy_version("banana").is_err());
    }
}
