//! The discovery chain on the wire: `DiscoveryChainRequest` (`DiscoveryChain.Get`) and its
//! reply `DiscoveryChainResponse` (`Chain`, `QueryMeta`), as Consul's
//! `agent/structs/discovery_chain.go` lays them out.
//!
//! The compiled chain crosses as the map of the JSON fields `GET /v1/discovery-chain`
//! answers with (`consul::discovery_chain::compile`), written in the order the server
//! renders them ([`write_doc`]) and read back in that order ([`read_doc`]), so a client
//! agent renders the server's body byte for byte; a duration stays the text the server
//! renders (`"5s"`) where Consul's struct carries nanoseconds (see `docs/decisions.md`,
//! *intentions and the discovery chain as typed calls*). The reader is bounded by the
//! body's size and [`super::CONVERTED_DEPTH_MAX`].

use super::{each_field, Fields, QueryMeta, QueryOptions, CONVERTED_DEPTH_MAX};
use crate::consul::config_entry::doc::Doc;
use crate::proto::msgpack::{Reader, WireError, Writer};

/// `DiscoveryChainRequest`: the chain of `Name`, evaluated in a datacenter, with the
/// caller's overrides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiscoveryChainRequest<'a> {
    pub name: &'a str,
    pub evaluate_in_datacenter: &'a str,
    /// `OverrideMeshGateway.Mode`.
    pub override_mesh_gateway_mode: &'a str,
    pub override_protocol: &'a str,
    /// `OverrideConnectTimeout` in nanoseconds; 0 is none.
    pub override_connect_timeout_ns: i64,
    pub datacenter: &'a str,
    pub options: QueryOptions<'a>,
}

impl<'a> DiscoveryChainRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<DiscoveryChainRequest<'a>, WireError> {
        let mut request = DiscoveryChainRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Name" => request.name = r.str()?,
                "EvaluateInDatacenter" => request.evaluate_in_datacenter = r.str()?,
                "OverrideMeshGateway" => each_field(r, |name, r| {
                    if name == "Mode" {
                        request.override_mesh_gateway_mode = r.str()?;
                        return Ok(true);
                    }
                    Ok(false)
                })?,
                "OverrideProtocol" => request.override_protocol = r.str()?,
                "OverrideConnectTimeout" => {
                    request.override_connect_timeout_ns = r.i64("OverrideConnectTimeout")?
                }
                "Datacenter" => request.datacenter = r.str()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    /// The request as Consul's agent sends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options.write_request(
            &mut w,
            &[
                "Datacenter",
                "EvaluateInDatacenter",
                "EvaluateInNamespace",
                "EvaluateInPartition",
                "Name",
                "OverrideConnectTimeout",
                "OverrideMeshGateway",
                "OverrideProtocol",
            ],
            |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                "EvaluateInDatacenter" => w.str(self.evaluate_in_datacenter),
                "EvaluateInNamespace" | "EvaluateInPartition" => w.str(""),
                "Name" => w.str(self.name),
                "OverrideConnectTimeout" => w.int(self.override_connect_timeout_ns),
                "OverrideMeshGateway" => {
                    let mut f = Fields::new(w, 1);
                    f.field("Mode").str(self.override_mesh_gateway_mode);
                    f.finish();
                }
                _ => w.str(self.override_protocol),
            },
        );
        w.into_inner()
    }
}

/// Writes a rendered value as msgpack, objects' fields in their order.
pub fn write_doc(w: &mut Writer, doc: &Doc) {
    match doc {
        Doc::Null => w.nil(),
        Doc::Bool(b) => w.bool(*b),
        Doc::Int(i) => w.int(*i),
        Doc::Float(f) => w.f64(*f),
        Doc::Str(s) => w.str(s),
        Doc::List(items) => {
            w.array_len(items.len());
            for item in items {
                write_doc(w, item);
            }
        }
        Doc::Obj(fields) => {
            w.map_len(fields.len());
            for (name, value) in fields {
                w.str(name);
                write_doc(w, value);
            }
        }
        Doc::Raw(value) => super::write_json(w, value),
        Doc::Json(text) => match serde_json::from_str(text) {
            Ok(value) => super::write_json(w, &value),
            Err(_) => w.nil(),
        },
    }
}

