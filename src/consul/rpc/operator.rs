//! The operator's calls, as Consul's `operator_raft_endpoint.go` and
//! `operator_autopilot_endpoint.go` serve them: `Operator.RaftGetConfiguration` (a
//! `DCSpecificRequest`, answered with `RaftConfigurationResponse`),
//! `Operator.RaftRemovePeerByAddress` and `RaftRemovePeerByID` (`RaftRemovePeerRequest`,
//! answered with net/rpc's empty `struct{}`), `Operator.AutopilotGetConfiguration` (answered
//! with `AutopilotConfig`), `Operator.AutopilotSetConfiguration`
//! (`AutopilotSetConfigRequest`, answered with a bool), `Operator.ServerHealth` (answered with
//! `AutopilotHealthReply`) and `Operator.AutopilotState` (answered with raft-autopilot's
//! `State`).
//!
//! The replies are read back into the same values they were written from
//! ([`RaftConfiguration`], [`OperatorHealth`], the store's [`AutopilotConfig`]), which the
//! HTTP handlers render: a client agent's answer is then its server's. None of these
//! replies embeds `QueryMeta`, as in Consul.

use super::{each_field, go_time_binary, Fields};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::autopilot::AutopilotConfig;
use crate::store::catalog::read::{ServiceUsage, CONNECT_KINDS};

/// One server of the Raft configuration (`structs.RaftServer`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RaftServer {
    pub id: String,
    pub node: String,
    pub address: String,
    pub leader: bool,
    pub protocol_version: String,
    pub voter: bool,
    pub last_index: u64,
}

/// `RaftConfigurationResponse`: the servers and the configuration's Raft index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RaftConfiguration {
    pub servers: Vec<RaftServer>,
    pub index: u64,
}

impl RaftConfiguration {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 2);
        f.field("Index").uint(self.index);
        let list = f.field("Servers");
        if self.servers.is_empty() {
            list.nil();
        } else {
            list.array_len(self.servers.len());
            for server in &self.servers {
                let mut s = Fields::new(list, 7);
                s.field("Address").str(&server.address);
                s.field("ID").str(&server.id);
                s.field("LastIndex").uint(server.last_index);
                s.field("Leader").bool(server.leader);
                s.field("Node").str(&server.node);
                s.field("ProtocolVersion").str(&server.protocol_version);
                s.field("Voter").bool(server.voter);
                s.finish();
            }
        }
        f.finish();
        w.into_inner()
    }

    pub fn decode(body: &[u8]) -> Result<RaftConfiguration, WireError> {
        let mut out = RaftConfiguration::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Index" => out.index = r.u64("Index")?,
                "Servers" => {
                    let count = r.array_len()?;
                    out.servers = Vec::with_capacity(count);
                    for _ in 0..count {
                        let mut server = RaftServer::default();
                        each_field(r, |name, r| {
                            match name {
                                "ID" => server.id = r.str()?.to_string(),
                                "Node" => server.node = r.str()?.to_string(),
                                "Address" => server.address = r.str()?.to_string(),
                                "Leader" => server.leader = r.bool()?,
                                "ProtocolVersion" => server.protocol_version = r.str()?.to_string(),
                                "Voter" => server.voter = r.bool()?,
                                "LastIndex" => server.last_index = r.u64("LastIndex")?,
                                _ => return Ok(false),
                            }
                            Ok(true)
                        })?;
                        out.servers.push(server);
                    }
                }
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(out)
    }
}

/// `RaftRemovePeerRequest`: the peer by address (`IP:port`) or by ID, and the token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RaftRemovePeerRequest<'a> {
    pub datacenter: &'a str,
    pub address: &'a str,
    pub id: &'a str,
    pub token: &'a str,
}

