//! What a proxy's snapshot knows of other datacenters (Consul's proxycfg watches with a
//! `Datacenter`): the mesh gateways of each, and the Connect-capable instances of a service
//! an upstream reaches there directly. A server's store holds only its own datacenter, so
//! these come from that datacenter's servers, over blocking typed calls (Consul's
//! `Health.ServiceNodes`, `Internal.ServiceDump`, naming the datacenter) the agent makes for
//! the gRPC thread ([`AgentSource::datacenter_call`]).
//!
//! [`RemoteQuery`] names one read; [`RemoteFollowers`] keeps one task per query a proxy
//! needs, each following its answer with blocking reads (`MinQueryIndex`), and starts and stops
//! them as the needs change (needs are derived from the last snapshot, so a new need is
//! followed from the next build on). [`RemoteView`] is what the followers hold at one
//! moment, as plain data: the snapshot builder reads it and stays pure.
//!
//! Invariants: at most [`DATACENTERS_MAX`] datacenters and [`QUERIES_MAX`] queries per
//! proxy are followed; an answer is parsed into at most
//! [`super::snapshot::ENDPOINTS_PER_TARGET_MAX`] instances; a follower that fails waits
//! [`RETRY_PAUSE`] before it asks again, and keeps its last answer meanwhile (a WAN blip
//! does not empty a cluster).

use super::feed::AgentSource;
use super::snapshot::{Endpoint, ENDPOINTS_PER_TARGET_MAX};
use crate::consul::filter::Filter;
use crate::consul::rpc::catalog::ServiceSpecificRequest;
use crate::consul::rpc::internal::ServiceDumpRequest;
use crate::consul::rpc::{decode_error, read_json, QueryOptions};
use crate::proto::msgpack::Reader;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// How long one blocking read of another datacenter waits there.
pub const REMOTE_WAIT: Duration = Duration::from_secs(60);
/// How often a mesh gateway asks again which datacenters exist (the list does not block).
pub const DATACENTERS_POLL: Duration = Duration::from_secs(5);
/// How long a follower waits after a failed read before asking again.
pub const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// Most other datacenters one mesh gateway routes to.
pub const DATACENTERS_MAX: usize = 64;
/// Most reads of other datacenters one proxy follows at once.
pub const QUERIES_MAX: usize = 1024;
/// Most mesh-gateway service names one datacenter may list that are followed.
pub const GATEWAY_NAMES_MAX: usize = 16;

/// Consul's `Kind` of a mesh gateway.
pub const MESH_GATEWAY_KIND: &str = "mesh-gateway";

/// One read of another datacenter.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RemoteQuery {
    /// The names of the datacenter's mesh-gateway services.
    GatewayNames { datacenter: String },
    /// The instances of one mesh-gateway service of the datacenter.
    Gateways { datacenter: String, name: String },
    /// The Connect-capable instances of a service there (its sidecars), as
    /// `/v1/health/connect/<service>` answers.
    Connect { datacenter: String, service: String },
}

impl RemoteQuery {
    pub fn datacenter(&self) -> &str {
        match self {
            RemoteQuery::GatewayNames { datacenter }
            | RemoteQuery::Gateways { datacenter, .. }
            | RemoteQuery::Connect { datacenter, .. } => datacenter,
        }
    }

