//! `praetor connect grpc-bootstrap`: the bootstrap of a proxyless gRPC client (gRPC's
//! `GRPC_XDS_BOOTSTRAP` file) and the certificates it reads, so a gRPC application takes a
//! sidecar's place in the mesh (praetor's; Consul has no such command).
//!
//! The client speaks for a `connect-proxy` registration (`-proxy-id`, or `-sidecar-for` as
//! `connect envoy` finds it): its upstreams are what the client can dial (`xds:///<upstream
//! id>`) and its destination service is the identity the client's leaf certificate carries.
//! The command writes into `-dir`:
//! - `bootstrap.json`: the agent's gRPC address as the xDS server (`server_features:
//!   ["xds_v3"]`), the proxy's ID as the node ID, and a `file_watcher` certificate provider
//!   named as the clusters name it over the three files below;
//! - `leaf.pem`, `leaf-key.pem`: the destination's leaf from
//!   `/v1/agent/connect/ca/leaf/<service>`; `roots.pem`: every root of
//!   `/v1/agent/connect/ca/roots`, active first.
//!
//! With `-once` it writes them and exits; otherwise it keeps the certificates current with
//! blocking queries (the agent renews a leaf before it expires, and a root rotation shows
//! in the roots) until it is stopped. Every file is replaced by a rename, so gRPC's watcher
//! never reads half a file. The key file is created with mode 0600.

use super::HttpFlags;
use crate::xds::resources::grpc::CERTIFICATE_PROVIDER_INSTANCE;
use clap::Args;
use serde_json::{json, Value};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one blocking query for the leaf or the roots waits at the agent.
const BLOCKING_WAIT: Duration = Duration::from_secs(300);
/// The read timeout of a blocking query: the wait plus Consul's jitter and some slack.
const BLOCKING_READ_TIMEOUT: Duration = Duration::from_secs(330);
/// The pause after a failed query before asking again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// How often gRPC's file watcher reads the certificate files again, in gRPC's JSON
/// duration syntax.
const FILE_REFRESH_INTERVAL: &str = "10s";

/// The files written into `-dir`.
pub const BOOTSTRAP_FILE: &str = "bootstrap.json";
pub const LEAF_FILE: &str = "leaf.pem";
pub const KEY_FILE: &str = "leaf-key.pem";
pub const ROOTS_FILE: &str = "roots.pem";

/// `connect grpc-bootstrap`'s flags, in `connect envoy`'s style.
#[derive(Args, Debug)]
pub struct GrpcBootstrapArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// The ID of a service instance whose sidecar registration the client speaks for
    /// (default: $CONNECT_SIDECAR_FOR).
    #[arg(long = "sidecar-for")]
    pub sidecar_for: Option<String>,
    /// The `connect-proxy` registration the client speaks for (default: $CONNECT_PROXY_ID).
    #[arg(long = "proxy-id")]
    pub proxy_id: Option<String>,
    /// The agent's gRPC address (`host:port`, `http://…`, `https://…`; default:
    /// $CONSUL_GRPC_ADDR, else the agent's gRPC port on localhost).
    #[arg(long = "grpc-addr")]
    pub grpc_addr: Option<String>,
    /// The CA file the client verifies the agent's gRPC TLS certificate with (default:
    /// $CONSUL_GRPC_CACERT); needed with an `https://` gRPC address.
    #[arg(long = "grpc-ca-file")]
    pub grpc_ca_file: Option<String>,
    /// The directory the bootstrap and certificate files are written to.
    #[arg(long)]
    pub dir: Option<String>,
    /// Write the files once and exit instead of keeping the certificates current.
    #[arg(long)]
    pub once: bool,
}

/// What the bootstrap says, from the flags and the agent.
#[derive(Debug, PartialEq)]
pub struct Bootstrap {
    pub server_uri: String,
    /// The CA file of a TLS gRPC port; `None` for plain text.
    pub server_ca_file: Option<String>,
    pub proxy_id: String,
    pub service: String,
    pub datacenter: String,
    pub dir: PathBuf,
}

impl Bootstrap {
    /// gRPC's bootstrap JSON (gRFC A27's `xds_servers`, `node`, and A29's
    /// `certificate_providers`).
    pub fn json(&self) -> Value {
        let file = |name: &str| self.dir.join(name).to_string_lossy().into_owned();
        let channel_creds = match &self.server_ca_file {
            None => json!([{"type": "insecure"}]),
            Some(ca) => json!([{"type": "tls", "config": {"ca_certificate_file": ca}}]),
        };
        json!({
            "xds_servers": [{
                "server_uri": self.server_uri,
                "channel_creds": channel_creds,
                "server_features": ["xds_v3"],
            }],
            "node": {
                "id": self.proxy_id,
                "cluster": self.service,
                "locality": {"region": self.datacenter},
                "metadata": {"namespace": "default", "partition": "default"},
            },
            "certificate_providers": {
                CERTIFICATE_PROVIDER_INSTANCE: {
                    "plugin_name": "file_watcher",
                    "config": {
                        "certificate_file": file(LEAF_FILE),
                        "private_key_file": file(KEY_FILE),
                        "ca_certificate_file": file(ROOTS_FILE),
                        "refresh_interval": FILE_REFRESH_INTERVAL,
                    },
                },
            },
        })
    }
}

