//! Expose paths (Consul's `Proxy.Expose`): HTTP paths of the local application that a
//! sidecar serves in plain text, outside the mesh, each on a listener of its own — how a
//! health checker or a metrics scraper without a certificate reaches `/health` of a service
//! that otherwise only takes mTLS.
//!
//! This module holds what the registration says (decoded from the agent's JSON, which the
//! agent validated with Consul's rules at registration) and Consul's names for the
//! resources a path becomes. Invariants: a path's listener routes exactly that path, to the
//! local application's cluster when the path's port is the service's own, else to a static
//! cluster `exposed_cluster_<port>` of its own; every other request on that listener is
//! Envoy's 404. Pure: no I/O.

use crate::consul::definition::CheckKind;
use crate::store::catalog::read::instance_checks;
use crate::store::Tables;
use serde_json::{Map, Value};

/// Most paths one registration may expose (a bound on the listeners one snapshot builds).
pub const EXPOSE_PATHS_MAX: usize = 256;

/// `Proxy.Expose` of a registration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expose {
    /// `Checks`: expose the destination's HTTP and gRPC checks as well.
    pub checks: bool,
    pub paths: Vec<ExposePath>,
}

/// One exposed path (Consul's `ExposePath`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExposePath {
    /// The exact path routed, `/health`.
    pub path: String,
    /// The local application's port the path is served on.
    pub local_path_port: u16,
    /// The port of the plain-text listener, on the proxy's public address.
    pub listener_port: u16,
    /// `http` (also when empty) or `http2`.
    pub protocol: String,
    /// The only sources whose connections the listener takes, as `(address, prefix length)`
    /// ranges: empty for a registered path (anyone who reaches the port); for a path made
    /// from a check, this host's loopback and the agent's LAN address, as Consul limits
    /// those to the agent that probes them.
    pub allowed_sources: Vec<(String, u32)>,
}

impl ExposePath {
    /// The path without the characters Envoy names cannot carry, as Consul strips it
    /// (every character outside `[A-Za-z0-9]`).
    fn stripped(&self) -> String {
        self.path
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect()
    }

    /// Consul's listener name, before the `:<address>:<port>` every listener name carries.
    pub fn listener_name(&self) -> String {
        format!("exposed_path_{}", self.stripped())
    }

    /// Consul's name of the HTTP connection manager's stat prefix, route configuration
    /// and virtual host.
    pub fn filter_name(&self) -> String {
        format!(
            "exposed_path_filter_{}_{}",
            self.stripped(),
            self.listener_port
        )
    }

    /// Whether the path speaks HTTP/2 to the application.
    pub fn is_http2(&self) -> bool {
        self.protocol.eq_ignore_ascii_case("http2")
    }
}

/// Consul's name of the static cluster for a path on a port other than the service's own.
pub fn cluster_name(local_path_port: u16) -> String {
    format!("exposed_cluster_{local_path_port}")
}

/// Decodes `Proxy.Expose` from the agent's answer (absent: nothing exposed).
pub fn decode(proxy: &Map<String, Value>) -> Result<Expose, String> {
    let Some(expose) = proxy.get("Expose").and_then(Value::as_object) else {
        return Ok(Expose::default());
    };
    let raw_paths = expose
        .get("Paths")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if raw_paths.len() > EXPOSE_PATHS_MAX {
        return Err(format!(
            "the proxy exposes {} paths; at most {EXPOSE_PATHS_MAX} are served",
            raw_paths.len()
        ));
    }
    let mut paths = Vec::with_capacity(raw_paths.len());
    for raw in raw_paths {
        let Some(path) = raw.as_object() else {
            return Err("an exposed path is not an object".to_string());
        };
        let port = |key: &str| -> Result<u16, String> {
            match path.get(key) {
                None | Some(Value::Null) => Ok(0),
                Some(value) => value
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok())
                    .ok_or_else(|| format!("Expose.Paths {key} {value} is not a port")),
            }
        };
        let text = |key: &str| {
            path.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        paths.push(ExposePath {
            path: text("Path"),
            local_path_port: port("LocalPathPort")?,
            listener_port: port("ListenerPort")?,
            protocol: text("Protocol").to_ascii_lowercase(),
            allowed_sources: Vec::new(),
        });
    }
    Ok(Expose {
        checks: expose
            .get("Checks")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        paths,
    })
}

