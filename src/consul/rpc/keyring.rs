//! `Internal.KeyringOperation`'s structs: Consul's `KeyringRequest` (an operation on the
//! gossip keyrings, with the key in base64 as the HTTP body carried it) and
//! `KeyringResponses` (one `KeyringResponse` per gossip pool and datacenter). The
//! operation travels as Consul's `KeyringOp` text — `list`, `install`, `use`, `remove`;
//! a request naming another is decoded, and refused by the server in Consul's words. A
//! key is checked as memberlist checks one ([`decode_key`]) by the agent before any call
//! and by the server before any query.

use super::{each_field, QueryMeta, QueryOptions};
use crate::proto::msgpack::{Reader, WireError, Writer};
use std::collections::BTreeMap;

/// Consul's `KeyringOp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyringOperation {
    List,
    Install,
    Use,
    Remove,
}

impl KeyringOperation {
    /// The operation's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyringOperation::List => "list",
            KeyringOperation::Install => "install",
            KeyringOperation::Use => "use",
            KeyringOperation::Remove => "remove",
        }
    }

    /// The operation a wire name names, if any.
    pub fn parse(name: &str) -> Option<KeyringOperation> {
        [
            KeyringOperation::List,
            KeyringOperation::Install,
            KeyringOperation::Use,
            KeyringOperation::Remove,
        ]
        .into_iter()
        .find(|op| op.as_str() == name)
    }
}

/// Decodes and checks a base64 gossip key (16, 24 or 32 bytes once decoded).
pub fn decode_key(text: &str) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let key = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("Invalid key: {e}"))?;
    if ![16, 24, 32].contains(&key.len()) {
        return Err(format!(
            "Invalid key: key size must be 16, 24 or 32 bytes, got {}",
            key.len()
        ));
    }
    Ok(key)
}

/// `KeyringRequest`: what to do to the keyrings, and how far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyringRequest<'a> {
    /// The operation's wire name (`KeyringOperation::parse` reads it).
    pub operation: &'a str,
    /// The key in base64, as the HTTP request's body carried it; empty for a list.
    pub key: &'a str,
    pub datacenter: &'a str,
    /// Set by the server that fans the operation out: the receiver runs it over its LAN
    /// pool only and hands it on nowhere.
    pub forwarded: bool,
    /// serf's relay factor: how many other members relay each member's answer.
    pub relay_factor: u8,
    /// A list of this datacenter's LAN pool only (no WAN pool, no other datacenter).
    pub local_only: bool,
    pub options: QueryOptions<'a>,
}

/// `KeyringRequest`'s own fields, sorted.
const REQUEST_FIELDS: [&str; 6] = [
    "Datacenter",
    "Forwarded",
    "Key",
    "LocalOnly",
    "Operation",
    "RelayFactor",
];

impl<'a> KeyringRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<KeyringRequest<'a>, WireError> {
        let mut request = KeyringRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Operation" => request.operation = r.str()?,
                "Key" => request.key = r.str()?,
                "Datacenter" => request.datacenter = r.str()?,
                "Forwarded" => request.forwarded = r.bool()?,
                "RelayFactor" => request.relay_factor = r.u8("RelayFactor")?,
                "LocalOnly" => request.local_only = r.bool()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options
            .write_request(&mut w, &REQUEST_FIELDS, |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                "Forwarded" => w.bool(self.forwarded),
                "Key" => w.str(self.key),
                "LocalOnly" => w.bool(self.local_only),
                "Operation" => w.str(self.operation),
                _ => w.uint(u64::from(self.relay_factor)),
            });
        w.into_inner()
    }
}

/// `KeyringResponse`: one pool's answer, as serf's `KeyResponse` aggregates its members'.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyringResponse {
    pub wan: bool,
    pub datacenter: String,
    pub segment: String,
    pub partition: String,
    /// Member name to the error (or note) it answered.
    pub messages: BTreeMap<String, String>,
    /// Base64 key to how many members hold it.
    pub keys: BTreeMap<String, u64>,
    /// Base64 key to how many members encrypt with it.
    pub primary_keys: BTreeMap<String, u64>,
    pub num_nodes: u64,
    /// Why the operation failed over this pool; empty when it did not.
    pub error: String,
}

fn write_counts(w: &mut Writer, counts: &BTreeMap<String, u64>) {
    w.map_len(counts.len());
    for (key, count) in counts {
        w.str(key);
        w.uint(*count);
    }
}

