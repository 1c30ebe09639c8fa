//! The gateway-services table against Consul's rules, driven through `Tables::apply` as
//! the servers drive it: entries and registrations in, rows and change keys out.

use super::*;
use crate::store::catalog::{CatalogOp, Registration, ServiceRegistration};
use crate::store::mesh::config_entry::{ConfigEntry, ConfigEntryOp, EntryBody};
use crate::store::{Command, CommandResult};

struct Fixture {
    tables: Tables,
    index: u64,
    changes: Vec<Change>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            tables: Tables::default(),
            index: 0,
            changes: Vec::new(),
        }
    }

    fn apply(&mut self, command: Command) -> CommandResult {
        self.index += 1;
        self.changes.clear();
        let result = self.tables.apply(self.index, &command, &mut self.changes);
        self.check();
        result
    }

    fn entry(&mut self, kind: ConfigKind, name: &str, json: &str, protocol: &str) {
        let entry = ConfigEntry {
            kind,
            name: name.into(),
            body: EntryBody::Json(json.into()),
            protocol: protocol.into(),
            create_index: 0,
            modify_index: 0,
        };
        let result = self.apply(Command::ConfigEntry(ConfigEntryOp::Set {
            entry: Box::new(entry),
            cas: None,
        }));
        assert_eq!(result, CommandResult::Bool(true));
    }

    fn delete_entry(&mut self, kind: ConfigKind, name: &str) {
        self.apply(Command::ConfigEntry(ConfigEntryOp::Delete {
            kind,
            name: name.into(),
            cas: None,
        }));
    }

    fn register(&mut self, node: &str, id: &str, name: &str, kind: &str, extra: &str) {
        let proxy_json =
            (kind == "connect-proxy").then(|| format!(r#"{{"DestinationServiceName":"{extra}"}}"#));
        let reg = Registration {
            node: node.into(),
            address: "10.0.0.1".into(),
            datacenter: "dc1".into(),
            service: Some(ServiceRegistration {
                kind: kind.into(),
                id: id.into(),
                name: name.into(),
                port: 80,
                proxy_json,
                connect_native: extra == "native",
                ..Default::default()
            }),
            ..Default::default()
        };
        self.apply(Command::Catalog(CatalogOp::Register(Box::new(reg))));
    }

    fn deregister(&mut self, node: &str, id: &str) {
        self.apply(Command::Catalog(CatalogOp::Deregister {
            node: node.into(),
            service_id: id.into(),
            check_id: String::new(),
        }));
    }

    /// `(service, port, from wildcard, service kind)` of a gateway's visible rows.
    fn rows(&self, gateway: &str) -> Vec<(String, u16, bool, String)> {
        gateway_rows(&self.tables, gateway)
            .iter()
            .map(|r| {
                (
                    r.service.to_string(),
                    r.port,
                    r.from_wildcard,
                    r.service_kind.to_string(),
                )
            })
            .collect()
    }

    fn announced(&self, key: &str) -> bool {
        self.changes
            .iter()
            .any(|c| c.table == Table::GatewayServices && c.key == ChangeKey::Key(Arc::from(key)))
    }

    /// The module's invariants, after every apply.
    fn check(&self) {
        let table = &self.tables.gateways;
        for (key, row) in &table.rows {
            assert_eq!(*key.gateway, *fold(&row.gateway));
            assert_eq!(*key.service, *fold(&row.service));
            assert_eq!(key.port, row.port);
            assert!(row.create_index <= row.modify_index);
            assert!(row.modify_index <= self.tables.table_index(Table::GatewayServices));
            assert!(table.by_service[&key.service].contains(&key.gateway));
            assert!(table.gateway_index.contains_key(&key.gateway));
            assert!(table.service_index.contains_key(&key.service));
        }
        for (service, gateways) in &table.by_service {
            for gateway in gateways {
                assert!(rows_of(table, gateway).any(|(k, _)| k.service == *service));
            }
        }
        assert!(table
            .gateway_index
            .keys()
            .all(|g| rows_of(table, g).next().is_some()));
        assert!(table
            .service_index
            .keys()
            .all(|s| table.by_service.contains_key(s)));
    }
}

const INGRESS: &str = r#"{"Listeners":[
    {"Port":8080,"Protocol":"http","Services":[{"Name":"*","Hosts":null}]},
    {"Port":9000,"Protocol":"tcp","Services":[{"Name":"db","Hosts":null}]},
    {"Port":8443,"Protocol":"http","Services":[{"Name":"api","Hosts":["api.example.com"]}]}]}"#;