/// The path gRPC's health protocol asks on (`grpc.health.v1.Health/Check`).
pub const GRPC_HEALTH_PATH: &str = "/grpc.health.v1.Health/Check";

/// The port of `host:port` (a URL's authority or a gRPC check's target before its
/// `/service`), if it names one.
fn authority_port(authority: &str) -> Option<u16> {
    let (_, port) = authority.rsplit_once(':')?;
    port.parse().ok().filter(|port| *port > 0)
}

/// The paths `Proxy.Expose.Checks` adds (Consul's `parseCheckPath`): one per HTTP or gRPC
/// check of the destination instance `destination_id` on `node` to which the agent gave a
/// listener port (its `ExposedPort`). An HTTP check's path is its URL's path and its local
/// port the URL's; a gRPC check asks `grpc.health.v1.Health/Check` over HTTP/2 on its
/// target's port. A check whose target names no port is left out, as Consul leaves it out
/// with a warning. Each listener takes connections from this host and from
/// `advertise_address` only. Pure: reads `tables`.
pub fn check_paths(
    tables: &Tables,
    node: &str,
    destination_id: &str,
    advertise_address: &str,
) -> Vec<ExposePath> {
    let Some(entry) = tables.catalog.node(node) else {
        return Vec::new();
    };
    let advertise_prefix = if advertise_address.contains(':') {
        128
    } else {
        32
    };
    let allowed_sources = vec![
        ("127.0.0.1".to_string(), 8),
        ("::1".to_string(), 128),
        (advertise_address.to_string(), advertise_prefix),
    ];
    let mut paths = Vec::new();
    for check in instance_checks(entry, destination_id) {
        let (Ok(listener_port), Some(definition)) =
            (u16::try_from(check.exposed_port()), check.definition())
        else {
            continue;
        };
        if listener_port == 0 {
            continue;
        }
        let derived = match check.kind() {
            kind if kind == CheckKind::Http.as_str() => {
                let rest = definition
                    .http
                    .split_once("://")
                    .map_or(definition.http.as_str(), |(_, rest)| rest);
                let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
                let path_end = rest[end..]
                    .find(['?', '#'])
                    .map_or(rest.len(), |at| end + at);
                authority_port(&rest[..end]).map(|port| {
                    let path = &rest[end..path_end];
                    (path.to_string(), port, "http")
                })
            }
            kind if kind == CheckKind::Grpc.as_str() => {
                let authority = definition.grpc.split('/').next().unwrap_or_default();
                authority_port(authority).map(|port| (GRPC_HEALTH_PATH.to_string(), port, "http2"))
            }
            _ => None,
        };
        if let Some((path, local_path_port, protocol)) = derived {
            paths.push(ExposePath {
                path,
                local_path_port,
                listener_port,
                protocol: protocol.to_string(),
                allowed_sources: allowed_sources.clone(),
            });
        }
        if paths.len() >= EXPOSE_PATHS_MAX {
            break;
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_consuls() {
        let path = ExposePath {
            path: "/health/ready-now".into(),
            local_path_port: 8080,
            listener_port: 21500,
            protocol: "http".into(),
            allowed_sources: Vec::new(),
        };
        assert_eq!(path.listener_name(), "exposed_path_healthreadynow");
        assert_eq!(
            path.filter_name(),
            "exposed_path_filter_healthreadynow_21500"
        );
        assert_eq!(cluster_name(9090), "exposed_cluster_9090");
        assert!(!path.is_http2());
    }

    #[test]
    fn decodes_the_agents_json() {
        let proxy = json!({"Expose": {"Checks": true, "Paths": [
            {"ListenerPort": 21500, "Path": "/health", "LocalPathPort": 8080, "Protocol": "HTTP2"},
            {"ListenerPort": 21501, "Path": "/metrics", "LocalPathPort": 9102},
        ]}});
        let expose = decode(proxy.as_object().unwrap()).unwrap();
        assert!(expose.checks);
        assert_eq!(expose.paths.len(), 2);
        assert!(expose.paths[0].is_http2());
        assert_eq!(expose.paths[1].protocol, "");
        assert_eq!(
            (
                expose.paths[1].local_path_port,
                expose.paths[1].listener_port
            ),
            (9102, 21501)
        );
        assert_eq!(decode(&Map::new()).unwrap(), Expose::default());
        let bad = json!({"Expose": {"Paths": [{"ListenerPort": 70000}]}});
        assert!(decode(bad.as_object().unwrap())
            .unwrap_err()
            .contains("not a port"));
    }
}
