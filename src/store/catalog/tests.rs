//! Unit tests of the catalog tables: Consul's registration semantics, the index rules and
//! the precision of the change keys.

use super::read::{self, check_service_nodes};
use super::rows::{Status, Tags};
use super::*;
use crate::store::{CatalogResult, Change, Command, CommandResult, QueryResult, Table, Tables};

struct Fixture {
    tables: Tables,
    next_index: u64,
    changes: Vec<Change>,
}

fn node_reg(node: &str, address: &str) -> Registration {
    Registration {
        node: node.into(),
        address: address.into(),
        datacenter: "dc1".into(),
        ..Default::default()
    }
}

fn service(id: &str, name: &str, tags: &[&str]) -> ServiceRegistration {
    ServiceRegistration {
        id: id.into(),
        name: name.into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        port: 80,
        ..Default::default()
    }
}

fn check(id: &str, service_id: &str, status: &str) -> CheckRegistration {
    CheckRegistration {
        check_id: id.into(),
        name: format!("check {id}"),
        status: status.into(),
        service_id: service_id.into(),
        ..Default::default()
    }
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            tables: Tables::default(),
            next_index: 10,
            changes: Vec::new(),
        }
    }
    fn run(&mut self, op: CatalogOp) -> CommandResult {
        self.next_index += 1;
        self.changes.clear();
        let result = self
            .tables
            .apply(self.next_index, &Command::Catalog(op), &mut self.changes);
        self.tables.catalog.check_invariants();
        result
    }
    fn register(&mut self, reg: Registration) -> CommandResult {
        self.run(CatalogOp::Register(Box::new(reg)))
    }
    fn instance(&mut self, node: &str, svc: ServiceRegistration, checks: Vec<CheckRegistration>) {
        let mut reg = node_reg(node, "10.0.0.1");
        reg.service = Some(svc);
        reg.checks = checks;
        assert_eq!(
            self.register(reg),
            CommandResult::Catalog(CatalogResult::Written)
        );
    }
    fn touched(&self, table: Table, key: &str) -> bool {
        self.changes
            .iter()
            .any(|c| c.table == table && c.key == crate::store::ChangeKey::Key(Arc::from(key)))
    }
}

#[test]
fn register_node_service_and_check_with_indexes_and_changes() {
    let mut f = Fixture::new();
    f.instance(
        "n1",
        service("web-1", "web", &["v1"]),
        vec![check("c1", "web-1", "passing")],
    );
    let index = f.next_index;
    assert_eq!(read::service_index(&f.tables, "web"), index);
    assert_eq!(read::nodes_index(&f.tables), index);
    assert_eq!(read::checks_index(&f.tables), index);
    for (table, key) in [
        (Table::Nodes, "n1"),
        (Table::Services, "web"),
        (Table::ServiceIndex, "web"),
        (Table::NodeServices, "n1"),
        (Table::Checks, "n1"),
    ] {
        assert!(f.touched(table, key), "{table:?} {key} in {:?}", f.changes);
    }
    let nodes = check_service_nodes(&f.tables, "web");
    assert_eq!(nodes.len(), 1);
    assert_eq!(&*nodes[0].node.address, "10.0.0.1");
    assert_eq!(nodes[0].checks().count(), 1);
    assert_eq!(&*nodes[0].checks().next().unwrap().service_name, "web");
    assert_eq!(&*nodes[0].checks().next().unwrap().service_tags[0], "v1");
    assert_eq!(nodes[0].service.create_index, index);
    assert!(nodes[0].all_passing());
}

#[test]
fn identical_registration_changes_nothing() {
    let mut f = Fixture::new();
    let reg = || {
        let mut r = node_reg("n1", "10.0.0.1");
        r.service = Some(service("web-1", "web", &["a", "b"]));
        r.checks = vec![check("c1", "web-1", "passing")];
        r
    };
    f.register(reg());
    let index = read::service_index(&f.tables, "web");
    let table_indexes = f.tables.table_indexes;
    assert_eq!(
        f.register(reg()),
        CommandResult::Catalog(CatalogResult::Written)
    );
    assert!(f.changes.is_empty(), "{:?}", f.changes);
    assert_eq!(read::service_index(&f.tables, "web"), index);
    assert_eq!(f.tables.table_indexes, table_indexes);
}

#[test]
fn one_service_changing_never_moves_another_services_index() {
    let mut f = Fixture::new();
    f.instance(
        "n1",
        service("web-1", "web", &[]),
        vec![check("web-check", "web-1", "passing")],
    );
    f.instance(
        "n2",
        service("api-1", "api", &[]),
        vec![check("api-check", "api-1", "passing")],
    );
    let web_index = read::service_index(&f.tables, "web");
    // Flip api's check: api moves, web does not, and web's keys are untouched.
    let mut reg = node_reg("n2", "10.0.0.1");
    reg.skip_node_update = true;
    reg.checks = vec![check("api-check", "api-1", "critical")];
    f.register(reg);
    assert_eq!(read::service_index(&f.tables, "web"), web_index);
    assert_eq!(read::service_index(&f.tables, "api"), f.next_index);
    assert!(f.touched(Table::ServiceIndex, "api"));
    assert!(!f.touched(Table::ServiceIndex, "web"));
    assert!(
        !f.touched(Table::Services, "api"),
        "a check change is not a service row change"
    );
    assert!(f.touched(Table::Checks, "n2"));
}

