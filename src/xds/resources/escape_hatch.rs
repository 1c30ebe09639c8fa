//! Consul's Envoy escape hatches: a resource given as Envoy JSON in a proxy's
//! `Proxy.Config` (`envoy_public_listener_json`, `envoy_local_cluster_json`,
//! `envoy_listener_tracing_json`) or an upstream's `Config` (`envoy_listener_json`,
//! `envoy_cluster_json`), decoded into the envoy-types message it names.
//!
//! The JSON is proto3's canonical JSON mapping of a `google.protobuf.Any`: an `@type` naming
//! the message, its fields beside it, nested `Any`s (filters' `typed_config`) likewise, as
//! Consul reads it with `protojson`. Decoding by type name needs the messages' descriptors:
//! the FileDescriptorSet envoy-types 0.7.7 generates its types from, vendored gzipped as
//! `envoy_descriptors.bin.gz` and decoded once per process on first use. The JSON becomes a
//! dynamic message against that pool, is encoded, and decodes as the envoy-types message,
//! so a field envoy-types knows reaches Envoy exactly as written.
//!
//! Everything here is pure and bounded: at most [`ESCAPE_HATCH_JSON_BYTES_MAX`] bytes of
//! JSON are read, nesting is bounded by serde_json's recursion limit, and an unknown field,
//! an unknown `@type` or a message of another type is an error in protojson's words, never
//! a panic.
//!
//! Regenerate the pool after an envoy-types upgrade:
//! `gzip -9n < ~/.cargo/registry/src/*/envoy-types-<version>/src/generated/types.bin > src/xds/resources/envoy_descriptors.bin.gz`.

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::Tracing;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage};
use std::fmt;
use std::io::Read;
use std::sync::OnceLock;

/// The most JSON one escape hatch may hold, in bytes.
pub const ESCAPE_HATCH_JSON_BYTES_MAX: usize = 512 * 1024;
/// The most the vendored descriptor set may inflate to, in bytes (it is 3.4 MB).
const DESCRIPTORS_BYTES_MAX: u64 = 16 * 1024 * 1024;

/// The `Proxy.Config` keys of a sidecar's escape hatches.
pub const PUBLIC_LISTENER_KEY: &str = "envoy_public_listener_json";
pub const LOCAL_CLUSTER_KEY: &str = "envoy_local_cluster_json";
pub const LISTENER_TRACING_KEY: &str = "envoy_listener_tracing_json";
/// The keys of an upstream's `Config`.
pub const UPSTREAM_LISTENER_KEY: &str = "envoy_listener_json";
pub const UPSTREAM_CLUSTER_KEY: &str = "envoy_cluster_json";

/// envoy-types' descriptors, gzipped.
static DESCRIPTORS_GZ: &[u8] = include_bytes!("envoy_descriptors.bin.gz");

/// Why an escape hatch's JSON gives no resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EscapeHatchError {
    /// More than [`ESCAPE_HATCH_JSON_BYTES_MAX`] bytes.
    TooLarge { bytes: usize },
    /// Not JSON, no `@type`, an unknown type or field, a value of the wrong kind.
    Json(String),
    /// A message of another type than the hatch takes.
    WrongType { found: String, expected: String },
    /// The message's encoding does not decode as envoy-types' message.
    Decode(String),
    /// The vendored descriptor set does not decode (a build defect).
    Descriptors(String),
}

impl fmt::Display for EscapeHatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EscapeHatchError::TooLarge { bytes } => write!(
                f,
                "proto: the JSON is {bytes} bytes, more than the {ESCAPE_HATCH_JSON_BYTES_MAX} an escape hatch may hold"
            ),
            EscapeHatchError::Json(message) => write!(f, "proto: {message}"),
            EscapeHatchError::WrongType { found, expected } => write!(
                f,
                "proto: @type is {found:?}, expected {expected:?}"
            ),
            EscapeHatchError::Decode(message) => write!(f, "proto: cannot parse invalid wire-format data: {message}"),
            EscapeHatchError::Descriptors(message) => {
                write!(f, "the Envoy descriptor set does not decode: {message}")
            }
        }
    }
}

impl std::error::Error for EscapeHatchError {}

/// The process-wide descriptor pool, decoded on first use.
fn pool() -> Result<&'static DescriptorPool, EscapeHatchError> {
    static POOL: OnceLock<Result<DescriptorPool, String>> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(DESCRIPTORS_GZ)
            .take(DESCRIPTORS_BYTES_MAX)
            .read_to_end(&mut bytes)
            .map_err(|e| e.to_string())?;
        DescriptorPool::decode(bytes.as_slice()).map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| EscapeHatchError::Descriptors(e.clone()))
}

