//! The local half of a prepared query's execution: which of this datacenter's instances its
//! service part selects (Consul's `execute` before sorting and failover).
//!
//! An instance is kept when none of its checks (node-level included) is critical — or,
//! with `OnlyPassing`, when all of them pass — ignoring the checks named in
//! `IgnoreCheckIDs`; when its node's metadata has every `NodeMeta` pair and its own every
//! `ServiceMeta` pair; and when it has every tag `Tags` requires and none it forbids
//! (`!tag`), tags compared case-insensitively. The order is the catalog's; the caller
//! shuffles and sorts.

use super::ServiceQuery;
use crate::store::catalog::read::{check_service_nodes_of_group, connect_rows, CheckServiceNode};
use crate::store::catalog::Status;
use crate::store::Tables;

/// The instances of this datacenter the query's service part selects. With `Connect` (in
/// the query or asked with `?connect`), the service's Connect-capable instances instead —
/// its Connect-native instances and the proxies whose destination it is — as Consul asks
/// its health endpoint with `Connect` set; the same filters then apply to those.
pub fn select<'a>(
    tables: &'a Tables,
    service: &ServiceQuery,
    connect: bool,
) -> Vec<CheckServiceNode<'a>> {
    let rows: Vec<CheckServiceNode<'a>> = if connect || service.connect {
        connect_rows(tables, &service.service)
            .views
            .into_iter()
            .map(|view| CheckServiceNode {
                node: view.node(),
                service: &view.service,
                node_checks: view.node_checks(),
                service_checks: view.checks(),
            })
            .collect()
    } else {
        match tables.catalog.group(&service.service) {
            Some(group) => check_service_nodes_of_group(group).collect(),
            None => return Vec::new(),
        }
    };
    let tags = TagFilter::new(service.tags.as_deref().unwrap_or_default());
    let node_meta = service.node_meta.as_deref().unwrap_or_default();
    let service_meta = service.service_meta.as_deref().unwrap_or_default();
    let ignored = service.ignore_check_ids.as_deref().unwrap_or_default();
    rows.into_iter()
        .filter(|row| healthy(row, service.only_passing, ignored))
        .filter(|row| row.node.meta.satisfies(node_meta))
        .filter(|row| row.service.meta.satisfies(service_meta))
        .filter(|row| tags.keeps(row))
        .collect()
}

/// Consul's `FilterIgnore`: no critical check (maintenance is critical), or with
/// `only_passing` every check passing, among the checks not ignored.
fn healthy(row: &CheckServiceNode, only_passing: bool, ignored: &[String]) -> bool {
    row.checks()
        .filter(|check| !ignored.iter().any(|id| **id == *check.check_id))
        .all(|check| match check.status {
            Status::Critical | Status::Maintenance => false,
            Status::Passing => true,
            Status::Warning => !only_passing,
        })
}

/// Required and forbidden tags, lowercased.
struct TagFilter {
    must: Vec<String>,
    not: Vec<String>,
}

impl TagFilter {
    fn new(tags: &[String]) -> TagFilter {
        let mut filter = TagFilter {
            must: Vec::new(),
            not: Vec::new(),
        };
        for tag in tags {
            let tag = tag.to_lowercase();
            match tag.strip_prefix('!') {
                Some(forbidden) => filter.not.push(forbidden.to_string()),
                None => filter.must.push(tag),
            }
        }
        filter
    }

    fn keeps(&self, row: &CheckServiceNode) -> bool {
        let has = |tag: &str| row.service.tags.iter().any(|t| t.to_lowercase() == tag);
        self.must.iter().all(|t| has(t)) && !self.not.iter().any(|t| has(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::catalog::{CatalogOp, CheckRegistration, Registration, ServiceRegistration};
    use crate::store::Command;

    fn register(
        tables: &mut Tables,
        index: u64,
        node: &str,
        tags: &[&str],
        meta: &[(&str, &str)],
        checks: &[(&str, &str)],
    ) {
        let registration = Registration {
            node: node.into(),
            address: "10.0.0.1".into(),
            node_meta: meta
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            service: Some(ServiceRegistration {
                id: "web".into(),
                name: "web".into(),
                tags: tags.iter().map(|t| t.to_string()).collect(),
                ..Default::default()
            }),
            checks: checks
                .iter()
                .map(|(id, status)| CheckRegistration {
                    check_id: (*id).into(),
                    name: (*id).into(),
                    status: (*status).into(),
                    service_id: if *id == "svc" {
                        "web".into()
                    } else {
                        String::new()
                    },
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let mut changes = Vec::new();
        tables.apply(
            index,
            &Command::Catalog(CatalogOp::Register(Box::new(registration))),
            &mut changes,
        );
    }

    fn nodes(rows: &[CheckServiceNode]) -> Vec<String> {
        let mut names: Vec<String> = rows.iter().map(|r| r.node.name.to_string()).collect();
        names.sort();
        names
    }

    #[test]
    fn health_tags_and_metadata_select_instances() {
        let mut tables = Tables::default();
        register(
            &mut tables,
            1,
            "ok",
            &["Primary"],
            &[("rack", "a")],
            &[("svc", "passing")],
        );
        register(
            &mut tables,
            2,
            "warn",
            &["primary"],
            &[("rack", "b")],
            &[("svc", "warning")],
        );
        register(
            &mut tables,
            3,
            "down",
            &["primary"],
            &[],
            &[("svc", "critical")],
        );
        register(
            &mut tables,
            4,
            "flaky",
            &["canary"],
            &[],
            &[("flaky", "critical")],
        );
        let mut query = ServiceQuery {
            service: "web".into(),
            ..Default::default()
        };
        assert_eq!(nodes(&select(&tables, &query, false)), ["ok", "warn"]);
        query.only_passing = true;
        assert_eq!(nodes(&select(&tables, &query, false)), ["ok"]);
        query.only_passing = false;
        query.ignore_check_ids = Some(vec!["flaky".into()]);
        assert_eq!(
            nodes(&select(&tables, &query, false)),
            ["flaky", "ok", "warn"]
        );
        query.tags = Some(vec!["PRIMARY".into()]);
        assert_eq!(nodes(&select(&tables, &query, false)), ["ok", "warn"]);
        query.tags = Some(vec!["!primary".into()]);
        assert_eq!(nodes(&select(&tables, &query, false)), ["flaky"]);
        query.tags = None;
        query.node_meta = Some(vec![("rack".into(), "b".into())]);
        assert_eq!(nodes(&select(&tables, &query, false)), ["warn"]);
        assert!(
            select(&tables, &query, true).is_empty(),
            "no Connect instances"
        );
        query.service = "nothing".into();
        assert!(select(&tables, &query, false).is_empty());
    }
}