impl<'a> RaftRemovePeerRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<RaftRemovePeerRequest<'a>, WireError> {
        let mut request = RaftRemovePeerRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Address" => request.address = r.str()?,
                "ID" => request.id = r.str()?,
                _ => return super::write_request_field(&mut request.token, name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 4);
        f.field("Address").str(self.address);
        f.field("Datacenter").str(self.datacenter);
        f.field("ID").str(self.id);
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

/// `AutopilotConfig`, durations in nanoseconds as Go's `time.Duration`.
pub fn write_autopilot_config(w: &mut Writer, config: &AutopilotConfig) {
    let mut f = Fields::new(w, 10);
    f.field("CleanupDeadServers")
        .bool(config.cleanup_dead_servers);
    f.field("CreateIndex").uint(config.create_index);
    f.field("DisableUpgradeMigration")
        .bool(config.disable_upgrade_migration);
    f.field("LastContactThreshold")
        .int(config.last_contact_threshold_ns);
    f.field("MaxTrailingLogs").uint(config.max_trailing_logs);
    f.field("MinQuorum").uint(u64::from(config.min_quorum));
    f.field("ModifyIndex").uint(config.modify_index);
    f.field("RedundancyZoneTag")
        .str(&config.redundancy_zone_tag);
    f.field("ServerStabilizationTime")
        .int(config.server_stabilization_time_ns);
    f.field("UpgradeVersionTag")
        .str(&config.upgrade_version_tag);
    f.finish();
}

/// Reads an `AutopilotConfig`; a field left out is Go's zero value, as go-msgpack leaves it.
pub fn read_autopilot_config(r: &mut Reader) -> Result<AutopilotConfig, WireError> {
    let mut config = AutopilotConfig {
        cleanup_dead_servers: false,
        last_contact_threshold_ns: 0,
        max_trailing_logs: 0,
        min_quorum: 0,
        server_stabilization_time_ns: 0,
        redundancy_zone_tag: String::new(),
        disable_upgrade_migration: false,
        upgrade_version_tag: String::new(),
        create_index: 0,
        modify_index: 0,
    };
    each_field(r, |name, r| {
        match name {
            "CleanupDeadServers" => config.cleanup_dead_servers = r.bool()?,
            "LastContactThreshold" => {
                config.last_contact_threshold_ns = r.i64("LastContactThreshold")?
            }
            "MaxTrailingLogs" => config.max_trailing_logs = r.u64("MaxTrailingLogs")?,
            "MinQuorum" => config.min_quorum = r.u32("MinQuorum")?,
            "ServerStabilizationTime" => {
                config.server_stabilization_time_ns = r.i64("ServerStabilizationTime")?
            }
            "RedundancyZoneTag" => config.redundancy_zone_tag = r.str()?.to_string(),
            "DisableUpgradeMigration" => config.disable_upgrade_migration = r.bool()?,
            "UpgradeVersionTag" => config.upgrade_version_tag = r.str()?.to_string(),
            "CreateIndex" => config.create_index = r.u64("CreateIndex")?,
            "ModifyIndex" => config.modify_index = r.u64("ModifyIndex")?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(config)
}

/// `AutopilotSetConfigRequest`: the new configuration and, with `CAS`, the `ModifyIndex` in
/// it that the stored one must have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutopilotSetConfigRequest<'a> {
    pub datacenter: &'a str,
    pub config: AutopilotConfig,
    pub cas: bool,
    pub token: &'a str,
}

impl<'a> AutopilotSetConfigRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<AutopilotSetConfigRequest<'a>, WireError> {
        let mut datacenter = "";
        let mut config = None;
        let mut cas = false;
        let mut token = "";
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => datacenter = r.str()?,
                "Config" => config = Some(read_autopilot_config(r)?),
                "CAS" => cas = r.bool()?,
                _ => return super::write_request_field(&mut token, name, r),
            }
            Ok(true)
        })?;
        let config = match config {
            Some(config) => config,
            None => read_autopilot_config(&mut Reader::new(&[0x80]))?,
        };
        Ok(AutopilotSetConfigRequest {
            datacenter,
            config,
            cas,
            token,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 4);
        f.field("CAS").bool(self.cas);
        write_autopilot_config(f.field("Config"), &self.config);
        f.field("Datacenter").str(self.datacenter);
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

/// One server's health as the leader's autopilot judges it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerHealth {
    pub id: String,
    pub name: String,
    pub address: String,
    /// Gossip's word for it: `alive`, `leaving`, `left`, `failed` or `none`.
    pub serf_status: &'static str,
    pub version: String,
    pub leader: bool,
    /// Nanoseconds since the leader last heard from it; -1 if never in this term.
    pub last_contact_ns: i64,
    pub last_term: u64,
    pub last_index: u64,
    pub healthy: bool,
    pub voter: bool,
    /// When `healthy` last changed, in Unix nanoseconds.
    pub stable_since_unix_ns: i64,
}

/// The servers' health: `AutopilotHealthReply`, and what `State` says of the same servers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OperatorHealth {
    pub healthy: bool,
    pub failure_tolerance: u64,
    pub servers: Vec<ServerHealth>,
}

