//! The table of every config key praetor accepts: Consul's keys (its `agent/config` structs,
//! Community Edition, with the deprecated top-level keys it still reads) and praetor's own
//! few, each with the type its value must have and what praetor does with it.
//!
//! This table is the one list: the checker ([`super::schema`]) refuses any key not in it and
//! any value of another type, the startup warnings for keys accepted but not acted on come
//! from it, `docs/config.md`'s key list is generated from it (a test keeps them equal), and a
//! test reads `src/` to hold each entry to its word: what "acts" is read outside `src/config`,
//! what is "not acted on" is not.
//!
//! Data only: blocks are statics so that a block can contain itself (a sidecar service is a
//! service). Names are Consul's `mapstructure` tags; [`GoName::Named`] records a Go field
//! name Consul also accepts where it is not the key without underscores.

use super::schema::{Block, Field, GoName, Holds, Kind, Use};

/// Whether an agent serves gRPC: it does (xDS for Envoy, `src/xds`), so the gRPC keys act
/// and `/v1/agent/self` shows its `xDS` section. Kept as a switch so that the keys, the
/// warnings and the agent's self-description cannot disagree about it.
pub const GRPC_SERVER_LISTENS: bool = true;

/// Why the gRPC keys do nothing while no gRPC server exists.
pub const NO_GRPC_SERVER: &str =
    "praetor has no gRPC server (xDS, peering, dataplane): nothing listens on it";

/// What a gRPC address or TLS setting does.
const GRPC: Use = if GRPC_SERVER_LISTENS {
    Use::Acts("grpc")
} else {
    Use::NotActedOn {
        why: NO_GRPC_SERVER,
        holds: Holds::Never,
        kept: "",
    }
};

/// What a gRPC port does: `-1` (disabled, the default) asks for nothing.
const GRPC_PORT: Use = if GRPC_SERVER_LISTENS {
    Use::Acts("ports.grpc")
} else {
    Use::NotActedOn {
        why: NO_GRPC_SERVER,
        holds: Holds::Int(-1),
        kept: "",
    }
};

const fn f(name: &'static str, kind: Kind, use_: Use) -> Field {
    Field {
        name,
        kind,
        go_name: GoName::Stripped,
        use_,
    }
}

/// A field whose Go name, lowercased, is `go` rather than the key without underscores.
const fn g(name: &'static str, go: &'static str, kind: Kind, use_: Use) -> Field {
    Field {
        name,
        kind,
        go_name: GoName::Named(go),
        use_,
    }
}

/// A field of an embedded Go struct: no Go-name spelling.
const fn e(name: &'static str, kind: Kind, use_: Use) -> Field {
    Field {
        name,
        kind,
        go_name: GoName::Embedded,
        use_,
    }
}

const fn acts(code: &'static str) -> Use {
    Use::Acts(code)
}

const fn not(why: &'static str) -> Use {
    Use::NotActedOn {
        why,
        holds: Holds::Never,
        kept: "",
    }
}

const fn not_unless(why: &'static str, holds: Holds) -> Use {
    Use::NotActedOn {
        why,
        holds,
        kept: "",
    }
}

const fn not_kept(why: &'static str, kept: &'static str) -> Use {
    Use::NotActedOn {
        why,
        holds: Holds::Never,
        kept,
    }
}

const SECTION: Use = Use::Section;
const COVERED: Use = Use::Covered;
const ENTERPRISE: Use = Use::Enterprise;

use Kind::{Bool, Duration, Float, Int, Map, Maps, Str, StrList, StrListMap, StrMap, Uint};

const REPLICATION: &str =
    "ACLs are not replicated from a primary datacenter: each datacenter keeps its own";
const NON_USER: &str = "one of Consul's internal settings, which praetor does not read";
const NO_UNIX_SOCKETS: &str = "praetor's agent listens on IP addresses only";
const GOSSIP_FIXED: &str = "the gossip pools keep memberlist's default timings";

// ---- ACL ----

static ACL: Block = Block {
    title: "acl",
    go_names: true,
    fields: &[
        f("enabled", Bool, acts("acl.enabled")),
        g(
            "enable_token_replication",
            "tokenreplication",
            Bool,
            not(REPLICATION),
        ),
        f(
            "policy_ttl",
            Duration,
            not("servers answer every policy lookup from their own store; nothing is cached"),
        ),
        f(
            "role_ttl",
            Duration,
            not("servers answer every role lookup from their own store; nothing is cached"),
        ),
        f("token_ttl", Duration, acts("config.token_ttl")),
        f("down_policy", Str, acts("config.down_policy")),
        f("default_policy", Str, acts("acl.default_policy")),
        f(
            "enable_key_list_policy",
            Bool,
            not("recursive KV reads are checked with `read`, not `list`"),
        ),
        f("tokens", Kind::Object(&ACL_TOKENS), SECTION),
        f(
            "enable_token_persistence",
            Bool,
            acts("acl.enable_token_persistence"),
        ),
        f("msp_disable_bootstrap", Bool, ENTERPRISE),
    ],
};

static ACL_TOKENS: Block = Block {
    title: "acl.tokens",
    go_names: true,
    fields: &[
        f("initial_management", Str, acts("initial_management")),
        f("replication", Str, not(REPLICATION)),
        f(
            "agent_recovery",
            Str,
            not("the recovery token is kept, and set through /v1/agent/token, but grants nothing: agent endpoints take ordinary tokens"),
        ),
        f("default", Str, acts("tokens.default")),
        f("agent", Str, acts("tokens.agent")),
        g(
            "config_file_service_registration",
            "configfileregistration",
            Str,
            not("services from config files are registered with the agent's own token"),
        ),
        f(
            "managed_service_provider",
            Kind::Objects(&ACL_SERVICE_PROVIDER_TOKEN),
            ENTERPRISE,
        ),
        // Deprecated names, in an embedded struct of Consul's (no Go-name spelling).
        e("master", Str, acts("initial_management")),
        e(
            "agent_master",
            Str,
            not("the recovery token is kept, and set through /v1/agent/token, but grants nothing: agent endpoints take ordinary tokens"),
        ),
    ],
};

static ACL_SERVICE_PROVIDER_TOKEN: Block = Block {
    title: "acl.tokens.managed_service_provider",
    go_names: true,
    fields: &[f("accessor_id", Str, COVERED), f("secret_id", Str, COVERED)],
};

// ---- addresses, ports, limits ----

