//! The leader's reconciliation of cluster members into the catalog, as Consul's leader does
//! it: every live member is a node with a passing `serfHealth` check, and every server also
//! carries the `consul` service. Until gossip lands the only member is this agent itself;
//! gossip will call [`member_registration`] for every member it knows.
//!
//! A registration is produced only when the catalog differs from what it should be, so the
//! reconcile loop costs a lookup per member when nothing changed.

use crate::consul::node_state::NodeState;
use crate::gossip::{MemberInfo, MemberStatus};
use crate::store::catalog::rows::Status;
use crate::store::catalog::{
    CatalogOp, CheckRegistration, Registration, ServiceRegistration, Weights, SERF_CHECK_ID,
    SERF_CHECK_NAME,
};

/// The output Consul gives a passing serf check.
pub const SERF_ALIVE_OUTPUT: &str = "Agent alive and reachable";
/// The output Consul gives a failed member's serf check.
pub const SERF_FAILED_OUTPUT: &str = "Agent not live or unreachable";
/// The ID and name of the service every server registers.
pub const CONSUL_SERVICE: &str = "consul";

/// A cluster member as the leader sees it.
#[derive(Clone, Debug)]
pub struct Member {
    pub name: String,
    pub id: String,
    pub address: String,
    pub datacenter: String,
    /// Server RPC port when the member is a server.
    pub server_port: Option<u16>,
    /// Alive (serf check passing) or failed (critical). Members that left are
    /// deregistered instead.
    pub alive: bool,
}

/// A gossip member in this datacenter as a [`Member`]; `None` for other datacenters.
/// Members that left are returned with their name only, for deregistration.
pub fn member_from_gossip(info: &MemberInfo, datacenter: &str) -> Option<Member> {
    if info
        .tags
        .get("dc")
        .is_some_and(|dc| !dc.eq_ignore_ascii_case(datacenter))
    {
        return None;
    }
    let server_port = match info.tags.get("role").map(String::as_str) {
        Some("consul") => info.tags.get("port").and_then(|p| p.parse().ok()),
        _ => None,
    };
    Some(Member {
        name: info.name.clone(),
        id: info.tags.get("id").cloned().unwrap_or_default(),
        address: info.addr.to_string(),
        datacenter: datacenter.to_string(),
        server_port,
        alive: !matches!(info.status, MemberStatus::Failed | MemberStatus::Left),
    })
    .filter(|_| info.status != MemberStatus::Left)
    .or_else(|| {
        (info.status == MemberStatus::Left).then(|| Member {
            name: info.name.clone(),
            id: String::new(),
            address: String::new(),
            datacenter: datacenter.to_string(),
            server_port: None,
            alive: false,
        })
    })
}

/// What the leader must do for each of `members` ([`member_op`]) against `version`. A
/// member is skipped while the catalog gives its node ID to another node that gossip also
/// shows alive: an agent restarted under a new name is alive under both names until
/// gossip finds the old one failed, and registering either would rename the node away
/// from the other, back and forth. The agent's own registration of its new name renames
/// the node (Consul's `EnsureNode` by ID), and nothing renames it back.
pub fn member_ops(version: &crate::store::StoreVersion, members: &[Member]) -> Vec<CatalogOp> {
    use crate::store::catalog::rows::fold;
    let alive: std::collections::HashSet<String> = members
        .iter()
        .filter(|m| m.alive && !m.address.is_empty())
        .map(|m| fold(&m.name).to_string())
        .collect();
    members
        .iter()
        .filter(|member| {
            let owner = (!member.id.is_empty())
                .then(|| version.catalog.node_ids.get(member.id.as_str()))
                .flatten();
            !owner.is_some_and(|owner| {
                **owner != *fold(&member.name) && alive.contains(&owner.to_string())
            })
        })
        .filter_map(|member| {
            let current = crate::consul::node_state::node_state_in(version, &member.name);
            member_op(member, &current)
        })
        .collect()
}

