//! `/v1/discovery-chain/<service>`: compiles a service's `service-router`,
//! `service-splitter` and `service-resolver` entries into Consul's chain shape — a start
//! node, router/splitter/resolver nodes keyed `<type>:<name>`, and the targets every
//! resolver ends at, with failover and redirects followed.
//!
//! Names are Consul's: a target ID is `[<subset>.]<service>.default.default.<dc>`; its SNI
//! is `[<subset>.]<service>.default.<dc>.internal.<trust domain>`. A router ends with
//! Consul's catch-all route to the service itself. Routers and splitters apply only to an
//! HTTP-family protocol (the store refuses them otherwise); redirect loops end with an
//! error, as Consul's compiler reports them. Pure.

use super::config_entry::doc::Doc;
use super::config_entry::fields_of;
use crate::proto::duration::format_go_duration;
use crate::store::mesh::config_entry::{self, is_http_family, service_protocol, ConfigKind};
use crate::store::Tables;
use serde_json::Value;
use std::collections::BTreeMap;

/// Consul's default connect timeout of a resolver without one.
pub const CONNECT_TIMEOUT_DEFAULT_NS: i64 = 5_000_000_000;
/// How many redirects a chain may follow before it is a loop.
pub const REDIRECTS_MAX: usize = 16;
/// Most nodes one chain may have.
pub const NODES_MAX: usize = 1024;

/// Overrides a caller may give (`POST`): Consul's `OverrideConnectTimeout`,
/// `OverrideProtocol`, `OverrideMeshGateway` (a proxy passes its registration's
/// `MeshGateway`, the upstream's own winning over the proxy's).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub connect_timeout_ns: Option<i64>,
    pub protocol: Option<String>,
    pub mesh_gateway: MeshGatewayMode,
}

/// How traffic to another datacenter's target travels (Consul's `MeshGatewayMode`):
/// straight to its instances, through this datacenter's mesh gateways, or through the
/// target datacenter's. `Default` defers to the next layer of configuration; a chain's
/// targets end with `Default` only when nothing chose (a proxy then goes direct, as
/// `None`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MeshGatewayMode {
    #[default]
    Default,
    None,
    Local,
    Remote,
}

impl MeshGatewayMode {
    /// Consul's `ValidateMeshGatewayMode`: the four spellings, anything else refused with
    /// Consul's message.
    pub fn parse(text: &str) -> Result<MeshGatewayMode, String> {
        match text {
            "" => Ok(MeshGatewayMode::Default),
            "none" => Ok(MeshGatewayMode::None),
            "local" => Ok(MeshGatewayMode::Local),
            "remote" => Ok(MeshGatewayMode::Remote),
            other => Err(format!("Invalid Mesh Gateway Mode: {other:?}")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MeshGatewayMode::Default => "",
            MeshGatewayMode::None => "none",
            MeshGatewayMode::Local => "local",
            MeshGatewayMode::Remote => "remote",
        }
    }

    /// `self` unless it defers, then `fallback` (Consul's `OverlayWith`, reversed).
    pub fn or(self, fallback: MeshGatewayMode) -> MeshGatewayMode {
        if self == MeshGatewayMode::Default {
            fallback
        } else {
            self
        }
    }

    /// The mode a config entry's `MeshGateway` object names; one that does not parse
    /// (the store keeps entries as written) defers.
    fn of_entry(entry: Option<&Value>) -> MeshGatewayMode {
        entry
            .and_then(|e| e.get("MeshGateway"))
            .map(|m| text(m, "Mode"))
            .and_then(|mode| MeshGatewayMode::parse(mode).ok())
            .unwrap_or_default()
    }
}

struct Compiler<'t> {
    tables: &'t Tables,
    /// Where the chain is evaluated (`compile-dc`): a target without a datacenter is here.
    datacenter: String,
    /// Where the chain's caller runs: a target here never goes through a mesh gateway.
    use_in_datacenter: String,
    trust_domain: String,
    nodes: BTreeMap<String, Doc>,
    targets: BTreeMap<String, Doc>,
    customized: bool,
    overrides: Overrides,
    /// The chain's protocol: splitters and routers apply only to the HTTP family.
    protocol: String,
}

