//! Consul's `FederationState` JSON: rendering the store's rows, reading a gateway's
//! `CheckServiceNode` back (from another server's typed answer, `consul::rpc::federation_state`),
//! and building one datacenter's row from its catalog.
//!
//! A gateway is kept as its `CheckServiceNode` JSON in one canonical form — compact, object
//! keys in name order (what `serde_json` writes) — whichever way it arrived: rendered here
//! from the catalog, or parsed from another datacenter's answer. So two rows about the same
//! gateways compare equal byte for byte, and anti-entropy writes only on a real change.
//!
//! Pure: no I/O, no clock (the writer passes `UpdatedAt`).

use super::json::JsonWriter;
use super::render;
use crate::store::catalog::read::CheckServiceNode;
use crate::store::federation::{FederationState, MeshGateway, MESH_GATEWAYS_PER_DATACENTER_MAX};
use crate::store::Tables;
use arcstr::ArcStr;
use serde_json::Value;

/// The service kind of a mesh gateway.
pub const MESH_GATEWAY_KIND: &str = "mesh-gateway";
/// The service meta key by which a mesh gateway opts into carrying WAN federation traffic
/// (Consul's `structs.MetaWANFederationKey`), with the value `"1"`.
pub const WAN_FEDERATION_META_KEY: &str = "consul-wan-federation";
/// Most federation states one answer may list (one per datacenter): a bound on what a
/// replicated answer may make this datacenter store.
pub const STATES_PER_ANSWER_MAX: usize = 1024;

/// Writes one state as Consul's `FederationState` object.
pub fn write_state(w: &mut JsonWriter, state: &FederationState) {
    w.begin_object();
    write_state_fields(w, state);
    w.end_object();
}

/// The fields of [`write_state`], into an object the caller opened.
pub fn write_state_fields(w: &mut JsonWriter, state: &FederationState) {
    w.field_str("Datacenter", &state.datacenter);
    // `MeshGateways` is `omitempty` in Consul.
    if !state.mesh_gateways.is_empty() {
        w.field_array("MeshGateways");
        for gateway in &state.mesh_gateways {
            w.raw_element(gateway.json.as_bytes());
        }
        w.end_array();
    }
    w.field_str("UpdatedAt", &state.updated_at);
    w.field_u64("PrimaryModifyIndex", state.primary_modify_index);
    w.field_u64("CreateIndex", state.create_index);
    w.field_u64("ModifyIndex", state.modify_index);
}

/// One gateway from its `CheckServiceNode` JSON, with what the locator needs extracted.
pub fn gateway_from_value(value: &Value) -> Result<MeshGateway, String> {
    let node = &value["Node"];
    let service = &value["Service"];
    if !node.is_object() || !service.is_object() {
        return Err("a mesh gateway without its Node or Service".to_string());
    }
    let text = |v: &Value, key: &str| v[key].as_str().unwrap_or_default().to_string();
    let healthy = match &value["Checks"] {
        Value::Array(checks) => checks
            .iter()
            .all(|check| check["Status"].as_str() != Some("critical")),
        _ => true,
    };
    let wan_federation = service["Meta"][WAN_FEDERATION_META_KEY].as_str() == Some("1");
    Ok(MeshGateway {
        json: ArcStr::from(value.to_string()),
        node: ArcStr::from(text(node, "Node")),
        service_id: ArcStr::from(text(service, "ID")),
        wan_address: ArcStr::from(best_address(node, service, true)),
        lan_address: ArcStr::from(best_address(node, service, false)),
        wan_federation,
        healthy,
    })
}

