//! `Catalog.Register`, `Catalog.Deregister`, `Catalog.ListDatacenters`,
//! `Catalog.ListNodes`, `Catalog.ListServices`, `Catalog.ServiceNodes` and
//! `Catalog.NodeServices`, as Consul's `catalog_endpoint.go` serves them.

use super::{
    authorize, decode_error, elsewhere, error_text, propose_typed, read, read_here, require, rows,
    Answer, Placement, Read,
};
use crate::api::authz::{check_deregister, check_registration, RowFilter};
use crate::api::catalog::{
    nearest_first, service_read, service_tags, service_views, services_read, ServiceView,
};
use crate::api::server::Server;
use crate::consul::filter::{self, Filter};
use crate::consul::render;
use crate::consul::rpc::catalog::{
    dc_request_source, decode_register, satisfies, write_gateway_service, write_node,
    write_node_service, write_service_node, DcSpecificRequest, DeregisterRequest,
    NodeSpecificRequest, QuerySource, RegisterError, ServiceSpecificRequest,
};
use crate::consul::rpc::QueryMeta;
use crate::proto::msgpack::Writer;
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::catalog::read;
use crate::store::catalog::rows::fold;
use crate::store::catalog::{CatalogOp, InstanceView};
use crate::store::{CatalogResult, Command, StoreVersion, Table, Tables};
use std::collections::HashMap;
use std::sync::Arc;

/// A catalog write's answer: Go's `struct{}` reply, or the store's refusal.
fn written(result: CatalogResult) -> Answer {
    match result {
        CatalogResult::Refused(reason) => Err(reason),
        CatalogResult::Written => Ok(vec![0x80]),
    }
}

/// A `Filter` expression of a request, parsed against `schema`.
pub fn parse_filter(text: &str, schema: filter::Schema) -> Result<Option<Filter>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    Filter::parse(text, schema)
        .map_err(|e| format!("Failed to create boolean expression evaluator: {e}"))
}

/// `Catalog.Register`: Consul's pre-apply checks (a node, a valid node ID, an address
/// unless the node is left alone, a service name with its ID), then the registration's ACL
/// check and the store's own validation.
pub async fn register(server: &Server, call: &TypedCall) -> Answer {
    let ctx = server.context();
    let request = decode_register(&call.body, &ctx.config().datacenter).map_err(|e| match e {
        RegisterError::Decode(error) => decode_error(error),
        RegisterError::Invalid(why) => why,
    })?;
    if let Some(answer) =
        elsewhere(server, call, &request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let mut registration = request.registration;
    if registration.node.is_empty() {
        return Err("Must provide node".to_string());
    }
    if !registration.id.is_empty() && uuid::Uuid::parse_str(&registration.id).is_err() {
        return Err(format!(
            "Bad node ID: uuid string is wrong length or has invalid format: {:?}",
            registration.id
        ));
    }
    if registration.address.is_empty() && !registration.skip_node_update {
        return Err("Must provide address if SkipNodeUpdate is not set".to_string());
    }
    if let Some(service) = &mut registration.service {
        if service.id.is_empty() && !service.name.is_empty() {
            service.id = service.name.clone();
        }
        if !service.id.is_empty() && service.name.is_empty() {
            return Err("Must provide service name with ID".to_string());
        }
    }
    let authz = authorize(server, &request.token)?;
    if let Some(authz) = &authz {
        check_registration(ctx, &registration, authz).map_err(|e| error_text(&e))?;
    }
    crate::telemetry::incr(crate::consul::metrics::Counter::CatalogRegisterRequests);
    let command = Command::Catalog(CatalogOp::Register(Box::new(registration)));
    written(propose_typed(server, command).await?)
}

/// `Catalog.Deregister`: the node, or one of its services or checks.
pub async fn deregister(server: &Server, call: &TypedCall) -> Answer {
    let request = DeregisterRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    if request.node.is_empty() {
        return Err("Must provide node".to_string());
    }
    let authz = authorize(server, request.token)?;
    if let Some(authz) = &authz {
        check_deregister(server.context(), request.node, request.service_id, authz)
            .map_err(|e| error_text(&e))?;
    }
    crate::telemetry::incr(crate::consul::metrics::Counter::CatalogDeregisterRequests);
    let command = Command::Catalog(CatalogOp::Deregister {
        node: request.node.to_string(),
        service_id: request.service_id.to_string(),
        check_id: request.check_id.to_string(),
    });
    written(propose_typed(server, command).await?)
}

/// `Catalog.ListDatacenters`: every known datacenter, nearest first.
pub fn list_datacenters(server: &Server) -> Answer {
    let names = server.context().router().datacenters_by_distance();
    let mut w = Writer::new();
    crate::consul::rpc::write_string_list(&mut w, names.iter().map(String::as_str), false);
    Ok(w.into_inner())
}

struct Nodes {
    node_meta: Vec<(String, String)>,
    filter: Option<Filter>,
    rows: RowFilter,
    /// The request's `Source`: seconds from it to each node, to answer nearest first
    /// (nodes without a coordinate last), as the HTTP handler's `?near` does.
    near: Option<HashMap<String, f64>>,
}

impl Read for Nodes {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            read::nodes_index(tables),
            WatchSet::new().table(Table::Nodes),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let mut hidden = false;
        let meta_filters: Vec<(&str, &str)> = pairs(&self.node_meta);
        let mut nodes: Vec<_> = version
            .catalog
            .nodes
            .values()
            .map(|entry| entry.node())
            .filter(|node| {
                if !self.rows.node(&node.name) {
                    hidden = true;
                    return false;
                }
                satisfies(&node.meta, &meta_filters)
                    && self
                        .filter
                        .as_ref()
                        .is_none_or(|f| f.matches(&render::as_value(|w| render::node(w, node))))
            })
            .collect();
        if let Some(near) = &self.near {
            let distances: Vec<Option<f64>> = nodes
                .iter()
                .map(|node| near.get(&*node.name).copied())
                .collect();
            nodes = nearest_first(&distances)
                .into_iter()
                .map(|i| nodes[i])
                .collect();
        }
        let meta = meta.filtered(hidden);
        let mut w = Writer::new();
        meta.write_reply(&mut w, &["Nodes"], |_, w| {
            if nodes.is_empty() {
                w.nil();
                return;
            }
            w.array_len(nodes.len());
            for node in &nodes {
                write_node(w, node);
            }
        });
        Ok(w.into_inner())
    }
}

