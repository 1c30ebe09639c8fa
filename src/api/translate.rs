//! `translate_wan_addrs`: answers about another datacenter's nodes carry their WAN
//! addresses, as Consul's agent rewrites them (`TranslateAddresses`).
//!
//! The agent that first took the request translates, with its own setting, once the
//! remote answer is back: a node's `Address` becomes its `wan` tagged address, a service's
//! `Address` and `Port` its `wan` tagged address and port, when they have one. Only the
//! endpoints Consul translates are touched (catalog and health service lists, a node's
//! services, the node list, a prepared query's results); everything else passes through.
//! The answer gains `X-Consul-Translate-Addresses: true`.
//!
//! The body is decoded and encoded again, so object keys come out in name order; JSON
//! readers do not care, and the setting is off by default.

use super::Context;
use crate::consul::json;
use serde_json::{Map, Value};

/// The header Consul sets on a translated answer.
const TRANSLATED_HEADER: &str = "X-Consul-Translate-Addresses: true\r\n";
/// Most bytes of an answer decoded for translation; larger ones pass untranslated (the
/// most a typed answer from another datacenter can carry, one RPC frame).
const TRANSLATED_BODY_BYTES_MAX: usize = crate::proto::rpc::FRAME_BYTES_MAX;

/// What shape of answer an endpoint gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// `[CheckServiceNode]`: `/v1/health/service/`, `/v1/health/connect/`.
    CheckServiceNodes,
    /// `[ServiceNode]`: `/v1/catalog/service/`, `/v1/catalog/connect/`.
    ServiceNodes,
    /// `[Node]`: `/v1/catalog/nodes`.
    Nodes,
    /// `{Node, Services: {id: NodeService}}`: `/v1/catalog/node/`.
    NodeServices,
    /// `{Node, Services: [NodeService]}`: `/v1/catalog/node-services/`.
    NodeServiceList,
    /// A prepared query's execution: `Nodes` from the datacenter the answer names.
    QueryExecution,
}

fn shape_of(path: &str) -> Option<Shape> {
    let shape = if path.starts_with("/v1/health/service/")
        || path.starts_with("/v1/health/connect/")
    {
        Shape::CheckServiceNodes
    } else if path.starts_with("/v1/catalog/service/") || path.starts_with("/v1/catalog/connect/") {
        Shape::ServiceNodes
    } else if path == "/v1/catalog/nodes" {
        Shape::Nodes
    } else if path.starts_with("/v1/catalog/node/") {
        Shape::NodeServices
    } else if path.starts_with("/v1/catalog/node-services/") {
        Shape::NodeServiceList
    } else if path.starts_with("/v1/query/") && path.ends_with("/execute") {
        Shape::QueryExecution
    } else {
        return None;
    };
    Some(shape)
}

/// A typed `?dc=` read's outcome (`api::rpc::client`), its answer translated once
/// rendered: the typed path renders the remote rows into the HTTP answer, which is then
/// rewritten. Outcomes of other shapes, or with the setting off, are left as they are.
pub fn translate_typed(
    ctx: &Context,
    path: &str,
    datacenter: &str,
    outcome: super::Outcome,
) -> super::Outcome {
    let shape = match shape_of(path) {
        Some(shape) if ctx.config().translate_wan_addrs => shape,
        _ => return outcome,
    };
    let super::Outcome::Async(work) = outcome else {
        return outcome;
    };
    let datacenter = datacenter.to_string();
    let local = ctx.config().datacenter.clone();
    super::Outcome::Async(Box::pin(async move {
        let respond = work.await;
        Box::new(move |reply: &mut super::Reply| {
            let start = reply.out.len();
            respond(reply);
            // A streamed body is written out first: the translation reads the whole answer.
            if let Some(mut tail) = reply.take_tail() {
                tail.fill_all(reply.out);
            }
            let answer = &reply.out[start..];
            if let Some(translated) = translate_response(answer, shape, &datacenter, &local) {
                reply.out.truncate(start);
                reply.out.extend_from_slice(&translated);
            }
        }) as super::AsyncResponder
    }))
}