static ADDRESSES: Block = Block {
    title: "addresses",
    go_names: true,
    fields: &[
        f("dns", Str, acts("addresses.dns")),
        f("http", Str, acts("addresses.http")),
        f("https", Str, acts("addresses.https")),
        f("grpc", Str, GRPC),
        g("grpc_tls", "grpctls", Str, GRPC),
    ],
};

static PORTS: Block = Block {
    title: "ports",
    go_names: true,
    fields: &[
        f("dns", Int, acts("ports.dns")),
        f("http", Int, acts("ports.http")),
        f("https", Int, acts("ports.https")),
        f("serf_lan", Int, acts("ports.serf_lan")),
        f("serf_wan", Int, acts("ports.serf_wan")),
        f("server", Int, acts("ports.server")),
        f("grpc", Int, GRPC_PORT),
        f("grpc_tls", Int, GRPC_PORT),
        f(
            "proxy_min_port",
            Int,
            not("Consul's managed proxies, which these placed, no longer exist"),
        ),
        f(
            "proxy_max_port",
            Int,
            not("Consul's managed proxies, which these placed, no longer exist"),
        ),
        f("sidecar_min_port", Int, acts("sidecar_min_port")),
        f("sidecar_max_port", Int, acts("sidecar_max_port")),
        f("expose_min_port", Int, acts("expose_min_port")),
        f("expose_max_port", Int, acts("expose_max_port")),
    ],
};

static LIMITS: Block = Block {
    title: "limits",
    go_names: true,
    fields: &[
        f(
            "http_max_conns_per_client",
            Int,
            not_kept(
                "the HTTP API does not limit connections per client address",
                "pending.http_max_conns_per_client",
            ),
        ),
        f(
            "https_handshake_timeout",
            Duration,
            not("HTTPS handshakes have no separate deadline"),
        ),
        f(
            "request_limits",
            Kind::Object(&LIMITS_REQUEST),
            not("servers do not rate-limit reads and writes"),
        ),
        f(
            "rpc_client_timeout",
            Duration,
            not("RPC calls to servers have no configurable deadline"),
        ),
        f(
            "rpc_handshake_timeout",
            Duration,
            not("RPC handshakes have no separate deadline"),
        ),
        f(
            "rpc_max_burst",
            Int,
            not_kept(
                "RPC requests from agents are not rate-limited",
                "pending.rpc_max_burst",
            ),
        ),
        f(
            "rpc_max_conns_per_client",
            Int,
            not("the RPC port does not limit connections per client address"),
        ),
        f(
            "rpc_rate",
            Float,
            not_kept(
                "RPC requests from agents are not rate-limited",
                "pending.rpc_rate_per_second",
            ),
        ),
        f("kv_max_value_size", Uint, acts("kv_max_value_size")),
        f("txn_max_req_len", Uint, acts("txn_max_req_len")),
    ],
};

static LIMITS_REQUEST: Block = Block {
    title: "limits.request_limits",
    go_names: true,
    fields: &[
        f("mode", Str, COVERED),
        f("read_rate", Float, COVERED),
        f("write_rate", Float, COVERED),
    ],
};

// ---- autopilot, performance, raft ----

static AUTOPILOT: Block = Block {
    title: "autopilot",
    go_names: true,
    fields: &[
        f("cleanup_dead_servers", Bool, acts("pending.autopilot")),
        f(
            "last_contact_threshold",
            Duration,
            acts("pending.autopilot"),
        ),
        f("max_trailing_logs", Int, acts("pending.autopilot")),
        f("min_quorum", Uint, acts("pending.autopilot")),
        f(
            "server_stabilization_time",
            Duration,
            acts("pending.autopilot"),
        ),
        f("disable_upgrade_migration", Bool, ENTERPRISE),
        f("redundancy_zone_tag", Str, ENTERPRISE),
        f("upgrade_version_tag", Str, ENTERPRISE),
    ],
};

static PERFORMANCE: Block = Block {
    title: "performance",
    go_names: true,
    fields: &[
        f(
            "leave_drain_time",
            Duration,
            not_kept(
                "a leaving server does not wait for requests to drain",
                "pending.leave_drain_time",
            ),
        ),
        f(
            "raft_multiplier",
            Int,
            not_kept(
                "praetor's Raft timings are fixed",
                "pending.raft_multiplier",
            ),
        ),
        f(
            "rpc_hold_timeout",
            Duration,
            not_kept(
                "forwarded requests do not wait for a leader",
                "pending.rpc_hold_timeout",
            ),
        ),
    ],
};

static RAFT_LOGSTORE: Block = Block {
    title: "raft_logstore",
    go_names: true,
    fields: &[
        f("backend", Str, COVERED),
        f("disable_log_cache", Bool, COVERED),
        f(
            "verification",
            Kind::Object(&RAFT_LOGSTORE_VERIFICATION),
            COVERED,
        ),
        g(
            "boltdb",
            "boltdbconfig",
            Kind::Object(&RAFT_BOLTDB),
            COVERED,
        ),
        g("wal", "walconfig", Kind::Object(&RAFT_WAL), COVERED),
    ],
};

static RAFT_LOGSTORE_VERIFICATION: Block = Block {
    title: "raft_logstore.verification",
    go_names: true,
    fields: &[
        f("enabled", Bool, COVERED),
        f("interval", Duration, COVERED),
    ],
};

static RAFT_BOLTDB: Block = Block {
    title: "raft_logstore.boltdb",
    go_names: true,
    fields: &[f("no_freelist_sync", Bool, COVERED)],
};

static RAFT_WAL: Block = Block {
    title: "raft_logstore.wal",
    go_names: true,
    fields: &[f("segment_size_mb", Int, COVERED)],
};

/// The deprecated `raft_boltdb` block: Consul's struct has no tag, so its one field is named
/// by its Go name.
static RAFT_BOLTDB_DEPRECATED: Block = Block {
    title: "raft_boltdb",
    go_names: true,
    fields: &[f("NoFreelistSync", Bool, COVERED)],
};

// ---- DNS ----