#[test]
fn an_ingress_entry_links_its_listed_services_and_a_wildcard_the_http_mesh_services() {
    let mut f = Fixture::new();
    f.entry(
        ConfigKind::ProxyDefaults,
        "global",
        r#"{"Config":{"protocol":"http"}}"#,
        "http",
    );
    f.entry(
        ConfigKind::ServiceDefaults,
        "db",
        r#"{"Protocol":"tcp"}"#,
        "tcp",
    );
    f.entry(ConfigKind::IngressGateway, "ig", INGRESS, "");
    // Listed services have rows before they exist.
    assert_eq!(
        f.rows("ig"),
        [
            ("api".to_string(), 8443, false, String::new()),
            ("db".to_string(), 9000, false, String::new()),
        ]
    );
    assert!(f.announced("gateway/ig") && f.announced("service/api"));
    let api = &gateway_rows(&f.tables, "IG")[0];
    assert_eq!(api.hosts, vec![ArcStr::from("api.example.com")]);
    assert_eq!(
        (&*api.protocol, api.gateway_kind),
        ("http", GatewayKind::Ingress)
    );
    assert_eq!(api.create_index, 3);

    // A typical service joins the wildcard only once something fronts it in the mesh.
    f.register("n1", "web-1", "web", "", "");
    assert_eq!(f.rows("ig").len(), 2);
    let index_before = gateway_index(&f.tables, "ig");
    f.register(
        "n1",
        "web-proxy",
        "web-sidecar-proxy",
        "connect-proxy",
        "web",
    );
    assert!(f.announced("service/web"), "the proxy's destination moved");
    assert_eq!(
        f.rows("ig")[2],
        ("web".to_string(), 8080, true, String::new())
    );
    assert!(gateway_index(&f.tables, "ig") > index_before);
    assert_eq!(service_index(&f.tables, "web"), f.index);
    // A native tcp service stays out of an http wildcard; `consul` never joins.
    f.register("n1", "db-1", "db", "", "native");
    f.register("n1", "consul", "consul", "", "native");
    assert_eq!(f.rows("ig").len(), 3);
    // Linked rows by service, for health/ingress and DNS.
    let linked = linked_rows(&f.tables, "WEB", GatewayKind::Ingress);
    assert_eq!(linked.len(), 1);
    assert_eq!(&*linked[0].gateway, "ig");
    assert!(linked_rows(&f.tables, "web", GatewayKind::Terminating).is_empty());

    // The proxy goes: the wildcard row for web goes with it.
    f.deregister("n1", "web-proxy");
    assert!(f.announced("service/web"));
    assert_eq!(f.rows("ig").len(), 2);
    assert!(linked_rows(&f.tables, "web", GatewayKind::Ingress).is_empty());
    // A service-defaults entry taking web to tcp keeps it out even with its proxy back.
    f.entry(
        ConfigKind::ServiceDefaults,
        "web",
        r#"{"Protocol":"tcp"}"#,
        "tcp",
    );
    f.register(
        "n1",
        "web-proxy",
        "web-sidecar-proxy",
        "connect-proxy",
        "web",
    );
    assert_eq!(f.rows("ig").len(), 2);
    f.delete_entry(ConfigKind::ServiceDefaults, "web");
    assert_eq!(f.rows("ig").len(), 3, "back to the http default");

    // The entry goes: every row goes, and the index stays monotonic.
    let before = gateway_index(&f.tables, "ig");
    f.delete_entry(ConfigKind::IngressGateway, "ig");
    assert!(f.rows("ig").is_empty());
    assert!(f.tables.gateways.rows.is_empty());
    assert!(gateway_index(&f.tables, "ig") > before);
    assert!(f.announced("gateway/ig") && f.announced("service/web"));
}