/// Decodes `json`, an `Any` in proto3's JSON mapping, as the message `M`.
pub fn decode<M: prost::Message + prost::Name + Default>(
    json: &str,
) -> Result<M, EscapeHatchError> {
    if json.len() > ESCAPE_HATCH_JSON_BYTES_MAX {
        return Err(EscapeHatchError::TooLarge { bytes: json.len() });
    }
    let pool = pool()?;
    let any_descriptor = pool
        .get_message_by_name("google.protobuf.Any")
        .ok_or_else(|| EscapeHatchError::Descriptors("no google.protobuf.Any".to_string()))?;
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let options = DeserializeOptions::new().deny_unknown_fields(true);
    let any = DynamicMessage::deserialize_with_options(any_descriptor, &mut deserializer, &options)
        .and_then(|any| deserializer.end().map(|()| any))
        .map_err(|e| EscapeHatchError::Json(e.to_string()))?;
    let any: envoy_types::pb::google::protobuf::Any = any
        .transcode_to()
        .map_err(|e| EscapeHatchError::Decode(e.to_string()))?;
    let expected = M::type_url();
    if any.type_url != expected {
        return Err(EscapeHatchError::WrongType {
            found: any.type_url,
            expected,
        });
    }
    M::decode(any.value.as_slice()).map_err(|e| EscapeHatchError::Decode(e.to_string()))
}

/// An Envoy `Listener` (`envoy_public_listener_json`, an upstream's `envoy_listener_json`).
pub fn listener(json: &str) -> Result<Listener, EscapeHatchError> {
    let listener: Listener = decode(json)?;
    if listener.name.is_empty() {
        return Err(EscapeHatchError::Json(
            "the listener has no name".to_string(),
        ));
    }
    Ok(listener)
}

/// An Envoy `Cluster` (`envoy_local_cluster_json`, an upstream's `envoy_cluster_json`).
pub fn cluster(json: &str) -> Result<Cluster, EscapeHatchError> {
    let cluster: Cluster = decode(json)?;
    if cluster.name.is_empty() {
        return Err(EscapeHatchError::Json(
            "the cluster has no name".to_string(),
        ));
    }
    Ok(cluster)
}

/// An HTTP connection manager's `Tracing` (`envoy_listener_tracing_json`).
pub fn tracing(json: &str) -> Result<Tracing, EscapeHatchError> {
    decode(json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Name;

    #[test]
    fn the_vendored_descriptors_decode_and_know_the_hatches_types() {
        let pool = pool().expect("the vendored descriptor set decodes");
        for name in [
            "envoy.config.listener.v3.Listener",
            "envoy.config.cluster.v3.Cluster",
            "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.Tracing",
            "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
            "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
            "google.protobuf.Duration",
        ] {
            assert!(pool.get_message_by_name(name).is_some(), "{name}");
        }
        assert_eq!(
            Tracing::type_url(),
            "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.Tracing"
        );
    }

    #[test]
    fn a_cluster_with_nested_any_and_well_known_types_decodes() {
        let cluster = cluster(
            r#"{
              "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
              "name": "local_app",
              "type": "STATIC",
              "connectTimeout": "2.5s",
              "circuit_breakers": {"thresholds": [{"max_connections": 7}]},
              "typed_extension_protocol_options": {
                "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                  "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                  "explicit_http_config": {"http2_protocol_options": {}}
                }
              }
            }"#,
        )
        .unwrap();
        assert_eq!(cluster.name, "local_app");
        let timeout = cluster.connect_timeout.unwrap();
        assert_eq!((timeout.seconds, timeout.nanos), (2, 500_000_000));
        assert_eq!(
            cluster.circuit_breakers.unwrap().thresholds[0]
                .max_connections
                .unwrap()
                .value,
            7
        );
        let options = &cluster.typed_extension_protocol_options
            ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
        assert!(options.type_url.ends_with("HttpProtocolOptions"));
        assert!(!options.value.is_empty());
    }

    #[test]
    fn bad_json_is_an_error_in_protojsons_words() {
        let listener_type = "type.googleapis.com/envoy.config.listener.v3.Listener";
        let cases = [
            ("{", "proto:"),
            ("[]", "proto:"),
            (r#"{"name": "x"}"#, "@type"),
            (
                r#"{"@type": "type.googleapis.com/envoy.config.nothing.v3.Nothing", "name": "x"}"#,
                "envoy.config.nothing.v3.Nothing",
            ),
            (
                &format!(r#"{{"@type": "{listener_type}", "name": "x", "colour": "red"}}"#),
                "colour",
            ),
            (
                &format!(r#"{{"@type": "{listener_type}", "name": 5}}"#),
                "proto:",
            ),
            (
                r#"{"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "c"}"#,
                "expected \"type.googleapis.com/envoy.config.listener.v3.Listener\"",
            ),
            (&format!(r#"{{"@type": "{listener_type}"}}"#), "no name"),
            (
                &format!(r#"{{"@type": "{listener_type}", "name": "x"}} trailing"#),
                "proto:",
            ),
        ];
        for (json, words) in cases {
            let error = listener(json).unwrap_err().to_string();
            assert!(error.contains(words), "{json}: {error}");
        }
        let huge = format!(
            r#"{{"@type": "{listener_type}", "name": "{}"}}"#,
            "x".repeat(ESCAPE_HATCH_JSON_BYTES_MAX)
        );
        assert!(matches!(
            listener(&huge),
            Err(EscapeHatchError::TooLarge { .. })
        ));
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(listener(&deep).is_err());
    }
}