static DNS: Block = Block {
    title: "dns_config",
    go_names: true,
    fields: &[
        f("allow_stale", Bool, acts("allow_stale")),
        f("a_record_limit", Int, acts("a_record_limit")),
        f(
            "disable_compression",
            Bool,
            not_unless("DNS answers are always compressed", Holds::Bool(false)),
        ),
        f("enable_truncate", Bool, acts("enable_truncate")),
        f("max_stale", Duration, acts("max_stale")),
        f("node_ttl", Duration, acts("node_ttl")),
        f("only_passing", Bool, acts("only_passing")),
        f("recursor_strategy", Str, acts("recursor_strategy")),
        f("recursor_timeout", Duration, acts("recursor_timeout")),
        f("service_ttl", StrMap, acts("service_ttl")),
        f("udp_answer_limit", Int, acts("udp_answer_limit")),
        g(
            "enable_additional_node_meta_txt",
            "nodemetatxt",
            Bool,
            acts("enable_additional_node_meta_txt"),
        ),
        f("soa", Kind::Object(&DNS_SOA), SECTION),
        f(
            "use_cache",
            Bool,
            not_unless(
                "DNS answers come from the agent's current view of the catalog, which is never older than a cache's",
                Holds::Bool(false),
            ),
        ),
        f(
            "cache_max_age",
            Duration,
            not("DNS answers come from the agent's current view of the catalog"),
        ),
        f("prefer_namespace", Bool, ENTERPRISE),
    ],
};

static DNS_SOA: Block = Block {
    title: "dns_config.soa",
    go_names: true,
    fields: &[
        f("refresh", Uint, acts("soa")),
        f("retry", Uint, acts("soa")),
        f("expire", Uint, acts("soa")),
        f("min_ttl", Uint, acts("soa")),
    ],
};

// ---- HTTP, telemetry, TLS, UI ----

static HTTP_CONFIG: Block = Block {
    title: "http_config",
    go_names: true,
    fields: &[
        f(
            "block_endpoints",
            StrList,
            not("every endpoint is served; none can be blocked"),
        ),
        f(
            "allow_write_http_from",
            StrList,
            not_kept(
                "writes are accepted from every client address",
                "pending.allow_write_http_from",
            ),
        ),
        f(
            "response_headers",
            StrMap,
            not_kept(
                "HTTP answers do not carry the configured headers",
                "pending.http_response_headers",
            ),
        ),
        f("use_cache", Bool, acts("http_use_cache")),
        f(
            "max_header_bytes",
            Int,
            not("the HTTP server's request head limit is fixed"),
        ),
    ],
};

static TELEMETRY: Block = Block {
    title: "telemetry",
    go_names: true,
    fields: &[
        f("circonus_api_app", Str, not("praetor has no Circonus sink")),
        f(
            "circonus_api_token",
            Str,
            not("praetor has no Circonus sink"),
        ),
        g(
            "circonus_api_url",
            "circonusapiurl",
            Str,
            not("praetor has no Circonus sink"),
        ),
        f(
            "circonus_broker_id",
            Str,
            not("praetor has no Circonus sink"),
        ),
        f(
            "circonus_broker_select_tag",
            Str,
            not("praetor has no Circonus sink"),
        ),
        f(
            "circonus_check_display_name",
            Str,
            not("praetor has no Circonus sink"),
        ),
        f(
            "circonus_check_force_metric_activation",
            Str,
            not("praetor has no Circonus sink"),
        ),
        f(
            "circonus_check_id",
            Str,
            not("praetor has no Circonus sink"),
        ),
        f(
            "circonus_check_instance_id",
            Str,
            not("praetor has no Circonus sink"),
        ),
        f(
            "circonus_check_search_tag",
            Str,
            not("praetor has no Circonus sink"),
        ),
        f(
            "circonus_check_tags",
            Str,
            not("praetor has no Circonus sink"),
        ),
        f(
            "circonus_submission_interval",
            Str,
            not("praetor has no Circonus sink"),
        ),
        g(
            "circonus_submission_url",
            "circonussubmissionurl",
            Str,
            not("praetor has no Circonus sink"),
        ),
        f(
            "disable_compat_1.9",
            Bool,
            not_unless(
                "praetor never emits the metric names Consul 1.9 deprecated",
                Holds::Bool(true),
            ),
        ),
        f("disable_hostname", Bool, acts("disable_hostname")),
        f("dogstatsd_addr", Str, acts("dogstatsd_addr")),
        f("dogstatsd_tags", StrList, acts("dogstatsd_tags")),
        f(
            "enable_host_metrics",
            Bool,
            not_unless("praetor does not collect host metrics", Holds::Bool(false)),
        ),
        g(
            "retry_failed_connection",
            "retryfailedconfiguration",
            Bool,
            acts("retry_failed_connection"),
        ),
        f("filter_default", Bool, acts("filter_default")),
        f("prefix_filter", StrList, acts("allowed_prefixes")),
        f("metrics_prefix", Str, acts("metrics_prefix")),
        f(
            "prometheus_retention_time",
            Duration,
            acts("prometheus_retention"),
        ),
        g("statsd_address", "statsdaddr", Str, acts("statsd_address")),
        g(
            "statsite_address",
            "statsiteaddr",
            Str,
            not("praetor has no statsite (TCP) sink; use statsd_address"),
        ),
        f(
            "statsite_prefix",
            Str,
            not("praetor has no statsite (TCP) sink"),
        ),
    ],
};

/// One protocol's TLS settings (`tls.defaults`, `tls.internal_rpc`, `tls.https`); which keys
/// a protocol may hold is checked by `config::tls` with Consul's messages.
static TLS_PROTOCOL: Block = Block {
    title: "tls.<protocol>",
    go_names: true,
    fields: &[
        f("ca_file", Str, acts("CaSource")),
        f("ca_path", Str, acts("CaSource")),
        f("cert_file", Str, acts("cert_file")),
        f("key_file", Str, acts("key_file")),
        f("tls_min_version", Str, acts("min_version")),
        f("tls_cipher_suites", Str, acts("cipher_suites")),
        f("verify_incoming", Bool, acts("verify_incoming")),
        f("verify_outgoing", Bool, acts("verify_outgoing")),
        f(
            "verify_server_hostname",
            Bool,
            acts("verify_server_hostname"),
        ),
        f("use_auto_cert", Bool, GRPC),
    ],
};

/// `tls.grpc`: the same keys, for the gRPC listener.
static TLS_GRPC: Block = Block {
    title: "tls.grpc",
    go_names: true,
    fields: &[
        f("ca_file", Str, COVERED),
        f("ca_path", Str, COVERED),
        f("cert_file", Str, COVERED),
        f("key_file", Str, COVERED),
        f("tls_min_version", Str, COVERED),
        f("tls_cipher_suites", Str, COVERED),
        f("verify_incoming", Bool, COVERED),
        f("verify_outgoing", Bool, COVERED),
        f("verify_server_hostname", Bool, COVERED),
        f("use_auto_cert", Bool, COVERED),
    ],
};

