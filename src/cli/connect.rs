//! `praetor connect ca get-config|set-config`, `praetor connect proxy`, `praetor connect
//! envoy` (in `envoy.rs`), as `consul connect` names them, and praetor's `connect
//! grpc-bootstrap` (in `grpc_bootstrap.rs`).

use super::HttpFlags;
use clap::{Args, Subcommand};

#[derive(Subcommand, Debug)]
pub enum ConnectCommand {
    /// Reads and changes the Connect CA's configuration.
    #[command(subcommand)]
    Ca(Box<CaCommand>),
    /// Runs the built-in mTLS proxy for a service.
    Proxy(Box<ProxyArgs>),
    /// Runs (or configures) Envoy as a service's sidecar proxy.
    Envoy(Box<super::envoy::EnvoyArgs>),
    /// Writes a proxyless gRPC client's xDS bootstrap and keeps its certificates current.
    GrpcBootstrap(Box<super::grpc_bootstrap::GrpcBootstrapArgs>),
}

/// `connect proxy`: Consul's flags for the built-in proxy.
#[derive(Args, Debug)]
pub struct ProxyArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// The ID of a service whose sidecar proxy registration gives everything else.
    #[arg(long = "sidecar-for")]
    pub sidecar_for: Option<String>,
    /// The service this proxy represents.
    #[arg(long)]
    pub service: Option<String>,
    /// An upstream, `name:port` (listening on 127.0.0.1) or `name:address:port`; repeatable.
    /// `name@dc` names an upstream in another datacenter (praetor's; Consul's flag has no
    /// datacenter).
    #[arg(long = "upstream")]
    pub upstreams: Vec<String>,
    /// The public mTLS listener, `address:port`.
    #[arg(long)]
    pub listen: Option<String>,
    /// Where the local service listens, `address:port`.
    #[arg(long = "service-addr")]
    pub service_addr: Option<String>,
    /// Data-plane threads (praetor's; default: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// The log level: trace, debug, info, warn or err (Consul's default: info).
    #[arg(long = "log-level", default_value = "info")]
    pub log_level: String,
    /// Log lines as JSON (hclog's keys), as the agent's -log-json does.
    #[arg(long = "log-json")]
    pub log_json: bool,
    /// Run as a gateway instead of a sidecar; the built-in proxy runs `mesh` gateways.
    #[arg(long)]
    pub gateway: Option<String>,
    /// Register the gateway with the local agent before starting (as `connect envoy`).
    #[arg(long)]
    pub register: bool,
    /// The gateway's LAN address, `<ip>[:<port>]` (default port 8443).
    #[arg(long)]
    pub address: Option<String>,
    /// The gateway's WAN address, `<ip>[:<port>]` (default port 8443).
    #[arg(long = "wan-address")]
    pub wan_address: Option<String>,
    /// A bind address `<name>=<ip>:<port>` instead of the default rules (repeatable).
    #[arg(long = "bind-address")]
    pub bind_address: Vec<String>,
    /// Expose this datacenter's servers for WAN federation through the mesh gateway (with
    /// -register, as `connect envoy`).
    #[arg(long = "expose-servers")]
    pub expose_servers: bool,
}

