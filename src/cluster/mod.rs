//! The cluster: the agent's gossip pools and what it learns from them.
//!
//! [`gossip`] drives the pure gossip core (`crate::gossip`) on shard 0's runtime and hands
//! every other part of the agent a [`gossip::GossipHandle`]; [`pools`] sets up the LAN and
//! WAN pools with Consul's tags, joins them, and turns membership into the server list the
//! raft thread bootstraps and reconciles from (or, on a client agent, into the server it
//! forwards to, kept by [`servers`]); [`router`] keeps, on a server, the other datacenters'
//! servers from the WAN pool; [`reconcile`] maps members to the catalog registrations the leader keeps;
//! [`user_events`] keeps the Consul user events heard on the LAN pool;
//! [`gossip_gateways`] carries the WAN pool's gossip to other datacenters through mesh
//! gateways when they federate that way.

pub mod gossip;
pub mod gossip_gateways;
pub mod pools;
pub mod reconcile;
pub mod router;
pub mod servers;
pub mod user_events;

use gossip::GossipHandle;
use std::sync::Arc;
use user_events::EventLog;

/// The agent's gossip pools and the user events heard on them: one per agent, shared by
/// every shard (the handles are `Send + Sync` and cheap to clone).
pub struct Pools {
    /// The LAN pool, when serf_lan is enabled.
    pub lan: Option<GossipHandle>,
    /// The WAN pool, on servers with serf_wan enabled.
    pub wan: Option<GossipHandle>,
    /// Recent Consul user events heard on the LAN pool (`/v1/event/list`).
    pub events: Arc<EventLog>,
    /// On a client agent, the servers its RPCs go to (empty on a server).
    pub servers: Arc<servers::ServerManager>,
    /// On a server, the other datacenters' servers as the WAN pool shows them (no route
    /// anywhere on a client agent, which sends every `?dc=` request to its server).
    pub router: Arc<router::Router>,
}
