//! `Health.ServiceNodes`, `Health.NodeChecks`, `Health.ServiceChecks` and
//! `Health.ChecksInState`, as Consul's `health_endpoint.go` serves them. `?passing` is not
//! a server's business: Consul's agent filters the answer itself.

use super::catalog::{parse_filter, Instances};
use super::{decode_error, read, read_here, require, rows, Answer, Read};
use crate::api::authz::RowFilter;
use crate::api::server::Server;
use crate::consul::filter::{self, Filter};
use crate::consul::render;
use crate::consul::rpc::catalog::{
    satisfies, write_check_service_node, write_health_checks, ChecksInStateRequest,
    NodeSpecificRequest, ServiceSpecificRequest,
};
use crate::consul::rpc::QueryMeta;
use crate::proto::msgpack::Writer;
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::catalog::read::{self, CheckServiceNode};
use crate::store::catalog::rows::fold;
use crate::store::catalog::{HealthCheck, InstanceView, Node, RowArc, Status};
use crate::store::{StoreVersion, Table, Tables};
use std::sync::Arc;

struct ServiceHealth(Instances);

/// An instance's view as Consul's `CheckServiceNode`.
fn row(view: &InstanceView) -> CheckServiceNode<'_> {
    CheckServiceNode {
        node: view.node(),
        service: &view.service,
        node_checks: view.node_checks(),
        service_checks: view.checks(),
    }
}

impl Read for ServiceHealth {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        self.0.evaluate(tables)
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let (views, hidden) = self.0.select(version, |view| {
            render::as_value(|w| render::check_service_node(w, &row(view)))
        });
        let meta = meta.filtered(hidden);
        let mut w = Writer::new();
        meta.write_reply(&mut w, &["Nodes"], |_, w| {
            if views.is_empty() {
                w.nil();
                return;
            }
            w.array_len(views.len());
            for view in &views {
                write_check_service_node(w, &row(view));
            }
        });
        Ok(w.into_inner())
    }
}

/// `Health.ServiceNodes`: each instance with its node and all their checks.
pub async fn service_nodes(server: &Server, call: &TypedCall) -> Answer {
    let request = ServiceSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    if request.service_name.is_empty() {
        return Err("Must provide service name".to_string());
    }
    if request.ingress {
        // The HTTP route's rule (`service:read` on the service the gateways front).
        require(&authz, |a| a.service_read(request.service_name))?;
    }
    let instances = Instances::new(
        server.context(),
        &request,
        filter::CHECK_SERVICE_NODE,
        rows(&authz),
    )?;
    read(server, call, &request.options, ServiceHealth(instances)).await
}

/// Writes a checks reply (`IndexedHealthChecks`).
fn checks_reply(meta: &QueryMeta, checks: &[&HealthCheck], hidden: bool) -> Answer {
    let meta = meta.filtered(hidden);
    let mut w = Writer::new();
    meta.write_reply(&mut w, &["HealthChecks"], |_, w| {
        write_health_checks(w, checks.iter().copied())
    });
    Ok(w.into_inner())
}

fn keep(filter: &Option<Filter>, check: &HealthCheck) -> bool {
    filter
        .as_ref()
        .is_none_or(|f| f.matches(&render::as_value(|w| render::health_check(w, check))))
}

/// The checks whose node has the node-meta pairs, that the token may read and that the
/// expression keeps; and whether the token hid any.
fn kept_checks<'t>(
    found: Vec<(&'t Arc<Node>, &'t RowArc<HealthCheck>)>,
    node_meta: &[(String, String)],
    rows: &RowFilter,
    filter: &Option<Filter>,
) -> (Vec<&'t HealthCheck>, bool) {
    let pairs: Vec<(&str, &str)> = node_meta
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut hidden = false;
    let checks = found
        .into_iter()
        .filter(|(node, check)| {
            if !satisfies(&node.meta, &pairs) {
                return false;
            }
            if !rows.node_service(&check.node, &check.service_name) {
                hidden = true;
                return false;
            }
            keep(filter, check)
        })
        .map(|(_, check)| &**check)
        .collect();
    (checks, hidden)
}