    /// The typed call of the read, blocking past `index`, with `token`: its method and
    /// body, naming the datacenter (whose servers a server hands it to). A datacenter's
    /// gateway names come from `Internal.ServiceDump` of the mesh-gateway kind, as Consul's
    /// proxycfg asks for another datacenter's gateways; a gateway's and a service's
    /// instances from `Health.ServiceNodes` (`Connect` set for a service's sidecars).
    pub fn call(&self, index: u64, token: &str) -> (&'static str, Vec<u8>) {
        let options = |filter| QueryOptions {
            token,
            min_query_index: index,
            max_query_time_ns: REMOTE_WAIT.as_nanos() as i64,
            filter,
            ..QueryOptions::default()
        };
        match self {
            RemoteQuery::GatewayNames { datacenter } => (
                "Internal.ServiceDump",
                ServiceDumpRequest {
                    datacenter,
                    service_kind: Some(MESH_GATEWAY_KIND),
                    peer_name: "",
                    options: options(""),
                }
                .encode(),
            ),
            RemoteQuery::Gateways { datacenter, name } => (
                "Health.ServiceNodes",
                ServiceSpecificRequest {
                    datacenter,
                    service_name: name,
                    options: options(MESH_GATEWAY_FILTER),
                    ..ServiceSpecificRequest::default()
                }
                .encode(),
            ),
            RemoteQuery::Connect {
                datacenter,
                service,
            } => (
                "Health.ServiceNodes",
                ServiceSpecificRequest {
                    datacenter,
                    service_name: service,
                    connect: true,
                    options: options(""),
                    ..ServiceSpecificRequest::default()
                }
                .encode(),
            ),
        }
    }

    /// Reads the reply of [`RemoteQuery::call`]: its index and what it says. The reply's
    /// `CheckServiceNode`s are read as JSON values (the map of their fields), which is what
    /// a subset's filter and the parsers below read.
    pub fn read(&self, reply: &[u8]) -> Result<(u64, RemoteAnswer), String> {
        let value = read_json(&mut Reader::new(reply))
            .map_err(|e| format!("a malformed answer: {}", decode_error(e)))?;
        let index = value["Index"].as_u64().unwrap_or(0);
        let answer = match self {
            RemoteQuery::GatewayNames { .. } => RemoteAnswer::Names(parse_names(&value["Nodes"])?),
            _ => RemoteAnswer::Instances(parse_instances(&value["Nodes"])?),
        };
        Ok((index, answer))
    }
}

/// The filter of a gateway's instances: only mesh gateways, whatever else shares the name.
const MESH_GATEWAY_FILTER: &str = "Service.Kind == \"mesh-gateway\"";

/// One instance of another datacenter as a health answer shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteInstance {
    /// The row as answered (a `CheckServiceNode`), for a subset's filter.
    pub row: Value,
    /// The address inside its datacenter: the service's, else its node's.
    pub lan_address: String,
    pub port: u16,
    /// The address other datacenters reach it at: the service's `wan` tagged address,
    /// else the node's, else the LAN address (Consul's `BestAddress(true)`).
    pub wan_address: String,
    pub wan_port: u16,
    /// Whether a check is critical or in maintenance, or only warns.
    pub critical: bool,
    pub warning: bool,
    pub weight_passing: u32,
    pub weight_warning: u32,
}

/// A followed answer.
#[derive(Clone, Debug, PartialEq)]
pub enum RemoteAnswer {
    Names(Vec<String>),
    Instances(Vec<RemoteInstance>),
}

fn text(value: &Value, key: &str) -> String {
    value[key].as_str().unwrap_or_default().to_string()
}

fn port_of(value: &Value) -> Option<u16> {
    value.as_u64().and_then(|p| u16::try_from(p).ok())
}