/// serf's `MemberStatus` values, in its order: `StatusNone` is 0.
const SERF_STATUSES: [&str; 5] = ["none", "alive", "leaving", "left", "failed"];

fn serf_status_code(status: &str) -> u64 {
    SERF_STATUSES.iter().position(|s| *s == status).unwrap_or(0) as u64
}

fn serf_status_of(code: u64) -> &'static str {
    SERF_STATUSES
        .get(usize::try_from(code).unwrap_or(usize::MAX))
        .copied()
        .unwrap_or("none")
}

/// raft-autopilot's `NodeStatus` for a gossip status: `unknown` for one it has no word for.
fn node_status(status: &str) -> &str {
    match status {
        "alive" | "failed" | "left" => status,
        _ => "unknown",
    }
}

fn node_status_of(status: &str) -> &'static str {
    match status {
        "alive" => "alive",
        "failed" => "failed",
        "left" => "left",
        _ => "none",
    }
}

/// Reads Go's `time.Time` binary form (version 1, or 2 with seconds of offset) as Unix
/// nanoseconds.
fn go_time_unix_ns(bytes: &[u8]) -> Result<i64, WireError> {
    /// Seconds from 0001-01-01 to 1970-01-01 (Go's `unixToInternal`).
    const UNIX_TO_INTERNAL_SECONDS: i64 = 62_135_596_800;
    let (seconds, nanos) = match bytes {
        [1, rest @ ..] if rest.len() == 14 => (&rest[0..8], &rest[8..12]),
        [2, rest @ ..] if rest.len() == 15 => (&rest[0..8], &rest[8..12]),
        _ => return Err(WireError::Invalid("a time that is not Go's binary form")),
    };
    let seconds = i64::from_be_bytes(seconds.try_into().expect("eight bytes"));
    let nanos = i32::from_be_bytes(nanos.try_into().expect("four bytes"));
    Ok((seconds - UNIX_TO_INTERNAL_SECONDS)
        .saturating_mul(1_000_000_000)
        .saturating_add(i64::from(nanos)))
}

/// `AutopilotHealthReply`.
pub fn encode_health(health: &OperatorHealth) -> Vec<u8> {
    let mut w = Writer::new();
    let mut f = Fields::new(&mut w, 3);
    f.field("FailureTolerance").uint(health.failure_tolerance);
    f.field("Healthy").bool(health.healthy);
    let list = f.field("Servers");
    if health.servers.is_empty() {
        list.nil();
    } else {
        list.array_len(health.servers.len());
        for server in &health.servers {
            let mut s = Fields::new(list, 12);
            s.field("Address").str(&server.address);
            s.field("Healthy").bool(server.healthy);
            s.field("ID").str(&server.id);
            s.field("LastContact").int(server.last_contact_ns);
            s.field("LastIndex").uint(server.last_index);
            s.field("LastTerm").uint(server.last_term);
            s.field("Leader").bool(server.leader);
            s.field("Name").str(&server.name);
            s.field("SerfStatus")
                .uint(serf_status_code(server.serf_status));
            s.field("StableSince")
                .bytes(&go_time_binary(server.stable_since_unix_ns));
            s.field("Version").str(&server.version);
            s.field("Voter").bool(server.voter);
            s.finish();
        }
    }
    f.finish();
    w.into_inner()
}