struct NodeChecks {
    node: Arc<str>,
    folded: Arc<str>,
    filter: Option<Filter>,
    rows: RowFilter,
}

impl Read for NodeChecks {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            read::checks_index(tables),
            WatchSet::new().key(Table::Checks, self.folded.clone()),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let mut hidden = false;
        let checks: Vec<&HealthCheck> = read::node_checks(version, &self.node)
            .into_iter()
            .map(|c| &**c)
            .filter(|c| {
                if !self.rows.node_service(&c.node, &c.service_name) {
                    hidden = true;
                    return false;
                }
                keep(&self.filter, c)
            })
            .collect();
        checks_reply(meta, &checks, hidden)
    }
}

/// `Health.NodeChecks`.
pub async fn node_checks(server: &Server, call: &TypedCall) -> Answer {
    let request = NodeSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let query = NodeChecks {
        node: Arc::from(request.node),
        folded: Arc::from(&*fold(request.node)),
        filter: parse_filter(request.options.filter, filter::HEALTH_CHECK)?,
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}

/// A service's checks, as the HTTP handler's checks view selects them: the instances with
/// the request's tags (`ServiceTags` with `TagFilter`, praetor's `?tag` on this route) and
/// node-meta, those the token may read, and of their checks those the expression keeps.
struct ServiceChecks {
    service: Arc<str>,
    folded: Arc<str>,
    tags: Vec<String>,
    node_meta: Vec<(String, String)>,
    filter: Option<Filter>,
    rows: RowFilter,
}

impl Read for ServiceChecks {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            read::service_index(tables, &self.service),
            WatchSet::new().key(Table::ServiceIndex, self.folded.clone()),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let pairs: Vec<(&str, &str)> = self
            .node_meta
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut hidden = false;
        let mut checks: Vec<&HealthCheck> = Vec::new();
        let views = version
            .catalog
            .group(&self.service)
            .map(|group| group.instances.values());
        for view in views.into_iter().flatten() {
            if !self.tags.iter().all(|t| view.service.has_tag(t))
                || !satisfies(&view.node().meta, &pairs)
            {
                continue;
            }
            if !self
                .rows
                .node_service(&view.node().name, &view.service.name)
            {
                hidden = true;
                continue;
            }
            checks.extend(
                view.checks()
                    .iter()
                    .map(|c| &**c)
                    .filter(|c| keep(&self.filter, c)),
            );
        }
        checks_reply(meta, &checks, hidden)
    }
}

/// `Health.ServiceChecks`.
pub async fn service_checks(server: &Server, call: &TypedCall) -> Answer {
    let request = ServiceSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let query = ServiceChecks {
        service: Arc::from(request.service_name),
        folded: Arc::from(&*fold(request.service_name)),
        tags: request
            .required_tags()
            .iter()
            .map(|t| t.to_string())
            .collect(),
        node_meta: crate::consul::rpc::owned_pairs(&request.node_meta_filters),
        filter: parse_filter(request.options.filter, filter::HEALTH_CHECK)?,
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}

struct ChecksInState {
    state: Option<Status>,
    node_meta: Vec<(String, String)>,
    filter: Option<Filter>,
    rows: RowFilter,
}

impl Read for ChecksInState {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            read::checks_index(tables),
            WatchSet::new().table(Table::Checks),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let (checks, hidden) = kept_checks(
            read::checks_in_state(version, self.state),
            &self.node_meta,
            &self.rows,
            &self.filter,
        );
        checks_reply(meta, &checks, hidden)
    }
}

/// `Health.ChecksInState`: `any`, `passing`, `warning` or `critical`.
pub async fn checks_in_state(server: &Server, call: &TypedCall) -> Answer {
    let request = ChecksInStateRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let state = match request.state {
        "any" => None,
        "passing" | "warning" | "critical" => Status::parse(request.state),
        other => return Err(format!("Invalid state '{other}'")),
    };
    let query = ChecksInState {
        state,
        node_meta: crate::consul::rpc::owned_pairs(&request.node_meta_filters),
        filter: parse_filter(request.options.filter, filter::HEALTH_CHECK)?,
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}