/// What `tls.grpc` does. `config::tls` warns about it itself while no gRPC server exists: the
/// deprecated top-level `verify_incoming` pins `tls.grpc.verify_incoming = false`, which asks
/// for nothing and must not be warned about.
const TLS_GRPC_USE: Use = if GRPC_SERVER_LISTENS {
    Use::Acts("tls.grpc")
} else {
    Use::NotActedOn {
        why: NO_GRPC_SERVER,
        holds: Holds::Checked,
        kept: "",
    }
};

static TLS: Block = Block {
    title: "tls",
    go_names: true,
    fields: &[
        f("defaults", Kind::Object(&TLS_PROTOCOL), SECTION),
        g(
            "internal_rpc",
            "internalrpc",
            Kind::Object(&TLS_PROTOCOL),
            SECTION,
        ),
        f("https", Kind::Object(&TLS_PROTOCOL), SECTION),
        f("grpc", Kind::Object(&TLS_GRPC), TLS_GRPC_USE),
    ],
};

static AUTO_ENCRYPT: Block = Block {
    title: "auto_encrypt",
    go_names: true,
    fields: &[
        f("tls", Bool, acts("auto_tls")),
        g("dns_san", "dnssan", StrList, acts("dns_san")),
        g("ip_san", "ipsan", StrList, acts("ip_san")),
        g("allow_tls", "allowtls", Bool, acts("allow_tls")),
    ],
};

static UI_CONFIG: Block = Block {
    title: "ui_config",
    go_names: true,
    fields: &[
        f("enabled", Bool, acts("ui.enabled")),
        f("dir", Str, acts("ui.dir")),
        f("content_path", Str, acts("content_path")),
        f("metrics_provider", Str, acts("metrics_provider")),
        f(
            "metrics_provider_files",
            StrList,
            acts("metrics_provider_files"),
        ),
        g(
            "metrics_provider_options_json",
            "metricsprovideroptionsjson",
            Str,
            acts("metrics_provider_options_json"),
        ),
        f(
            "metrics_proxy",
            Kind::Object(&UI_METRICS_PROXY),
            not("the agent does not proxy the UI's metrics requests yet"),
        ),
        g(
            "dashboard_url_templates",
            "dashboardurltemplates",
            StrMap,
            acts("dashboard_url_templates"),
        ),
    ],
};

static UI_METRICS_PROXY: Block = Block {
    title: "ui_config.metrics_proxy",
    go_names: true,
    fields: &[
        g("base_url", "baseurl", Str, COVERED),
        f(
            "add_headers",
            Kind::Objects(&UI_METRICS_PROXY_HEADER),
            COVERED,
        ),
        f("path_allowlist", StrList, COVERED),
    ],
};

static UI_METRICS_PROXY_HEADER: Block = Block {
    title: "ui_config.metrics_proxy.add_headers",
    go_names: true,
    fields: &[f("name", Str, COVERED), f("value", Str, COVERED)],
};

// ---- Connect and service definitions ----

static CONNECT: Block = Block {
    title: "connect",
    go_names: true,
    fields: &[
        f("enabled", Bool, acts("connect.enabled")),
        g("ca_provider", "caprovider", Str, acts("connect.ca")),
        g("ca_config", "caconfig", Map, acts("connect.ca")),
        g(
            "enable_mesh_gateway_wan_federation",
            "meshgatewaywanfederationenabled",
            Bool,
            acts("connect.mesh_gateway_wan_federation"),
        ),
        g(
            "test_ca_leaf_root_change_spread",
            "testcaleafrootchangespread",
            Duration,
            not(NON_USER),
        ),
    ],
};

static CONFIG_ENTRIES: Block = Block {
    title: "config_entries",
    go_names: true,
    fields: &[f("bootstrap", Maps, acts("bootstrap_entries"))],
};

/// A service definition, as `service`, `services` and a sidecar hold it. The registration
/// code reads it as a whole (`consul::definition`).
static SERVICE: Block = Block {
    title: "service definition",
    go_names: true,
    fields: &[
        f("kind", Str, COVERED),
        f("id", Str, COVERED),
        f("name", Str, COVERED),
        f("tags", StrList, COVERED),
        f("address", Str, COVERED),
        f(
            "tagged_addresses",
            Kind::ObjectMap(&SERVICE_ADDRESS),
            COVERED,
        ),
        f("meta", StrMap, COVERED),
        f("port", Int, COVERED),
        f("socket_path", Str, COVERED),
        f("check", Kind::Object(&CHECK), COVERED),
        f("checks", Kind::Objects(&CHECK), COVERED),
        f("token", Str, COVERED),
        f("weights", Kind::Object(&SERVICE_WEIGHTS), COVERED),
        f("enable_tag_override", Bool, COVERED),
        f("proxy", Kind::Object(&SERVICE_PROXY), COVERED),
        f("connect", Kind::Object(&SERVICE_CONNECT), COVERED),
    ],
};

static SERVICE_ADDRESS: Block = Block {
    title: "service definition: tagged address",
    go_names: true,
    fields: &[f("address", Str, COVERED), f("port", Int, COVERED)],
};

static SERVICE_WEIGHTS: Block = Block {
    title: "service definition: weights",
    go_names: true,
    fields: &[f("passing", Int, COVERED), f("warning", Int, COVERED)],
};

static SERVICE_CONNECT: Block = Block {
    title: "service definition: connect",
    go_names: true,
    fields: &[
        f("native", Bool, COVERED),
        f("sidecar_service", Kind::Object(&SERVICE), COVERED),
    ],
};

static SERVICE_PROXY: Block = Block {
    title: "service definition: proxy",
    go_names: true,
    fields: &[
        f("destination_service_name", Str, COVERED),
        f("destination_service_id", Str, COVERED),
        f("local_service_address", Str, COVERED),
        f("local_service_port", Int, COVERED),
        f("local_service_socket_path", Str, COVERED),
        f(
            "transparent_proxy",
            Kind::Object(&SERVICE_TRANSPARENT_PROXY),
            COVERED,
        ),
        f("mode", Str, COVERED),
        f("config", Map, COVERED),
        f("upstreams", Kind::Objects(&SERVICE_UPSTREAM), COVERED),
        f("mesh_gateway", Kind::Object(&SERVICE_MESH_GATEWAY), COVERED),
        f("expose", Kind::Object(&SERVICE_EXPOSE), COVERED),
    ],
};

static SERVICE_TRANSPARENT_PROXY: Block = Block {
    title: "service definition: proxy.transparent_proxy",
    go_names: true,
    fields: &[
        f("outbound_listener_port", Int, COVERED),
        f("dialed_directly", Bool, COVERED),
    ],
};

