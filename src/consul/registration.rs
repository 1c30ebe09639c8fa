//! Consul's catalog registration bodies (`RegisterRequest`: node, `Service`, `Check` and
//! `Checks`) decoded leniently, with Consul's defaults, limits and validation messages. The
//! catalog endpoint, transactions and agent definitions all decode through here.

use crate::consul::body::{parse_strict, Obj};
use crate::store::catalog::{
    CheckDefinition, CheckRegistration, Registration, ServiceRegistration, Weights,
};

/// Most checks one registration may carry.
pub const REGISTRATION_CHECKS_MAX: usize = 256;
/// Most tags one service may carry.
pub const SERVICE_TAGS_MAX: usize = 1024;
/// Consul's limits on metadata: pairs, key length, value length.
pub const META_PAIRS_MAX: usize = 64;
pub const META_KEY_BYTES_MAX: usize = 128;
pub const META_VALUE_BYTES_MAX: usize = 512;
/// Longest node, service or check name or ID.
pub const NAME_BYTES_MAX: usize = 1024;

/// Consul's metadata rules: at most 64 pairs, keys of letters, digits, `_` and `-` up to 128
/// bytes, values up to 512 bytes, and (unless allowed) no `consul-` prefix.
pub fn validate_meta(pairs: &[(String, String)], allow_consul_prefix: bool) -> Result<(), String> {
    validate_meta_allowing(pairs, allow_consul_prefix, &[])
}

/// [`validate_meta`] for a service's `Meta`: a mesh gateway may also carry
/// `consul-wan-federation`, the one `consul-` key Consul lets a service set (it marks the
/// gateway as one that carries WAN federation traffic).
pub fn validate_service_meta(kind: &str, pairs: &[(String, String)]) -> Result<(), String> {
    let allowed: &[&str] = if kind == crate::consul::federation_state::MESH_GATEWAY_KIND {
        &[crate::consul::federation_state::WAN_FEDERATION_META_KEY]
    } else {
        &[]
    };
    validate_meta_allowing(pairs, false, allowed)
}