/// Reads an `AutopilotHealthReply`.
pub fn decode_health(body: &[u8]) -> Result<OperatorHealth, WireError> {
    let mut health = OperatorHealth::default();
    each_field(&mut Reader::new(body), |name, r| {
        match name {
            "Healthy" => health.healthy = r.bool()?,
            "FailureTolerance" => health.failure_tolerance = r.u64("FailureTolerance")?,
            "Servers" => {
                let count = r.array_len()?;
                health.servers = Vec::with_capacity(count);
                for _ in 0..count {
                    let mut server = ServerHealth::default();
                    each_field(r, |name, r| {
                        match name {
                            "ID" => server.id = r.str()?.to_string(),
                            "Name" => server.name = r.str()?.to_string(),
                            "Address" => server.address = r.str()?.to_string(),
                            "SerfStatus" => {
                                server.serf_status = serf_status_of(r.u64("SerfStatus")?)
                            }
                            "Version" => server.version = r.str()?.to_string(),
                            "Leader" => server.leader = r.bool()?,
                            "LastContact" => server.last_contact_ns = r.i64("LastContact")?,
                            "LastTerm" => server.last_term = r.u64("LastTerm")?,
                            "LastIndex" => server.last_index = r.u64("LastIndex")?,
                            "Healthy" => server.healthy = r.bool()?,
                            "Voter" => server.voter = r.bool()?,
                            "StableSince" => {
                                server.stable_since_unix_ns = go_time_unix_ns(r.bytes()?)?
                            }
                            _ => return Ok(false),
                        }
                        Ok(true)
                    })?;
                    health.servers.push(server);
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(health)
}

/// raft-autopilot's `RaftState` of a server.
fn raft_state(server: &ServerHealth) -> &'static str {
    if server.leader {
        "leader"
    } else if server.voter {
        "voter"
    } else {
        "non-voter"
    }
}

/// raft-autopilot's `State`: the same health keyed by server ID, each server's autopilot
/// view (`ServerState`: `Server`, `State`, `Stats`, `Health`), the leader and the voters.
/// Consul CE's servers carry the network segment's meta and the `voter` node type, and no
/// extension (`Ext`).
pub fn encode_state(health: &OperatorHealth, raft_version: i64) -> Vec<u8> {
    let mut w = Writer::new();
    let mut f = Fields::new(&mut w, 6);
    f.field("Ext").nil();
    f.field("FailureTolerance").uint(health.failure_tolerance);
    f.field("Healthy").bool(health.healthy);
    let leader = health.servers.iter().find(|s| s.leader);
    f.field("Leader").str(leader.map_or("", |s| s.id.as_str()));
    let map = f.field("Servers");
    map.map_len(health.servers.len());
    for server in &health.servers {
        map.str(&server.id);
        let mut state = Fields::new(map, 4);
        {
            let mut h = Fields::new(state.field("Health"), 2);
            h.field("Healthy").bool(server.healthy);
            h.field("StableSince")
                .bytes(&go_time_binary(server.stable_since_unix_ns));
            h.finish();
        }
        {
            let mut s = Fields::new(state.field("Server"), 10);
            s.field("Address").str(&server.address);
            s.field("Ext").nil();
            s.field("ID").str(&server.id);
            s.field("IsLeader").bool(server.leader);
            let meta = s.field("Meta");
            meta.map_len(1);
            meta.str("consul-network-segment");
            meta.str("");
            s.field("Name").str(&server.name);
            s.field("NodeStatus").str(node_status(server.serf_status));
            s.field("NodeType").str("voter");
            s.field("RaftVersion").int(raft_version);
            s.field("Version").str(&server.version);
            s.finish();
        }
        state.field("State").str(raft_state(server));
        {
            let mut s = Fields::new(state.field("Stats"), 3);
            s.field("LastContact").int(server.last_contact_ns);
            s.field("LastIndex").uint(server.last_index);
            s.field("LastTerm").uint(server.last_term);
            s.finish();
        }
        state.finish();
    }
    let voters: Vec<&str> = health
        .servers
        .iter()
        .filter(|s| s.voter)
        .map(|s| s.id.as_str())
        .collect();
    super::write_string_list(f.field("Voters"), voters.into_iter(), true);
    f.finish();
    w.into_inner()
}

/// Reads raft-autopilot's `State` back into the servers' health, in the order its map
/// lists them. A server is a voter when its `State` is `voter` or `leader`.
pub fn decode_state(body: &[u8]) -> Result<OperatorHealth, WireError> {
    let mut health = OperatorHealth::default();
    each_field(&mut Reader::new(body), |name, r| {
        match name {
            "Healthy" => health.healthy = r.bool()?,
            "FailureTolerance" => health.failure_tolerance = r.u64("FailureTolerance")?,
            "Servers" => {
                let count = r.map_len()?;
                health.servers = Vec::with_capacity(count);
                for _ in 0..count {
                    r.skip()?; // the key: the server's ID, which `Server` repeats
                    let mut server = ServerHealth::default();
                    each_field(r, |name, r| {
                        match name {
                            "Server" => each_field(r, |name, r| {
                                match name {
                                    "ID" => server.id = r.str()?.to_string(),
                                    "Name" => server.name = r.str()?.to_string(),
                                    "Address" => server.address = r.str()?.to_string(),
                                    "NodeStatus" => server.serf_status = node_status_of(r.str()?),
                                    "Version" => server.version = r.str()?.to_string(),
                                    "IsLeader" => server.leader = r.bool()?,
                                    _ => return Ok(false),
                                }
                                Ok(true)
                            })?,
                            "State" => server.voter = matches!(r.str()?, "voter" | "leader"),
                            "Stats" => each_field(r, |name, r| {
                                match name {
                                    "LastContact" => {
                                        server.last_contact_ns = r.i64("LastContact")?
                                    }
                                    "LastTerm" => server.last_term = r.u64("LastTerm")?,
                                    "LastIndex" => server.last_index = r.u64("LastIndex")?,
                                    _ => return Ok(false),
                                }
                                Ok(true)
                            })?,
                            "Health" => each_field(r, |name, r| {
                                match name {
                                    "Healthy" => server.healthy = r.bool()?,
                                    "StableSince" => {
                                        server.stable_since_unix_ns = go_time_unix_ns(r.bytes()?)?
                                    }
                                    _ => return Ok(false),
                                }
                                Ok(true)
                            })?,
                            _ => return Ok(false),
                        }
                        Ok(true)
                    })?;
                    health.servers.push(server);
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(health)
}

/// `Operator.Usage`'s reply, `structs.Usage`: the catalog's counts of the answering
/// server's datacenter (`Usage`, keyed by its name; `structs.ServiceUsage` each, the Connect
/// counts keyed by kind) with the read's `QueryMeta` embedded.
pub fn encode_usage(meta: &super::QueryMeta, datacenter: &str, usage: &ServiceUsage) -> Vec<u8> {
    let mut w = Writer::new();
    meta.write_reply(&mut w, &["Usage"], |_, w| {
        w.map_len(1);
        w.str(datacenter);
        let mut f = Fields::new(w, 5);
        f.field("BillableServiceInstances")
            .uint(usage.billable_service_instances as u64);
        let connect = f.field("ConnectServiceInstances");
        connect.map_len(usage.connect_instances.len());
        for (kind, count) in usage.connect_instances {
            connect.str(kind);
            connect.uint(count as u64);
        }
        f.field("Nodes").uint(usage.nodes as u64);
        f.field("ServiceInstances")
            .uint(usage.service_instances as u64);
        f.field("Services").uint(usage.services as u64);
        f.finish();
    });
    w.into_inner()
}

/// Reads [`encode_usage`]'s reply back: its `QueryMeta`, the datacenter it counts and the
/// counts. A Connect kind praetor does not count, or a second datacenter, is refused: the
/// server is not answering for one datacenter as praetor's servers do.
pub fn decode_usage(body: &[u8]) -> Result<(super::QueryMeta, String, ServiceUsage), WireError> {
    let mut datacenter = None;
    let mut usage = ServiceUsage {
        connect_instances: CONNECT_KINDS.map(|kind| (kind, 0)),
        ..ServiceUsage::default()
    };
    let count = |r: &mut Reader, field| r.u64(field).map(|n| n as usize);
    let meta = super::read_reply(body, |name, r| {
        if name != "Usage" {
            return Ok(false);
        }
        if r.try_nil()? {
            return Ok(true);
        }
        for _ in 0..r.map_len()? {
            if datacenter.is_some() {
                return Err(WireError::Invalid("Usage: more than one datacenter"));
            }
            datacenter = Some(r.str()?.to_string());
            each_field(r, |name, r| {
                match name {
                    "BillableServiceInstances" => {
                        usage.billable_service_instances = count(r, "BillableServiceInstances")?
                    }
                    "Nodes" => usage.nodes = count(r, "Nodes")?,
                    "ServiceInstances" => usage.service_instances = count(r, "ServiceInstances")?,
                    "Services" => usage.services = count(r, "Services")?,
                    "ConnectServiceInstances" => {
                        if r.try_nil()? {
                            return Ok(true);
                        }
                        for _ in 0..r.map_len()? {
                            let kind = r.str()?;
                            let n = count(r, "ConnectServiceInstances")?;
                            let slot = usage
                                .connect_instances
                                .iter_mut()
                                .find(|(known, _)| *known == kind)
                                .ok_or(WireError::Invalid(
                                    "ConnectServiceInstances: unknown kind",
                                ))?;
                            slot.1 = n;
                        }
                    }
                    _ => return Ok(false),
                }
                Ok(true)
            })?;
        }
        Ok(true)
    })?;
    let datacenter = datacenter.ok_or(WireError::Invalid("Usage: no datacenter"))?;
    Ok((meta, datacenter, usage))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health() -> OperatorHealth {
        let server = |id: &str, leader: bool, voter: bool| ServerHealth {
            id: id.to_string(),
            name: format!("node-{id}"),
            address: "127.0.0.1:8300".to_string(),
            serf_status: "alive",
            version: "1.22.0".to_string(),
            leader,
            last_contact_ns: if leader { 0 } else { -1 },
            last_term: 2,
            last_index: 40,
            healthy: true,
            voter,
            stable_since_unix_ns: 1_700_000_000_123_000_000,
        };
        OperatorHealth {
            healthy: true,
            failure_tolerance: 1,
            servers: vec![
                server("a", true, true),
                server("b", false, true),
                server("c", false, false),
            ],
        }
    }

    #[test]
    fn health_and_state_read_back_as_written() {
        let health = health();
        assert_eq!(decode_health(&encode_health(&health)).unwrap(), health);
        assert_eq!(decode_state(&encode_state(&health, 3)).unwrap(), health);
        assert_eq!(
            decode_health(&encode_health(&OperatorHealth::default())).unwrap(),
            OperatorHealth::default()
        );
        assert!(
            decode_health(&[0x81, 0xa7, b'S', b'e', b'r', b'v', b'e', b'r', b's', 0xdd]).is_err()
        );
    }

    #[test]
    fn raft_configuration_and_requests_read_back_as_written() {
        let configuration = RaftConfiguration {
            servers: vec![RaftServer {
                id: "5e1a".into(),
                node: "s1".into(),
                address: "127.0.0.1:8300".into(),
                leader: true,
                protocol_version: "3".into(),
                voter: true,
                last_index: 9,
            }],
            index: 4,
        };
        assert_eq!(
            RaftConfiguration::decode(&configuration.encode()).unwrap(),
            configuration
        );
        let remove = RaftRemovePeerRequest {
            datacenter: "dc1",
            address: "10.0.0.9:8300",
            id: "",
            token: "t",
        };
        assert_eq!(
            RaftRemovePeerRequest::decode(&remove.encode()).unwrap(),
            remove
        );
        let set = AutopilotSetConfigRequest {
            datacenter: "",
            config: AutopilotConfig {
                modify_index: 12,
                min_quorum: 3,
                ..AutopilotConfig::default()
            },
            cas: true,
            token: "",
        };
        assert_eq!(
            AutopilotSetConfigRequest::decode(&set.encode()).unwrap(),
            set
        );
    }

    #[test]
    fn usage_reads_back_as_it_was_written() {
        let mut usage = ServiceUsage {
            nodes: 3,
            services: 2,
            service_instances: 5,
            billable_service_instances: 4,
            connect_instances: CONNECT_KINDS.map(|kind| (kind, 0)),
        };
        usage.connect_instances[0].1 = 1;
        let meta = crate::consul::rpc::QueryMeta {
            index: 42,
            known_leader: true,
            consistency_level: "leader",
            ..Default::default()
        };
        let body = encode_usage(&meta, "dc2", &usage);
        let (read_meta, datacenter, read) = decode_usage(&body).unwrap();
        assert_eq!((read_meta.index, datacenter.as_str()), (42, "dc2"));
        assert_eq!(read, usage);
        // A reply without the datacenter's counts is not praetor's.
        let mut w = Writer::new();
        meta.write_reply(&mut w, &[], |_, _| {});
        assert!(decode_usage(&w.into_inner()).is_err());
    }
}