#[test]
fn node_level_check_moves_every_service_on_the_node() {
    let mut f = Fixture::new();
    f.instance("n1", service("web-1", "web", &[]), vec![]);
    f.instance("n1", service("db-1", "db", &[]), vec![]);
    f.instance("n2", service("other-1", "other", &[]), vec![]);
    let other = read::service_index(&f.tables, "other");
    let mut reg = node_reg("n1", "10.0.0.1");
    reg.checks = vec![check("node-check", "", "warning")];
    f.register(reg);
    assert_eq!(read::service_index(&f.tables, "web"), f.next_index);
    assert_eq!(read::service_index(&f.tables, "db"), f.next_index);
    assert_eq!(read::service_index(&f.tables, "other"), other);
    let web = check_service_nodes(&f.tables, "web");
    assert_eq!(web[0].checks().count(), 1);
    assert_eq!(web[0].aggregated_status(), Status::Warning);
    assert!(!web[0].all_passing());
    assert!(web[0].none_critical());
    // A node address change also reaches the node's services, as in Consul.
    f.register(node_reg("n1", "10.0.0.2"));
    assert_eq!(read::service_index(&f.tables, "web"), f.next_index);
    assert_eq!(read::service_index(&f.tables, "other"), other);
    assert_eq!(
        &*check_service_nodes(&f.tables, "db")[0].node.address,
        "10.0.0.2"
    );
}

#[test]
fn deregistering_the_last_instance_records_an_extinction() {
    let mut f = Fixture::new();
    f.instance(
        "n1",
        service("web-1", "web", &[]),
        vec![check("c1", "web-1", "passing")],
    );
    f.instance("n1", service("api-1", "api", &[]), vec![]);
    let result = f.run(CatalogOp::Deregister {
        node: "n1".into(),
        service_id: "web-1".into(),
        check_id: String::new(),
    });
    assert_eq!(result, CommandResult::Catalog(CatalogResult::Written));
    assert!(f.tables.catalog.group("web").is_none());
    assert!(
        read::check(&f.tables, "n1", "c1").is_none(),
        "the service's checks go with it"
    );
    assert_eq!(f.tables.catalog.service_extinction_index, f.next_index);
    assert_eq!(read::service_index(&f.tables, "web"), f.next_index);
    assert_eq!(
        read::service_index(&f.tables, "never-existed"),
        f.next_index
    );
    assert!(f.touched(Table::ServiceIndex, "web"));
    assert!(!f.touched(Table::ServiceIndex, "api"));
    // Deregistering something missing is not an error.
    let again = f.run(CatalogOp::Deregister {
        node: "n1".into(),
        service_id: "web-1".into(),
        check_id: String::new(),
    });
    assert_eq!(again, CommandResult::Catalog(CatalogResult::Written));
    assert!(f.changes.is_empty());
}

#[test]
fn deregistering_a_node_removes_everything_on_it() {
    let mut f = Fixture::new();
    let mut reg = node_reg("n1", "10.0.0.1");
    reg.id = "a6c7a2fa-3d83-4e2b-9b66-0b8d8f2a4c11".into();
    f.register(reg);
    f.instance(
        "n1",
        service("web-1", "web", &[]),
        vec![check("c1", "web-1", "passing")],
    );
    f.instance("n2", service("web-2", "web", &[]), vec![]);
    f.run(CatalogOp::Deregister {
        node: "N1".into(),
        service_id: String::new(),
        check_id: String::new(),
    });
    assert!(f.tables.catalog.node("n1").is_none());
    assert!(f.tables.catalog.node_ids.is_empty());
    assert_eq!(check_service_nodes(&f.tables, "web").len(), 1);
    assert!(f.touched(Table::Nodes, "n1"));
    assert!(f.touched(Table::ServiceIndex, "web"));
}

#[test]
fn refused_registrations_change_nothing() {
    let mut f = Fixture::new();
    f.register(node_reg("n1", "10.0.0.1"));
    let before = f.tables.table_indexes;
    let mut reg = node_reg("n1", "10.0.0.9");
    reg.checks = vec![check("c1", "no-such-service", "passing")];
    let result = f.register(reg);
    assert!(
        matches!(&result, CommandResult::Catalog(CatalogResult::Refused(e)) if e.contains("Missing service registration")),
        "{result:?}"
    );
    assert_eq!(
        &*f.tables.catalog.node("n1").unwrap().node().address,
        "10.0.0.1"
    );
    assert_eq!(f.tables.table_indexes, before);
    assert!(f.changes.is_empty());
    for (reg, message) in [
        (node_reg("", "1.2.3.4"), "Must provide node"),
        (node_reg("n", ""), "Must provide address"),
        (
            Registration {
                id: "not-a-uuid".into(),
                ..node_reg("n", "1.2.3.4")
            },
            "Bad node ID",
        ),
    ] {
        match f.register(reg) {
            CommandResult::Catalog(CatalogResult::Refused(e)) => {
                assert!(e.contains(message), "{e}")
            }
            other => panic!("expected {message}, got {other:?}"),
        }
    }
    let mut bad_check = node_reg("n1", "10.0.0.1");
    bad_check.checks = vec![CheckRegistration {
        node: "other-node".into(),
        ..check("x", "", "passing")
    }];
    assert!(
        matches!(f.register(bad_check), CommandResult::Catalog(CatalogResult::Refused(e)) if e.contains("does not match"))
    );
}