fn socket_addr(text: &str, what: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    text.to_socket_addrs()
        .map_err(|e| format!("Invalid {what} {text:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("Invalid {what} {text:?}"))
}

fn upstream(text: &str) -> Result<crate::proxy::UpstreamSpec, String> {
    let parts: Vec<&str> = text.split(':').collect();
    let (name, bind) = match parts[..] {
        [name, port] => (name, format!("127.0.0.1:{port}")),
        [name, address, port] => (name, format!("{address}:{port}")),
        _ => return Err(format!("Invalid upstream {text:?}: expected name:port")),
    };
    let (destination, datacenter) = match name.split_once('@') {
        Some((destination, datacenter)) if !datacenter.is_empty() => {
            (destination, Some(datacenter.to_string()))
        }
        Some(_) => {
            return Err(format!(
                "Invalid upstream {text:?}: the datacenter is empty"
            ))
        }
        None => (name, None),
    };
    if destination.is_empty() {
        return Err(format!("Invalid upstream {text:?}: the name is empty"));
    }
    Ok(crate::proxy::UpstreamSpec {
        destination: destination.to_string(),
        bind: socket_addr(&bind, "upstream address")?,
        datacenter,
        mesh_gateway_mode: None,
    })
}

/// The service ID of the mesh gateway this proxy runs: registered now with `-register`
/// (by `connect envoy`'s registration, so both register a gateway the same way), else the
/// one mesh gateway registered with the agent.
fn gateway_id(args: &ProxyArgs) -> Result<Option<String>, String> {
    let Some(gateway) = args.gateway.as_deref().filter(|g| !g.is_empty()) else {
        if args.expose_servers {
            return Err("'-expose-servers' can only be used for mesh gateways".to_string());
        }
        if args.register {
            return Err("Auto-Registration can only be used for gateways".to_string());
        }
        return Ok(None);
    };
    let kind = super::envoy::gateway_kind(gateway)?;
    if kind != "mesh-gateway" {
        return Err(format!(
            "The built-in proxy runs mesh gateways only (-gateway=mesh), not {gateway:?}"
        ));
    }
    if args.sidecar_for.is_some() || !args.upstreams.is_empty() || args.listen.is_some() {
        return Err("-gateway cannot be used with -sidecar-for, -upstream or -listen".to_string());
    }
    if args.expose_servers && !args.register {
        // As `connect envoy`: the flag is a registration's meta, nothing without -register.
        return Err("'-expose-servers' requires '-register'".to_string());
    }
    let client = args.http.client()?;
    if !args.register {
        return super::envoy::lookup_gateway(&client, kind).map(|(id, _)| Some(id));
    }
    let name = args
        .service
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| kind.to_string());
    let mut argv = vec![
        "envoy".to_string(),
        "--gateway=mesh".to_string(),
        "--register".to_string(),
    ];
    for (flag, value) in [
        ("address", &args.address),
        ("wan-address", &args.wan_address),
    ] {
        if let Some(value) = value {
            argv.push(format!("--{flag}={value}"));
        }
    }
    for bind in &args.bind_address {
        argv.push(format!("--bind-address={bind}"));
    }
    if args.expose_servers {
        argv.push("--expose-servers".to_string());
    }
    let envoy_args = {
        use clap::{Args, FromArgMatches};
        let matches = super::envoy::EnvoyArgs::augment_args(clap::Command::new("envoy"))
            .try_get_matches_from(argv)
            .map_err(|e| e.to_string())?;
        super::envoy::EnvoyArgs::from_arg_matches(&matches).map_err(|e| e.to_string())?
    };
    super::envoy::register_gateway(&client, &envoy_args, kind, &name, &name)?;
    Ok(Some(name))
}

/// Builds the proxy's settings: the agent must be reachable over plain HTTP on TCP.
fn proxy_settings(args: ProxyArgs) -> Result<crate::proxy::ProxySettings, String> {
    let options = super::client::ClientOptions::resolve(&args.http, &super::client::process_env)
        .map_err(|e| format!("Error initializing client: {e}"))?;
    let super::client::Transport::Tcp(address) = &options.transport else {
        return Err("the built-in proxy reaches its agent over TCP (http://host:port)".to_string());
    };
    if options.tls.is_some() {
        return Err("the built-in proxy reaches its agent over plain HTTP".to_string());
    }
    let gateway = gateway_id(&args)?;
    Ok(crate::proxy::ProxySettings {
        gateway,
        agent: crate::proxy::http::AgentClient {
            addr: socket_addr(address, "agent address")?,
            token: options.token.clone(),
        },
        sidecar_for: args.sidecar_for,
        service: args.service,
        upstreams: args
            .upstreams
            .iter()
            .map(|u| upstream(u))
            .collect::<Result<_, _>>()?,
        listen: args
            .listen
            .as_deref()
            .map(|l| socket_addr(l, "listen address"))
            .transpose()?,
        service_addr: args
            .service_addr
            .as_deref()
            .map(|a| socket_addr(a, "service address"))
            .transpose()?,
        threads: args.threads,
    })
}

#[derive(Subcommand, Debug)]
pub enum CaCommand {
    /// Prints the CA configuration.
    GetConfig(GetConfigArgs),
    /// Replaces the CA configuration from a JSON file (rotating the root when the key
    /// type, key size or root lifetime changes).
    SetConfig(SetConfigArgs),
}

#[derive(Args, Debug)]
pub struct GetConfigArgs {
    #[command(flatten)]
    pub http: HttpFlags,
}

#[derive(Args, Debug)]
pub struct SetConfigArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// The JSON file with the new configuration (`Provider`, `Config`).
    #[arg(long = "config-file")]
    pub config_file: Option<String>,
}

pub fn run(command: ConnectCommand) -> Result<i32, String> {
    match command {
        ConnectCommand::Ca(command) => match *command {
            CaCommand::GetConfig(args) => get_config(args),
            CaCommand::SetConfig(args) => set_config(args),
        },
        ConnectCommand::Proxy(args) => {
            // The proxy logs as the agent does (hclog's line format with timestamps), to
            // stderr only.
            crate::logging::init(&crate::logging::LogSettings {
                level: &args.log_level,
                json: args.log_json,
                file: None,
            })?;
            crate::proxy::run(proxy_settings(*args)?)
        }
        ConnectCommand::Envoy(args) => super::envoy::run(*args),
        ConnectCommand::GrpcBootstrap(args) => super::grpc_bootstrap::run(*args),
    }
}

fn get_config(args: GetConfigArgs) -> Result<i32, String> {
    let client = args.http.client()?;
    let response = client
        .ok("GET", "/v1/connect/ca/configuration", None)
        .map_err(|e| format!("Error request CA configuration: {e}"))?;
    let value: serde_json::Value =
        serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"\t");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(&value, &mut serializer).map_err(|e| e.to_string())?;
    println!("{}", String::from_utf8_lossy(&out));
    Ok(0)
}

fn set_config(args: SetConfigArgs) -> Result<i32, String> {
    let Some(path) = args.config_file.filter(|p| !p.is_empty()) else {
        return Err("-config-file must be set".to_string());
    };
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("Error reading config file: {e}"))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("Error parsing config file: {e}"))?;
    let client = args.http.client()?;
    client
        .ok(
            "PUT",
            "/v1/connect/ca/configuration",
            Some(value.to_string().as_bytes()),
        )
        .map_err(|e| format!("Error setting CA configuration: {e}"))?;
    println!("Configuration updated!");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::upstream;

    #[test]
    fn an_upstream_flag_may_name_a_datacenter() {
        let local = upstream("db:9191").unwrap();
        assert_eq!(
            (
                local.destination.as_str(),
                local.bind.to_string(),
                local.datacenter
            ),
            ("db", "127.0.0.1:9191".to_string(), None)
        );
        let remote = upstream("db@dc2:127.0.0.5:9191").unwrap();
        assert_eq!(
            (remote.destination.as_str(), remote.bind.to_string()),
            ("db", "127.0.0.5:9191".to_string())
        );
        assert_eq!(remote.datacenter.as_deref(), Some("dc2"));
        assert!(upstream("db@:9191").is_err());
        assert!(upstream("@dc2:9191").is_err());
        assert!(upstream("db").is_err());
    }
}