/// Replaces `path` with `contents` through a rename, with `mode` on the new file.
fn write_file(path: &Path, contents: &[u8], mode: u32) -> Result<(), String> {
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&temporary)
        .map_err(|e| format!("cannot write {}: {e}", temporary.display()))?;
    file.write_all(contents)
        .and_then(|_| file.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", temporary.display()))?;
    std::fs::rename(&temporary, path).map_err(|e| format!("cannot replace {}: {e}", path.display()))
}

/// The roots as one PEM bundle, active first, and the index the answer came with.
fn roots_bundle(body: &[u8]) -> Result<String, String> {
    let roots: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let mut list: Vec<&Value> = roots["Roots"].as_array().into_iter().flatten().collect();
    list.sort_by_key(|r| !r["Active"].as_bool().unwrap_or(false));
    let mut bundle = String::new();
    for root in list {
        if let Some(pem) = root["RootCert"].as_str() {
            bundle.push_str(pem.trim_end());
            bundle.push('\n');
        }
    }
    if bundle.is_empty() {
        return Err("the agent has no Connect CA roots".to_string());
    }
    Ok(bundle)
}

fn index_of(response: &super::client::Response) -> u64 {
    response
        .header("X-Consul-Index")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Fetches the leaf (blocking while `index` is its index) and writes it; returns the new
/// index.
fn refresh_leaf(
    client: &super::client::Client,
    service: &str,
    dir: &Path,
    index: u64,
) -> Result<u64, String> {
    let mut path = format!(
        "/v1/agent/connect/ca/leaf/{}",
        super::client::encode_path(service)
    );
    if index > 0 {
        path.push_str(&format!("?index={index}&wait={}s", BLOCKING_WAIT.as_secs()));
    }
    let response = client
        .ok("GET", &path, None)
        .map_err(|e| format!("cannot fetch the leaf certificate of {service:?}: {e}"))?;
    let new_index = index_of(&response);
    if new_index != index || index == 0 {
        let leaf: Value = serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
        let (Some(cert), Some(key)) = (leaf["CertPEM"].as_str(), leaf["PrivateKeyPEM"].as_str())
        else {
            return Err(format!(
                "the agent's leaf of {service:?} has no certificate"
            ));
        };
        // A watcher reading between the two renames may see a pair that does not match;
        // gRPC then keeps the pair it has until its next read, one refresh interval later.
        write_file(&dir.join(KEY_FILE), key.as_bytes(), 0o600)?;
        write_file(&dir.join(LEAF_FILE), cert.as_bytes(), 0o644)?;
    }
    Ok(new_index)
}

/// Fetches the roots (blocking while `index` is their index) and writes them; returns the
/// new index.
fn refresh_roots(client: &super::client::Client, dir: &Path, index: u64) -> Result<u64, String> {
    let mut path = "/v1/agent/connect/ca/roots".to_string();
    if index > 0 {
        path.push_str(&format!("?index={index}&wait={}s", BLOCKING_WAIT.as_secs()));
    }
    let response = client
        .ok("GET", &path, None)
        .map_err(|e| format!("cannot fetch the Connect CA roots: {e}"))?;
    let new_index = index_of(&response);
    if new_index != index || index == 0 {
        write_file(
            &dir.join(ROOTS_FILE),
            roots_bundle(&response.body)?.as_bytes(),
            0o644,
        )?;
    }
    Ok(new_index)
}

/// Resolves the proxy and what the bootstrap says from the flags and the agent.
fn resolve(args: &GrpcBootstrapArgs, client: &super::client::Client) -> Result<Bootstrap, String> {
    let env = super::client::process_env;
    let flag_or_env = |flag: &Option<String>, name: &str| {
        flag.clone().filter(|v| !v.is_empty()).or_else(|| env(name))
    };
    let dir = args.dir.clone().filter(|d| !d.is_empty()).ok_or_else(|| {
        "-dir is required: where to write the bootstrap and certificates".to_string()
    })?;
    let proxy_id = match (
        flag_or_env(&args.proxy_id, "CONNECT_PROXY_ID"),
        flag_or_env(&args.sidecar_for, "CONNECT_SIDECAR_FOR"),
    ) {
        (Some(id), _) => id,
        (None, Some(service)) => super::envoy::proxy_for_sidecar(client, &service)?,
        (None, None) => {
            return Err(
                "No proxy ID specified. One of -proxy-id or -sidecar-for is required".to_string(),
            )
        }
    };
    let path = format!(
        "/v1/agent/service/{}",
        super::client::encode_path(&proxy_id)
    );
    let response = client
        .ok("GET", &path, None)
        .map_err(|e| format!("failed fetch proxy config from local agent: {e}"))?;
    let registration: Value = serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
    if registration["Kind"] != "connect-proxy" || !registration["Proxy"].is_object() {
        return Err("service is not a Connect proxy".to_string());
    }
    let service = registration["Proxy"]["DestinationServiceName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("proxy {proxy_id:?} names no destination service"))?
        .to_string();
    let grpc_addr = flag_or_env(&args.grpc_addr, "CONSUL_GRPC_ADDR");
    let (address, port, tls) = super::envoy::grpc_address(client, grpc_addr.as_deref())?;
    let server_ca_file = if tls {
        Some(
            flag_or_env(&args.grpc_ca_file, "CONSUL_GRPC_CACERT").ok_or_else(|| {
                "the agent's gRPC port speaks TLS: -grpc-ca-file is required".to_string()
            })?,
        )
    } else {
        None
    };
    let host = if address.contains(':') {
        format!("[{address}]")
    } else {
        address
    };
    let dir = std::fs::canonicalize(&dir).map_err(|e| format!("cannot use -dir {dir:?}: {e}"))?;
    Ok(Bootstrap {
        server_uri: format!("{host}:{port}"),
        server_ca_file,
        proxy_id,
        service,
        datacenter: registration["Datacenter"]
            .as_str()
            .unwrap_or("dc1")
            .to_string(),
        dir,
    })
}

pub fn run(args: GrpcBootstrapArgs) -> Result<i32, String> {
    let mut client = args.http.client()?;
    let bootstrap = resolve(&args, &client)?;
    let dir = bootstrap.dir.clone();
    let mut leaf_index = refresh_leaf(&client, &bootstrap.service, &dir, 0)?;
    let mut roots_index = refresh_roots(&client, &dir, 0)?;
    let text = serde_json::to_vec_pretty(&bootstrap.json()).map_err(|e| e.to_string())?;
    write_file(&dir.join(BOOTSTRAP_FILE), &text, 0o644)?;
    println!("{}", dir.join(BOOTSTRAP_FILE).display());
    if args.once {
        return Ok(0);
    }
    client.options.timeout = BLOCKING_READ_TIMEOUT;
    // The roots on a thread of their own, so a leaf renewal and a root rotation are each
    // written as soon as the agent answers.
    let roots_client = super::client::Client::new(client.options.clone());
    let roots_dir = dir.clone();
    std::thread::Builder::new()
        .name("grpc-bootstrap-roots".into())
        .spawn(move || loop {
            match refresh_roots(&roots_client, &roots_dir, roots_index) {
                Ok(index) => roots_index = index,
                Err(e) => {
                    eprintln!("[WARN]  {e}");
                    std::thread::sleep(RETRY_PAUSE);
                }
            }
        })
        .map_err(|e| format!("cannot start the roots thread: {e}"))?;
    loop {
        match refresh_leaf(&client, &bootstrap.service, &dir, leaf_index) {
            Ok(index) => leaf_index = index,
            Err(e) => {
                eprintln!("[WARN]  {e}");
                std::thread::sleep(RETRY_PAUSE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bootstrap_names_the_server_the_node_and_the_file_watcher() {
        let bootstrap = Bootstrap {
            server_uri: "127.0.0.1:8502".to_string(),
            server_ca_file: None,
            proxy_id: "web-grpc".to_string(),
            service: "web".to_string(),
            datacenter: "dc1".to_string(),
            dir: PathBuf::from("/certs"),
        };
        let json = bootstrap.json();
        assert_eq!(json["xds_servers"][0]["server_uri"], "127.0.0.1:8502");
        assert_eq!(
            json["xds_servers"][0]["channel_creds"][0]["type"],
            "insecure"
        );
        assert_eq!(json["xds_servers"][0]["server_features"][0], "xds_v3");
        assert_eq!(json["node"]["id"], "web-grpc");
        let provider = &json["certificate_providers"][CERTIFICATE_PROVIDER_INSTANCE];
        assert_eq!(provider["plugin_name"], "file_watcher");
        assert_eq!(provider["config"]["certificate_file"], "/certs/leaf.pem");
        assert_eq!(
            provider["config"]["private_key_file"],
            "/certs/leaf-key.pem"
        );
        assert_eq!(
            provider["config"]["ca_certificate_file"],
            "/certs/roots.pem"
        );
        let tls = Bootstrap {
            server_ca_file: Some("/ca.pem".to_string()),
            ..bootstrap
        };
        assert_eq!(
            tls.json()["xds_servers"][0]["channel_creds"][0],
            json!({"type": "tls", "config": {"ca_certificate_file": "/ca.pem"}})
        );
    }

    #[test]
    fn roots_are_bundled_active_first() {
        let body =
            br#"{"Roots":[{"RootCert":"OLD\n","Active":false},{"RootCert":"NEW","Active":true}]}"#;
        assert_eq!(roots_bundle(body).unwrap(), "NEW\nOLD\n");
        assert!(roots_bundle(br#"{"Roots":[]}"#).is_err());
    }
}
