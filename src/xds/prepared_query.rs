//! Prepared-query upstreams (an upstream with `DestinationType: "prepared_query"`): the
//! sidecar's outbound listener proxies TCP to one cluster named by Consul's SNI for a
//! query, `<query>.default.<dc>.query.<trust domain>`, whose endpoints are what executing
//! the query returns for Connect (its service's sidecars and Connect-native instances, with
//! its tag, metadata and health filters).
//!
//! Consul treats these upstreams as L4 only and discovers them outside discovery chains;
//! so does this module. The execution is the store's own (`store::query::resolve` and
//! `select`, what `/v1/query/<name>/execute?connect` runs locally), read from the same
//! store version as the rest of the snapshot, so the endpoints follow the store: a new
//! healthy instance appears at the next build, a failing one leaves. Pure: no I/O.

use super::registration;
use super::snapshot::{spiffe_id, Endpoint, ENDPOINTS_PER_TARGET_MAX};
use crate::store::catalog::read::proxy_destination;
use crate::store::catalog::Status;
use crate::store::query::{self, select::select};
use crate::store::Tables;

/// A prepared-query upstream as its resources need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryUpstream {
    /// Consul's upstream ID, `prepared_query:<name>`: its listener's name and stat prefix.
    pub id: String,
    /// The query's name or ID, as the upstream gives it.
    pub query: String,
    pub bind_address: String,
    pub bind_port: u16,
    /// The cluster's name and the SNI sent: [`query_sni`].
    pub sni: String,
    /// The SPIFFE IDs an endpoint's certificate may carry: the query's service in this
    /// datacenter, and whatever destination the selected instances front.
    pub spiffe_ids: Vec<String>,
    pub connect_timeout_ms: u64,
    /// The instances the execution selects, in address order.
    pub endpoints: Vec<Endpoint>,
    /// Why the query selects nothing here, for the watcher to say (a query that does not
    /// exist, one in another datacenter): empty when it was executed.
    pub unserved: String,
}

/// Consul's SNI (and cluster name) of a prepared query: `<query>.default.<datacenter>.query.<trust domain>`.
pub fn query_sni(query: &str, datacenter: &str, trust_domain: &str) -> String {
    format!("{query}.default.{datacenter}.query.{trust_domain}")
}

/// Consul's default upstream connect timeout, in milliseconds.
const CONNECT_TIMEOUT_MS_DEFAULT: u64 = 5_000;