/// Consul's `CheckServiceNode.BestAddress`: for the WAN the service's `wan` tagged address,
/// else the node's `wan` tagged address with the service port; then (and for the LAN) the
/// service's address, else the node's, with the service's port. As `host:port`, an IPv6
/// host in brackets.
fn best_address(node: &Value, service: &Value, wan: bool) -> String {
    let mut port = service["Port"].as_u64().unwrap_or(0);
    let mut host = String::new();
    if wan {
        let tagged = &service["TaggedAddresses"]["wan"];
        if let Some(address) = tagged["Address"].as_str().filter(|a| !a.is_empty()) {
            host = address.to_string();
            port = tagged["Port"].as_u64().unwrap_or(port);
        } else if let Some(address) = node["TaggedAddresses"]["wan"]
            .as_str()
            .filter(|a| !a.is_empty())
        {
            host = address.to_string();
        }
    }
    if host.is_empty() {
        host = service["Address"]
            .as_str()
            .filter(|a| !a.is_empty())
            .or_else(|| node["Address"].as_str())
            .unwrap_or_default()
            .to_string();
    }
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// This datacenter's row as its catalog has it now: every `mesh-gateway` instance with its
/// node and checks, in service-name then instance order (Consul's `ServiceDump` of the
/// kind). Indexes and `UpdatedAt` are the writer's.
pub fn from_catalog(tables: &Tables, datacenter: &str, updated_at: &str) -> FederationState {
    let mut gateways = Vec::new();
    for group in tables.catalog.services.values() {
        for view in group.instances.values() {
            if view.service.kind() != MESH_GATEWAY_KIND {
                continue;
            }
            if gateways.len() == MESH_GATEWAYS_PER_DATACENTER_MAX {
                log::warn!(
                    "federation: more than {MESH_GATEWAYS_PER_DATACENTER_MAX} mesh gateways; \
                     the rest are left out of this datacenter's federation state"
                );
                break;
            }
            let row = CheckServiceNode {
                node: view.node(),
                service: &view.service,
                node_checks: view.node_checks(),
                service_checks: view.checks(),
            };
            let value = render::as_value(|w| render::check_service_node(w, &row));
            gateways.push(gateway_from_value(&value).expect("a rendered row has both parts"));
        }
    }
    FederationState {
        datacenter: ArcStr::from(datacenter),
        mesh_gateways: gateways,
        updated_at: ArcStr::from(updated_at),
        primary_modify_index: 0,
        create_index: 0,
        modify_index: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gateway_value(service_wan: Option<&str>, status: &str) -> Value {
        let mut service = json!({
            "ID": "mgw", "Service": "mesh-gateway", "Kind": "mesh-gateway",
            "Address": "10.0.0.5", "Port": 8443,
            "Meta": {"consul-wan-federation": "1"},
        });
        if let Some(wan) = service_wan {
            service["TaggedAddresses"] = json!({"wan": {"Address": wan, "Port": 443}});
        }
        json!({
            "Node": {"Node": "gw-node", "Address": "10.0.0.1",
                     "TaggedAddresses": {"wan": "198.51.100.1"}},
            "Service": service,
            "Checks": [{"CheckID": "serfHealth", "Status": status}],
        })
    }

    #[test]
    fn gateways_take_consuls_best_addresses_and_health() {
        let g = gateway_from_value(&gateway_value(Some("203.0.113.9"), "passing")).unwrap();
        assert_eq!(&*g.wan_address, "203.0.113.9:443");
        assert_eq!(&*g.lan_address, "10.0.0.5:8443");
        assert!(g.healthy && g.wan_federation);
        assert_eq!((&*g.node, &*g.service_id), ("gw-node", "mgw"));
        // No service `wan` address: the node's, with the service's port.
        let g = gateway_from_value(&gateway_value(None, "critical")).unwrap();
        assert_eq!(&*g.wan_address, "198.51.100.1:8443");
        assert!(!g.healthy);
        let v6 = json!({"Node": {"Address": "::1"}, "Service": {"Port": 1}});
        assert_eq!(&*gateway_from_value(&v6).unwrap().lan_address, "[::1]:1");
        assert!(gateway_from_value(&json!({"Node": {}})).is_err());
    }

    /// One state as compact JSON text.
    fn state_json(state: &FederationState) -> String {
        let mut out = Vec::new();
        let mut w = JsonWriter::new(&mut out, false);
        write_state(&mut w, state);
        w.finish();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn states_render_as_consuls_json() {
        let state = FederationState {
            datacenter: ArcStr::from("dc2"),
            mesh_gateways: vec![gateway_from_value(&gateway_value(None, "passing")).unwrap()],
            updated_at: ArcStr::from("2026-12-06T18:00:00.5Z"),
            primary_modify_index: 4,
            create_index: 3,
            modify_index: 4,
        };
        let text = state_json(&state);
        assert!(text.starts_with(r#"{"Datacenter":"dc2","MeshGateways":[{"Checks":"#));
        assert!(text.ends_with(
            r#""UpdatedAt":"2026-12-06T18:00:00.5Z","PrimaryModifyIndex":4,"CreateIndex":3,"ModifyIndex":4}"#
        ));
        // An empty state leaves `MeshGateways` out, as Go's `omitempty`.
        let empty = FederationState {
            mesh_gateways: Vec::new(),
            ..state
        };
        assert!(!state_json(&empty).contains("MeshGateways"));
    }
}