/// Reads a value [`write_doc`] wrote, maps' keys in the order they came.
pub fn read_doc(r: &mut Reader) -> Result<Doc, WireError> {
    read_doc_at(r, 0)
}

fn read_doc_at(r: &mut Reader, depth: usize) -> Result<Doc, WireError> {
    if depth > CONVERTED_DEPTH_MAX {
        return Err(WireError::TooDeep);
    }
    Ok(match r.peek()? {
        0xc0 => {
            r.skip()?;
            Doc::Null
        }
        0xc2 | 0xc3 => Doc::Bool(r.bool()?),
        0xca | 0xcb => Doc::Float(r.f64()?),
        0x00..=0x7f | 0xcc..=0xcf | 0xe0..=0xff | 0xd0..=0xd3 => {
            Doc::Int(r.i64("a chain's number")?)
        }
        0xa0..=0xbf | 0xd9..=0xdb | 0xc4..=0xc6 => Doc::Str(r.str()?.to_string()),
        0x90..=0x9f | 0xdc | 0xdd => {
            let count = r.array_len()?;
            let mut items = Vec::with_capacity(count);
            for _ in 0..count {
                items.push(read_doc_at(r, depth + 1)?);
            }
            Doc::List(items)
        }
        0x80..=0x8f | 0xde | 0xdf => {
            let count = r.map_len()?;
            let mut fields = Vec::with_capacity(count);
            for _ in 0..count {
                let name = r.str()?.to_string();
                fields.push((name, read_doc_at(r, depth + 1)?));
            }
            Doc::Obj(fields)
        }
        _ => return Err(WireError::Invalid("a chain holds a msgpack extension")),
    })
}

/// `DiscoveryChainResponse`: the compiled chain (the value of the HTTP answer's `Chain`).
pub fn write_response(meta: &QueryMeta, chain: &Doc) -> Vec<u8> {
    let mut w = Writer::new();
    meta.write_reply(&mut w, &["Chain"], |_, w| write_doc(w, chain));
    w.into_inner()
}

/// Reads a `DiscoveryChainResponse`: its metadata and the chain (`Null` when none).
pub fn read_response(body: &[u8]) -> Result<(QueryMeta, Doc), WireError> {
    let mut chain = Doc::Null;
    let meta = super::read_reply(body, |name, r| {
        if name == "Chain" {
            chain = read_doc(r)?;
            return Ok(true);
        }
        Ok(false)
    })?;
    Ok((meta, chain))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_crosses_in_its_order() {
        let chain = Doc::Obj(vec![
            ("ServiceName".into(), Doc::Str("web".into())),
            ("Default".into(), Doc::Bool(true)),
            ("ServiceMeta".into(), Doc::Obj(Vec::new())),
            ("EnvoyExtensions".into(), Doc::Null),
            (
                "Nodes".into(),
                Doc::Obj(vec![(
                    "splitter:web".into(),
                    Doc::List(vec![
                        Doc::Float(50.0),
                        Doc::Float(0.5),
                        Doc::Int(-3),
                        Doc::Raw(serde_json::json!({"b": 1, "a": {"PathPrefix": "/"}})),
                    ]),
                )]),
            ),
        ]);
        let meta = QueryMeta {
            index: 7,
            ..QueryMeta::default()
        };
        let (back_meta, back) = read_response(&write_response(&meta, &chain)).unwrap();
        assert_eq!(back_meta.index, 7);
        assert_eq!(back.to_json(), chain.to_json());

        let request = DiscoveryChainRequest {
            name: "web",
            evaluate_in_datacenter: "dc2",
            override_mesh_gateway_mode: "local",
            override_protocol: "http",
            override_connect_timeout_ns: 5_000_000_000,
            datacenter: "dc1",
            options: QueryOptions::default(),
        };
        assert_eq!(
            DiscoveryChainRequest::decode(&request.encode()).unwrap(),
            request
        );
        let deep = vec![0x91u8; CONVERTED_DEPTH_MAX + 5];
        assert!(read_doc(&mut Reader::new(&deep)).is_err());
        assert!(read_response(b"\x81\xa5Chain\xd4\x01\x02").is_err());
    }
}
