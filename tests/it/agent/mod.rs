//! The agent API and client agents: local services and checks, anti-entropy, servers and
//! failover.

mod agent_antientropy;
mod agent_api;
mod client_agents;