/// What the leader must do for `member`: register it alive or failed, deregister it when
/// it left (signalled by an empty address), or nothing.
pub fn member_op(member: &Member, current: &NodeState) -> Option<CatalogOp> {
    if member.address.is_empty() {
        return current.node.as_ref().map(|_| CatalogOp::Deregister {
            node: member.name.clone(),
            service_id: String::new(),
            check_id: String::new(),
        });
    }
    member_registration(member, current).map(|r| CatalogOp::Register(Box::new(r)))
}

fn consul_service(port: u16) -> ServiceRegistration {
    ServiceRegistration {
        id: CONSUL_SERVICE.into(),
        name: CONSUL_SERVICE.into(),
        port: port as i32,
        weights: Some(Weights::default()),
        meta: vec![
            ("non_voter".into(), "false".into()),
            ("read_replica".into(), "false".into()),
            ("raft_version".into(), "3".into()),
            ("serf_protocol_current".into(), "2".into()),
            ("serf_protocol_min".into(), "1".into()),
            ("serf_protocol_max".into(), "5".into()),
            ("version".into(), crate::CONSUL_API_VERSION.into()),
        ],
        ..Default::default()
    }
}

/// Deregistrations for catalog nodes with a serf check that are not among `members`.
pub fn reaped_ops(version: &crate::store::Tables, members: &[Member]) -> Vec<CatalogOp> {
    let serf_key = crate::store::catalog::rows::fold(SERF_CHECK_ID);
    version
        .catalog
        .nodes
        .values()
        .filter(|entry| {
            entry.checks.contains_key(&*serf_key)
                && !members
                    .iter()
                    .any(|m| m.name.eq_ignore_ascii_case(&entry.node().name))
        })
        .map(|entry| CatalogOp::Deregister {
            node: entry.node().name.to_string(),
            service_id: String::new(),
            check_id: String::new(),
        })
        .collect()
}