fn validate_meta_allowing(
    pairs: &[(String, String)],
    allow_consul_prefix: bool,
    allowed_keys: &[&str],
) -> Result<(), String> {
    if pairs.len() > META_PAIRS_MAX {
        return Err(format!(
            "Node metadata cannot contain more than {META_PAIRS_MAX} key/value pairs"
        ));
    }
    for (key, value) in pairs {
        let problem = if key.is_empty() {
            Some("Key cannot be blank".to_string())
        } else if !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            Some("Key contains invalid characters".to_string())
        } else if key.len() > META_KEY_BYTES_MAX {
            Some(format!(
                "Key is too long (limit: {META_KEY_BYTES_MAX} characters)"
            ))
        } else if key.starts_with("consul-")
            && !allow_consul_prefix
            && !allowed_keys.contains(&key.as_str())
        {
            Some("Key prefix 'consul-' is reserved for internal use".to_string())
        } else if value.len() > META_VALUE_BYTES_MAX {
            Some(format!(
                "Value is too long (limit: {META_VALUE_BYTES_MAX} characters)"
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(format!(
                "Couldn't load metadata pair ('{key}', '{value}'): {problem}"
            ));
        }
    }
    Ok(())
}

fn check_name(what: &str, value: &str) -> Result<(), String> {
    if value.len() > NAME_BYTES_MAX {
        return Err(format!("{what} exceeds {NAME_BYTES_MAX} bytes"));
    }
    Ok(())
}

/// Whether an address is the "any" address, which Consul refuses for services.
pub fn is_any_address(address: &str) -> bool {
    matches!(address, "0.0.0.0" | "::" | "[::]")
}

/// `Weights` as a client sends it.
pub fn parse_weights(obj: &Obj) -> Result<Option<Weights>, String> {
    let Some(w) = obj.obj(&["weights"])? else {
        return Ok(None);
    };
    Ok(Some(Weights {
        passing: w.bounded(&["passing"], 0, u32::MAX as i64)? as u32,
        warning: w.bounded(&["warning"], 0, u32::MAX as i64)? as u32,
    }))
}

/// A service's `TaggedAddresses`: `{"lan": {"Address": "…", "Port": 80}}`.
pub fn parse_service_tagged_addresses(obj: &Obj) -> Result<Vec<(String, String, i32)>, String> {
    let Some(map) = obj.obj(&["taggedaddresses"])? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (tag, value) in map.map() {
        let entry = Obj::new(value).map_err(|e| format!("TaggedAddresses.{tag}: {e}"))?;
        out.push((
            tag.clone(),
            entry.string(&["address"])?,
            entry.bounded(&["port"], 0, 65535)? as i32,
        ));
    }
    Ok(out)
}

/// Consul's `NodeService` in a registration body (`Service`).
pub fn parse_service(obj: &Obj) -> Result<ServiceRegistration, String> {
    let meta = obj.str_map(&["meta", "servicemeta"])?;
    let kind = obj.string(&["kind", "servicekind"])?;
    validate_service_meta(&kind, &meta).map_err(|e| format!("Invalid Service Meta: {e}"))?;
    let tags = obj.str_list(&["tags", "servicetags"])?;
    if tags.len() > SERVICE_TAGS_MAX {
        return Err(format!(
            "a service may carry at most {SERVICE_TAGS_MAX} tags"
        ));
    }
    let service = ServiceRegistration {
        kind,
        id: obj.string(&["id", "serviceid"])?,
        name: obj.string(&["service", "name", "servicename"])?,
        tags,
        address: obj.string(&["address", "serviceaddress"])?,
        tagged_addresses: parse_service_tagged_addresses(obj)?,
        meta,
        port: obj.bounded(&["port", "serviceport"], 0, 65535)? as i32,
        weights: parse_weights(obj)?,
        enable_tag_override: obj.bool(&["enabletagoverride", "serviceenabletagoverride"])?,
        socket_path: obj.string(&["socketpath"])?,
        proxy_json: match obj.get(&["proxy"]) {
            Some(value) if value.as_object().is_some_and(|m| !m.is_empty()) => {
                Some(crate::consul::definition::normalize_proxy(value)?.to_json())
            }
            _ => None,
        },
        connect_native: match obj.obj(&["connect"])? {
            Some(c) => c.bool(&["native"])?,
            None => false,
        },
    };
    check_name("service name", &service.name)?;
    check_name("service ID", &service.id)?;
    if is_any_address(&service.address) {
        return Err("Invalid service address".to_string());
    }
    Ok(service)
}

/// Consul's `HealthCheckDefinition` (catalog) or the flat check fields (agent).
pub fn parse_check_definition(obj: &Obj) -> Result<CheckDefinition, String> {
    let header = match obj.obj(&["header"])? {
        None => Vec::new(),
        Some(h) => {
            let mut pairs = Vec::new();
            for (name, value) in h.map() {
                let values = match value {
                    serde_json::Value::String(s) => vec![s.clone()],
                    serde_json::Value::Array(items) => items
                        .iter()
                        .map(|v| {
                            v.as_str()
                                .map(str::to_string)
                                .ok_or_else(|| format!("Header.{name}: expected strings"))
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                    _ => return Err(format!("Header.{name}: expected a list of strings")),
                };
                pairs.push((name.clone(), values));
            }
            pairs
        }
    };
    let mut script_args = obj.str_list(&["scriptargs", "args"])?;
    if script_args.is_empty() {
        // Consul's older single `Script` string runs through a shell.
        if let Some(script) = obj.opt_string(&["script"])?.filter(|s| !s.is_empty()) {
            script_args = vec!["/bin/sh".into(), "-c".into(), script];
        }
    }
    Ok(CheckDefinition {
        http: obj.string(&["http"])?,
        tls_server_name: obj.string(&["tlsservername"])?,
        tls_skip_verify: obj.bool(&["tlsskipverify"])?,
        header,
        method: obj.string(&["method"])?,
        body: obj.string(&["body"])?,
        disable_redirects: obj.bool(&["disableredirects"])?,
        tcp: obj.string(&["tcp"])?,
        udp: obj.string(&["udp"])?,
        grpc: obj.string(&["grpc"])?,
        grpc_use_tls: obj.bool(&["grpcusetls"])?,
        interval_ns: obj.duration_ns(&["interval"])?,
        timeout_ns: obj.duration_ns(&["timeout"])?,
        ttl_ns: obj.duration_ns(&["ttl"])?,
        deregister_critical_service_after_ns: obj
            .duration_ns(&["deregistercriticalserviceafter"])?,
        script_args,
        alias_node: obj.string(&["aliasnode"])?,
        alias_service: obj.string(&["aliasservice"])?,
        output_max_size: obj.bounded(&["outputmaxsize"], 0, i64::MAX)? as u64,
        h2ping: obj.string(&["h2ping"])?,
        h2ping_use_tls: obj.bool(&["h2pingusetls"])?,
        os_service: obj.string(&["osservice"])?,
    })
}

/// Consul's `CheckType.Type()`: the kind of check a definition describes.
pub fn check_type_of(def: &CheckDefinition) -> &'static str {
    if !def.grpc.is_empty() {
        "grpc"
    } else if !def.http.is_empty() {
        "http"
    } else if !def.tcp.is_empty() {
        "tcp"
    } else if !def.udp.is_empty() {
        "udp"
    } else if def.ttl_ns > 0 {
        "ttl"
    } else if !def.script_args.is_empty() {
        "script"
    } else if !def.alias_service.is_empty() || !def.alias_node.is_empty() {
        "alias"
    } else if !def.h2ping.is_empty() {
        "h2ping"
    } else if !def.os_service.is_empty() {
        "os_service"
    } else {
        ""
    }
}

pub fn parse_catalog_check(obj: &Obj, node: &str) -> Result<CheckRegistration, String> {
    let definition = match obj.obj(&["definition"])? {
        Some(def) => parse_check_definition(&def)?,
        None => CheckDefinition::default(),
    };
    let name = obj.string(&["name"])?;
    let mut check_id = obj.string(&["checkid", "id"])?;
    if check_id.is_empty() {
        check_id = name.clone();
    }
    check_name("check ID", &check_id)?;
    let mut kind = obj.string(&["type"])?;
    if kind.is_empty() {
        kind = check_type_of(&definition).to_string();
    }
    let node_field = obj.string(&["node"])?;
    Ok(CheckRegistration {
        node: if node_field.is_empty() {
            node.to_string()
        } else {
            node_field
        },
        check_id,
        name,
        status: obj.string(&["status"])?,
        notes: obj.string(&["notes"])?,
        output: obj.string(&["output"])?,
        service_id: obj.string(&["serviceid"])?,
        kind,
        interval: obj.string(&["interval"])?,
        timeout: obj.string(&["timeout"])?,
        exposed_port: obj.bounded(&["exposedport"], 0, 65535)? as i32,
        // A plain catalog check has no definition: leaving it out spares every server
        // decoding 22 empty fields per check from the Raft entry (the store reads an absent
        // definition as the empty one, so the row is the same).
        definition: (!definition.is_empty()).then_some(definition),
    })
}

/// Consul's refusal of a registration naming a cluster peer (`PeerName` on the request,
/// its service or a check): only peering itself writes imported rows.
pub const PEER_REGISTRATION_REFUSED: &str = "cannot register requests with PeerName in them";

/// Whether a registration body names a peer anywhere Consul looks for one.
fn names_a_peer(obj: &Obj) -> Result<bool, String> {
    let named = |o: &Obj| o.string(&["peername"]).map(|p| !p.is_empty());
    if named(obj)? {
        return Ok(true);
    }
    for part in obj
        .obj(&["service"])?
        .into_iter()
        .chain(obj.obj(&["check"])?)
    {
        if named(&part)? {
            return Ok(true);
        }
    }
    for check in obj.obj_list(&["checks"])? {
        if named(&check)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Decodes `/v1/catalog/register`'s body (Consul's `RegisterRequest`). A body naming a peer
/// is refused with exactly [`PEER_REGISTRATION_REFUSED`].
pub fn parse_registration(body: &[u8], default_datacenter: &str) -> Result<Registration, String> {
    let value = parse_strict(body, &super::bodies::REGISTER_REQUEST)?;
    let obj = Obj::new(&value)?;
    if names_a_peer(&obj)? {
        return Err(PEER_REGISTRATION_REFUSED.to_string());
    }
    let node = obj.string(&["node"])?;
    check_name("node name", &node)?;
    let node_meta = obj.str_map(&["nodemeta"])?;
    validate_meta(&node_meta, true)?;
    let mut checks = Vec::new();
    if let Some(check) = obj.obj(&["check"])? {
        checks.push(parse_catalog_check(&check, &node)?);
    }
    for check in obj.obj_list(&["checks"])? {
        checks.push(parse_catalog_check(&check, &node)?);
    }
    if checks.len() > REGISTRATION_CHECKS_MAX {
        return Err(format!(
            "a registration may carry at most {REGISTRATION_CHECKS_MAX} checks"
        ));
    }
    let mut datacenter = obj.string(&["datacenter"])?;
    if datacenter.is_empty() {
        datacenter = default_datacenter.to_string();
    }
    Ok(Registration {
        id: obj.string(&["id"])?.to_lowercase(),
        node,
        address: obj.string(&["address"])?,
        datacenter,
        tagged_addresses: obj.str_map(&["taggedaddresses"])?,
        node_meta,
        service: match obj.obj(&["service"])? {
            Some(s) => Some(parse_service(&s)?),
            None => None,
        },
        checks,
        skip_node_update: obj.bool(&["skipnodeupdate"])?,
        keep_node_meta: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_bodies_decode_in_any_letter_case() {
        let body = br#"{"node":"n1","address":"10.0.0.1","NodeMeta":{"consul-version":"1"},
            "service":{"service":"web","tags":["a"],"port":80,"weights":{"passing":3,"warning":0},
                       "taggedaddresses":{"lan":{"address":"10.0.0.1","port":80}}},
            "check":{"name":"web check","serviceid":"web","status":"passing",
                     "definition":{"http":"http://x","interval":"10s"}}}"#;
        let reg = parse_registration(body, "dc1").unwrap();
        assert_eq!(reg.datacenter, "dc1");
        let service = reg.service.unwrap();
        assert_eq!((service.name.as_str(), service.port), ("web", 80));
        assert_eq!(
            service.weights,
            Some(Weights {
                passing: 3,
                warning: 0
            })
        );
        assert_eq!(
            service.tagged_addresses,
            vec![("lan".into(), "10.0.0.1".into(), 80)]
        );
        let check = &reg.checks[0];
        assert_eq!(check.check_id, "web check", "the ID defaults to the name");
        assert_eq!(check.node, "n1");
        assert_eq!(check.kind, "http");
        assert_eq!(
            check.definition.as_ref().unwrap().interval_ns,
            10_000_000_000
        );
    }

    #[test]
    fn bad_registrations_are_refused_with_reasons() {
        for (body, needle) in [
            (&br#"{"Node": [5]}"#[..], "cannot unmarshal array"),
            (
                br#"{"Service": {"Service": "w", "Meta": {"consul-x": "1"}}}"#,
                "reserved",
            ),
            (
                br#"{"Service": {"Service": "w", "Address": "0.0.0.0"}}"#,
                "Invalid service address",
            ),
            (
                br#"{"Service": {"Service": "w", "Port": 70000}}"#,
                "out of range",
            ),
            (
                br#"{"Check": {"Definition": {"Interval": "often"}}}"#,
                "invalid duration",
            ),
            (b"[1]", "cannot unmarshal array"),
            (
                br#"{"Service": {"Service": "w", "enable_tag_override": true}}"#,
                "unknown field",
            ),
            (b"{", "EOF"),
        ] {
            let err = parse_registration(body, "dc1").unwrap_err();
            assert!(
                err.contains(needle),
                "{}: {err}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn meta_rules() {
        assert!(validate_meta(&[("ok_key-1".into(), "v".into())], false).is_ok());
        let wan_federation = [("consul-wan-federation".to_string(), "1".to_string())];
        assert!(validate_service_meta("mesh-gateway", &wan_federation).is_ok());
        assert!(validate_service_meta("", &wan_federation).is_err());
        let other = [("consul-other".to_string(), "1".to_string())];
        assert!(validate_service_meta("mesh-gateway", &other).is_err());
        assert!(validate_meta(&[("bad key".into(), "v".into())], false).is_err());
        assert!(validate_meta(&[("k".into(), "v".repeat(600))], false).is_err());
        let many: Vec<_> = (0..65).map(|i| (format!("k{i}"), String::new())).collect();
        assert!(validate_meta(&many, false).is_err());
    }
}