#[test]
fn names_and_ids_match_case_insensitively() {
    let mut f = Fixture::new();
    f.instance(
        "Node-A",
        service("Web-1", "Web", &[]),
        vec![check("Check-1", "WEB-1", "passing")],
    );
    assert_eq!(check_service_nodes(&f.tables, "web").len(), 1);
    assert_eq!(check_service_nodes(&f.tables, "WEB").len(), 1);
    let entry = f.tables.catalog.node("node-a").unwrap();
    assert_eq!(
        &*entry.node().name,
        "Node-A",
        "the registered spelling is kept"
    );
    assert!(read::check(&f.tables, "NODE-A", "check-1").is_some());
    assert!(read::service_instance(&f.tables, "node-a", "WEB-1").is_some());
}

#[test]
fn check_default_status_is_critical_and_status_changes_keep_create_index() {
    let mut f = Fixture::new();
    f.instance(
        "n1",
        service("web-1", "web", &[]),
        vec![check("c1", "web-1", "")],
    );
    let created = read::check(&f.tables, "n1", "c1").unwrap().create_index;
    assert_eq!(
        read::check(&f.tables, "n1", "c1").unwrap().status,
        Status::Critical
    );
    let mut reg = node_reg("n1", "10.0.0.1");
    reg.checks = vec![check("c1", "web-1", "passing")];
    f.register(reg);
    let c = read::check(&f.tables, "n1", "c1").unwrap();
    assert_eq!(
        (c.status, c.create_index, c.modify_index),
        (Status::Passing, created, f.next_index)
    );
}

#[test]
fn node_ids_rename_unhealthy_nodes_and_protect_healthy_ones() {
    let mut f = Fixture::new();
    let id = "a6c7a2fa-3d83-4e2b-9b66-0b8d8f2a4c11";
    let mut reg = node_reg("old-name", "10.0.0.1");
    reg.id = id.into();
    f.register(reg);
    // Without a serf check the old node is not considered healthy: the ID moves.
    let mut renamed = node_reg("new-name", "10.0.0.1");
    renamed.id = id.into();
    assert_eq!(
        f.register(renamed),
        CommandResult::Catalog(CatalogResult::Written)
    );
    assert!(f.tables.catalog.node("old-name").is_none());
    assert_eq!(&**f.tables.catalog.node_ids.get(id).unwrap(), "new-name");
    // A healthy node keeps its name against a different ID.
    let mut serf = node_reg("new-name", "10.0.0.1");
    serf.id = id.into();
    serf.checks = vec![CheckRegistration {
        check_id: SERF_CHECK_ID.into(),
        name: SERF_CHECK_NAME.into(),
        status: "passing".into(),
        ..Default::default()
    }];
    f.register(serf);
    let mut thief = node_reg("new-name", "10.0.0.7");
    thief.id = "0b3d1c60-98e1-4c41-a0f1-4b8e9b0fa001".into();
    assert!(
        matches!(f.register(thief), CommandResult::Catalog(CatalogResult::Refused(e)) if e.contains("is reserved by node"))
    );
}

#[test]
fn renaming_a_service_under_the_same_id_moves_it_between_groups() {
    let mut f = Fixture::new();
    f.instance(
        "n1",
        service("svc-1", "alpha", &[]),
        vec![check("c", "svc-1", "passing")],
    );
    f.instance("n1", service("svc-1", "beta", &["t"]), vec![]);
    assert!(f.tables.catalog.group("alpha").is_none());
    let beta = check_service_nodes(&f.tables, "beta");
    assert_eq!(beta.len(), 1);
    assert_eq!(
        &*beta[0].checks().next().unwrap().service_name,
        "beta",
        "checks follow their service"
    );
    assert_eq!(&*beta[0].checks().next().unwrap().service_tags[0], "t");
    assert!(f.touched(Table::ServiceIndex, "alpha"));
}

#[test]
fn batches_apply_each_operation_independently() {
    let mut f = Fixture::new();
    let mut good = node_reg("n1", "10.0.0.1");
    good.service = Some(service("web-1", "web", &[]));
    let mut bad = node_reg("n2", "10.0.0.2");
    bad.checks = vec![check("c", "missing", "passing")];
    let result = f.run(CatalogOp::Batch(vec![
        CatalogOp::Register(Box::new(good)),
        CatalogOp::Register(Box::new(bad)),
    ]));
    assert!(matches!(
        result,
        CommandResult::Catalog(CatalogResult::Refused(_))
    ));
    assert_eq!(check_service_nodes(&f.tables, "web").len(), 1);
    assert!(f.tables.catalog.node("n2").is_none());
}