#[test]
fn a_terminating_entry_carries_tls_settings_and_service_kinds() {
    let mut f = Fixture::new();
    f.entry(
        ConfigKind::TerminatingGateway,
        "tg",
        r#"{"Services":[
            {"Name":"billing","CAFile":"/ca.pem","CertFile":"/c.pem","KeyFile":"/k.pem","SNI":"billing.example"},
            {"Name":"*","CAFile":"/wild-ca.pem"}]}"#,
        "",
    );
    assert_eq!(
        f.rows("tg"),
        [("billing".to_string(), 0, false, String::new())]
    );
    let billing = gateway_rows(&f.tables, "tg")[0].clone();
    assert_eq!(
        (
            &*billing.ca_file,
            &*billing.cert_file,
            &*billing.key_file,
            &*billing.sni
        ),
        ("/ca.pem", "/c.pem", "/k.pem", "billing.example")
    );
    // Registering billing makes its kind `service`; the row keeps its creation index.
    f.register("n1", "billing-1", "billing", "", "");
    let billing = gateway_rows(&f.tables, "tg")[0].clone();
    assert_eq!(&*billing.service_kind, "service");
    assert!(billing.create_index < billing.modify_index);
    // The wildcard takes plain services, with its own settings; a native-only one stays out.
    f.register("n1", "legacy-1", "Legacy", "", "");
    f.register("n1", "mesh-1", "meshy", "", "native");
    assert_eq!(
        f.rows("tg"),
        [
            ("billing".to_string(), 0, false, "service".to_string()),
            ("Legacy".to_string(), 0, true, "service".to_string()),
        ]
    );
    assert_eq!(&*gateway_rows(&f.tables, "tg")[1].ca_file, "/wild-ca.pem");
    // A destination defined by service-defaults joins the wildcard without instances.
    f.entry(
        ConfigKind::ServiceDefaults,
        "external",
        r#"{"Protocol":"","Destination":{"Addresses":["example.com"],"Port":443}}"#,
        "",
    );
    assert_eq!(
        f.rows("tg")[1],
        ("external".to_string(), 0, true, "destination".to_string())
    );
    // The last instance leaves: the wildcard row goes, the listed row stays, unknown kind.
    f.deregister("n1", "legacy-1");
    f.deregister("n1", "billing-1");
    assert_eq!(
        f.rows("tg"),
        [
            ("billing".to_string(), 0, false, String::new()),
            ("external".to_string(), 0, true, "destination".to_string()),
        ]
    );
    assert_eq!(
        linked_rows(&f.tables, "billing", GatewayKind::Terminating).len(),
        1
    );
    // An unrelated catalog write touches nothing of the table.
    let table_index = f.tables.table_index(Table::GatewayServices);
    f.register("n2", "x", "unrelated", "connect-proxy", "nothing-listed");
    assert_eq!(f.tables.table_index(Table::GatewayServices), table_index);
}

#[test]
fn the_table_survives_a_snapshot() {
    let mut f = Fixture::new();
    f.entry(ConfigKind::IngressGateway, "ig", INGRESS, "");
    let restored = Tables::from_snapshot_bytes(&f.tables.to_snapshot_bytes()).unwrap();
    assert_eq!(gateway_rows(&restored, "ig").len(), 2);
    assert_eq!(
        restored.gateways.by_service.len(),
        f.tables.gateways.by_service.len()
    );
    assert_eq!(
        gateway_index(&restored, "ig"),
        gateway_index(&f.tables, "ig")
    );
}
