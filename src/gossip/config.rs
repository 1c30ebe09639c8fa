//! Gossip configuration: memberlist's and serf's knobs with their defaults, and the
//! presets memberlist ships (`DefaultLANConfig`, `DefaultWANConfig`, `DefaultLocalConfig`)
//! plus Consul's adjustments to them (agent/consul/config.go: 72 h reconnect timeout,
//! 30 s dead-node reclaim, 3 s leave propagation, queue depth scaled to the cluster).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

/// memberlist `ProtocolVersionMin`/`Max` and the version spoken (`ProtocolVersion2Compatible`).
pub const MEMBERLIST_PROTOCOL_MIN: u8 = 1;
pub const MEMBERLIST_PROTOCOL_MAX: u8 = 5;
pub const MEMBERLIST_PROTOCOL_CURRENT: u8 = 2;
/// serf `ProtocolVersionMin`/`Max`; serf's `DefaultConfig` speaks 4, `serf agent` 5.
pub const SERF_PROTOCOL_MIN: u8 = 2;
pub const SERF_PROTOCOL_MAX: u8 = 5;
pub const SERF_PROTOCOL_CURRENT: u8 = 4;

#[derive(Debug, Clone)]
pub struct GossipConfig {
    /// Unique node name in the pool.
    pub node_name: String,
    /// Address and port other members use to reach us (UDP and TCP).
    pub advertise_addr: IpAddr,
    pub advertise_port: u16,
    /// serf tags, carried as node metadata (at most 512 bytes encoded).
    pub tags: BTreeMap<String, String>,

    // memberlist
    pub probe_interval: Duration,
    pub probe_timeout: Duration,
    pub indirect_checks: usize,
    pub retransmit_mult: usize,
    pub suspicion_mult: u32,
    pub suspicion_max_timeout_mult: u32,
    pub awareness_max_multiplier: u32,
    pub push_pull_interval: Duration,
    pub gossip_interval: Duration,
    pub gossip_nodes: usize,
    pub gossip_to_the_dead_time: Duration,
    pub tcp_timeout: Duration,
    pub udp_buffer_size: usize,
    pub enable_compression: bool,
    pub disable_tcp_pings: bool,
    /// How long a dead node's name stays bound to its address (0: forever).
    pub dead_node_reclaim_time: Duration,
    /// Cluster label (memberlist `Label`); "" for none.
    pub label: String,
    pub skip_inbound_label_check: bool,
    pub gossip_verify_incoming: bool,
    pub gossip_verify_outgoing: bool,
    /// Initial keyring, primary first. Empty: no encryption.
    pub keys: Vec<Vec<u8>>,
    pub serf_protocol: u8,

    // serf
    pub broadcast_timeout: Duration,
    pub leave_propagate_delay: Duration,
    pub event_buffer: usize,
    pub query_buffer: usize,
    pub reap_interval: Duration,
    pub reconnect_interval: Duration,
    pub reconnect_timeout: Duration,
    pub tombstone_timeout: Duration,
    pub recent_intent_timeout: Duration,
    pub queue_check_interval: Duration,
    pub max_queue_depth: usize,
    /// When > 0, the queue limit is max(min_queue_depth, 2 * members) (Consul sets 4096).
    pub min_queue_depth: usize,
    pub query_timeout_mult: u32,
    pub query_response_size_limit: usize,
    pub query_size_limit: usize,
    pub user_event_size_limit: usize,
    pub disable_coordinates: bool,
}

impl GossipConfig {
    /// memberlist `DefaultLANConfig` + serf `DefaultConfig`.
    pub fn lan(node_name: impl Into<String>, addr: IpAddr, port: u16) -> Self {
        GossipConfig {
            node_name: node_name.into(),
            advertise_addr: addr,
            advertise_port: port,
            tags: BTreeMap::new(),
            probe_interval: Duration::from_secs(1),
            probe_timeout: Duration::from_millis(500),
            indirect_checks: 3,
            retransmit_mult: 4,
            suspicion_mult: 4,
            suspicion_max_timeout_mult: 6,
            awareness_max_multiplier: 8,
            push_pull_interval: Duration::from_secs(30),
            gossip_interval: Duration::from_millis(200),
            gossip_nodes: 3,
            gossip_to_the_dead_time: Duration::from_secs(30),
            tcp_timeout: Duration::from_secs(10),
            udp_buffer_size: 1400,
            enable_compression: true,
            disable_tcp_pings: false,
            dead_node_reclaim_time: Duration::ZERO,
            label: String::new(),
            skip_inbound_label_check: false,
            gossip_verify_incoming: true,
            gossip_verify_outgoing: true,
            keys: Vec::new(),
            serf_protocol: SERF_PROTOCOL_CURRENT,
            broadcast_timeout: Duration::from_secs(5),
            leave_propagate_delay: Duration::from_secs(1),
            event_buffer: 512,
            query_buffer: 512,
            reap_interval: Duration::from_secs(15),
            reconnect_interval: Duration::from_secs(30),
            reconnect_timeout: Duration::from_secs(24 * 3600),
            tombstone_timeout: Duration::from_secs(24 * 3600),
            recent_intent_timeout: Duration::from_secs(5 * 60),
            queue_check_interval: Duration::from_secs(30),
            max_queue_depth: 4096,
            min_queue_depth: 0,
            query_timeout_mult: 16,
            query_response_size_limit: 1024,
            query_size_limit: 1024,
            user_event_size_limit: 512,
            disable_coordinates: false,
        }
    }