static SERVICE_UPSTREAM: Block = Block {
    title: "service definition: proxy.upstreams",
    go_names: true,
    fields: &[
        f("destination_type", Str, COVERED),
        f("destination_namespace", Str, COVERED),
        f("destination_partition", Str, COVERED),
        f("destination_peer", Str, COVERED),
        f("destination_name", Str, COVERED),
        f("datacenter", Str, COVERED),
        f("local_bind_address", Str, COVERED),
        f("local_bind_port", Int, COVERED),
        f("local_bind_socket_path", Str, COVERED),
        f("local_bind_socket_mode", Str, COVERED),
        f("config", Map, COVERED),
        f("mesh_gateway", Kind::Object(&SERVICE_MESH_GATEWAY), COVERED),
    ],
};

static SERVICE_MESH_GATEWAY: Block = Block {
    title: "service definition: mesh_gateway",
    go_names: true,
    fields: &[f("mode", Str, COVERED)],
};

static SERVICE_EXPOSE: Block = Block {
    title: "service definition: proxy.expose",
    go_names: true,
    fields: &[
        f("checks", Bool, COVERED),
        f("port", Int, COVERED),
        f("paths", Kind::Objects(&SERVICE_EXPOSE_PATH), COVERED),
    ],
};

static SERVICE_EXPOSE_PATH: Block = Block {
    title: "service definition: proxy.expose.paths",
    go_names: true,
    fields: &[
        f("listener_port", Int, COVERED),
        f("path", Str, COVERED),
        f("protocol", Str, COVERED),
        f("local_path_port", Int, COVERED),
    ],
};

/// A check definition, as `check`, `checks` and a service's checks hold it. Its Go names
/// double as Consul's alias tags (`ServiceID`, `ScriptArgs`, `DockerContainerID`,
/// `TLSSkipVerify`, `DeregisterCriticalServiceAfter`).
static CHECK: Block = Block {
    title: "check definition",
    go_names: true,
    fields: &[
        f("id", Str, COVERED),
        f("name", Str, COVERED),
        f("notes", Str, COVERED),
        f("service_id", Str, COVERED),
        f("token", Str, COVERED),
        f("status", Str, COVERED),
        g("args", "scriptargs", StrList, COVERED),
        f("http", Str, COVERED),
        f("header", StrListMap, COVERED),
        f("method", Str, COVERED),
        f("body", Str, COVERED),
        f("disable_redirects", Bool, COVERED),
        f("output_max_size", Int, COVERED),
        f("tcp", Str, COVERED),
        f("udp", Str, COVERED),
        f("interval", Duration, COVERED),
        f("docker_container_id", Str, COVERED),
        f("shell", Str, COVERED),
        f("grpc", Str, COVERED),
        f("grpc_use_tls", Bool, COVERED),
        f("tls_server_name", Str, COVERED),
        f("tls_skip_verify", Bool, COVERED),
        f("alias_node", Str, COVERED),
        f("alias_service", Str, COVERED),
        f("timeout", Duration, COVERED),
        f("ttl", Duration, COVERED),
        f("h2ping", Str, COVERED),
        f("h2ping_use_tls", Bool, COVERED),
        f("os_service", Str, COVERED),
        f("success_before_passing", Int, COVERED),
        f("failures_before_warning", Int, COVERED),
        f("failures_before_critical", Int, COVERED),
        f("deregister_critical_service_after", Duration, COVERED),
    ],
};

// ---- blocks praetor does not act on as a whole ----

static AUTO_CONFIG: Block = Block {
    title: "auto_config",
    go_names: true,
    fields: &[
        f("enabled", Bool, COVERED),
        f("intro_token", Str, COVERED),
        f("intro_token_file", Str, COVERED),
        f("server_addresses", StrList, COVERED),
        f("dns_sans", StrList, COVERED),
        f("ip_sans", StrList, COVERED),
        f(
            "authorization",
            Kind::Object(&AUTO_CONFIG_AUTHORIZATION),
            COVERED,
        ),
    ],
};

static AUTO_CONFIG_AUTHORIZATION: Block = Block {
    title: "auto_config.authorization",
    go_names: true,
    fields: &[
        f("enabled", Bool, COVERED),
        f("static", Kind::Object(&AUTO_CONFIG_STATIC), COVERED),
    ],
};

static AUTO_CONFIG_STATIC: Block = Block {
    title: "auto_config.authorization.static",
    go_names: true,
    fields: &[
        f("claim_assertions", StrList, COVERED),
        f("allow_reuse", Bool, COVERED),
        g("jwt_supported_algs", "jwtsupportedalgs", StrList, COVERED),
        f("bound_audiences", StrList, COVERED),
        f("claim_mappings", StrMap, COVERED),
        f("list_claim_mappings", StrMap, COVERED),
        g("oidc_discovery_url", "oidcdiscoveryurl", Str, COVERED),
        g(
            "oidc_discovery_ca_cert",
            "oidcdiscoverycacert",
            Str,
            COVERED,
        ),
        g("jwks_url", "jwksurl", Str, COVERED),
        g("jwks_ca_cert", "jwkscacert", Str, COVERED),
        g(
            "jwt_validation_pub_keys",
            "jwtvalidationpubkeys",
            StrList,
            COVERED,
        ),
        f("bound_issuer", Str, COVERED),
        f("expiration_leeway", Str, COVERED),
        f("not_before_leeway", Str, COVERED),
        f("clock_skew_leeway", Str, COVERED),
    ],
};

static CACHE: Block = Block {
    title: "cache",
    go_names: true,
    fields: &[
        f("entry_fetch_max_burst", Int, COVERED),
        f("entry_fetch_rate", Float, COVERED),
    ],
};

static CLOUD: Block = Block {
    title: "cloud",
    go_names: true,
    fields: &[
        g("resource_id", "resourceid", Str, COVERED),
        g("client_id", "clientid", Str, COVERED),
        f("client_secret", Str, COVERED),
        f("hostname", Str, COVERED),
        g("auth_url", "authurl", Str, COVERED),
        f("scada_address", Str, COVERED),
    ],
};

static GOSSIP: Block = Block {
    title: "gossip_lan, gossip_wan",
    go_names: true,
    fields: &[
        f("gossip_nodes", Int, COVERED),
        f("gossip_interval", Duration, COVERED),
        f("probe_interval", Duration, COVERED),
        f("probe_timeout", Duration, COVERED),
        g("suspicion_mult", "suspicionmult", Int, COVERED),
        g("retransmit_mult", "retransmitmult", Int, COVERED),
    ],
};

static LOCALITY: Block = Block {
    title: "locality",
    go_names: true,
    fields: &[f("region", Str, COVERED), f("zone", Str, COVERED)],
};