#[test]
fn repeated_strings_are_shared() {
    let mut f = Fixture::new();
    for i in 0..10 {
        f.instance(
            &format!("n{i}"),
            service(&format!("web-{i}"), "web", &["blue", "v2"]),
            vec![CheckRegistration {
                name: "web health".into(),
                kind: "http".into(),
                ..check(&format!("c{i}"), &format!("web-{i}"), "passing")
            }],
        );
    }
    let nodes = check_service_nodes(&f.tables, "web");
    for pair in nodes.windows(2) {
        assert!(Tags::ptr_eq(&pair[0].service.tags, &pair[1].service.tags));
        assert!(ArcStr::ptr_eq(&pair[0].service.name, &pair[1].service.name));
        assert!(ArcStr::ptr_eq(
            &pair[0].checks().next().unwrap().name,
            &pair[1].checks().next().unwrap().name
        ));
        assert_eq!(pair[0].checks().next().unwrap().kind(), "http");
    }
}

#[test]
fn snapshot_round_trip_keeps_rows_indexes_and_sharing() {
    let mut f = Fixture::new();
    f.instance(
        "n1",
        service("web-1", "web", &["x"]),
        vec![check("c1", "web-1", "warning")],
    );
    f.instance("n2", service("web-2", "web", &["x"]), vec![]);
    let mut node_check = node_reg("n2", "10.0.0.1");
    node_check.checks = vec![check("serfHealth", "", "passing")];
    f.register(node_check);
    f.instance("n2", service("gone", "gone", &[]), vec![]);
    f.run(CatalogOp::Deregister {
        node: "n2".into(),
        service_id: "gone".into(),
        check_id: String::new(),
    });
    let restored = Tables::from_snapshot_bytes(&f.tables.to_snapshot_bytes()).unwrap();
    restored.catalog.check_invariants();
    assert_eq!(
        read::service_index(&restored, "web"),
        read::service_index(&f.tables, "web")
    );
    assert_eq!(
        restored.catalog.service_extinction_index,
        f.tables.catalog.service_extinction_index
    );
    let before = check_service_nodes(&f.tables, "web");
    let after = check_service_nodes(&restored, "web");
    assert_eq!(before.len(), after.len());
    for (a, b) in before.iter().zip(&after) {
        assert_eq!(a.node, b.node);
        assert_eq!(a.service, b.service);
        assert_eq!(
            a.checks().collect::<Vec<_>>(),
            b.checks().collect::<Vec<_>>()
        );
    }
    assert!(Tags::ptr_eq(&after[0].service.tags, &after[1].service.tags));
}

#[test]
fn a_service_without_id_is_identified_by_its_name() {
    let mut f = Fixture::new();
    f.instance(
        "n1",
        service("", "web", &[]),
        vec![check("c", "web", "passing")],
    );
    let rows = check_service_nodes(&f.tables, "web");
    assert_eq!(&*rows[0].service.id, "web");
    assert_eq!(rows[0].checks().count(), 1);
}

#[test]
fn checks_moving_between_services_and_node_level_keep_every_view_current() {
    let mut f = Fixture::new();
    f.instance(
        "n1",
        service("a-1", "a", &[]),
        vec![check("c", "a-1", "passing"), check("d", "a-1", "passing")],
    );
    f.instance("n1", service("b-1", "b", &[]), vec![]);
    let own = |f: &Fixture, svc: &str| -> Vec<String> {
        check_service_nodes(&f.tables, svc)[0]
            .service_checks
            .iter()
            .map(|c| c.check_id.to_string())
            .collect()
    };
    assert_eq!(own(&f, "a"), ["c", "d"]);
    // c moves from a-1 to b-1: both services' answers change.
    let mut reg = node_reg("n1", "10.0.0.1");
    reg.checks = vec![check("c", "b-1", "warning")];
    assert_eq!(
        f.register(reg),
        CommandResult::Catalog(CatalogResult::Written)
    );
    assert_eq!(own(&f, "a"), ["d"]);
    assert_eq!(own(&f, "b"), ["c"]);
    assert!(f.touched(Table::ServiceIndex, "a") && f.touched(Table::ServiceIndex, "b"));
    assert_eq!(
        &*check_service_nodes(&f.tables, "b")[0].service_checks[0].service_name,
        "b"
    );
    // c becomes a node check: in every view's node checks, in nobody's own list.
    let mut reg = node_reg("n1", "10.0.0.1");
    reg.checks = vec![check("c", "", "critical")];
    assert_eq!(
        f.register(reg),
        CommandResult::Catalog(CatalogResult::Written)
    );
    assert!(own(&f, "b").is_empty());
    for svc in ["a", "b"] {
        let nodes = check_service_nodes(&f.tables, svc);
        assert_eq!(nodes[0].node_checks.len(), 1);
        assert!(!nodes[0].none_critical());
    }
    // And back to a service check, then deleted.
    let mut reg = node_reg("n1", "10.0.0.1");
    reg.checks = vec![check("C", "A-1", "passing")];
    assert_eq!(
        f.register(reg),
        CommandResult::Catalog(CatalogResult::Written)
    );
    assert_eq!(own(&f, "a"), ["C", "d"]);
    assert!(check_service_nodes(&f.tables, "b")[0]
        .node_checks
        .is_empty());
    f.run(CatalogOp::Deregister {
        node: "n1".into(),
        service_id: String::new(),
        check_id: "c".into(),
    });
    assert_eq!(own(&f, "a"), ["d"]);
    assert!(read::check(&f.tables, "n1", "c").is_none());
    // Deleting the service takes its remaining checks.
    f.run(CatalogOp::Deregister {
        node: "n1".into(),
        service_id: "a-1".into(),
        check_id: String::new(),
    });
    assert!(read::check(&f.tables, "n1", "d").is_none());
}