fn pairs(owned: &[(String, String)]) -> Vec<(&str, &str)> {
    owned
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    crate::consul::rpc::owned_pairs(pairs)
}

/// `Catalog.ListNodes`.
pub async fn list_nodes(server: &Server, call: &TypedCall) -> Answer {
    let request = DcSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let source = dc_request_source(&call.body).map_err(decode_error)?;
    let query = Nodes {
        node_meta: owned(&request.node_meta_filters),
        filter: parse_filter(request.options.filter, filter::NODE)?,
        rows: rows(&authz),
        near: distances(server.context(), &source),
    };
    read(server, call, &request.options, query).await
}

struct Services {
    node_meta: Vec<(String, String)>,
    /// Evaluated against each instance as a `ServiceNode`, as the HTTP handler does.
    filter: Option<Filter>,
    rows: RowFilter,
}

impl Read for Services {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        services_read(tables, !self.node_meta.is_empty())
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let meta_filters = pairs(&self.node_meta);
        let (services, hidden) = service_tags(version, &self.rows, |view| {
            satisfies(&view.node().meta, &meta_filters)
                && self.filter.as_ref().is_none_or(|filter| {
                    filter.matches(&render::as_value(|w| {
                        render::service_node(w, view.node(), &view.service)
                    }))
                })
        });
        let mut w = Writer::new();
        meta.filtered(hidden)
            .write_reply(&mut w, &["Services"], |_, w| {
                w.map_len(services.len());
                for (name, tags) in &services {
                    w.str(name);
                    crate::consul::rpc::write_string_list(w, tags.iter().copied(), false);
                }
            });
        Ok(w.into_inner())
    }
}

