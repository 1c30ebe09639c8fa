//! Routes (Consul's `routes.go`): one `RouteConfiguration` per L7 upstream, named by the
//! upstream's ID, built from its discovery chain, and one per HTTP listener of an ingress
//! gateway, named by its port, with a virtual host per exposed service. A router's routes match path, methods,
//! headers and query parameters and carry its rewrites, timeouts and retries; a splitter
//! becomes weighted clusters (Consul's weights times 100, nested splitters multiplied out);
//! a resolver is its cluster.

use super::clusters::resolver_cluster_name;
use super::listeners::ingress_route_name;
use super::rbac::header_matcher;
use super::{duration_ms, regex_escape, safe_regex};
use crate::xds::snapshot::{
    is_l7, ChainNode, HeaderChanges, IngressListener, RouteRule, Snapshot, Upstream,
};
use envoy_types::pb::envoy::config::core::v3::{
    header_value_option::HeaderAppendAction, HeaderValue, HeaderValueOption,
};
use envoy_types::pb::envoy::config::route::v3::{
    header_matcher::HeaderMatchSpecifier, query_parameter_matcher::QueryParameterMatchSpecifier,
    route, route_action, route_match, weighted_cluster::ClusterWeight, HeaderMatcher,
    QueryParameterMatcher, RetryPolicy, Route, RouteAction, RouteConfiguration, RouteMatch,
    VirtualHost, WeightedCluster,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{string_matcher::MatchPattern, StringMatcher};
use envoy_types::pb::google::protobuf::{BoolValue, UInt32Value};

/// How deep splitters may nest inside each other (the chain compiler bounds redirects the
/// same way).
const SPLITTER_DEPTH_MAX: usize = 16;

pub fn build(snapshot: &Snapshot) -> Result<Vec<RouteConfiguration>, String> {
    let mut out = Vec::new();
    for upstream in &snapshot.upstreams {
        if !is_l7(&upstream.protocol) || upstream.bind_port == 0 {
            continue;
        }
        out.push(route_configuration(upstream)?);
    }
    for listener in &snapshot.ingress {
        if is_l7(&listener.protocol) {
            out.push(ingress_route_configuration(snapshot, listener)?);
        }
    }
    Ok(out)
}

fn catch_all() -> RouteMatch {
    RouteMatch {
        path_specifier: Some(route_match::PathSpecifier::Prefix("/".to_string())),
        ..Default::default()
    }
}

pub(super) fn route_configuration(upstream: &Upstream) -> Result<RouteConfiguration, String> {
    let name = format!(
        "{}.default.default.{}",
        upstream.destination, upstream.datacenter
    );
    Ok(RouteConfiguration {
        name: upstream.id.clone(),
        virtual_hosts: vec![virtual_host(upstream, name, vec!["*".to_string()])?],
        validate_clusters: Some(BoolValue { value: false }),
        ..Default::default()
    })
}

/// The route configuration of an ingress gateway's HTTP listener: one virtual host per
/// exposed service, named by its upstream ID and matching its `Host` values, with the
/// routes of its discovery chain (Consul's `routesForIngressGateway`).
fn ingress_route_configuration(
    snapshot: &Snapshot,
    listener: &IngressListener,
) -> Result<RouteConfiguration, String> {
    let mut virtual_hosts = Vec::with_capacity(listener.services.len());
    for service in &listener.services {
        let upstream = snapshot
            .upstreams
            .iter()
            .find(|u| u.id == service.upstream)
            .ok_or_else(|| {
                format!(
                    "ingress listener {}: no upstream {:?}",
                    listener.port, service.upstream
                )
            })?;
        let mut host = virtual_host(upstream, upstream.id.clone(), service.domains.clone())?;
        // The service's header changes apply to every route of its host, as Consul's
        // `injectHeaderManipToVirtualHost` puts them.
        host.request_headers_to_add = header_options(&service.request_headers);
        host.request_headers_to_remove = service.request_headers.remove.clone();
        host.response_headers_to_add = header_options(&service.response_headers);
        host.response_headers_to_remove = service.response_headers.remove.clone();
        virtual_hosts.push(host);
    }
    Ok(RouteConfiguration {
        name: ingress_route_name(listener.port),
        virtual_hosts,
        validate_clusters: Some(BoolValue { value: false }),
        ..Default::default()
    })
}

/// Envoy's header options for Consul's `Add` (appended to a header already there) and
/// `Set` (replacing it).
fn header_options(changes: &HeaderChanges) -> Vec<HeaderValueOption> {
    let option = |(name, value): &(String, String), action: HeaderAppendAction| HeaderValueOption {
        header: Some(HeaderValue {
            key: name.clone(),
            value: value.clone(),
            ..Default::default()
        }),
        append_action: action as i32,
        ..Default::default()
    };
    changes
        .add
        .iter()
        .map(|h| option(h, HeaderAppendAction::AppendIfExistsOrAdd))
        .chain(
            changes
                .set
                .iter()
                .map(|h| option(h, HeaderAppendAction::OverwriteIfExistsOrAdd)),
        )
        .collect()
}

/// A virtual host answering `domains` with the routes of `upstream`'s chain.
fn virtual_host(
    upstream: &Upstream,
    name: String,
    domains: Vec<String>,
) -> Result<VirtualHost, String> {
    let routes = match upstream.nodes.get(&upstream.start) {
        Some(ChainNode::Router(rules)) => rules
            .iter()
            .map(|rule| {
                Ok(Route {
                    r#match: Some(route_match(rule)),
                    action: Some(route::Action::Route(route_action(
                        upstream,
                        &rule.next,
                        Some(rule),
                    )?)),
                    ..Default::default()
                })
            })
            .collect::<Result<Vec<_>, String>>()?,
        Some(_) => vec![Route {
            r#match: Some(catch_all()),
            action: Some(route::Action::Route(route_action(
                upstream,
                &upstream.start,
                None,
            )?)),
            ..Default::default()
        }],
        None => {
            return Err(format!(
                "upstream {:?}: its chain has no start node",
                upstream.id
            ))
        }
    };
    Ok(VirtualHost {
        name,
        domains,
        routes,
        ..Default::default()
    })
}

fn route_match(rule: &RouteRule) -> RouteMatch {
    let path_specifier = if !rule.path_exact.is_empty() {
        route_match::PathSpecifier::Path(rule.path_exact.clone())
    } else if !rule.path_regex.is_empty() {
        route_match::PathSpecifier::SafeRegex(safe_regex(rule.path_regex.clone()))
    } else if !rule.path_prefix.is_empty() {
        route_match::PathSpecifier::Prefix(rule.path_prefix.clone())
    } else {
        route_match::PathSpecifier::Prefix("/".to_string())
    };
    let mut headers: Vec<HeaderMatcher> = rule.headers.iter().map(header_matcher).collect();
    if !rule.methods.is_empty() {
        let methods: Vec<String> = rule.methods.iter().map(|m| regex_escape(m)).collect();
        headers.push(HeaderMatcher {
            name: ":method".to_string(),
            header_match_specifier: Some(HeaderMatchSpecifier::StringMatch(StringMatcher {
                match_pattern: Some(MatchPattern::SafeRegex(safe_regex(format!(
                    "^({})$",
                    methods.join("|")
                )))),
                ignore_case: false,
            })),
            ..Default::default()
        });
    }
    RouteMatch {
        path_specifier: Some(path_specifier),
        headers,
        query_parameters: rule
            .query_params
            .iter()
            .map(|(name, exact)| QueryParameterMatcher {
                name: name.clone(),
                query_parameter_match_specifier: Some(if exact.is_empty() {
                    QueryParameterMatchSpecifier::PresentMatch(true)
                } else {
                    QueryParameterMatchSpecifier::StringMatch(StringMatcher {
                        match_pattern: Some(MatchPattern::Exact(exact.clone())),
                        ignore_case: false,
                    })
                }),
            })
            .collect(),
        ..Default::default()
    }
}

/// Adds the clusters a splitter node leads to, with their weights (percent × `scale`).
fn splits(
    upstream: &Upstream,
    node: &str,
    scale: f64,
    depth: usize,
    out: &mut Vec<ClusterWeight>,
) -> Result<(), String> {
    if depth > SPLITTER_DEPTH_MAX {
        return Err(format!(
            "upstream {:?}: splitters nest too deep",
            upstream.id
        ));
    }
    match upstream.nodes.get(node) {
        Some(ChainNode::Splitter(list)) => {
            for split in list {
                splits(
                    upstream,
                    &split.next,
                    scale * split.weight / 100.0,
                    depth + 1,
                    out,
                )?;
            }
            Ok(())
        }
        Some(ChainNode::Resolver { .. }) => {
            let name = resolver_cluster_name(upstream, node)
                .ok_or_else(|| format!("upstream {:?}: no cluster for {node:?}", upstream.id))?;
            // Consul's weights are percentages with two decimals: ×100 makes them whole.
            let weight = (scale * 100.0).round() as u32;
            if weight == 0 {
                return Ok(());
            }
            match out.iter_mut().find(|c| c.name == name) {
                Some(existing) => {
                    let w = existing.weight.get_or_insert(UInt32Value { value: 0 });
                    w.value += weight;
                }
                None => out.push(ClusterWeight {
                    name,
                    weight: Some(UInt32Value { value: weight }),
                    ..Default::default()
                }),
            }
            Ok(())
        }
        _ => Err(format!(
            "upstream {:?}: a split leads to {node:?}, neither a splitter nor a resolver",
            upstream.id
        )),
    }
}

fn route_action(
    upstream: &Upstream,
    node: &str,
    rule: Option<&RouteRule>,
) -> Result<RouteAction, String> {
    let cluster_specifier = match upstream.nodes.get(node) {
        Some(ChainNode::Resolver { .. }) => route_action::ClusterSpecifier::Cluster(
            resolver_cluster_name(upstream, node)
                .ok_or_else(|| format!("upstream {:?}: no cluster for {node:?}", upstream.id))?,
        ),
        Some(ChainNode::Splitter(_)) => {
            let mut clusters = Vec::new();
            splits(upstream, node, 100.0, 0, &mut clusters)?;
            if clusters.is_empty() {
                return Err(format!(
                    "upstream {:?}: a splitter with no weight",
                    upstream.id
                ));
            }
            route_action::ClusterSpecifier::WeightedClusters(WeightedCluster {
                clusters,
                ..Default::default()
            })
        }
        _ => {
            return Err(format!(
                "upstream {:?}: a route leads to {node:?}, neither a splitter nor a resolver",
                upstream.id
            ))
        }
    };
    let mut action = RouteAction {
        cluster_specifier: Some(cluster_specifier),
        ..Default::default()
    };
    if let Some(rule) = rule {
        action.prefix_rewrite = rule.prefix_rewrite.clone();
        if rule.request_timeout_ms > 0 {
            action.timeout = Some(duration_ms(rule.request_timeout_ms));
        }
        let mut retry_on = Vec::new();
        if rule.retry_on_connect_failure {
            retry_on.push("connect-failure");
        }
        if !rule.retry_on_status_codes.is_empty() {
            retry_on.push("retriable-status-codes");
        }
        if rule.num_retries > 0 || !retry_on.is_empty() {
            action.retry_policy = Some(RetryPolicy {
                retry_on: retry_on.join(","),
                num_retries: Some(UInt32Value {
                    value: rule.num_retries,
                }),
                retriable_status_codes: rule.retry_on_status_codes.clone(),
                ..Default::default()
            });
        }
    }
    Ok(action)
}