static PEERING: Block = Block {
    title: "peering",
    go_names: true,
    fields: &[
        f("enabled", Bool, COVERED),
        f("test_allow_peer_registrations", Bool, COVERED),
    ],
};

static RPC: Block = Block {
    title: "rpc",
    go_names: true,
    fields: &[f("enable_streaming", Bool, COVERED)],
};

static UNIX_SOCKETS: Block = Block {
    title: "unix_sockets",
    go_names: true,
    fields: &[
        f("group", Str, COVERED),
        f("mode", Str, COVERED),
        f("user", Str, COVERED),
    ],
};

static XDS: Block = Block {
    title: "xds",
    go_names: true,
    fields: &[f("update_max_per_second", Float, COVERED)],
};

static CONSUL_INTERNAL: Block = Block {
    title: "consul",
    go_names: true,
    fields: &[
        f(
            "coordinate",
            Kind::Object(&CONSUL_INTERNAL_COORDINATE),
            COVERED,
        ),
        f("raft", Kind::Object(&CONSUL_INTERNAL_RAFT), COVERED),
        f("server", Kind::Object(&CONSUL_INTERNAL_SERVER), COVERED),
    ],
};

static CONSUL_INTERNAL_COORDINATE: Block = Block {
    title: "consul.coordinate",
    go_names: true,
    fields: &[
        f("update_batch_size", Int, COVERED),
        f("update_max_batches", Int, COVERED),
        f("update_period", Duration, COVERED),
    ],
};

static CONSUL_INTERNAL_RAFT: Block = Block {
    title: "consul.raft",
    go_names: true,
    fields: &[
        f("election_timeout", Duration, COVERED),
        f("heartbeat_timeout", Duration, COVERED),
        f("leader_lease_timeout", Duration, COVERED),
    ],
};

static CONSUL_INTERNAL_SERVER: Block = Block {
    title: "consul.server",
    go_names: true,
    fields: &[f("health_interval", Duration, COVERED)],
};

// ---- Consul Enterprise blocks ----

static AUDIT: Block = Block {
    title: "audit",
    go_names: true,
    fields: &[
        f("enabled", Bool, COVERED),
        g("sink", "sinks", Kind::ObjectMap(&AUDIT_SINK), COVERED),
    ],
};

static AUDIT_SINK: Block = Block {
    title: "audit.sink",
    go_names: true,
    fields: &[
        f("type", Str, COVERED),
        f("format", Str, COVERED),
        f("path", Str, COVERED),
        f("delivery_guarantee", Str, COVERED),
        f("mode", Str, COVERED),
        f("rotate_bytes", Int, COVERED),
        f("rotate_duration", Str, COVERED),
        f("rotate_max_files", Int, COVERED),
    ],
};

static SEGMENT: Block = Block {
    title: "segments",
    go_names: true,
    fields: &[
        f("advertise", Str, COVERED),
        f("bind", Str, COVERED),
        f("name", Str, COVERED),
        f("port", Int, COVERED),
        g("rpc_listener", "rpclistener", Bool, COVERED),
    ],
};

static REPORTING: Block = Block {
    title: "reporting",
    go_names: true,
    fields: &[f("license", Kind::Object(&REPORTING_LICENSE), COVERED)],
};

static REPORTING_LICENSE: Block = Block {
    title: "reporting.license",
    go_names: true,
    fields: &[f("enabled", Bool, COVERED)],
};

// ---- the top level ----