#[test]
fn a_node_name_changing_case_relabels_rows_and_views() {
    let mut f = Fixture::new();
    f.instance(
        "node1",
        service("a-1", "a", &[]),
        vec![check("c", "a-1", "passing")],
    );
    let mut reg = node_reg("n1", "10.0.0.1");
    reg.node = "NODE1".into();
    reg.checks = vec![check("nc", "", "passing")];
    assert_eq!(
        f.register(reg),
        CommandResult::Catalog(CatalogResult::Written)
    );
    let nodes = check_service_nodes(&f.tables, "a");
    assert_eq!(&*nodes[0].node.name, "NODE1");
    assert_eq!(&*nodes[0].service.node, "NODE1");
    assert_eq!(&*nodes[0].service_checks[0].node, "NODE1");
    assert_eq!(&*nodes[0].node_checks[0].node, "NODE1");
}

/// A catalog exercising every serialized row field: node IDs, metadata and tagged
/// addresses, shared and distinct tag lists, weights, service tagged addresses, a Connect
/// proxy with socket path, node-level and service checks with definitions and an unknown
/// check type, mixed-case names, and a service that went extinct.
fn snapshot_fixture_tables() -> Tables {
    let mut tables = Tables::default();
    let mut changes = Vec::new();
    for (i, op) in snapshot_fixture_ops().into_iter().enumerate() {
        let result = tables.apply(i as u64 + 1, &Command::Catalog(op), &mut changes);
        assert_eq!(result, CommandResult::Catalog(CatalogResult::Written));
    }
    tables
}

/// Node-A of the fixture: an ID, metadata and tagged addresses, a weighted service with
/// tagged addresses, a node-level check and an HTTP service check with its definition.
fn snapshot_fixture_node_a() -> CatalogOp {
    let definition = CheckDefinition {
        http: "http://10.0.0.1:8080/health".into(),
        header: vec![("X-Probe".into(), vec!["a".into(), "b".into()])],
        method: "GET".into(),
        interval_ns: 10_000_000_000,
        timeout_ns: 1_000_000_000,
        deregister_critical_service_after_ns: 60_000_000_000,
        ..Default::default()
    };
    CatalogOp::Register(Box::new(Registration {
        id: "9b2d4c1e-57a5-4a2e-8f63-8f1f1f0b6a01".into(),
        node: "Node-A".into(),
        address: "10.0.0.1".into(),
        datacenter: "dc1".into(),
        tagged_addresses: vec![
            ("wan".into(), "192.0.2.1".into()),
            ("lan".into(), "10.0.0.1".into()),
        ],
        node_meta: vec![("rack".into(), "r1".into())],
        service: Some(ServiceRegistration {
            id: "Web-1".into(),
            name: "Web".into(),
            tags: vec!["v1".into(), "Primary".into()],
            address: "10.0.0.11".into(),
            tagged_addresses: vec![("lan".into(), "10.0.0.11".into(), 8080)],
            meta: vec![("version".into(), "1.2.3".into())],
            port: 8080,
            weights: Some(Weights {
                passing: 3,
                warning: 1,
            }),
            enable_tag_override: true,
            ..Default::default()
        }),
        checks: vec![
            CheckRegistration {
                check_id: "serfHealth".into(),
                name: "Serf Health Status".into(),
                status: "passing".into(),
                output: "Agent alive and reachable".into(),
                ..Default::default()
            },
            CheckRegistration {
                check_id: "service:Web-1".into(),
                name: "Web HTTP".into(),
                status: "warning".into(),
                notes: "slow".into(),
                output: "HTTP GET: 429".into(),
                service_id: "Web-1".into(),
                kind: "http".into(),
                interval: "10s".into(),
                timeout: "1s".into(),
                definition: Some(definition),
                ..Default::default()
            },
        ],
        ..Default::default()
    }))
}