/// The response with its body translated and its head adjusted, or `None` to leave it.
fn translate_response(
    response: &[u8],
    shape: Shape,
    datacenter: &str,
    local: &str,
) -> Option<Vec<u8>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut headers);
    let head_len = match parsed.parse(response) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return None,
    };
    if parsed.code != Some(200) {
        return None;
    }
    let body = &response[head_len..];
    if body.len() > TRANSLATED_BODY_BYTES_MAX {
        return None;
    }
    let pretty = body.starts_with(b"[\n") || body.starts_with(b"{\n");
    let mut value: Value = serde_json::from_slice(body).ok()?;
    if !translate_value(&mut value, shape, datacenter, local) {
        return None;
    }
    let mut new_body = Vec::with_capacity(body.len() + 64);
    json::write_serde(&mut new_body, &value, pretty);
    // The status line and every header but the length, which changes.
    let mut out = Vec::with_capacity(head_len + new_body.len() + 64);
    let status_end = response.iter().position(|b| *b == b'\n')? + 1;
    out.extend_from_slice(&response[..status_end]);
    for header in parsed.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            continue;
        }
        out.extend_from_slice(header.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(header.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(TRANSLATED_HEADER.as_bytes());
    out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", new_body.len()).as_bytes());
    out.extend_from_slice(&new_body);
    Some(out)
}

/// Translates `value` in place; false when it is not of the expected shape or nothing
/// needs translating (results from this datacenter).
fn translate_value(value: &mut Value, shape: Shape, datacenter: &str, local: &str) -> bool {
    let datacenter = match shape {
        // Failover may have answered from a third datacenter: the answer says which.
        Shape::QueryExecution => value
            .get("Datacenter")
            .and_then(Value::as_str)
            .unwrap_or(datacenter)
            .to_string(),
        _ => datacenter.to_string(),
    };
    if datacenter.eq_ignore_ascii_case(local) {
        return false;
    }
    match shape {
        Shape::CheckServiceNodes => each_object(value, check_service_node),
        Shape::QueryExecution => value
            .get_mut("Nodes")
            .is_some_and(|nodes| each_object(nodes, check_service_node)),
        Shape::ServiceNodes => each_object(value, service_node),
        Shape::Nodes => each_object(value, node),
        Shape::NodeServices | Shape::NodeServiceList => {
            let Some(object) = value.as_object_mut() else {
                return false;
            };
            if let Some(Value::Object(n)) = object.get_mut("Node") {
                node(n);
            }
            match object.get_mut("Services") {
                Some(Value::Object(services)) => {
                    services.values_mut().for_each(|s| {
                        if let Value::Object(s) = s {
                            node_service(s, "Address", "Port", "TaggedAddresses")
                        }
                    });
                }
                Some(Value::Array(services)) => {
                    services.iter_mut().for_each(|s| {
                        if let Value::Object(s) = s {
                            node_service(s, "Address", "Port", "TaggedAddresses")
                        }
                    });
                }
                _ => {}
            }
            true
        }
    }
}

fn each_object(value: &mut Value, translate: fn(&mut Map<String, Value>)) -> bool {
    let Some(items) = value.as_array_mut() else {
        return false;
    };
    for item in items {
        if let Value::Object(object) = item {
            translate(object);
        }
    }
    true
}

/// A node's address: its `wan` tagged address, if it has one.
fn node(node: &mut Map<String, Value>) {
    let wan = node
        .get("TaggedAddresses")
        .and_then(|t| t.get("wan"))
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty())
        .map(str::to_string);
    if let Some(wan) = wan {
        node.insert("Address".to_string(), Value::String(wan));
    }
}

/// A service's address and port (under the given field names): its `wan` tagged address
/// and, when not zero, port.
fn node_service(service: &mut Map<String, Value>, address: &str, port: &str, tagged: &str) {
    let Some(wan) = service.get(tagged).and_then(|t| t.get("wan")).cloned() else {
        return;
    };
    if let Some(a) = wan.get("Address").and_then(Value::as_str) {
        service.insert(address.to_string(), Value::String(a.to_string()));
    }
    if let Some(p) = wan.get("Port").and_then(Value::as_u64).filter(|p| *p != 0) {
        service.insert(port.to_string(), Value::from(p));
    }
}

fn check_service_node(entry: &mut Map<String, Value>) {
    if let Some(Value::Object(n)) = entry.get_mut("Node") {
        node(n);
    }
    if let Some(Value::Object(s)) = entry.get_mut("Service") {
        node_service(s, "Address", "Port", "TaggedAddresses");
    }
}

fn service_node(entry: &mut Map<String, Value>) {
    node(entry);
    node_service(
        entry,
        "ServiceAddress",
        "ServicePort",
        "ServiceTaggedAddresses",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(body: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Consul-Index: 7\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    fn body_of(response: &[u8]) -> Value {
        let at = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        serde_json::from_slice(&response[at..]).unwrap()
    }

    #[test]
    fn remote_health_answers_carry_wan_addresses_and_the_header() {
        let body = r#"[{"Node":{"Node":"n1","Address":"10.0.0.1","TaggedAddresses":{"lan":"10.0.0.1","wan":"198.51.100.1"}},
            "Service":{"ID":"web","Service":"web","Address":"10.0.0.9","Port":80,
                "TaggedAddresses":{"wan":{"Address":"203.0.113.9","Port":8080}}},"Checks":[]},
            {"Node":{"Node":"n2","Address":"10.0.0.2","TaggedAddresses":null},
            "Service":{"ID":"web","Service":"web","Address":"","Port":80,"TaggedAddresses":null},"Checks":[]}]"#;
        let out = translate_response(&response(body), Shape::CheckServiceNodes, "dc2", "dc1")
            .expect("translated");
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("X-Consul-Translate-Addresses: true\r\n"));
        assert!(text.contains("X-Consul-Index: 7\r\n"));
        let value = body_of(&out);
        assert_eq!(value[0]["Node"]["Address"], "198.51.100.1");
        assert_eq!(value[0]["Service"]["Address"], "203.0.113.9");
        assert_eq!(value[0]["Service"]["Port"], 8080);
        // Without WAN addresses nothing changes.
        assert_eq!(value[1]["Node"]["Address"], "10.0.0.2");
        assert_eq!(value[1]["Service"]["Port"], 80);
        let length: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert_eq!(length, out.len() - at);
    }

    #[test]
    fn local_results_errors_and_other_endpoints_pass_through() {
        let body = r#"{"Service":"web","Datacenter":"dc1","Nodes":[]}"#;
        assert!(translate_response(&response(body), Shape::QueryExecution, "dc2", "dc1").is_none());
        let error = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 3\r\n\r\nno!";
        assert!(translate_response(error, Shape::Nodes, "dc2", "dc1").is_none());
        assert_eq!(shape_of("/v1/kv/a"), None);
        assert_eq!(shape_of("/v1/query/q/execute"), Some(Shape::QueryExecution));
        assert_eq!(shape_of("/v1/catalog/nodes"), Some(Shape::Nodes));
        let nodes =
            r#"[{"Node":"n1","Address":"10.0.0.1","TaggedAddresses":{"wan":"198.51.100.1"}}]"#;
        let out = translate_response(&response(nodes), Shape::Nodes, "dc2", "dc1").unwrap();
        assert_eq!(body_of(&out)[0]["Address"], "198.51.100.1");
    }
}