/// Reads a health answer (a list of `CheckServiceNode`s).
pub fn parse_instances(body: &Value) -> Result<Vec<RemoteInstance>, String> {
    let rows = match body {
        Value::Array(rows) => rows.as_slice(),
        Value::Null => &[],
        _ => return Err("a health answer that is not a list".to_string()),
    };
    let mut out = Vec::with_capacity(rows.len().min(ENDPOINTS_PER_TARGET_MAX));
    for row in rows.iter().take(ENDPOINTS_PER_TARGET_MAX) {
        let service = &row["Service"];
        let node = &row["Node"];
        let Some(port) = port_of(&service["Port"]) else {
            continue;
        };
        let lan_address = Some(text(service, "Address"))
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| text(node, "Address"));
        let service_wan = &service["TaggedAddresses"]["wan"];
        let node_wan = text(&node["TaggedAddresses"], "wan");
        let (wan_address, wan_port) = if !text(service_wan, "Address").is_empty() {
            (
                text(service_wan, "Address"),
                port_of(&service_wan["Port"]).unwrap_or(port),
            )
        } else if !node_wan.is_empty() {
            (node_wan, port)
        } else {
            (lan_address.clone(), port)
        };
        let statuses: Vec<&str> = row["Checks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["Status"].as_str().unwrap_or_default())
            .collect();
        let weights = &service["Weights"];
        out.push(RemoteInstance {
            lan_address,
            port,
            wan_address,
            wan_port,
            critical: statuses
                .iter()
                .any(|s| *s == "critical" || *s == "maintenance"),
            warning: statuses.contains(&"warning"),
            weight_passing: weights["Passing"]
                .as_u64()
                .unwrap_or(1)
                .min(u32::MAX as u64) as u32,
            weight_warning: weights["Warning"]
                .as_u64()
                .unwrap_or(1)
                .min(u32::MAX as u64) as u32,
            row: row.clone(),
        });
    }
    Ok(out)
}

/// The names of the mesh-gateway services among `Internal.ServiceDump`'s instances, in
/// name order, at most [`GATEWAY_NAMES_MAX`].
pub fn parse_names(rows: &Value) -> Result<Vec<String>, String> {
    let rows = match rows {
        Value::Array(rows) => rows.as_slice(),
        Value::Null => &[],
        _ => return Err("a service dump that is not a list".to_string()),
    };
    let names: BTreeSet<&str> = rows
        .iter()
        .filter(|row| row["Service"]["Kind"] == MESH_GATEWAY_KIND)
        .filter_map(|row| row["Service"]["Service"].as_str())
        .collect();
    Ok(names
        .into_iter()
        .take(GATEWAY_NAMES_MAX)
        .map(str::to_string)
        .collect())
}

/// What a proxy knows of other datacenters at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RemoteView {
    /// Every known datacenter, the local one included (mesh gateways only).
    pub datacenters: Vec<String>,
    pub answers: BTreeMap<RemoteQuery, Arc<RemoteAnswer>>,
}

impl RemoteView {
    fn instances(&self, query: &RemoteQuery) -> &[RemoteInstance] {
        match self.answers.get(query).map(|a| &**a) {
            Some(RemoteAnswer::Instances(list)) => list,
            _ => &[],
        }
    }

    /// The names of `datacenter`'s mesh-gateway services, as far as known.
    pub fn gateway_names(&self, datacenter: &str) -> &[String] {
        let query = RemoteQuery::GatewayNames {
            datacenter: datacenter.to_string(),
        };
        match self.answers.get(&query).map(|a| &**a) {
            Some(RemoteAnswer::Names(names)) => names,
            _ => &[],
        }
    }

    /// `datacenter`'s mesh gateways at their WAN addresses, in address order.
    pub fn gateways(&self, datacenter: &str) -> Vec<Endpoint> {
        let mut out = Vec::new();
        for name in self.gateway_names(datacenter) {
            let query = RemoteQuery::Gateways {
                datacenter: datacenter.to_string(),
                name: name.clone(),
            };
            for instance in self.instances(&query) {
                out.push(Endpoint {
                    address: instance.wan_address.clone(),
                    port: instance.wan_port,
                    healthy: !instance.critical,
                    weight: instance.weight_passing.max(1),
                });
            }
        }
        out.sort_by(|a, b| (&a.address, a.port).cmp(&(&b.address, b.port)));
        out.truncate(ENDPOINTS_PER_TARGET_MAX);
        out
    }