/// The catalog writes [`snapshot_fixture_tables`] applies: every field of a registration
/// set somewhere.
fn snapshot_fixture_ops() -> Vec<CatalogOp> {
    vec![
        snapshot_fixture_node_a(),
        CatalogOp::Register(Box::new(Registration {
            node: "node-b".into(),
            address: "10.0.0.2".into(),
            datacenter: "dc1".into(),
            service: Some(ServiceRegistration {
                id: "web-2".into(),
                name: "web".into(),
                tags: vec!["v1".into(), "Primary".into()],
                port: 8080,
                ..Default::default()
            }),
            checks: vec![CheckRegistration {
                check_id: "custom".into(),
                name: "custom".into(),
                status: "critical".into(),
                kind: "my-own-kind".into(),
                exposed_port: 21500,
                ..Default::default()
            }],
            ..Default::default()
        })),
        CatalogOp::Register(Box::new(Registration {
            node: "node-b".into(),
            address: "10.0.0.2".into(),
            datacenter: "dc1".into(),
            service: Some(ServiceRegistration {
                kind: "connect-proxy".into(),
                id: "web-2-proxy".into(),
                name: "web-sidecar-proxy".into(),
                socket_path: "/run/proxy.sock".into(),
                proxy_json: Some(r#"{"DestinationServiceName":"web"}"#.into()),
                ..Default::default()
            }),
            ..Default::default()
        })),
        CatalogOp::Register(Box::new(Registration {
            node: "node-c".into(),
            address: "10.0.0.3".into(),
            datacenter: "dc1".into(),
            service: Some(ServiceRegistration {
                name: "gone".into(),
                ..Default::default()
            }),
            ..Default::default()
        })),
        CatalogOp::Deregister {
            node: "node-c".into(),
            service_id: "gone".into(),
            check_id: String::new(),
        },
    ]
}

#[test]
fn a_borrowed_decode_is_the_same_command_and_applies_the_same() {
    // What every server applies (`Command::decode_borrowed`, the text borrowed from the
    // entry) must be what was encoded, field for field, and write the same rows as the
    // owned command: the same snapshot bytes and the same changes.
    let mut ops = snapshot_fixture_ops();
    ops.push(CatalogOp::Batch(snapshot_fixture_ops()[..2].to_vec()));
    let (mut owned, mut borrowed) = (Tables::default(), Tables::default());
    for (i, op) in ops.into_iter().enumerate() {
        let index = i as u64 + 1;
        let command = Command::Catalog(op);
        let bytes = command.encode();
        let decoded = Command::decode_borrowed(&bytes).unwrap();
        assert_eq!(decoded.encode_as_entry(), bytes, "{command:?}");
        assert_eq!(Command::decode(&bytes).unwrap(), command);
        let (mut owned_changes, mut borrowed_changes) = (Vec::new(), Vec::new());
        let result = owned.apply(index, &command, &mut owned_changes);
        assert_eq!(
            borrowed.apply(index, &decoded, &mut borrowed_changes),
            result
        );
        assert_eq!(borrowed_changes, owned_changes);
    }
    borrowed.catalog.check_invariants();
    assert_eq!(borrowed.to_snapshot_bytes(), owned.to_snapshot_bytes());
    assert!(!borrowed.catalog.nodes.is_empty());
}

/// `snapshot_fixture_tables()` as the store's snapshot, written by praetor at commit 48ab5e5
/// (before the catalog's rows were packed into one-word strings and lists, and before the ACL
/// tables existed).
const SNAPSHOT_WRITTEN_BEFORE: &[u8] = include_bytes!("testdata/snapshot-format-1.bin");
/// The same state as written by main at b2ea180, once the ACL tables were appended (format
/// 1, ACL tables as a trailing field): before stored coordinates, the newer check fields,
/// the autopilot configuration and the prepared-query table existed.
const SNAPSHOT_WRITTEN_WITH_ACL: &[u8] = include_bytes!("testdata/snapshot-format-1-acl.bin");
/// `snapshot_fixture_tables()` plus one prepared query, as written before the agent CA:
/// format 1 with every addition after the ACL tables (stored coordinates, check fields,
/// autopilot, prepared queries) a defaulted trailing field, which older snapshots restore
/// without (`#[serde(default)]`).
const SNAPSHOT_WRITTEN_WITH_QUERIES: &[u8] =
    include_bytes!("testdata/snapshot-format-1-queries.bin");
/// The same state as written before the federation states: format 2, the agent CA (none
/// here), the mesh tables (config entries, the Connect CA; empty here) and the gateway
/// services appended, 16 table indexes.
const SNAPSHOT_WRITTEN_FORMAT_2: &[u8] = include_bytes!("testdata/snapshot-format-2.bin");
/// The same state as written before the peering tables: format 3, 17 table indexes and the
/// federation states (empty here) appended.
const SNAPSHOT_WRITTEN_FORMAT_3: &[u8] = include_bytes!("testdata/snapshot-format-3.bin");
/// The same state as written before the imported services: format 4, 19 table indexes and
/// the peering tables (empty here) appended.
const SNAPSHOT_WRITTEN_FORMAT_4: &[u8] = include_bytes!("testdata/snapshot-format-4.bin");
/// The same state as today's code writes it: format 5, 20 table indexes and the imported
/// services (none here) at the end of the peering tables.
const SNAPSHOT_WRITTEN_NOW: &[u8] = include_bytes!("testdata/snapshot-format-5.bin");

/// The fixture's catalog with a prepared query written after it.
fn snapshot_fixture_tables_with_query() -> Tables {
    use crate::store::query::{Failover, PreparedQuery, QueryOp, ServiceQuery};
    let mut tables = snapshot_fixture_tables();
    let mut changes = Vec::new();
    let query = PreparedQuery {
        id: "5c1d7e2a-0b9f-4c3e-8a71-2f6d9e4b1c08".into(),
        name: "web-near".into(),
        service: ServiceQuery {
            service: "web".into(),
            failover: Failover {
                nearest_n: 2,
                datacenters: Some(vec!["dc2".into()]),
                targets: None,
            },
            only_passing: true,
            tags: Some(vec!["primary".into(), "!canary".into()]),
            node_meta: Some(vec![("rack".into(), "r1".into())]),
            ..Default::default()
        },
        dns_ttl: "10s".into(),
        ..Default::default()
    };
    let index = tables.index + 1;
    let result = tables.apply(
        index,
        &Command::Query(QueryOp::Set {
            query: Box::new(query),
            create: true,
        }),
        &mut changes,
    );
    assert_eq!(result, CommandResult::Query(QueryResult::Written));
    tables
}

#[test]
fn snapshots_written_by_earlier_versions_restore_and_the_format_is_unchanged() {
    let fresh = snapshot_fixture_tables_with_query();
    if std::env::var_os("PRAETOR_WRITE_SNAPSHOT_FIXTURE").is_some() {
        // Only for an intended, compatible change (a trailing table with a default): writes
        // the new pinned bytes; an incompatible one must bump SNAPSHOT_FORMAT_VERSION instead.
        std::fs::write(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/store/catalog/testdata/snapshot-format-5.bin"
            ),
            fresh.to_snapshot_bytes(),
        )
        .unwrap();
    }
    assert_eq!(
        fresh.to_snapshot_bytes(),
        SNAPSHOT_WRITTEN_NOW,
        "the snapshot format changed; bump SNAPSHOT_FORMAT_VERSION and keep reading the old one"
    );
    let now = Tables::from_snapshot_bytes(SNAPSHOT_WRITTEN_NOW).unwrap();
    now.queries.check_invariants();
    assert_eq!(now.queries.len(), 1);
    assert_eq!(now.to_snapshot_bytes(), SNAPSHOT_WRITTEN_NOW);
    // Format 4 restores to the same state, no imported services and their table index 0.
    let format_4 = Tables::from_snapshot_bytes(SNAPSHOT_WRITTEN_FORMAT_4).unwrap();
    assert!(format_4.peering.imports.is_empty());
    assert_eq!(
        format_4.table_index(crate::store::Table::ImportedServices),
        0
    );
    assert_eq!(format_4.to_snapshot_bytes(), SNAPSHOT_WRITTEN_NOW);
    // Format 3 restores to the same state, the peering tables empty and their table
    // indexes 0.
    let format_3 = Tables::from_snapshot_bytes(SNAPSHOT_WRITTEN_FORMAT_3).unwrap();
    assert!(format_3.peering.peerings.is_empty());
    assert_eq!(format_3.table_index(crate::store::Table::Peerings), 0);
    assert_eq!(format_3.to_snapshot_bytes(), SNAPSHOT_WRITTEN_NOW);
    // Format 2 restores to the same state, the federation states empty and their table
    // index 0.
    let format_2 = Tables::from_snapshot_bytes(SNAPSHOT_WRITTEN_FORMAT_2).unwrap();
    assert!(format_2.federation.states.is_empty());
    assert_eq!(
        format_2.table_index(crate::store::Table::FederationStates),
        0
    );
    assert_eq!(format_2.to_snapshot_bytes(), SNAPSHOT_WRITTEN_NOW);
    // Format 1 with the prepared query restores to the same state, the agent CA absent.
    let with_queries = Tables::from_snapshot_bytes(SNAPSHOT_WRITTEN_WITH_QUERIES).unwrap();
    assert_eq!(with_queries.agent_ca, None);
    assert_eq!(with_queries.to_snapshot_bytes(), SNAPSHOT_WRITTEN_NOW);
    // Both older formats restore to the catalog alone, with no prepared query.
    let catalog_only = snapshot_fixture_tables().to_snapshot_bytes();
    let with_acl = Tables::from_snapshot_bytes(SNAPSHOT_WRITTEN_WITH_ACL).unwrap();
    assert!(with_acl.queries.is_empty());
    assert_eq!(with_acl.to_snapshot_bytes(), catalog_only);
    let fresh = snapshot_fixture_tables();
    let restored = Tables::from_snapshot_bytes(SNAPSHOT_WRITTEN_BEFORE).unwrap();
    restored.catalog.check_invariants();
    assert!(restored.queries.is_empty());
    assert_eq!(restored.to_snapshot_bytes(), catalog_only);
    for service in ["web", "web-sidecar-proxy"] {
        let rows = |t: &Tables| {
            check_service_nodes(t, service)
                .iter()
                .map(|r| {
                    let checks: Vec<HealthCheck> = r.checks().map(|c| (**c).clone()).collect();
                    ((**r.node).clone(), (**r.service).clone(), checks)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(rows(&restored), rows(&fresh), "{service}");
        assert!(!rows(&fresh).is_empty());
    }
    assert_eq!(
        restored.catalog.service_extinction_index,
        fresh.catalog.service_extinction_index
    );
    assert!(restored.catalog.service_extinction_index > 0);
}

// A registration of a service with its own checks builds the instance's view once
// (`upsert_service` takes the checks along); the same registration split in two — the
// service, then the checks — in one batch at the same index goes the way of separate
// writes. Rows, views, indexes and change sets must be the same; each test below is one
// kind of combined write.

/// Two `web` instances and a `db` one with service checks, and a node check on `n1`.
fn combined_write_base() -> Fixture {
    let mut base = Fixture::new();
    base.instance(
        "n1",
        service("web-1", "web", &["v1"]),
        vec![
            check("c1", "web-1", "passing"),
            check("c3", "web-1", "passing"),
        ],
    );
    base.instance(
        "n1",
        service("db-1", "db", &[]),
        vec![check("d1", "db-1", "passing")],
    );
    base.instance(
        "n2",
        service("web-2", "web", &[]),
        vec![check("c1", "web-2", "passing")],
    );
    let mut node_check = node_reg("n1", "10.0.0.1");
    node_check.checks = vec![check("serf", "", "passing")];
    assert_eq!(
        base.register(node_check),
        CommandResult::Catalog(CatalogResult::Written)
    );
    base
}

/// A registration on `n1` of one service with the checks given.
fn on_n1(svc: ServiceRegistration, checks: Vec<CheckRegistration>) -> Registration {
    let mut reg = node_reg("n1", "10.0.0.1");
    reg.service = Some(svc);
    reg.checks = checks;
    reg
}

/// Applies `reg` whole on one copy of the base and split (service, then checks, in one
/// batch) on another, and asserts the two copies agree on everything a reader sees.
fn assert_combined_write_is_split_write(reg: Registration) {
    use std::collections::HashSet;
    let base = combined_write_base();
    let fork = || Fixture {
        tables: base.tables.clone(),
        next_index: base.next_index,
        changes: Vec::new(),
    };
    let (mut together, mut split) = (fork(), fork());
    let mut service_only = reg.clone();
    service_only.checks.clear();
    let mut checks_only = reg.clone();
    checks_only.service = None;
    let result = together.register(reg);
    assert_eq!(result, CommandResult::Catalog(CatalogResult::Written));
    let batch = CatalogOp::Batch(vec![
        CatalogOp::Register(Box::new(service_only)),
        CatalogOp::Register(Box::new(checks_only)),
    ]);
    assert_eq!(split.run(batch), result);
    assert_eq!(
        together.tables.to_snapshot_bytes(),
        split.tables.to_snapshot_bytes()
    );
    assert_eq!(together.tables.table_indexes, split.tables.table_indexes);
    let set = |f: &Fixture| f.changes.iter().cloned().collect::<HashSet<Change>>();
    assert_eq!(set(&together), set(&split));
    assert_eq!(
        together.changes.len(),
        set(&together).len(),
        "no duplicates"
    );
    for name in ["web", "www", "db"] {
        assert_eq!(
            read::service_index(&together.tables, name),
            read::service_index(&split.tables, name),
            "{name}"
        );
        let views = |f: &Fixture| {
            check_service_nodes(&f.tables, name)
                .iter()
                .map(|r| {
                    let checks: Vec<HealthCheck> = r.checks().map(|c| (**c).clone()).collect();
                    ((**r.service).clone(), checks, r.all_passing())
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(views(&together), views(&split), "{name}");
    }
}

#[test]
fn a_new_instance_with_a_new_check_written_together_is_the_split_write() {
    // The churn's registration.
    assert_combined_write_is_split_write(on_n1(
        service("web-9", "web", &[]),
        vec![check("c9", "web-9", "passing")],
    ));
}

#[test]
fn new_tags_with_changed_new_and_unchanged_checks_written_together_is_the_split_write() {
    // The existing checks are relabelled; given out of order.
    assert_combined_write_is_split_write(on_n1(
        service("web-1", "web", &["v2"]),
        vec![
            check("c2", "web-1", "warning"),
            check("c1", "web-1", "critical"),
            check("c3", "web-1", "passing"),
        ],
    ));
}

#[test]
fn a_renamed_service_with_its_check_twice_written_together_is_the_split_write() {
    assert_combined_write_is_split_write(on_n1(
        service("web-1", "www", &["v1"]),
        vec![
            check("c1", "web-1", "passing"),
            check("c1", "web-1", "warning"),
        ],
    ));
}

#[test]
fn an_unchanged_service_with_a_changed_check_written_together_is_the_split_write() {
    assert_combined_write_is_split_write(on_n1(
        service("web-1", "web", &["v1"]),
        vec![check("c1", "web-1", "warning")],
    ));
}

#[test]
fn checks_not_taken_along_written_together_are_the_split_write() {
    // A check held by another service, a node check.
    assert_combined_write_is_split_write(on_n1(
        service("web-1", "web", &["v3"]),
        vec![check("d1", "web-1", "passing")],
    ));
    assert_combined_write_is_split_write(on_n1(
        service("web-1", "web", &["v3"]),
        vec![check("serf", "web-1", "passing")],
    ));
    assert_combined_write_is_split_write(on_n1(
        service("web-1", "web", &["v3"]),
        vec![check("c1", "web-1", "passing"), check("n", "", "passing")],
    ));
}