/// The registration that makes `member` alive in the catalog, or `None` when the catalog
/// already says so. A node row that already has the member's address and ID is not written
/// (its tagged addresses and meta are the member's own agent's); a different row gets the
/// member's address and ID and keeps the meta and tagged addresses it holds when the
/// registration applies (`Registration::keep_node_meta`).
pub fn member_registration(member: &Member, current: &NodeState) -> Option<Registration> {
    // A failed member the catalog does not hold is left out, as Consul's leader ignores
    // it: the name a node had before a rename (its ID is the renamed node's now, and
    // registering the old name would rename the node back), or a node deregistered on
    // purpose.
    if !member.alive && current.node.is_none() {
        return None;
    }
    let service = member.server_port.map(consul_service);
    let (want_status, want_output) = if member.alive {
        (Status::Passing, SERF_ALIVE_OUTPUT)
    } else {
        (Status::Critical, SERF_FAILED_OUTPUT)
    };
    let serf_passing = current.checks.iter().any(|c| {
        c.check_id.eq_ignore_ascii_case(SERF_CHECK_ID)
            && c.service_id.is_empty()
            && c.status == want_status
            && *c.output == *want_output
    });
    let node_matches = current
        .node
        .as_ref()
        .is_some_and(|n| *n.address == *member.address && *n.id == *member.id);
    let service_matches = match &service {
        None => true,
        Some(wanted) => current.services.iter().any(|s| {
            *s.id == *CONSUL_SERVICE
                && s.port == wanted.port
                && s.meta.len() == wanted.meta.len()
                && wanted
                    .meta
                    .iter()
                    .all(|(k, v)| s.meta.get(k).is_some_and(|have| **have == **v))
        }),
    };
    if serf_passing && node_matches && service_matches {
        return None;
    }
    // The node row's meta and tagged addresses belong to the member's own agent (its
    // anti-entropy writes them), and this registration may have been computed before that
    // write landed: `keep_node_meta` keeps whatever the row holds when it applies, so only a
    // new address or ID is written over it (Consul keeps a node's meta across an address
    // change too). A row that does not exist yet is created bare; the agent fills it in.
    Some(Registration {
        id: member.id.clone(),
        node: member.name.clone(),
        address: member.address.clone(),
        datacenter: member.datacenter.clone(),
        skip_node_update: node_matches,
        keep_node_meta: true,
        service,
        checks: vec![CheckRegistration {
            node: member.name.clone(),
            check_id: SERF_CHECK_ID.into(),
            name: SERF_CHECK_NAME.into(),
            status: want_status.as_str().into(),
            output: want_output.into(),
            ..Default::default()
        }],
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consul::node_state::node_state_in;
    use crate::store::catalog::CatalogOp;
    use crate::store::{Command, Tables};
    use std::sync::Arc;

    /// The race that lost a fresh agent's metadata for a whole anti-entropy interval: the
    /// reconcile reads the catalog before the node exists, the agent's own sync registers
    /// the node with its metadata, then the reconcile's registration applies. It must not
    /// erase what the agent wrote.
    #[test]
    fn a_reconcile_computed_before_the_agents_write_keeps_its_metadata() {
        let member = Member {
            name: "fresh".into(),
            id: "b6c7a2fa-3d83-4e2b-9b66-0b8d8f2a4c12".into(),
            address: "10.0.0.2".into(),
            datacenter: "dc1".into(),
            server_port: Some(8300),
            alive: true,
        };
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let before = Arc::new(tables.clone());
        let reg = member_registration(&member, &node_state_in(&before, "fresh"))
            .expect("an absent node is registered");
        assert!(!reg.skip_node_update, "the row does not exist yet");
        let agent_sync = Registration {
            id: member.id.clone(),
            node: "fresh".into(),
            address: "10.0.0.2".into(),
            datacenter: "dc1".into(),
            tagged_addresses: vec![("lan".into(), "10.0.0.2".into())],
            node_meta: vec![("consul-version".into(), "1.22.0".into())],
            ..Default::default()
        };
        tables.apply(
            1,
            &Command::Catalog(CatalogOp::Register(Box::new(agent_sync))),
            &mut changes,
        );
        tables.apply(
            2,
            &Command::Catalog(CatalogOp::Register(Box::new(reg))),
            &mut changes,
        );
        let after = Arc::new(tables);
        let node = node_state_in(&after, "fresh").node.expect("registered");
        assert_eq!(&**node.meta.get("consul-version").unwrap(), "1.22.0");
        assert_eq!(&**node.tagged_addresses.get("lan").unwrap(), "10.0.0.2");
        // And the serf check and consul service arrived with it.
        assert!(member_registration(&member, &node_state_in(&after, "fresh")).is_none());
    }

    #[test]
    fn reconcile_registers_once_and_keeps_agent_metadata() {
        let member = Member {
            name: "s1".into(),
            id: "a6c7a2fa-3d83-4e2b-9b66-0b8d8f2a4c11".into(),
            address: "10.0.0.1".into(),
            datacenter: "dc1".into(),
            server_port: Some(8300),
            alive: true,
        };
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        // The agent's own anti-entropy registered the node with metadata first.
        let agent_node = Registration {
            id: member.id.clone(),
            node: "s1".into(),
            address: "10.0.0.1".into(),
            datacenter: "dc1".into(),
            node_meta: vec![("consul-version".into(), "x".into())],
            ..Default::default()
        };
        tables.apply(
            1,
            &Command::Catalog(CatalogOp::Register(Box::new(agent_node))),
            &mut changes,
        );
        let version = Arc::new(tables.clone());
        let reg = member_registration(&member, &node_state_in(&version, "s1")).expect("registers");
        // The row already has the member's address and ID: only the check and service are
        // written, so the agent's meta stays whatever the agent last wrote.
        assert!(reg.skip_node_update);
        assert!(reg.node_meta.is_empty() && reg.tagged_addresses.is_empty());
        tables.apply(
            2,
            &Command::Catalog(CatalogOp::Register(Box::new(reg))),
            &mut changes,
        );
        let version = Arc::new(tables);
        let state = node_state_in(&version, "s1");
        assert!(
            member_registration(&member, &state).is_none(),
            "nothing left to do"
        );
        assert_eq!(state.services.len(), 1);
        // A registration computed before the agent changed its meta must not undo the
        // change: with the node row already right, it does not write the row at all.
        let mut failed = member.clone();
        failed.alive = false;
        let stale = member_registration(&failed, &state).expect("the check must change");
        assert!(stale.skip_node_update, "the node row is already right");
        let mut tables = (*version).clone();
        let newer_meta = Registration {
            id: member.id.clone(),
            node: "s1".into(),
            address: "10.0.0.1".into(),
            datacenter: "dc1".into(),
            node_meta: vec![("consul-version".into(), "y".into())],
            ..Default::default()
        };
        tables.apply(
            3,
            &Command::Catalog(CatalogOp::Register(Box::new(newer_meta))),
            &mut changes,
        );
        tables.apply(
            4,
            &Command::Catalog(CatalogOp::Register(Box::new(stale))),
            &mut changes,
        );
        let after = Arc::new(tables);
        let after = node_state_in(&after, "s1");
        assert_eq!(
            &**after.node.unwrap().meta.get("consul-version").unwrap(),
            "y"
        );
        assert!(after.checks.iter().any(
            |c| c.check_id.eq_ignore_ascii_case(SERF_CHECK_ID) && c.status == Status::Critical
        ));
        assert_eq!(
            &*state
                .node
                .unwrap()
                .meta
                .get("consul-version")
                .unwrap()
                .clone(),
            "x"
        );
    }

    /// An agent restarted under a new name with its node ID: both names are alive in gossip
    /// for a while. The leader must not rename the node back and forth between them.
    #[test]
    fn a_renamed_agent_keeps_its_new_name_while_gossip_still_shows_the_old_one() {
        let id = "c6c7a2fa-3d83-4e2b-9b66-0b8d8f2a4c13";
        let member = |name: &str, alive: bool| Member {
            name: name.into(),
            id: id.into(),
            address: "10.0.0.3".into(),
            datacenter: "dc1".into(),
            server_port: None,
            alive,
        };
        let register = |tables: &mut Tables, index: u64, name: &str| {
            let agent_node = Registration {
                id: id.into(),
                node: name.into(),
                address: "10.0.0.3".into(),
                datacenter: "dc1".into(),
                ..Default::default()
            };
            tables.apply(
                index,
                &Command::Catalog(CatalogOp::Register(Box::new(agent_node))),
                &mut Vec::new(),
            );
        };
        let names = |ops: &[CatalogOp]| -> Vec<String> {
            ops.iter()
                .map(|op| match op {
                    CatalogOp::Register(r) => r.node.clone(),
                    other => panic!("unexpected {other:?}"),
                })
                .collect()
        };
        let mut tables = Tables::default();
        register(&mut tables, 1, "old");
        let both = [member("old", true), member("new", true)];
        // The catalog still says "old": only "old" is reconciled; "new" would steal its ID.
        let ops = member_ops(&Arc::new(tables.clone()), &both);
        assert_eq!(names(&ops), ["old"]);
        // The agent registers its new name: the node is renamed, and "old" does not take
        // it back.
        register(&mut tables, 2, "new");
        let ops = member_ops(&Arc::new(tables.clone()), &both);
        assert_eq!(names(&ops), ["new"]);
        // Gossip finds the old name failed: it is not in the catalog, so it stays out.
        let after = [member("old", false), member("new", true)];
        let ops = member_ops(&Arc::new(tables), &after);
        assert_eq!(names(&ops), ["new"]);
    }
}