/// Every top-level key. Consul decodes the top level from embedded structs, so only the
/// names themselves (in any letter case) are accepted here, not Go field names.
pub static TOP_LEVEL: Block = Block {
    title: "top level",
    go_names: false,
    fields: &[
        f("acl", Kind::Object(&ACL), SECTION),
        // Deprecated ACL keys (Consul's `DeprecatedConfig`), moved into `acl` by
        // `config::acl` with Consul's deprecation warnings.
        f(
            "acl_agent_master_token",
            Str,
            not("the recovery token is kept, and set through /v1/agent/token, but grants nothing: agent endpoints take ordinary tokens"),
        ),
        f("acl_agent_token", Str, acts("tokens.agent")),
        f("acl_datacenter", Str, acts("acl.enabled")),
        f("acl_default_policy", Str, acts("acl.default_policy")),
        f("acl_down_policy", Str, acts("config.down_policy")),
        f(
            "acl_enable_key_list_policy",
            Bool,
            not("recursive KV reads are checked with `read`, not `list`"),
        ),
        f("acl_master_token", Str, acts("initial_management")),
        f("acl_replication_token", Str, not(REPLICATION)),
        f("acl_token", Str, acts("tokens.default")),
        f("acl_ttl", Duration, acts("config.token_ttl")),
        f("enable_acl_replication", Bool, not(REPLICATION)),
        f("addresses", Kind::Object(&ADDRESSES), SECTION),
        f("advertise_addr", Str, acts("advertise()")),
        f(
            "advertise_addr_ipv4",
            Str,
            not("the node's lan_ipv4 tagged address is advertise_addr"),
        ),
        f(
            "advertise_addr_ipv6",
            Str,
            not("the node's lan_ipv6 tagged address is advertise_addr"),
        ),
        f("advertise_addr_wan", Str, acts("advertise_wan()")),
        f(
            "advertise_addr_wan_ipv4",
            Str,
            not("the node's wan_ipv4 tagged address is advertise_addr_wan"),
        ),
        f(
            "advertise_addr_wan_ipv6",
            Str,
            not("the node's wan_ipv6 tagged address is advertise_addr_wan"),
        ),
        f(
            "advertise_reconnect_timeout",
            Duration,
            not("this agent's peers reap it after their own reconnect_timeout"),
        ),
        f(
            "auto_config",
            Kind::Object(&AUTO_CONFIG),
            not("praetor has no auto-config (JWT-authorized client agent configuration); use auto_encrypt"),
        ),
        f("autopilot", Kind::Object(&AUTOPILOT), SECTION),
        f(
            "auto_reload_config",
            Bool,
            not_unless(
                "configuration is reloaded on SIGHUP and `praetor reload`, not when files change",
                Holds::Bool(false),
            ),
        ),
        f("bind_addr", Str, acts("config.bind_addr")),
        f("bootstrap", Bool, acts("config.bootstrap")),
        f("bootstrap_expect", Int, acts("config.bootstrap_expect")),
        f(
            "cache",
            Kind::Object(&CACHE),
            not("the agent cache does not rate-limit its entries' refreshes"),
        ),
        // The old top-level TLS keys, moved into `tls` by `config::tls`.
        f("ca_file", Str, acts("CaSource")),
        f("ca_path", Str, acts("CaSource")),
        f("cert_file", Str, acts("cert_file")),
        f("key_file", Str, acts("key_file")),
        f("tls_cipher_suites", Str, acts("cipher_suites")),
        f("tls_min_version", Str, acts("min_version")),
        f(
            "tls_prefer_server_cipher_suites",
            Bool,
            not("ignored, as Consul ignores it: TLS servers choose the suite"),
        ),
        f("verify_incoming", Bool, acts("verify_incoming")),
        f("verify_incoming_https", Bool, acts("verify_incoming")),
        f("verify_incoming_rpc", Bool, acts("verify_incoming")),
        f("verify_outgoing", Bool, acts("verify_outgoing")),
        f("verify_server_hostname", Bool, acts("verify_server_hostname")),
        f("check", Kind::OneOrMany(&CHECK), acts("\"checks\"")),
        f(
            "check_output_max_size",
            Int,
            not("each check keeps its own output_max_size (default 4096 bytes)"),
        ),
        f("check_update_interval", Duration, acts("\"check_update_interval\"")),
        f("checks", Kind::Objects(&CHECK), acts("\"checks\"")),
        f("client_addr", Str, acts("config.addresses")),
        f(
            "cloud",
            Kind::Object(&CLOUD),
            not("praetor does not link to HashiCorp Cloud"),
        ),
        f(
            "config_entries",
            Kind::Object(&CONFIG_ENTRIES),
            SECTION,
        ),
        f("auto_encrypt", Kind::Object(&AUTO_ENCRYPT), SECTION),
        f("connect", Kind::Object(&CONNECT), SECTION),
        f("dns_config", Kind::Object(&DNS), SECTION),
        f("domain", Str, acts("dns.domain")),
        f("alt_domain", Str, acts("alt_domain")),
        f("recursors", StrList, acts("recursors")),
        f("data_dir", Str, acts("config.data_dir")),
        f("datacenter", Str, acts("config.datacenter")),
        f("default_query_time", Duration, acts("default_query_time")),
        f(
            "disable_anonymous_signature",
            Bool,
            not_unless(
                "praetor never contacts anyone to check for updates, so it sends no signature",
                Holds::Bool(true),
            ),
        ),
        f(
            "disable_coordinates",
            Bool,
            not_unless(
                "network coordinates are always kept",
                Holds::Bool(false),
            ),
        ),
        f(
            "disable_host_node_id",
            Bool,
            not_unless(
                "praetor never derives the node ID from the host; it is random and kept in the data directory",
                Holds::Bool(true),
            ),
        ),
        f(
            "disable_http_unprintable_char_filter",
            Bool,
            not("the HTTP API's handling of unprintable characters in paths is fixed"),
        ),
        f(
            "disable_keyring_file",
            Bool,
            not_unless(
                "the gossip keyring is kept in memory, not in a file",
                Holds::Bool(true),
            ),
        ),
        f(
            "disable_primary_gateway_fallback",
            Bool,
            acts("\"disable_primary_gateway_fallback\""),
        ),
        f(
            "disable_remote_exec",
            Bool,
            not_unless(
                "praetor has no remote exec (`consul exec`), so there is nothing to enable",
                Holds::Bool(true),
            ),
        ),
        f(
            "disable_update_check",
            Bool,
            not_unless(
                "praetor never contacts anyone to check for updates",
                Holds::Bool(true),
            ),
        ),
        f(
            "discard_check_output",
            Bool,
            not_unless("check output is always kept", Holds::Bool(false)),
        ),
        f(
            "discovery_max_stale",
            Duration,
            not("service discovery reads are served as their consistency mode asks"),
        ),
        f(
            "enable_agent_tls_for_checks",
            Bool,
            not_unless(
                "HTTP and gRPC checks do not present the agent's certificate",
                Holds::Bool(false),
            ),
        ),
        f(
            "enable_central_service_config",
            Bool,
            not_unless(
                "the agent does not merge service-defaults and proxy-defaults into its local registrations",
                Holds::Bool(false),
            ),
        ),
        f(
            "enable_debug",
            Bool,
            not_unless("praetor has no /debug/pprof endpoints", Holds::Bool(false)),
        ),
        f("enable_script_checks", Bool, acts("\"enable_script_checks\"")),
        f(
            "enable_local_script_checks",
            Bool,
            acts("\"enable_local_script_checks\""),
        ),
        f(
            "enable_syslog",
            Bool,
            not_unless("praetor does not write to syslog", Holds::Bool(false)),
        ),
        f("encrypt", Str, acts("\"encrypt\"")),
        f("encrypt_verify_incoming", Bool, acts("encrypt_verify_incoming")),
        f("encrypt_verify_outgoing", Bool, acts("encrypt_verify_outgoing")),
        f(
            "gossip_lan",
            Kind::Object(&GOSSIP),
            not(GOSSIP_FIXED),
        ),
        f(
            "gossip_wan",
            Kind::Object(&GOSSIP),
            not(GOSSIP_FIXED),
        ),
        f("http_config", Kind::Object(&HTTP_CONFIG), SECTION),
        f("leave_on_terminate", Bool, acts("leave_on_terminate")),
        f("license_path", Str, ENTERPRISE),
        f("limits", Kind::Object(&LIMITS), SECTION),
        f(
            "locality",
            Kind::Object(&LOCALITY),
            not("the agent publishes no locality for itself or its services"),
        ),
        f("log_level", Str, acts("log_level")),
        f(
            "log_sublevels",
            StrMap,
            not("every subsystem logs at log_level"),
        ),
        f("log_json", Bool, acts("process.log_json")),
        f("log_file", Str, acts("log_file")),
        f("log_rotate_duration", Duration, acts("rotate_duration")),
        f("log_rotate_bytes", Int, acts("rotate_bytes")),
        f("log_rotate_max_files", Int, acts("rotate_max_files")),
        f("max_query_time", Duration, acts("max_query_time")),
        f("node_id", Str, acts("config.node_id")),
        f("node_meta", StrMap, acts("\"node_meta\"")),
        f("node_name", Str, acts("config.node_name")),
        f(
            "peering",
            Kind::Object(&PEERING),
            not("praetor has no cluster peering"),
        ),
        f("performance", Kind::Object(&PERFORMANCE), SECTION),
        f("pid_file", Str, acts("pid_file")),
        f("ports", Kind::Object(&PORTS), SECTION),
        f("primary_datacenter", Str, acts("primary_datacenter")),
        f(
            "primary_gateways",
            StrList,
            acts("\"primary_gateways\""),
        ),
        f(
            "primary_gateways_interval",
            Duration,
            acts("\"primary_gateways_interval\""),
        ),
        f(
            "protocol",
            Int,
            not_unless(
                "praetor always speaks gossip protocol 2, which every Consul agent understands",
                Holds::Int(2),
            ),
        ),
        f(
            "raft_protocol",
            Int,
            not_unless("praetor speaks Raft protocol 3 only", Holds::Int(3)),
        ),
        f(
            "raft_snapshot_threshold",
            Int,
            acts("raft_snapshot_threshold_entries"),
        ),
        f(
            "raft_snapshot_interval",
            Duration,
            not("servers check for a snapshot after every applied batch (raft_snapshot_threshold)"),
        ),
        f("raft_trailing_logs", Int, acts("raft_trailing_logs_entries")),
        f(
            "raft_logstore",
            Kind::Object(&RAFT_LOGSTORE),
            not("praetor's servers keep their own log format"),
        ),
        f(
            "raft_boltdb",
            Kind::Object(&RAFT_BOLTDB_DEPRECATED),
            not("praetor's servers keep their own log format"),
        ),
        f(
            "reconnect_timeout",
            Duration,
            not_kept(
                "failed LAN members are reaped after 72h",
                "pending.reconnect_timeout",
            ),
        ),
        f(
            "reconnect_timeout_wan",
            Duration,
            not("failed WAN members are reaped after 72h"),
        ),
        f(
            "rejoin_after_leave",
            Bool,
            not_unless(
                "an agent that left does not rejoin its previous members at start",
                Holds::Bool(false),
            ),
        ),
        f("retry_interval", Duration, acts("\"retry_interval\"")),
        f("retry_interval_wan", Duration, acts("\"retry_interval_wan\"")),
        f("retry_join", StrList, acts("retry_join")),
        f("retry_max", Int, acts("\"retry_max\"")),
        f("retry_max_wan", Int, acts("\"retry_max_wan\"")),
        f("retry_join_wan", StrList, acts("\"retry_join_wan\"")),
        f(
            "serf_lan_allowed_cidrs",
            StrList,
            not("gossip accepts packets from every address"),
        ),
        f(
            "serf_wan_allowed_cidrs",
            StrList,
            not("gossip accepts packets from every address"),
        ),
        f("serf_lan", Str, acts("serf_lan_bind")),
        f("serf_wan", Str, acts("serf_wan_bind")),
        f("server", Bool, acts("config.server")),
        f(
            "server_name",
            Str,
            not("outgoing TLS checks server.<datacenter>.<domain>"),
        ),
        f("service", Kind::OneOrMany(&SERVICE), acts("\"services\"")),
        f("services", Kind::Objects(&SERVICE), acts("\"services\"")),
        f("session_ttl_min", Duration, acts("session_ttl_min_ns")),
        f("skip_leave_on_interrupt", Bool, acts("skip_leave_on_interrupt")),
        f("start_join", StrList, acts("start_join")),
        f("start_join_wan", StrList, acts("\"start_join_wan\"")),
        f(
            "syslog_facility",
            Str,
            not("praetor does not write to syslog"),
        ),
        f("tls", Kind::Object(&TLS), SECTION),
        f(
            "tagged_addresses",
            StrMap,
            not("the node's tagged addresses are its lan and wan addresses"),
        ),
        f("telemetry", Kind::Object(&TELEMETRY), SECTION),
        f("translate_wan_addrs", Bool, acts("translate_wan_addrs")),
        f(
            "xds",
            Kind::Object(&XDS),
            not("xDS updates are not rate-limited: every store change is sent as it comes"),
        ),
        // The UI keys Consul deprecated, read by `config::ui` into `ui_config`.
        f("ui", Bool, acts("ui.enabled")),
        f("ui_content_path", Str, acts("content_path")),
        f("ui_dir", Str, acts("ui.dir")),
        f("ui_config", Kind::Object(&UI_CONFIG), SECTION),
        f(
            "unix_sockets",
            Kind::Object(&UNIX_SOCKETS),
            not(NO_UNIX_SOCKETS),
        ),
        f("watches", Maps, acts("config.watches")),
        f(
            "rpc",
            Kind::Object(&RPC),
            not("blocking queries are answered without streaming"),
        ),
        f(
            "use_streaming_backend",
            Bool,
            not_unless(
                "blocking queries are answered without streaming",
                Holds::Bool(false),
            ),
        ),
        f(
            "snapshot_agent",
            Map,
            not("it configures Consul Enterprise's snapshot agent, a separate program"),
        ),
        // Consul's internal settings. praetor reads the first three so that tests can
        // shorten them, as Consul's own tests do.
        f("ae_interval", Duration, acts("\"ae_interval\"")),
        f(
            "check_deregister_interval_min",
            Duration,
            acts("\"check_deregister_interval_min\""),
        ),
        f("check_reap_interval", Duration, acts("\"check_reap_interval\"")),
        f(
            "consul",
            Kind::Object(&CONSUL_INTERNAL),
            not(NON_USER),
        ),
        f("revision", Str, not(NON_USER)),
        f("segment_limit", Int, not(NON_USER)),
        f("segment_name_limit", Int, not(NON_USER)),
        f("sync_coordinate_interval_min", Duration, not(NON_USER)),
        f("sync_coordinate_rate_target", Float, not(NON_USER)),
        f("version", Str, not(NON_USER)),
        f("version_prerelease", Str, not(NON_USER)),
        f("version_metadata", Str, not(NON_USER)),
        // Consul Enterprise.
        f("audit", Kind::Object(&AUDIT), ENTERPRISE),
        f("read_replica", Bool, ENTERPRISE),
        f("segment", Str, ENTERPRISE),
        f("segments", Kind::Objects(&SEGMENT), ENTERPRISE),
        f("partition", Str, ENTERPRISE),
        f("license_poll_base_time", Duration, ENTERPRISE),
        f("license_poll_max_time", Duration, ENTERPRISE),
        f("license_update_base_time", Duration, ENTERPRISE),
        f("license_update_max_time", Duration, ENTERPRISE),
        f("reporting", Kind::Object(&REPORTING), ENTERPRISE),
        // praetor's own keys, named in Consul's style.
        f("shards", Int, acts("config.shards")),
        f("raft_log_cache_bytes", Int, acts("config.raft_log_cache_bytes")),
        f("enable_debug_faults", Bool, acts("\"enable_debug_faults\"")),
    ],
};