fn write_response(w: &mut Writer, response: &KeyringResponse) {
    let mut f = super::Fields::new(w, 9);
    f.field("Datacenter").str(&response.datacenter);
    f.field("Error").str(&response.error);
    write_counts(f.field("Keys"), &response.keys);
    super::write_string_map(
        f.field("Messages"),
        response
            .messages
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str())),
        false,
    );
    f.field("NumNodes").uint(response.num_nodes);
    f.field("Partition").str(&response.partition);
    write_counts(f.field("PrimaryKeys"), &response.primary_keys);
    f.field("Segment").str(&response.segment);
    f.field("WAN").bool(response.wan);
    f.finish();
}

fn read_counts(r: &mut Reader) -> Result<BTreeMap<String, u64>, WireError> {
    let entries = r.map_len()?;
    let mut counts = BTreeMap::new();
    for _ in 0..entries {
        let key = r.str()?.to_string();
        counts.insert(key, r.u64("Keys")?);
    }
    Ok(counts)
}

fn read_response(r: &mut Reader) -> Result<KeyringResponse, WireError> {
    let mut response = KeyringResponse::default();
    each_field(r, |name, r| {
        match name {
            "WAN" => response.wan = r.bool()?,
            "Datacenter" => response.datacenter = r.str()?.to_string(),
            "Segment" => response.segment = r.str()?.to_string(),
            "Partition" => response.partition = r.str()?.to_string(),
            "Messages" => {
                response.messages = super::string_map(r)?
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }
            "Keys" => response.keys = read_counts(r)?,
            "PrimaryKeys" => response.primary_keys = read_counts(r)?,
            "NumNodes" => response.num_nodes = r.u64("NumNodes")?,
            "Error" => response.error = r.str()?.to_string(),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(response)
}

/// `KeyringResponses`: every pool's answer, then `QueryMeta` (which Consul's endpoint
/// leaves unset).
pub fn write_keyring_responses(w: &mut Writer, meta: &QueryMeta, responses: &[KeyringResponse]) {
    meta.write_reply(w, &["Responses"], |_, w| {
        if responses.is_empty() {
            w.nil();
            return;
        }
        w.array_len(responses.len());
        for response in responses {
            write_response(w, response);
        }
    });
}

/// `KeyringResponses` read back: the pools' answers (its `QueryMeta` carries nothing the
/// agent uses).
pub fn read_keyring_responses(body: &[u8]) -> Result<Vec<KeyringResponse>, WireError> {
    let mut responses = Vec::new();
    super::read_reply(body, |name, r| {
        if name != "Responses" {
            return Ok(false);
        }
        let count = r.array_len()?;
        responses = Vec::with_capacity(count);
        for _ in 0..count {
            responses.push(read_response(r)?);
        }
        Ok(true)
    })?;
    Ok(responses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reads_back_as_written() {
        let request = KeyringRequest {
            operation: "install",
            key: "pUqJrVyVRj5jsiYEkM/tFQYfWyJIv4s3XkvDwy7Cu5s=",
            datacenter: "dc1",
            forwarded: true,
            relay_factor: 3,
            local_only: false,
            options: QueryOptions {
                token: "secret",
                ..QueryOptions::default()
            },
        };
        assert_eq!(KeyringRequest::decode(&request.encode()), Ok(request));
        assert_eq!(KeyringOperation::parse("use"), Some(KeyringOperation::Use));
        assert_eq!(KeyringOperation::parse("rotate"), None);
    }

    #[test]
    fn responses_read_back_as_written() {
        let response = KeyringResponse {
            wan: true,
            datacenter: "dc1".to_string(),
            messages: [("n1".to_string(), "no such key".to_string())].into(),
            keys: [("a2V5".to_string(), 3)].into(),
            primary_keys: [("a2V5".to_string(), 2)].into(),
            num_nodes: 3,
            error: "1/3 nodes reported failure".to_string(),
            ..KeyringResponse::default()
        };
        let mut w = Writer::new();
        write_keyring_responses(
            &mut w,
            &QueryMeta::default(),
            std::slice::from_ref(&response),
        );
        assert_eq!(read_keyring_responses(&w.into_inner()), Ok(vec![response]));
        let mut w = Writer::new();
        write_keyring_responses(&mut w, &QueryMeta::default(), &[]);
        assert_eq!(read_keyring_responses(&w.into_inner()), Ok(vec![]));
    }
}