/// `Catalog.ListServices`: each service's tags.
pub async fn list_services(server: &Server, call: &TypedCall) -> Answer {
    let request = DcSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let query = Services {
        node_meta: owned(&request.node_meta_filters),
        filter: parse_filter(request.options.filter, filter::SERVICE_NODE)?,
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}

/// The instances a service query selects, with what it depends on: those the HTTP
/// handler's view reads ([`service_views`]: the service's group, the Connect view with its
/// proxies and terminating gateways, or the ingress gateways linking it), nearest first to
/// the request's `Source` when it names a node of this datacenter.
pub struct Instances {
    pub service: Arc<str>,
    pub folded: Arc<str>,
    pub view: ServiceView,
    pub tags: Vec<String>,
    pub node_meta: Vec<(String, String)>,
    pub filter: Option<Filter>,
    pub rows: RowFilter,
    /// Estimated seconds from the request's `Source` node to each node, taken when the call
    /// starts (as the HTTP handler takes them), or `None` to keep the catalog's order.
    pub near: Option<HashMap<String, f64>>,
}

impl Instances {
    pub fn new(
        ctx: &crate::api::Context,
        request: &ServiceSpecificRequest,
        schema: filter::Schema,
        rows: RowFilter,
    ) -> Result<Instances, String> {
        let view = if request.ingress {
            ServiceView::HealthIngress
        } else if request.connect {
            ServiceView::Connect
        } else {
            ServiceView::Catalog
        };
        Ok(Instances {
            service: Arc::from(request.service_name),
            folded: Arc::from(&*fold(request.service_name)),
            view,
            tags: request
                .required_tags()
                .iter()
                .map(|t| t.to_string())
                .collect(),
            node_meta: owned(&request.node_meta_filters),
            filter: parse_filter(request.options.filter, schema)?,
            rows,
            near: distances(ctx, &request.source),
        })
    }

    pub fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        service_read(tables, &self.service, &self.folded, self.view)
    }

    /// The selected instances, and whether the token hid any; `render` gives a row's JSON
    /// for the `Filter` expression.
    pub fn select<'t>(
        &self,
        tables: &'t Tables,
        render: impl Fn(&InstanceView) -> serde_json::Value,
    ) -> (Vec<&'t InstanceView>, bool) {
        let views = service_views(tables, &self.service, self.view);
        let meta_filters = pairs(&self.node_meta);
        let mut hidden = false;
        let selected: Vec<&InstanceView> = views
            .into_iter()
            .filter(|view| {
                if !self.tags.iter().all(|t| view.service.has_tag(t))
                    || !satisfies(&view.node().meta, &meta_filters)
                {
                    return false;
                }
                if !self
                    .rows
                    .node_service(&view.node().name, &view.service.name)
                {
                    hidden = true;
                    return false;
                }
                self.filter
                    .as_ref()
                    .is_none_or(|f| f.matches(&render(view)))
            })
            .collect();
        let Some(near) = &self.near else {
            return (selected, hidden);
        };
        let distances: Vec<Option<f64>> = selected
            .iter()
            .map(|view| near.get(&*view.node().name).copied())
            .collect();
        let sorted = nearest_first(&distances)
            .into_iter()
            .map(|i| selected[i])
            .collect();
        (sorted, hidden)
    }
}

/// The distances a request's `Source` asks to sort by, as Consul's `sortNodesByDistanceFrom`:
/// only for a node of this datacenter (another datacenter's node has no coordinate here), and
/// only when that node's coordinate is known.
pub fn distances(ctx: &crate::api::Context, source: &QuerySource) -> Option<HashMap<String, f64>> {
    let here = source
        .datacenter
        .eq_ignore_ascii_case(&ctx.config().datacenter);
    if source.node.is_empty() || !here {
        return None;
    }
    crate::api::coordinate::distances_from(ctx, source.node)
}

struct ServiceNodes(Instances);

impl Read for ServiceNodes {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        self.0.evaluate(tables)
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let (views, hidden) = self.0.select(version, |view| {
            render::as_value(|w| render::service_node(w, view.node(), &view.service))
        });
        let meta = meta.filtered(hidden);
        let mut w = Writer::new();
        meta.write_reply(&mut w, &["ServiceNodes"], |_, w| {
            if views.is_empty() {
                w.nil();
                return;
            }
            w.array_len(views.len());
            for view in &views {
                write_service_node(w, view.node(), &view.service);
            }
        });
        Ok(w.into_inner())
    }
}

/// `Catalog.ServiceNodes`.
pub async fn service_nodes(server: &Server, call: &TypedCall) -> Answer {
    let request = ServiceSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    if request.service_name.is_empty() {
        return Err("Must provide service name".to_string());
    }
    let query = ServiceNodes(Instances::new(
        server.context(),
        &request,
        filter::SERVICE_NODE,
        rows(&authz),
    )?);
    read(server, call, &request.options, query).await
}