    /// `service`'s Connect-capable instances in `datacenter` at their own addresses, with
    /// health and weight computed as for local instances, and a subset's filter applied.
    pub fn connect_endpoints(
        &self,
        datacenter: &str,
        service: &str,
        only_passing: bool,
        filter: Option<&Filter>,
    ) -> Vec<Endpoint> {
        let query = RemoteQuery::Connect {
            datacenter: datacenter.to_string(),
            service: service.to_string(),
        };
        let mut out: Vec<Endpoint> = self
            .instances(&query)
            .iter()
            .filter(|i| filter.is_none_or(|f| f.matches(&i.row)))
            .map(|i| {
                let healthy = !(i.critical || (only_passing && i.warning));
                Endpoint {
                    address: i.lan_address.clone(),
                    port: i.port,
                    healthy,
                    weight: if i.warning && !only_passing {
                        i.weight_warning.max(1)
                    } else {
                        i.weight_passing.max(1)
                    },
                }
            })
            .collect();
        out.sort_by(|a, b| (&a.address, a.port).cmp(&(&b.address, b.port)));
        out
    }
}

/// The reads a mesh gateway needs: every other known datacenter's gateway names, then
/// the instances of each name listed so far.
pub fn mesh_gateway_needs(view: &RemoteView, local: &str) -> BTreeSet<RemoteQuery> {
    let mut needs = BTreeSet::new();
    for datacenter in view
        .datacenters
        .iter()
        .filter(|dc| *dc != local)
        .take(DATACENTERS_MAX)
    {
        gateway_needs(view, datacenter, &mut needs);
    }
    needs
}

/// The reads that find `datacenter`'s mesh gateways.
pub fn gateway_needs(view: &RemoteView, datacenter: &str, needs: &mut BTreeSet<RemoteQuery>) {
    needs.insert(RemoteQuery::GatewayNames {
        datacenter: datacenter.to_string(),
    });
    for name in view.gateway_names(datacenter) {
        needs.insert(RemoteQuery::Gateways {
            datacenter: datacenter.to_string(),
            name: name.clone(),
        });
    }
}