    /// memberlist `DefaultWANConfig` + serf `DefaultConfig`.
    pub fn wan(node_name: impl Into<String>, addr: IpAddr, port: u16) -> Self {
        GossipConfig {
            tcp_timeout: Duration::from_secs(30),
            suspicion_mult: 6,
            push_pull_interval: Duration::from_secs(60),
            probe_timeout: Duration::from_secs(3),
            probe_interval: Duration::from_secs(5),
            gossip_nodes: 4,
            gossip_interval: Duration::from_millis(500),
            gossip_to_the_dead_time: Duration::from_secs(60),
            ..GossipConfig::lan(node_name, addr, port)
        }
    }

    /// memberlist `DefaultLocalConfig` (loopback / tests).
    pub fn local(node_name: impl Into<String>, addr: IpAddr, port: u16) -> Self {
        GossipConfig {
            tcp_timeout: Duration::from_secs(1),
            indirect_checks: 1,
            retransmit_mult: 2,
            suspicion_mult: 3,
            push_pull_interval: Duration::from_secs(15),
            probe_timeout: Duration::from_millis(200),
            probe_interval: Duration::from_secs(1),
            gossip_interval: Duration::from_millis(100),
            gossip_to_the_dead_time: Duration::from_secs(15),
            ..GossipConfig::lan(node_name, addr, port)
        }
    }

    /// Consul's serf LAN pool: LAN timings plus Consul's changes.
    pub fn consul_lan(node_name: impl Into<String>, addr: IpAddr, port: u16) -> Self {
        GossipConfig::lan(node_name, addr, port).with_consul_changes()
    }

    /// Consul's serf WAN pool (servers only; node names are `<node>.<dc>`).
    pub fn consul_wan(node_name: impl Into<String>, addr: IpAddr, port: u16) -> Self {
        GossipConfig::wan(node_name, addr, port).with_consul_changes()
    }

    fn with_consul_changes(self) -> Self {
        GossipConfig {
            reconnect_timeout: Duration::from_secs(3 * 24 * 3600),
            dead_node_reclaim_time: Duration::from_secs(30),
            leave_propagate_delay: Duration::from_secs(3),
            min_queue_depth: 4096,
            ..self
        }
    }

    /// The memberlist `Vsn` array: pmin, pmax, pcur, dmin, dmax, dcur.
    pub fn vsn(&self) -> [u8; 6] {
        [
            MEMBERLIST_PROTOCOL_MIN,
            MEMBERLIST_PROTOCOL_MAX,
            MEMBERLIST_PROTOCOL_CURRENT,
            SERF_PROTOCOL_MIN,
            SERF_PROTOCOL_MAX,
            self.serf_protocol,
        ]
    }
}

/// Consul's node tags for a client agent (agent/consul/client_serf.go).
pub fn consul_client_tags(
    datacenter: &str,
    node_id: &str,
    build: &str,
) -> BTreeMap<String, String> {
    let mut t = BTreeMap::new();
    t.insert("role".into(), "node".into());
    t.insert("dc".into(), datacenter.into());
    t.insert("segment".into(), String::new());
    t.insert("id".into(), node_id.into());
    t.insert("vsn".into(), "2".into());
    t.insert("vsn_min".into(), "2".into());
    t.insert("vsn_max".into(), "3".into());
    t.insert("build".into(), build.into());
    t
}

/// Consul's node tags for a server (agent/consul/server_serf.go). `wan_join_port` is
/// only set on the LAN pool; `expect` only with bootstrap-expect.
pub struct ConsulServerTags<'a> {
    pub datacenter: &'a str,
    pub node_id: &'a str,
    pub build: &'a str,
    pub server_port: u16,
    pub raft_protocol: u32,
    pub bootstrap_expect: u32,
    pub wan_join_port: Option<u16>,
}

pub fn consul_server_tags(s: &ConsulServerTags<'_>) -> BTreeMap<String, String> {
    let mut t = BTreeMap::new();
    if let Some(p) = s.wan_join_port {
        t.insert("wan_join_port".into(), p.to_string());
    }
    t.insert("role".into(), "consul".into());
    t.insert("dc".into(), s.datacenter.into());
    t.insert("segment".into(), String::new());
    t.insert("id".into(), s.node_id.into());
    t.insert("vsn".into(), "2".into());
    t.insert("vsn_min".into(), "2".into());
    t.insert("vsn_max".into(), "3".into());
    t.insert("raft_vsn".into(), s.raft_protocol.to_string());
    t.insert("build".into(), s.build.into());
    t.insert("port".into(), s.server_port.to_string());
    if s.bootstrap_expect != 0 {
        t.insert("expect".into(), s.bootstrap_expect.to_string());
    }
    t.insert("acls".into(), "0".into());
    t.insert("ft_fs".into(), "1".into());
    t.insert("ft_si".into(), "1".into());
    t
}