struct NodeServices {
    node: Arc<str>,
    folded: Arc<str>,
    /// `Catalog.NodeServiceList`'s reply (a list of services) rather than
    /// `Catalog.NodeServices`' (a map by ID).
    as_list: bool,
    filter: Option<Filter>,
    rows: RowFilter,
}

impl Read for NodeServices {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            read::node_services_index(tables),
            WatchSet::new()
                .key(Table::Nodes, self.folded.clone())
                .key(Table::NodeServices, self.folded.clone()),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let found = version.catalog.node(&self.node);
        let hidden_node = found.is_some_and(|e| !self.rows.node(&e.node().name));
        let entry = found.filter(|_| !hidden_node);
        let mut hidden = hidden_node;
        let mut services: Vec<_> = entry
            .map(|e| {
                e.services
                    .values()
                    .filter(|s| {
                        if !self.rows.service(&s.name) {
                            hidden = true;
                            return false;
                        }
                        self.filter.as_ref().is_none_or(|f| {
                            f.matches(&render::as_value(|w| render::node_service(w, s)))
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let meta = meta.filtered(hidden);
        let mut w = Writer::new();
        if self.as_list {
            // `IndexedNodeServiceList`: a struct, never nil; an unknown node's is empty.
            meta.write_reply(&mut w, &["NodeServices"], |_, w| {
                let mut f = crate::consul::rpc::Fields::new(w, 2);
                match entry {
                    Some(entry) => write_node(f.field("Node"), entry.node()),
                    None => f.field("Node").nil(),
                }
                let w = f.field("Services");
                if services.is_empty() {
                    w.nil();
                } else {
                    w.array_len(services.len());
                    for service in &services {
                        write_node_service(w, service);
                    }
                }
                f.finish();
            });
            return Ok(w.into_inner());
        }
        services.sort_by(|a, b| a.id.cmp(&b.id));
        meta.write_reply(&mut w, &["NodeServices"], |_, w| {
            let Some(entry) = entry else {
                w.nil();
                return;
            };
            let mut f = crate::consul::rpc::Fields::new(w, 2);
            write_node(f.field("Node"), entry.node());
            let w = f.field("Services");
            w.map_len(services.len());
            for service in &services {
                w.str(&service.id);
                write_node_service(w, service);
            }
            f.finish();
        });
        Ok(w.into_inner())
    }
}

/// `Catalog.NodeServices`: the node and its services by ID (nil for an unknown node).
pub async fn node_services(server: &Server, call: &TypedCall) -> Answer {
    node_services_of(server, call, false).await
}

/// `Catalog.NodeServiceList`: the node and the list of its services (`/v1/catalog/node-services`).
pub async fn node_service_list(server: &Server, call: &TypedCall) -> Answer {
    node_services_of(server, call, true).await
}

async fn node_services_of(server: &Server, call: &TypedCall, as_list: bool) -> Answer {
    let request = NodeSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    if request.node.is_empty() {
        return Err("Must provide node".to_string());
    }
    let query = NodeServices {
        node: Arc::from(request.node),
        folded: Arc::from(&*fold(request.node)),
        as_list,
        filter: parse_filter(request.options.filter, filter::NODE_SERVICE)?,
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}

/// The rows a gateway links (`Catalog.GatewayServices`).
struct GatewayServices {
    gateway: Arc<str>,
    rows: RowFilter,
}

impl Read for GatewayServices {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        crate::api::gateways::gateway_read(tables, &self.gateway)
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let (shown, hidden) =
            crate::api::gateways::readable_rows(version, &self.gateway, &self.rows);
        let mut w = Writer::new();
        meta.filtered(hidden)
            .write_reply(&mut w, &["Services"], |_, w| {
                if shown.is_empty() {
                    w.nil();
                    return;
                }
                w.array_len(shown.len());
                for row in &shown {
                    write_gateway_service(w, row);
                }
            });
        Ok(w.into_inner())
    }
}

/// `Catalog.GatewayServices`: the services a gateway links (`service:read` on the gateway,
/// the HTTP route's rule; rows of services the token may not read left out).
pub async fn gateway_services(server: &Server, call: &TypedCall) -> Answer {
    let request = ServiceSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    require(&authz, |a| a.service_read(request.service_name))?;
    let query = GatewayServices {
        gateway: Arc::from(request.service_name),
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}