/// Follows one read with blocking queries, publishing each new answer.
async fn follow(
    agent: AgentSource,
    query: RemoteQuery,
    token: String,
    tx: watch::Sender<Option<Arc<RemoteAnswer>>>,
    changed: Arc<Notify>,
) {
    let mut index = 0;
    loop {
        let (method, body) = query.call(index, &token);
        let answer = agent
            .datacenter_call(query.datacenter(), method, body, REMOTE_WAIT)
            .await
            .and_then(|reply| query.read(&reply));
        match answer {
            Ok((next, parsed)) => {
                let modified = tx.send_if_modified(|slot| {
                    let changed = slot.as_deref() != Some(&parsed);
                    *slot = Some(Arc::new(parsed));
                    changed
                });
                if modified {
                    changed.notify_one();
                }
                // An index that goes backwards (a restored or new server) starts over; one
                // that does not move (an answer without an index) must not spin.
                if next == 0 || next == index {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                index = if next < index { 0 } else { next };
            }
            Err(reason) => {
                log::debug!("xds: {query:?}: {reason}");
                index = 0;
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
        if tx.is_closed() {
            return;
        }
    }
}

/// Polls the list of datacenters.
async fn follow_datacenters(
    agent: AgentSource,
    tx: watch::Sender<Vec<String>>,
    changed: Arc<Notify>,
) {
    loop {
        match agent.datacenters().await {
            Ok(mut list) => {
                list.truncate(DATACENTERS_MAX + 1);
                if tx.send_if_modified(|slot| {
                    let changed = *slot != list;
                    *slot = list;
                    changed
                }) {
                    changed.notify_one();
                }
            }
            Err(reason) => log::debug!("xds: the datacenters: {reason}"),
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(DATACENTERS_POLL).await;
    }
}

struct Follower {
    rx: watch::Receiver<Option<Arc<RemoteAnswer>>>,
    task: JoinHandle<()>,
}

/// The followers of one proxy, waking its watcher through [`RemoteFollowers::changed`].
pub struct RemoteFollowers {
    followers: BTreeMap<RemoteQuery, Follower>,
    datacenters: Option<(watch::Receiver<Vec<String>>, JoinHandle<()>)>,
    pub changed: Arc<Notify>,
}

impl Default for RemoteFollowers {
    fn default() -> Self {
        RemoteFollowers {
            followers: BTreeMap::new(),
            datacenters: None,
            changed: Arc::new(Notify::new()),
        }
    }
}

impl RemoteFollowers {
    /// Follows the datacenter list (a mesh gateway) or stops following it.
    pub fn follow_datacenters(&mut self, on: bool, agent: &AgentSource) {
        match (on, &self.datacenters) {
            (true, None) => {
                let (tx, rx) = watch::channel(Vec::new());
                let task =
                    tokio::spawn(follow_datacenters(agent.clone(), tx, self.changed.clone()));
                self.datacenters = Some((rx, task));
            }
            (false, Some((_, task))) => {
                task.abort();
                self.datacenters = None;
            }
            _ => {}
        }
    }

    /// Follows exactly `needs` (the first [`QUERIES_MAX`]); says whether the set changed.
    pub fn follow(
        &mut self,
        needs: &BTreeSet<RemoteQuery>,
        agent: &AgentSource,
        token: &str,
    ) -> bool {
        let before = self.followers.len();
        self.followers.retain(|query, follower| {
            let keep = needs.contains(query);
            if !keep {
                follower.task.abort();
            }
            keep
        });
        let mut changed = self.followers.len() != before;
        for query in needs.iter().take(QUERIES_MAX) {
            if self.followers.contains_key(query) {
                continue;
            }
            let (tx, rx) = watch::channel(None);
            let task = tokio::spawn(follow(
                agent.clone(),
                query.clone(),
                token.to_string(),
                tx,
                self.changed.clone(),
            ));
            self.followers.insert(query.clone(), Follower { rx, task });
            changed = true;
        }
        changed
    }

    /// What the followers hold now.
    pub fn view(&self) -> RemoteView {
        RemoteView {
            datacenters: self
                .datacenters
                .as_ref()
                .map(|(rx, _)| rx.borrow().clone())
                .unwrap_or_default(),
            answers: self
                .followers
                .iter()
                .filter_map(|(q, f)| f.rx.borrow().clone().map(|a| (q.clone(), a)))
                .collect(),
        }
    }
}

impl Drop for RemoteFollowers {
    fn drop(&mut self) {
        for follower in self.followers.values() {
            follower.task.abort();
        }
        if let Some((_, task)) = &self.datacenters {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_is_reached_at_its_wan_address_and_a_sidecar_at_its_own() {
        let body: Value = serde_json::from_str(
            r#"[{"Node":{"Address":"10.0.0.1","TaggedAddresses":{"wan":"198.51.100.1"}},
                 "Service":{"Kind":"mesh-gateway","Address":"10.0.0.2","Port":8443,
                            "TaggedAddresses":{"wan":{"Address":"203.0.113.9","Port":443}},
                            "Weights":{"Passing":3,"Warning":1}},
                 "Checks":[{"Status":"passing"}]},
                {"Node":{"Address":"10.0.0.3","TaggedAddresses":{"wan":"198.51.100.3"}},
                 "Service":{"Kind":"mesh-gateway","Address":"","Port":8443},
                 "Checks":[{"Status":"critical"}]}]"#,
        )
        .unwrap();
        let instances = parse_instances(&body).unwrap();
        let mut view = RemoteView::default();
        view.answers.insert(
            RemoteQuery::GatewayNames {
                datacenter: "dc2".into(),
            },
            Arc::new(RemoteAnswer::Names(vec!["mesh-gateway".into()])),
        );
        view.answers.insert(
            RemoteQuery::Gateways {
                datacenter: "dc2".into(),
                name: "mesh-gateway".into(),
            },
            Arc::new(RemoteAnswer::Instances(instances.clone())),
        );
        let gateways = view.gateways("dc2");
        assert_eq!(
            gateways
                .iter()
                .map(|e| (e.address.as_str(), e.port, e.healthy, e.weight))
                .collect::<Vec<_>>(),
            vec![
                ("198.51.100.3", 8443, false, 1),
                ("203.0.113.9", 443, true, 3)
            ]
        );
        assert!(view.gateways("dc3").is_empty());
        view.answers.insert(
            RemoteQuery::Connect {
                datacenter: "dc2".into(),
                service: "db".into(),
            },
            Arc::new(RemoteAnswer::Instances(instances)),
        );
        let direct = view.connect_endpoints("dc2", "db", false, None);
        assert_eq!(
            direct
                .iter()
                .map(|e| (e.address.as_str(), e.port))
                .collect::<Vec<_>>(),
            vec![("10.0.0.2", 8443), ("10.0.0.3", 8443)]
        );
        view.datacenters = vec!["dc1".into(), "dc2".into()];
        let needs = mesh_gateway_needs(&view, "dc1");
        assert_eq!(needs.len(), 2, "{needs:?}");
        assert!(parse_instances(&Value::Bool(true)).is_err());
    }

    #[test]
    fn reads_name_their_datacenter_and_block() {
        let q = RemoteQuery::Gateways {
            datacenter: "dc2".into(),
            name: "mesh gw".into(),
        };
        let (method, body) = q.call(7, "secret");
        assert_eq!(method, "Health.ServiceNodes");
        let request = ServiceSpecificRequest::decode(&body).unwrap();
        assert_eq!(
            (request.datacenter, request.service_name),
            ("dc2", "mesh gw")
        );
        assert_eq!(request.options.min_query_index, 7);
        assert_eq!(request.options.max_query_time_ns, 60_000_000_000);
        assert_eq!(
            (request.options.token, request.options.filter),
            ("secret", MESH_GATEWAY_FILTER)
        );
        assert!(!request.connect);
        let connect = RemoteQuery::Connect {
            datacenter: "dc2".into(),
            service: "api".into(),
        };
        let (_, body) = connect.call(0, "");
        assert!(ServiceSpecificRequest::decode(&body).unwrap().connect);
        let names = RemoteQuery::GatewayNames {
            datacenter: "dc2".into(),
        };
        let (method, body) = names.call(3, "");
        assert_eq!(method, "Internal.ServiceDump");
        let request = ServiceDumpRequest::decode(&body).unwrap();
        assert_eq!(
            (request.datacenter, request.service_kind),
            ("dc2", Some(MESH_GATEWAY_KIND))
        );
    }

    #[test]
    fn replies_read_as_their_index_and_rows() {
        use crate::proto::msgpack::Writer;
        let row = serde_json::json!({
            "Node": {"Node": "n1", "Address": "10.0.0.2"},
            "Service": {"Service": "gw-b", "Kind": "mesh-gateway", "Port": 8443},
            "Checks": [],
        });
        let other = serde_json::json!({
            "Node": {"Node": "n2", "Address": "10.0.0.3"},
            "Service": {"Service": "gw-a", "Kind": "mesh-gateway", "Port": 8443},
            "Checks": [],
        });
        let mut w = Writer::new();
        crate::consul::rpc::write_json(
            &mut w,
            &serde_json::json!({"Index": 12, "Nodes": [row, other.clone(), other]}),
        );
        let reply = w.into_inner();
        let names = RemoteQuery::GatewayNames {
            datacenter: "dc2".into(),
        };
        assert_eq!(
            names.read(&reply).unwrap(),
            (12, RemoteAnswer::Names(vec!["gw-a".into(), "gw-b".into()]))
        );
        let gateways = RemoteQuery::Gateways {
            datacenter: "dc2".into(),
            name: "gw-a".into(),
        };
        let (index, RemoteAnswer::Instances(instances)) = gateways.read(&reply).unwrap() else {
            panic!("instances expected");
        };
        assert_eq!((index, instances.len()), (12, 3));
        assert!(names.read(b"\xc1").is_err());
    }
}