fn entry_fields(tables: &Tables, kind: ConfigKind, name: &str) -> Option<Value> {
    config_entry::get(tables, kind, name).map(|e| fields_of(e))
}

/// Where a resolver entry's `Redirect` sends `(service, subset, datacenter)`, when it sends
/// it anywhere else (unset fields keep the service and datacenter; the subset is replaced).
fn redirect_elsewhere(
    entry: &Value,
    service: &str,
    subset: &str,
    datacenter: &str,
) -> Option<(String, String, String)> {
    let redirect = entry.get("Redirect").filter(|r| r.is_object())?;
    let to_service = match text(redirect, "Service") {
        "" => service,
        s => s,
    };
    let to_subset = text(redirect, "ServiceSubset");
    let to_dc = match text(redirect, "Datacenter") {
        "" => datacenter,
        dc => dc,
    };
    if to_service == service && to_subset == subset && to_dc == datacenter {
        return None;
    }
    Some((
        to_service.to_string(),
        to_subset.to_string(),
        to_dc.to_string(),
    ))
}

fn text<'v>(value: &'v Value, name: &str) -> &'v str {
    value.get(name).and_then(Value::as_str).unwrap_or_default()
}

impl Compiler<'_> {
    fn target_id(&self, service: &str, subset: &str, datacenter: &str) -> String {
        if subset.is_empty() {
            format!("{service}.default.default.{datacenter}")
        } else {
            format!("{subset}.{service}.default.default.{datacenter}")
        }
    }

    fn sni(&self, service: &str, subset: &str, datacenter: &str) -> String {
        let base = format!(
            "{service}.default.{datacenter}.internal.{}",
            self.trust_domain
        );
        if subset.is_empty() {
            base
        } else {
            format!("{subset}.{base}")
        }
    }

    /// Registers the target of `service`/`subset` in `datacenter`; returns its ID.
    /// The mesh gateway mode of a target of `service` in `datacenter`, as Consul's
    /// compiler picks it: none in the caller's own datacenter; else service-defaults',
    /// then proxy-defaults', and a caller's override above both.
    fn mesh_gateway_mode(&mut self, service: &str, datacenter: &str) -> MeshGatewayMode {
        if datacenter == self.use_in_datacenter {
            return MeshGatewayMode::Default;
        }
        let service_defaults = entry_fields(self.tables, ConfigKind::ServiceDefaults, service);
        let proxy_defaults = entry_fields(self.tables, ConfigKind::ProxyDefaults, "global");
        let configured = MeshGatewayMode::of_entry(service_defaults.as_ref())
            .or(MeshGatewayMode::of_entry(proxy_defaults.as_ref()));
        let chosen = self.overrides.mesh_gateway.or(configured);
        if chosen != configured {
            self.customized = true;
        }
        chosen
    }

    fn target(&mut self, service: &str, subset: &str, datacenter: &str, timeout_ns: i64) -> String {
        let id = self.target_id(service, subset, datacenter);
        if !self.targets.contains_key(&id) {
            let mode = self.mesh_gateway_mode(service, datacenter);
            let mesh_gateway = match mode {
                MeshGatewayMode::Default => Doc::Obj(Vec::new()),
                mode => Doc::Obj(vec![("Mode".into(), Doc::Str(mode.as_str().into()))]),
            };
            let subset_doc = entry_fields(self.tables, ConfigKind::ServiceResolver, service)
                .and_then(|r| r.get("Subsets").and_then(|s| s.get(subset)).cloned())
                .map(|s| {
                    let mut fields = Vec::new();
                    if !text(&s, "Filter").is_empty() {
                        fields.push((
                            "Filter".to_string(),
                            Doc::Str(text(&s, "Filter").to_string()),
                        ));
                    }
                    if s.get("OnlyPassing").and_then(Value::as_bool) == Some(true) {
                        fields.push(("OnlyPassing".to_string(), Doc::Bool(true)));
                    }
                    Doc::Obj(fields)
                })
                .unwrap_or(Doc::Obj(Vec::new()));
            let sni = self.sni(service, subset, datacenter);
            let doc = Doc::Obj(vec![
                ("ID".into(), Doc::Str(id.clone())),
                ("Service".into(), Doc::Str(service.to_string())),
                ("ServiceSubset".into(), Doc::Str(subset.to_string())),
                ("Namespace".into(), Doc::Str("default".into())),
                ("Partition".into(), Doc::Str("default".into())),
                ("Datacenter".into(), Doc::Str(datacenter.to_string())),
                ("MeshGateway".into(), mesh_gateway),
                ("Subset".into(), subset_doc),
                (
                    "ConnectTimeout".into(),
                    Doc::Str(format_go_duration(timeout_ns)),
                ),
                ("SNI".into(), Doc::Str(sni.clone())),
                ("Name".into(), Doc::Str(sni)),
            ]);
            self.targets.insert(id.clone(), doc);
        }
        id
    }

    /// The resolver node for `service`/`subset`, following redirects; returns its key.
    fn resolver(
        &mut self,
        service: &str,
        subset: &str,
        datacenter: &str,
        depth: usize,
    ) -> Result<String, String> {
        if depth > REDIRECTS_MAX {
            return Err(format!(
                "detected circular resolver redirect: {service:?} was redirected more than {REDIRECTS_MAX} times"
            ));
        }
        let entry = entry_fields(self.tables, ConfigKind::ServiceResolver, service);
        if let Some(entry) = &entry {
            self.customized = true;
            if let Some((to_service, to_subset, to_dc)) =
                redirect_elsewhere(entry, service, subset, datacenter)
            {
                return self.resolver(&to_service, &to_subset, &to_dc, depth + 1);
            }
        }
        let subset = match (subset, &entry) {
            ("", Some(e)) => text(e, "DefaultSubset").to_string(),
            (s, _) => s.to_string(),
        };
        let timeout_ns = self.overrides.connect_timeout_ns.unwrap_or_else(|| {
            entry
                .as_ref()
                .and_then(|e| e.get("ConnectTimeout").and_then(Value::as_str))
                .and_then(|t| crate::proto::duration::parse_go_duration_nanos(t).ok())
                .filter(|ns| *ns > 0)
                .unwrap_or(CONNECT_TIMEOUT_DEFAULT_NS)
        });
        let target = self.target(service, &subset, datacenter, timeout_ns);
        let key = format!("resolver:{target}");
        if self.nodes.contains_key(&key) {
            return Ok(key);
        }
        let mut resolver = vec![
            (
                "ConnectTimeout".to_string(),
                Doc::Str(format_go_duration(timeout_ns)),
            ),
            ("Default".to_string(), Doc::Bool(entry.is_none())),
            ("Target".to_string(), Doc::Str(target.clone())),
        ];
        let failover = entry.as_ref().and_then(|e| {
            let all = e.get("Failover")?.as_object()?;
            all.get(subset.as_str()).or_else(|| all.get("*")).cloned()
        });
        if let Some(failover) = failover {
            let at = (service, subset.as_str(), datacenter);
            let mut failover_targets = self.failover_targets(&failover, at, timeout_ns);
            failover_targets.retain(|t| *t != target);
            if !failover_targets.is_empty() {
                resolver.push((
                    "Failover".to_string(),
                    Doc::Obj(vec![(
                        "Targets".to_string(),
                        Doc::List(failover_targets.into_iter().map(Doc::Str).collect()),
                    )]),
                ));
            }
        }
        self.insert_node(
            key.clone(),
            Doc::Obj(vec![
                ("Type".into(), Doc::Str("resolver".into())),
                ("Name".into(), Doc::Str(target)),
                ("Resolver".into(), Doc::Obj(resolver)),
            ]),
        )?;
        Ok(key)
    }

    /// The targets a resolver's `Failover` block names for the resolver at
    /// `(service, subset, datacenter)`: its explicit `Targets`, else the failover service in
    /// each of its `Datacenters`, else the failover service here.
    fn failover_targets(
        &mut self,
        failover: &Value,
        (service, subset, datacenter): (&str, &str, &str),
        timeout_ns: i64,
    ) -> Vec<String> {
        let to_service = match text(failover, "Service") {
            "" => service.to_string(),
            s => s.to_string(),
        };
        // Consul's `rewriteTarget`: a failover to the same service keeps the subset
        // unless it names another one.
        let to_subset = match text(failover, "ServiceSubset") {
            "" if to_service == service => subset.to_string(),
            s => s.to_string(),
        };
        let datacenters: Vec<String> = failover
            .get("Datacenters")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|d| d.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let explicit: Vec<(String, String, String)> = failover
            .get("Targets")
            .and_then(Value::as_array)
            .map(|targets| {
                targets
                    .iter()
                    .map(|t| {
                        let s = match text(t, "Service") {
                            "" => service.to_string(),
                            s => s.to_string(),
                        };
                        let dc = match text(t, "Datacenter") {
                            "" => datacenter.to_string(),
                            d => d.to_string(),
                        };
                        (s, text(t, "ServiceSubset").to_string(), dc)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut failover_targets = Vec::new();
        if !explicit.is_empty() {
            for (s, sub, dc) in explicit {
                failover_targets.push(self.target(&s, &sub, &dc, timeout_ns));
            }
        } else if datacenters.is_empty() {
            failover_targets.push(self.target(&to_service, &to_subset, datacenter, timeout_ns));
        } else {
            for dc in datacenters {
                failover_targets.push(self.target(&to_service, &to_subset, &dc, timeout_ns));
            }
        }
        failover_targets
    }

    fn insert_node(&mut self, key: String, node: Doc) -> Result<(), String> {
        if self.nodes.len() >= NODES_MAX {
            return Err(format!("a discovery chain has at most {NODES_MAX} nodes"));
        }
        self.nodes.insert(key, node);
        Ok(())
    }

    /// Where traffic for `service`/`subset` goes next: its splitter (when no subset is
    /// asked for and the protocol allows one), else its resolver.
    fn next_for(&mut self, service: &str, subset: &str, depth: usize) -> Result<String, String> {
        let datacenter = self.datacenter.clone();
        if subset.is_empty() && self.http() {
            if let Some(splitter) = entry_fields(self.tables, ConfigKind::ServiceSplitter, service)
            {
                return self.splitter(service, &splitter, depth);
            }
        }
        self.resolver(service, subset, &datacenter, 0)
    }

    fn http(&self) -> bool {
        is_http_family(&self.protocol)
    }

    fn splitter(&mut self, service: &str, entry: &Value, depth: usize) -> Result<String, String> {
        if depth > REDIRECTS_MAX {
            return Err(format!(
                "detected circular splitter reference at {service:?}"
            ));
        }
        self.customized = true;
        let key = format!("splitter:{service}.default.default");
        if self.nodes.contains_key(&key) {
            return Ok(key);
        }
        let mut splits = Vec::new();
        for split in entry
            .get("Splits")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let to_service = match text(split, "Service") {
                "" => service.to_string(),
                s => s.to_string(),
            };
            let to_subset = text(split, "ServiceSubset").to_string();
            // A split back to the same service goes to its resolver, not round again.
            let next = if to_service == service {
                let dc = self.datacenter.clone();
                self.resolver(&to_service, &to_subset, &dc, 0)?
            } else {
                self.next_for(&to_service, &to_subset, depth + 1)?
            };
            let weight = split.get("Weight").and_then(Value::as_f64).unwrap_or(0.0);
            splits.push(Doc::Obj(vec![
                ("Weight".into(), Doc::Float(weight)),
                ("NextNode".into(), Doc::Str(next)),
            ]));
        }
        self.insert_node(
            key.clone(),
            Doc::Obj(vec![
                ("Type".into(), Doc::Str("splitter".into())),
                (
                    "Name".into(),
                    Doc::Str(format!("{service}.default.default")),
                ),
                ("Splits".into(), Doc::List(splits)),
            ]),
        )?;
        Ok(key)
    }

    fn router(&mut self, service: &str, entry: &Value) -> Result<String, String> {
        self.customized = true;
        let key = format!("router:{service}.default.default");
        let mut routes = Vec::new();
        let mut all: Vec<Value> = entry
            .get("Routes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        // Consul's catch-all route to the service itself.
        all.push(serde_json::json!({
            "Match": {"HTTP": {"PathPrefix": "/"}},
            "Destination": {"Service": service}
        }));
        for route in &all {
            let destination = route.get("Destination").cloned().unwrap_or(Value::Null);
            let to_service = match text(&destination, "Service") {
                "" => service.to_string(),
                s => s.to_string(),
            };
            let to_subset = text(&destination, "ServiceSubset").to_string();
            let next = self.next_for(&to_service, &to_subset, 1)?;
            let mut definition = route.clone();
            if let Some(object) = definition.as_object_mut() {
                let dest = object
                    .entry("Destination")
                    .or_insert_with(|| serde_json::json!({}));
                if let Some(dest) = dest.as_object_mut() {
                    dest.entry("Service")
                        .or_insert_with(|| Value::String(to_service.clone()));
                }
            }
            routes.push(Doc::Obj(vec![
                ("Definition".into(), Doc::Raw(definition)),
                ("NextNode".into(), Doc::Str(next)),
            ]));
        }
        self.insert_node(
            key.clone(),
            Doc::Obj(vec![
                ("Type".into(), Doc::Str("router".into())),
                (
                    "Name".into(),
                    Doc::Str(format!("{service}.default.default")),
                ),
                ("Routes".into(), Doc::List(routes)),
            ]),
        )?;
        Ok(key)
    }
}

/// Compiles the chain of `service`, evaluated in `datacenter`, for a caller in
/// `use_in_datacenter`, as Consul's `{"Chain": …}` answer.
pub fn compile(
    tables: &Tables,
    service: &str,
    datacenter: &str,
    use_in_datacenter: &str,
    overrides: Overrides,
) -> Result<Doc, String> {
    let trust_domain = tables.mesh.ca.trust_domain().unwrap_or_default();
    let protocol = overrides
        .protocol
        .clone()
        .unwrap_or_else(|| service_protocol(tables, service).to_string());
    let mut compiler = Compiler {
        tables,
        datacenter: datacenter.to_string(),
        use_in_datacenter: use_in_datacenter.to_string(),
        trust_domain,
        nodes: BTreeMap::new(),
        targets: BTreeMap::new(),
        customized: false,
        overrides,
        protocol: protocol.clone(),
    };
    let start = match entry_fields(tables, ConfigKind::ServiceRouter, service) {
        Some(router) if is_http_family(&protocol) => compiler.router(service, &router)?,
        _ => compiler.next_for(service, "", 0)?,
    };
    let default = !compiler.customized
        && protocol == crate::store::mesh::config_entry::DEFAULT_PROTOCOL
        && compiler.overrides.connect_timeout_ns.is_none();
    let chain = Doc::Obj(vec![
        ("ServiceName".into(), Doc::Str(service.to_string())),
        ("Namespace".into(), Doc::Str("default".into())),
        ("Partition".into(), Doc::Str("default".into())),
        ("Datacenter".into(), Doc::Str(datacenter.to_string())),
        ("CustomizationHash".into(), Doc::Str(String::new())),
        ("Default".into(), Doc::Bool(default)),
        ("Protocol".into(), Doc::Str(protocol)),
        ("ServiceMeta".into(), Doc::Obj(Vec::new())),
        ("EnvoyExtensions".into(), Doc::Null),
        ("StartNode".into(), Doc::Str(start)),
        (
            "Nodes".into(),
            Doc::Obj(compiler.nodes.into_iter().collect()),
        ),
        (
            "Targets".into(),
            Doc::Obj(compiler.targets.into_iter().collect()),
        ),
    ]);
    Ok(Doc::Obj(vec![("Chain".into(), chain)]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mesh::config_entry::ConfigEntryOp;
    use crate::store::{Command, CommandResult};

    fn write(t: &mut Tables, index: u64, body: &str) {
        let entry = crate::consul::config_entry::decode_body(body.as_bytes()).unwrap();
        let mut changes = Vec::new();
        let r = t.apply(
            index,
            &Command::ConfigEntry(ConfigEntryOp::Set {
                entry: Box::new(entry),
                cas: None,
            }),
            &mut changes,
        );
        assert_eq!(r, CommandResult::Bool(true), "{body}");
    }

    fn chain(t: &Tables, service: &str) -> Value {
        let doc = compile(t, service, "dc1", "dc1", Overrides::default()).unwrap();
        serde_json::from_str::<Value>(&doc.to_json()).unwrap()["Chain"].clone()
    }

    #[test]
    fn a_service_without_entries_has_the_default_chain() {
        let t = Tables::default();
        let c = chain(&t, "web");
        assert_eq!(c["Default"], true);
        assert_eq!(c["Protocol"], "tcp");
        assert_eq!(c["StartNode"], "resolver:web.default.default.dc1");
        let node = &c["Nodes"]["resolver:web.default.default.dc1"];
        assert_eq!(node["Type"], "resolver");
        assert_eq!(node["Resolver"]["ConnectTimeout"], "5s");
        assert_eq!(node["Resolver"]["Default"], true);
        assert_eq!(c["Targets"]["web.default.default.dc1"]["Service"], "web");
    }

    #[test]
    fn routers_splitters_resolvers_redirects_and_failover_compile() {
        let mut t = Tables::default();
        write(
            &mut t,
            2,
            r#"{"Kind":"proxy-defaults","Config":{"protocol":"http"}}"#,
        );
        write(
            &mut t,
            3,
            r#"{"Kind":"service-resolver","Name":"web","DefaultSubset":"v1","ConnectTimeout":"3s",
            "Subsets":{"v1":{"Filter":"Service.Meta.version == v1"},"v2":{"Filter":"Service.Meta.version == v2"}},
            "Failover":{"*":{"Datacenters":["dc2"]}}}"#,
        );
        write(
            &mut t,
            4,
            r#"{"Kind":"service-splitter","Name":"web","Splits":[{"Weight":90,"ServiceSubset":"v1"},{"Weight":10,"ServiceSubset":"v2"}]}"#,
        );
        write(
            &mut t,
            5,
            r#"{"Kind":"service-router","Name":"web","Routes":[{"Match":{"HTTP":{"PathPrefix":"/admin"}},"Destination":{"Service":"admin"}}]}"#,
        );
        write(
            &mut t,
            6,
            r#"{"Kind":"service-resolver","Name":"admin","Redirect":{"Service":"backoffice"}}"#,
        );
        let c = chain(&t, "web");
        assert_eq!(c["Default"], false);
        assert_eq!(c["Protocol"], "http");
        assert_eq!(c["StartNode"], "router:web.default.default");
        let routes = c["Nodes"]["router:web.default.default"]["Routes"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(routes.len(), 2, "the catch-all route is added");
        assert_eq!(
            routes[0]["NextNode"], "resolver:backoffice.default.default.dc1",
            "redirect followed"
        );
        assert_eq!(routes[1]["NextNode"], "splitter:web.default.default");
        let splits = c["Nodes"]["splitter:web.default.default"]["Splits"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(splits[0]["NextNode"], "resolver:v1.web.default.default.dc1");
        assert_eq!(splits[1]["Weight"], 10);
        let v1 = &c["Nodes"]["resolver:v1.web.default.default.dc1"]["Resolver"];
        assert_eq!(v1["ConnectTimeout"], "3s");
        assert_eq!(v1["Failover"]["Targets"][0], "v1.web.default.default.dc2");
        assert_eq!(
            c["Targets"]["v2.web.default.default.dc1"]["Subset"]["Filter"],
            "Service.Meta.version == v2"
        );
        // A redirect loop is an error.
        write(
            &mut t,
            7,
            r#"{"Kind":"service-resolver","Name":"a","Redirect":{"Service":"b"}}"#,
        );
        write(
            &mut t,
            8,
            r#"{"Kind":"service-resolver","Name":"b","Redirect":{"Service":"a"}}"#,
        );
        assert!(compile(&t, "a", "dc1", "dc1", Overrides::default())
            .unwrap_err()
            .contains("circular"));
    }

    fn mode_of(t: &Tables, service: &str, target: &str, override_mode: MeshGatewayMode) -> Value {
        let overrides = Overrides {
            mesh_gateway: override_mode,
            ..Overrides::default()
        };
        let doc = compile(t, service, "dc2", "dc1", overrides).unwrap();
        let chain = serde_json::from_str::<Value>(&doc.to_json()).unwrap()["Chain"].clone();
        chain["Targets"][target]["MeshGateway"].clone()
    }

    #[test]
    fn a_remote_target_takes_its_mesh_gateway_mode_from_override_then_service_then_proxy_defaults()
    {
        let mut t = Tables::default();
        let db = "db.default.default.dc2";
        // Nothing configured: the mode defers (a proxy goes straight to the instances).
        assert_eq!(
            mode_of(&t, "db", db, MeshGatewayMode::Default),
            serde_json::json!({})
        );
        write(
            &mut t,
            2,
            r#"{"Kind":"proxy-defaults","Name":"global","MeshGateway":{"Mode":"local"}}"#,
        );
        assert_eq!(
            mode_of(&t, "db", db, MeshGatewayMode::Default)["Mode"],
            "local"
        );
        write(
            &mut t,
            3,
            r#"{"Kind":"service-defaults","Name":"db","MeshGateway":{"Mode":"remote"}}"#,
        );
        assert_eq!(
            mode_of(&t, "db", db, MeshGatewayMode::Default)["Mode"],
            "remote"
        );
        // The caller's override (an upstream's or its proxy's MeshGateway) wins.
        assert_eq!(mode_of(&t, "db", db, MeshGatewayMode::None)["Mode"], "none");
        assert_eq!(
            mode_of(&t, "db", db, MeshGatewayMode::Local)["Mode"],
            "local"
        );
    }

    #[test]
    fn a_target_in_the_callers_own_datacenter_never_uses_a_mesh_gateway() {
        let mut t = Tables::default();
        write(
            &mut t,
            2,
            r#"{"Kind":"proxy-defaults","Name":"global","MeshGateway":{"Mode":"remote"}}"#,
        );
        write(
            &mut t,
            3,
            r#"{"Kind":"service-resolver","Name":"db","Failover":{"*":{"Datacenters":["dc2"]}}}"#,
        );
        let overrides = Overrides {
            mesh_gateway: MeshGatewayMode::Local,
            ..Overrides::default()
        };
        let doc = compile(&t, "db", "dc1", "dc1", overrides).unwrap();
        let chain = serde_json::from_str::<Value>(&doc.to_json()).unwrap()["Chain"].clone();
        assert_eq!(
            chain["Targets"]["db.default.default.dc1"]["MeshGateway"],
            serde_json::json!({})
        );
        assert_eq!(
            chain["Targets"]["db.default.default.dc2"]["MeshGateway"]["Mode"],
            "local"
        );
    }

    #[test]
    fn mesh_gateway_modes_parse_as_consul_spells_them() {
        for (text, mode) in [
            ("", MeshGatewayMode::Default),
            ("none", MeshGatewayMode::None),
            ("local", MeshGatewayMode::Local),
            ("remote", MeshGatewayMode::Remote),
        ] {
            assert_eq!(MeshGatewayMode::parse(text), Ok(mode));
            assert_eq!(mode.as_str(), text);
        }
        assert_eq!(
            MeshGatewayMode::parse("Local").unwrap_err(),
            "Invalid Mesh Gateway Mode: \"Local\""
        );
    }
}