/// The upstream `upstream` (a `prepared_query` one) executed against `tables`, in
/// `local_datacenter`.
pub fn build(
    tables: &Tables,
    upstream: &registration::Upstream,
    local_datacenter: &str,
    trust_domain: &str,
) -> QueryUpstream {
    let datacenter = if upstream.datacenter.is_empty() {
        local_datacenter
    } else {
        upstream.datacenter.as_str()
    };
    let mut out = QueryUpstream {
        id: upstream.id(),
        query: upstream.destination_name.clone(),
        bind_address: upstream.bind_address.clone(),
        bind_port: upstream.bind_port,
        sni: query_sni(&upstream.destination_name, datacenter, trust_domain),
        spiffe_ids: Vec::new(),
        connect_timeout_ms: registration::config_u64(&upstream.config, "connect_timeout_ms")
            .unwrap_or(CONNECT_TIMEOUT_MS_DEFAULT),
        endpoints: Vec::new(),
        unserved: String::new(),
    };
    if datacenter != local_datacenter {
        out.unserved = format!(
            "the query runs in datacenter {datacenter:?}; only this datacenter's queries are executed for Envoy"
        );
        return out;
    }
    let resolved = match query::resolve(tables, &upstream.destination_name, "") {
        Ok(Some(resolved)) => resolved,
        Ok(None) => {
            out.unserved = format!("no prepared query {:?}", upstream.destination_name);
            return out;
        }
        Err(reason) => {
            out.unserved = reason;
            return out;
        }
    };
    out.spiffe_ids.push(spiffe_id(
        trust_domain,
        local_datacenter,
        &resolved.service.service,
    ));
    for row in select(tables, &resolved.service, true)
        .iter()
        .take(ENDPOINTS_PER_TARGET_MAX)
    {
        let instance = &**row.service;
        let Ok(port) = u16::try_from(instance.port) else {
            continue;
        };
        // A proxy's certificate names the service it fronts, a Connect-native
        // instance's its own name (Consul's SAN list for a query's cluster).
        let destination = proxy_destination(instance).unwrap_or_else(|| instance.name.to_string());
        let id = spiffe_id(trust_domain, local_datacenter, &destination);
        if !out.spiffe_ids.contains(&id) {
            out.spiffe_ids.push(id);
        }
        // The execution dropped the failing instances; one with a warning stays, at its
        // warning weight, as Consul weighs an endpoint.
        let warning = row.checks().any(|c| c.status == Status::Warning);
        out.endpoints.push(Endpoint {
            address: if instance.address.is_empty() {
                row.node.address.to_string()
            } else {
                instance.address.to_string()
            },
            port,
            healthy: true,
            weight: if warning {
                instance.weights.warning.max(1)
            } else {
                instance.weights.passing.max(1)
            },
        });
    }
    out.endpoints
        .sort_by(|a, b| (&a.address, a.port).cmp(&(&b.address, b.port)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::catalog::{CatalogOp, Registration, ServiceRegistration};
    use crate::store::query::{PreparedQuery, QueryOp, ServiceQuery};
    use crate::store::Command;

    const TD: &str = "td.consul";

    fn register(tables: &mut Tables, index: u64, kind: &str, id: &str, port: i32) {
        let reg = Registration {
            node: format!("n{index}"),
            address: format!("10.0.0.{index}"),
            datacenter: "dc1".into(),
            service: Some(ServiceRegistration {
                kind: kind.into(),
                id: id.into(),
                name: if kind.is_empty() { "db" } else { id }.into(),
                port,
                proxy_json: (kind == "connect-proxy")
                    .then(|| r#"{"DestinationServiceName":"db"}"#.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        };
        tables.apply(
            index,
            &Command::Catalog(CatalogOp::Register(Box::new(reg))),
            &mut Vec::new(),
        );
    }

    fn upstream(name: &str, datacenter: &str) -> registration::Upstream {
        registration::Upstream {
            destination_type: "prepared_query".into(),
            destination_name: name.into(),
            datacenter: datacenter.into(),
            bind_address: "127.0.0.1".into(),
            bind_port: 9292,
            config: Default::default(),
            mesh_gateway_mode: String::new(),
        }
    }

    #[test]
    fn a_query_selects_its_services_proxies_from_the_store() {
        let mut tables = Tables::default();
        register(&mut tables, 1, "", "db", 5432);
        register(&mut tables, 2, "connect-proxy", "db-sidecar-proxy", 21000);
        let query = PreparedQuery {
            id: "8f246b77-f3e1-ff88-5b48-8ec93abf3e05".into(),
            name: "db-query".into(),
            service: ServiceQuery {
                service: "db".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        crate::store::query::apply(
            &mut tables,
            3,
            &QueryOp::Set {
                query: Box::new(query),
                create: true,
            },
            &mut Vec::new(),
        )
        .unwrap();
        let built = build(&tables, &upstream("db-query", ""), "dc1", TD);
        assert_eq!(built.id, "prepared_query:db-query");
        assert_eq!(built.sni, "db-query.default.dc1.query.td.consul");
        assert_eq!(built.unserved, "");
        assert_eq!(
            built.spiffe_ids,
            vec!["spiffe://td.consul/ns/default/dc/dc1/svc/db".to_string()]
        );
        // The proxy, not the plain instance: the query runs for Connect.
        let endpoints: Vec<_> = built
            .endpoints
            .iter()
            .map(|e| (e.address.as_str(), e.port, e.healthy))
            .collect();
        assert_eq!(endpoints, vec![("10.0.0.2", 21000, true)]);
        // By ID too, case-insensitively by name.
        let by_id = build(
            &tables,
            &upstream("8f246b77-f3e1-ff88-5b48-8ec93abf3e05", ""),
            "dc1",
            TD,
        );
        assert_eq!(by_id.endpoints, built.endpoints);
        assert_eq!(
            build(&tables, &upstream("DB-Query", ""), "dc1", TD).endpoints,
            built.endpoints
        );

        // A second proxy of db joins at the next build.
        register(&mut tables, 4, "connect-proxy", "db-2-sidecar-proxy", 21001);
        assert_eq!(
            build(&tables, &upstream("db-query", ""), "dc1", TD)
                .endpoints
                .len(),
            2
        );
    }

    #[test]
    fn a_missing_or_remote_query_selects_nothing_and_says_why() {
        let tables = Tables::default();
        let missing = build(&tables, &upstream("nope", ""), "dc1", TD);
        assert!(missing.endpoints.is_empty());
        assert!(
            missing.unserved.contains("no prepared query"),
            "{missing:?}"
        );
        let remote = build(&tables, &upstream("db-query", "dc2"), "dc1", TD);
        assert_eq!(remote.id, "prepared_query:db-query?dc=dc2");
        assert_eq!(remote.sni, "db-query.default.dc2.query.td.consul");
        assert!(remote.unserved.contains("dc2"), "{remote:?}");
    }

    #[test]
    fn the_sni_is_consuls() {
        assert_eq!(
            query_sni(
                "db-query",
                "dc1",
                "11111111-2222-3333-4444-555555555555.consul"
            ),
            "db-query.default.dc1.query.11111111-2222-3333-4444-555555555555.consul"
        );
    }
}
