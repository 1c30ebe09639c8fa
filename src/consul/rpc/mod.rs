//! Consul's RPC structs (`agent/structs`), field for field, in msgpack as Consul's
//! `structs.MsgpackHandle` writes and reads them: the requests a server decodes
//! (`KeyRequest`, `KVSRequest`, `RegisterRequest`, `ServiceSpecificRequest`,
//! `SessionRequest`, …) and the replies it encodes (`IndexedDirEntries`,
//! `IndexedCheckServiceNodes`, …), for the typed calls served on the server port
//! (`api::rpc`). Pure: bytes in, values out.
//!
//! How go-msgpack lays a Go struct out, which every encoder here follows:
//! - a struct is a map from field name to value, keys in byte-wise sorted order; fields of
//!   embedded structs (`QueryOptions`, `QueryMeta`, `RaftIndex`, `WriteRequest`) are
//!   flattened into the outer map; Consul CE's `EnterpriseMeta` is empty and adds nothing;
//! - strings and `[]byte` are msgpack raw strings; a nil slice, map or pointer is nil;
//! - `time.Duration` is its nanoseconds as an integer; `time.Time` is Go's
//!   `MarshalBinary` form as a raw string ([`go_time_binary`]);
//! - decoding matches keys exactly, skips unknown ones, and reads nil as the zero value.
//!
//! Decoders borrow strings from the body they read (which is a slice of the receive
//! buffer); owned values are built only where a store command needs them. Every decoder
//! is bounded by the body's size and the reader's nesting limit, and reports bad input as
//! an error naming the field.

pub mod acl;
pub mod auto_encrypt;
pub mod catalog;
pub mod config_entry;
pub mod connect_ca;
pub mod coordinate;
pub mod discovery_chain;
pub mod federation_state;
pub mod intention;
pub mod internal;
pub mod keyring;
pub mod kvs;
pub mod operator;
pub mod peering;
pub mod prepared_query;
pub mod rows;
pub mod session;
pub mod snapshot;
pub mod status;
pub mod txn;

use crate::proto::msgpack::{Reader, WireError, Writer};

/// A request body that is not the struct its method takes: net/rpc's decode failure,
/// answered as the call's error.
pub fn decode_error(error: WireError) -> String {
    format!("msgpack decode error: {error}")
}

/// Reads a struct's map, calling `field` for each key; `field` returns `false` for a key
/// it does not know, whose value is then skipped. Nil is an empty struct.
pub fn each_field<'a>(
    reader: &mut Reader<'a>,
    mut field: impl FnMut(&'a str, &mut Reader<'a>) -> Result<bool, WireError>,
) -> Result<(), WireError> {
    let entries = reader.map_len()?;
    for _ in 0..entries {
        let name = reader.str()?;
        if !field(name, reader)? {
            reader.skip()?;
        }
    }
    Ok(())
}

/// The bytes of the value `reader` stands at, which it then passes: a nested struct kept
/// whole to be read later (when a field it needs comes after it) or by another reader.
pub fn value_bytes<'a>(reader: &mut Reader<'a>) -> Result<&'a [u8], WireError> {
    let start = reader.rest();
    reader.skip()?;
    Ok(&start[..start.len() - reader.rest().len()])
}

/// A reply that embeds `QueryMeta`: reads its fields, handing the others to `own`.
pub fn read_reply<'a>(
    body: &'a [u8],
    mut own: impl FnMut(&'a str, &mut Reader<'a>) -> Result<bool, WireError>,
) -> Result<QueryMeta, WireError> {
    let mut meta = QueryMeta::default();
    each_field(&mut Reader::new(body), |name, r| {
        if own(name, r)? {
            return Ok(true);
        }
        meta.field(name, r)
    })?;
    Ok(meta)
}

/// A `map[string]string`, borrowed.
pub fn string_map<'a>(reader: &mut Reader<'a>) -> Result<Vec<(&'a str, &'a str)>, WireError> {
    let entries = reader.map_len()?;
    let mut pairs = Vec::with_capacity(entries);
    for _ in 0..entries {
        pairs.push((reader.str()?, reader.str()?));
    }
    Ok(pairs)
}

/// A `[]string`, borrowed; nil is empty.
pub fn string_list<'a>(reader: &mut Reader<'a>) -> Result<Vec<&'a str>, WireError> {
    let entries = reader.array_len()?;
    let mut items = Vec::with_capacity(entries);
    for _ in 0..entries {
        items.push(reader.str()?);
    }
    Ok(items)
}

/// Owned copies of borrowed pairs.
pub fn owned_pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Writes a struct's fields, checking (in debug builds) that their names come in the
/// sorted order go-msgpack writes them in and that the announced count is kept.
pub struct Fields<'w> {
    writer: &'w mut Writer,
    remaining: usize,
    last: &'static str,
}

impl<'w> Fields<'w> {
    pub fn new(writer: &'w mut Writer, count: usize) -> Fields<'w> {
        writer.map_len(count);
        Fields {
            writer,
            remaining: count,
            last: "",
        }
    }

    /// The writer for the value of field `name`.
    pub fn field(&mut self, name: &'static str) -> &mut Writer {
        debug_assert!(
            self.last < name,
            "field {name} written after {}: go-msgpack sorts field names",
            self.last
        );
        debug_assert!(self.remaining > 0, "more fields than announced at {name}");
        self.last = name;
        self.remaining -= 1;
        self.writer.str(name);
        self.writer
    }

    pub fn finish(self) {
        debug_assert_eq!(self.remaining, 0, "fewer fields than announced");
    }
}

/// A `map[string]string`; nil when `nil_when_empty` and there is nothing in it.
pub fn write_string_map<'p>(
    w: &mut Writer,
    pairs: impl ExactSizeIterator<Item = (&'p str, &'p str)>,
    nil_when_empty: bool,
) {
    if pairs.len() == 0 && nil_when_empty {
        w.nil();
        return;
    }
    w.map_len(pairs.len());
    for (k, v) in pairs {
        w.str(k);
        w.str(v);
    }
}

/// A `[]string`; nil when `nil_when_empty` and there is nothing in it.
pub fn write_string_list<'p>(
    w: &mut Writer,
    items: impl ExactSizeIterator<Item = &'p str>,
    nil_when_empty: bool,
) {
    if items.len() == 0 && nil_when_empty {
        w.nil();
        return;
    }
    w.array_len(items.len());
    for item in items {
        w.str(item);
    }
}

/// Consul's `QueryOptions`, embedded in every read request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueryOptions<'a> {
    pub token: &'a str,
    pub min_query_index: u64,
    /// `MaxQueryTime` in nanoseconds; 0 or less means the server's default.
    pub max_query_time_ns: i64,
    pub allow_stale: bool,
    pub require_consistent: bool,
    pub use_cache: bool,
    pub max_stale_duration_ns: i64,
    pub filter: &'a str,
    pub allow_not_modified_response: bool,
}

impl<'a> QueryOptions<'a> {
    /// Reads the field if it is one of `QueryOptions`'; `false` otherwise.
    pub fn field(&mut self, name: &str, r: &mut Reader<'a>) -> Result<bool, WireError> {
        match name {
            "Token" => self.token = r.str()?,
            "MinQueryIndex" => self.min_query_index = r.u64("MinQueryIndex")?,
            "MaxQueryTime" => self.max_query_time_ns = r.i64("MaxQueryTime")?,
            "AllowStale" => self.allow_stale = r.bool()?,
            "RequireConsistent" => self.require_consistent = r.bool()?,
            "UseCache" => self.use_cache = r.bool()?,
            "MaxStaleDuration" => self.max_stale_duration_ns = r.i64("MaxStaleDuration")?,
            "Filter" => self.filter = r.str()?,
            "AllowNotModifiedResponse" => self.allow_not_modified_response = r.bool()?,
            // Read and ignored: the agent's cache settings travel with the options.
            "MaxAge" | "MustRevalidate" | "StaleIfError" => r.skip()?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Consul's `ConsistencyLevel()`.
    pub fn consistency_level(&self) -> &'static str {
        if self.require_consistent {
            "consistent"
        } else if self.allow_stale {
            "stale"
        } else {
            "leader"
        }
    }
}

/// Consul's `WriteRequest`: a token.
pub fn write_request_field<'a>(
    token: &mut &'a str,
    name: &str,
    r: &mut Reader<'a>,
) -> Result<bool, WireError> {
    if name == "Token" {
        *token = r.str()?;
        return Ok(true);
    }
    Ok(false)
}

/// Consul's `QueryMeta`, embedded in every read reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueryMeta {
    pub index: u64,
    pub last_contact_ns: i64,
    pub known_leader: bool,
    pub consistency_level: &'static str,
    pub not_modified: bool,
    pub results_filtered_by_acls: bool,
}

/// `QueryMeta`'s field names, sorted.
const QUERY_META_FIELDS: [&str; 7] = [
    "Backend",
    "ConsistencyLevel",
    "Index",
    "KnownLeader",
    "LastContact",
    "NotModified",
    "ResultsFilteredByACLs",
];

impl QueryMeta {
    /// The same metadata, saying whether the token hid rows.
    pub fn filtered(&self, hidden: bool) -> QueryMeta {
        QueryMeta {
            results_filtered_by_acls: hidden,
            ..self.clone()
        }
    }

    fn write_field(&self, name: &str, w: &mut Writer) {
        match name {
            // `QueryBackendBlocking`: praetor answers every read as a blocking query.
            "Backend" => w.int(0),
            "ConsistencyLevel" => w.str(self.consistency_level),
            "Index" => w.uint(self.index),
            "KnownLeader" => w.bool(self.known_leader),
            "LastContact" => w.int(self.last_contact_ns),
            "NotModified" => w.bool(self.not_modified),
            "ResultsFilteredByACLs" => w.bool(self.results_filtered_by_acls),
            _ => unreachable!("not a QueryMeta field: {name}"),
        }
    }

    /// Writes a reply struct that embeds `QueryMeta` next to its own fields (`own`, sorted),
    /// merging the two in go-msgpack's order; `write_own` writes the value of each own
    /// field.
    pub fn write_reply(
        &self,
        w: &mut Writer,
        own: &[&'static str],
        write_own: impl FnMut(&str, &mut Writer),
    ) {
        write_merged(w, own, write_own, &QUERY_META_FIELDS, |name, w| {
            self.write_field(name, w)
        });
    }

    /// Reads the field if it is one of `QueryMeta`'s; `false` otherwise.
    pub fn field(&mut self, name: &str, r: &mut Reader) -> Result<bool, WireError> {
        match name {
            "Index" => self.index = r.u64("Index")?,
            "LastContact" => self.last_contact_ns = r.i64("LastContact")?,
            "KnownLeader" => self.known_leader = r.bool()?,
            "ConsistencyLevel" => {
                self.consistency_level = match r.str()? {
                    "leader" => "leader",
                    "stale" => "stale",
                    "consistent" => "consistent",
                    _ => "",
                }
            }
            "NotModified" => self.not_modified = r.bool()?,
            "ResultsFilteredByACLs" => self.results_filtered_by_acls = r.bool()?,
            "Backend" => r.skip()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Writes a struct made of its own fields (`own`, sorted) and an embedded struct's
/// (`embedded`, sorted), merged in go-msgpack's order.
fn write_merged(
    w: &mut Writer,
    own: &[&'static str],
    mut write_own: impl FnMut(&str, &mut Writer),
    embedded: &[&'static str],
    mut write_embedded: impl FnMut(&str, &mut Writer),
) {
    debug_assert!(own.windows(2).all(|p| p[0] < p[1]), "own fields sorted");
    debug_assert!(
        embedded.windows(2).all(|p| p[0] < p[1]),
        "embedded fields sorted"
    );
    let mut fields = Fields::new(w, own.len() + embedded.len());
    let (mut i, mut j) = (0, 0);
    while i < own.len() || j < embedded.len() {
        let take_own = j == embedded.len() || (i < own.len() && own[i] < embedded[j]);
        if take_own {
            let name = own[i];
            write_own(name, fields.field(name));
            i += 1;
        } else {
            let name = embedded[j];
            write_embedded(name, fields.field(name));
            j += 1;
        }
    }
    fields.finish();
}

/// `QueryOptions`' field names, sorted.
const QUERY_OPTIONS_FIELDS: [&str; 12] = [
    "AllowNotModifiedResponse",
    "AllowStale",
    "Filter",
    "MaxAge",
    "MaxQueryTime",
    "MaxStaleDuration",
    "MinQueryIndex",
    "MustRevalidate",
    "RequireConsistent",
    "StaleIfError",
    "Token",
    "UseCache",
];

impl QueryOptions<'_> {
    /// Writes a request struct that embeds `QueryOptions` next to its own fields (`own`,
    /// sorted), as a client sends it.
    pub fn write_request(
        &self,
        w: &mut Writer,
        own: &[&'static str],
        write_own: impl FnMut(&str, &mut Writer),
    ) {
        write_merged(
            w,
            own,
            write_own,
            &QUERY_OPTIONS_FIELDS,
            |name, w| match name {
                "AllowNotModifiedResponse" => w.bool(self.allow_not_modified_response),
                "AllowStale" => w.bool(self.allow_stale),
                "Filter" => w.str(self.filter),
                "MaxQueryTime" => w.int(self.max_query_time_ns),
                "MaxStaleDuration" => w.int(self.max_stale_duration_ns),
                "MinQueryIndex" => w.uint(self.min_query_index),
                "RequireConsistent" => w.bool(self.require_consistent),
                "Token" => w.str(self.token),
                "UseCache" => w.bool(self.use_cache),
                // The agent cache's settings: zero, which the server ignores.
                "MaxAge" | "StaleIfError" => w.int(0),
                _ => w.bool(false),
            },
        );
    }
}

/// Go's `time.Time.MarshalBinary` of a Unix time in nanoseconds, in UTC: version 1, seconds
/// since year 1, nanoseconds, and offset -1 (UTC). go-msgpack writes a `time.Time` this
/// way, as a raw string.
pub fn go_time_binary(unix_ns: i64) -> [u8; 15] {
    /// Seconds from 0001-01-01 to 1970-01-01 (Go's `unixToInternal`).
    const UNIX_TO_INTERNAL_SECONDS: i64 = 62_135_596_800;
    let seconds = unix_ns.div_euclid(1_000_000_000) + UNIX_TO_INTERNAL_SECONDS;
    let nanos = unix_ns.rem_euclid(1_000_000_000) as i32;
    let mut out = [0u8; 15];
    out[0] = 1;
    out[1..9].copy_from_slice(&seconds.to_be_bytes());
    out[9..13].copy_from_slice(&nanos.to_be_bytes());
    out[13..15].copy_from_slice(&(-1i16).to_be_bytes());
    out
}

/// The largest JSON or msgpack nesting converted between the two (free-form maps: proxy
/// configuration, metadata of config entries).
pub const CONVERTED_DEPTH_MAX: usize = 32;

/// Writes a JSON value as go-msgpack writes the `interface{}` it decodes to: objects as
/// maps (keys sorted, as Go maps are not, but decoders do not care), integers as integers,
/// other numbers as float64.
pub fn write_json(w: &mut Writer, value: &serde_json::Value) {
    write_json_at(w, value, 0)
}

fn write_json_at(w: &mut Writer, value: &serde_json::Value, depth: usize) {
    use serde_json::Value;
    if depth > CONVERTED_DEPTH_MAX {
        w.nil();
        return;
    }
    match value {
        Value::Null => w.nil(),
        Value::Bool(b) => w.bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => w.int(i),
            (None, Some(u)) => w.uint(u),
            _ => w.f64(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => w.str(s),
        Value::Array(items) => {
            w.array_len(items.len());
            for item in items {
                write_json_at(w, item, depth + 1);
            }
        }
        Value::Object(map) => {
            w.map_len(map.len());
            for (k, v) in map {
                w.str(k);
                write_json_at(w, v, depth + 1);
            }
        }
    }
}

/// Reads any msgpack value as JSON (for free-form fields stored as JSON text). Strings
/// that are not UTF-8 are refused; extensions are read as null.
pub fn read_json(r: &mut Reader) -> Result<serde_json::Value, WireError> {
    read_json_at(r, 0)
}

fn read_json_at(r: &mut Reader, depth: usize) -> Result<serde_json::Value, WireError> {
    use serde_json::Value;
    if depth > CONVERTED_DEPTH_MAX {
        return Err(WireError::TooDeep);
    }
    let marker = r.peek()?;
    Ok(match marker {
        0xc0 => {
            r.skip()?;
            Value::Null
        }
        0xc2 | 0xc3 => Value::Bool(r.bool()?),
        0xca | 0xcb => serde_json::Number::from_f64(r.f64()?).map_or(Value::Null, Value::Number),
        0x00..=0x7f | 0xcc..=0xcf => Value::from(r.u64("number")?),
        0xe0..=0xff | 0xd0..=0xd3 => Value::from(r.i64("number")?),
        0xa0..=0xbf | 0xd9..=0xdb | 0xc4..=0xc6 => Value::String(r.str()?.to_string()),
        0x90..=0x9f | 0xdc | 0xdd => {
            let n = r.array_len()?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(read_json_at(r, depth + 1)?);
            }
            Value::Array(items)
        }
        0x80..=0x8f | 0xde | 0xdf => {
            let n = r.map_len()?;
            let mut map = serde_json::Map::new();
            for _ in 0..n {
                let key = r.str()?.to_string();
                map.insert(key, read_json_at(r, depth + 1)?);
            }
            Value::Object(map)
        }
        _ => {
            r.skip()?;
            Value::Null
        }
    })
}

/// Decodes the request body of `method` with its typed decoder and drops it: what the
/// fuzz target drives, so that every decoder meets arbitrary bytes.
pub fn decode_any(method: &str, body: &[u8]) {
    fn decoded<T, E>(result: Result<T, E>) -> bool {
        result.is_ok()
    }
    let _ = match method {
        "KVS.Get" | "KVS.List" => decoded(kvs::KeyRequest::decode(body)),
        "KVS.ListKeys" => decoded(kvs::KeyListRequest::decode(body)),
        "KVS.Apply" => decoded(kvs::KvsRequest::decode(body)),
        "Catalog.Register" => decoded(catalog::decode_register(body, "dc1")),
        "Catalog.Deregister" => decoded(catalog::DeregisterRequest::decode(body)),
        "Catalog.ServiceNodes" | "Health.ServiceNodes" | "Health.ServiceChecks" => {
            decoded(catalog::ServiceSpecificRequest::decode(body))
        }
        "Catalog.NodeServices" | "Health.NodeChecks" | "Internal.NodeInfo" => {
            decoded(catalog::NodeSpecificRequest::decode(body))
        }
        "Health.ChecksInState" => decoded(catalog::ChecksInStateRequest::decode(body)),
        "Session.Apply" => decoded(session::decode_apply(body, "node")),
        "Session.Get" | "Session.Renew" => decoded(session::SessionSpecificRequest::decode(body)),
        "Txn.Apply" | "Txn.Read" => decoded(txn::decode(body)),
        "Coordinate.Update" => decoded(coordinate::UpdateRequest::decode(body)),
        "ACL.TokenRead" => decoded(acl::TokenGetRequest::decode(body)),
        "ACL.TokenList" | "ACL.PolicyList" | "ACL.RoleList" => {
            decoded(acl::ListRequest::decode(body))
        }
        "ACL.TokenSet" | "ACL.TokenClone" => decoded(
            acl::SetRequest::decode(acl::Object::Token, body)
                .and_then(|r| acl::read_token(&mut Reader::new(r.object))),
        ),
        "ACL.PolicySet" => decoded(
            acl::SetRequest::decode(acl::Object::Policy, body)
                .and_then(|r| acl::read_policy(&mut Reader::new(r.object))),
        ),
        "ACL.RoleSet" => decoded(
            acl::SetRequest::decode(acl::Object::Role, body)
                .and_then(|r| acl::read_role(&mut Reader::new(r.object))),
        ),
        "ACL.TokenDelete" => decoded(acl::DeleteRequest::decode(acl::Object::Token, body)),
        "ACL.PolicyDelete" => decoded(acl::DeleteRequest::decode(acl::Object::Policy, body)),
        "ACL.RoleDelete" => decoded(acl::DeleteRequest::decode(acl::Object::Role, body)),
        "ACL.PolicyRead" => decoded(acl::GetRequest::decode(acl::Object::Policy, body)),
        "ACL.RoleRead" => decoded(acl::GetRequest::decode(acl::Object::Role, body)),
        // Auth methods, binding rules, login, logout and bootstrap (issue #36, ACL auth).
        "ACL.AuthMethodRead" => decoded(acl::GetRequest::decode(acl::Object::AuthMethod, body)),
        "ACL.BindingRuleRead" => decoded(acl::GetRequest::decode(acl::Object::BindingRule, body)),
        "ACL.AuthMethodList" | "ACL.BindingRuleList" => decoded(acl::ListRequest::decode(body)),
        "ACL.AuthMethodSet" => decoded(
            acl::SetRequest::decode(acl::Object::AuthMethod, body)
                .and_then(|r| acl::read_auth_method(&mut Reader::new(r.object))),
        ),
        "ACL.BindingRuleSet" => decoded(
            acl::SetRequest::decode(acl::Object::BindingRule, body)
                .and_then(|r| acl::read_binding_rule(&mut Reader::new(r.object))),
        ),
        "ACL.AuthMethodDelete" => {
            decoded(acl::DeleteRequest::decode(acl::Object::AuthMethod, body))
        }
        "ACL.BindingRuleDelete" => {
            decoded(acl::DeleteRequest::decode(acl::Object::BindingRule, body))
        }
        "ACL.Login" => decoded(acl::LoginRequest::decode(body)),
        "ACL.Logout" => decoded(acl::LogoutRequest::decode(body)),
        "ACL.BootstrapTokens" => decoded(acl::BootstrapRequest::decode(body)),
        "Internal.EventFire" => decoded(internal::EventFireRequest::decode(body)),
        "Internal.ServiceDump" | "Internal.ExportedServicesForPeer" => {
            decoded(internal::ServiceDumpRequest::decode(body))
        }
        // Config entries (issue #36, mesh).
        "ConfigEntry.Apply" | "ConfigEntry.Delete" => {
            decoded(config_entry::ConfigEntryRequest::decode(body))
        }
        "ConfigEntry.Get" | "ConfigEntry.List" => {
            decoded(config_entry::ConfigEntryQuery::decode(body))
        }
        "ConfigEntry.ListAll" => decoded(config_entry::ConfigEntryListAllRequest::decode(body)),
        "PreparedQuery.Apply" => decoded(prepared_query::QueryRequest::decode(body)),
        "PreparedQuery.Get" => decoded(prepared_query::SpecificRequest::decode(body)),
        "PreparedQuery.Execute" | "PreparedQuery.Explain" => {
            decoded(prepared_query::ExecuteRequest::decode(body))
        }
        "PreparedQuery.ExecuteRemote" => {
            decoded(prepared_query::ExecuteRemoteRequest::decode(body))
        }
        "ConnectCA.Sign" | "ConnectCA.SignIntermediate" | "AutoEncrypt.Sign" => {
            decoded(connect_ca::CaSignRequest::decode(body))
        }
        "FederationState.Apply" => decoded(federation_state::ApplyRequest::decode(body)),
        // The CA's configuration and the operator's calls (issue #36, operator).
        "ConnectCA.ConfigurationSet" => decoded(connect_ca::CaRequest::decode(body)),
        "Operator.RaftRemovePeerByAddress" | "Operator.RaftRemovePeerByID" => {
            decoded(operator::RaftRemovePeerRequest::decode(body))
        }
        "Operator.AutopilotSetConfiguration" => {
            decoded(operator::AutopilotSetConfigRequest::decode(body))
        }
        // praetor's own leadership transfer (issue #36, dcstate); `Operator.Usage` is a
        // `DCSpecificRequest`, the default below.
        "Operator.TransferLeader" => decoded(operator::RaftRemovePeerRequest::decode(body)),
        // The catalog's, health's, UI's and federation states' other reads (issue #36, dccatalog).
        "Catalog.NodeServiceList" => decoded(catalog::NodeSpecificRequest::decode(body)),
        "Catalog.GatewayServices" => decoded(catalog::ServiceSpecificRequest::decode(body)),
        "FederationState.Get" => decoded(federation_state::StateQuery::decode(body)),
        "FederationState.List" | "FederationState.ListMeshGateways" => {
            decoded(catalog::DcSpecificRequest::decode(body))
        }
        // Intentions and the discovery chain (issue #36, intentions).
        "Intention.Apply" => decoded(intention::IntentionRequest::decode(body)),
        "Intention.Get" | "Intention.Match" | "Intention.Check" => {
            decoded(intention::IntentionQueryRequest::decode(body))
        }
        "Intention.List" => decoded(intention::IntentionListRequest::decode(body)),
        "DiscoveryChain.Get" => decoded(discovery_chain::DiscoveryChainRequest::decode(body)),
        // The UI's summaries (issue #36, r10ui).
        "Internal.GatewayServiceDump" | "Internal.ServiceTopology" => {
            decoded(catalog::ServiceSpecificRequest::decode(body))
        }
        // Peering (praetor's own methods) and exported services (issue #36, peering).
        "Peering.GenerateToken" => decoded(peering::GenerateTokenRequest::decode(body)),
        "Peering.Establish" => decoded(peering::EstablishRequest::decode(body)),
        "Peering.Read" | "Peering.Delete" => decoded(peering::PeeringNameRequest::decode(body)),
        "Peering.List" | "ConfigEntry.GetResolvedExportedServices" => {
            decoded(peering::PartitionRequest::decode(body))
        }
        // Not a method: the request a byte-5 (`RPCSnapshot`) connection opens with.
        "RPCSnapshot" => decoded(snapshot::SnapshotRequest::decode(body)),
        // The gossip keyrings (issue #36, r11key).
        "Internal.KeyringOperation" => decoded(keyring::KeyringRequest::decode(body)),
        _ => decoded(catalog::DcSpecificRequest::decode(body)),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_meta_merges_with_a_reply_in_sorted_order() {
        let meta = QueryMeta {
            index: 42,
            last_contact_ns: 5,
            known_leader: true,
            consistency_level: "leader",
            ..QueryMeta::default()
        };
        let mut w = Writer::new();
        meta.write_reply(&mut w, &["Entries"], |_, w| w.nil());
        let mut r = Reader::new(&w.buf);
        let mut names = Vec::new();
        each_field(&mut r, |name, r| {
            names.push(name);
            if name == "Index" {
                assert_eq!(r.u64("Index")?, 42);
                return Ok(true);
            }
            Ok(false)
        })
        .unwrap();
        assert_eq!(
            names,
            [
                "Backend",
                "ConsistencyLevel",
                "Entries",
                "Index",
                "KnownLeader",
                "LastContact",
                "NotModified",
                "ResultsFilteredByACLs"
            ]
        );
    }

    #[test]
    fn query_options_read_every_field_and_leave_others() {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 5);
        f.field("AllowStale").bool(true);
        f.field("Key").str("k");
        f.field("MaxQueryTime").int(1_000_000_000);
        f.field("MinQueryIndex").uint(7);
        f.field("Token").str("secret");
        f.finish();
        let mut options = QueryOptions::default();
        let mut key = "";
        each_field(&mut Reader::new(&w.buf), |name, r| {
            if name == "Key" {
                key = r.str()?;
                return Ok(true);
            }
            options.field(name, r)
        })
        .unwrap();
        assert_eq!(key, "k");
        assert_eq!(options.token, "secret");
        assert_eq!(options.min_query_index, 7);
        assert_eq!(options.max_query_time_ns, 1_000_000_000);
        assert_eq!(options.consistency_level(), "stale");
    }

    #[test]
    fn go_times_marshal_as_go_does() {
        // time.Unix(0, 0).UTC().MarshalBinary()
        assert_eq!(
            go_time_binary(0),
            [1, 0, 0, 0, 14, 119, 145, 247, 0, 0, 0, 0, 0, 255, 255]
        );
        // time.Unix(1, 5).UTC(): seconds + 1, nanoseconds 5.
        let t = go_time_binary(1_000_000_005);
        assert_eq!(&t[1..9], &(62_135_596_801i64).to_be_bytes());
        assert_eq!(&t[9..13], &5i32.to_be_bytes());
    }

    #[test]
    fn json_and_msgpack_convert_both_ways() {
        let value = serde_json::json!({
            "DestinationServiceName": "web",
            "Upstreams": [{"DestinationName": "db", "LocalBindPort": 9191}],
            "Config": {"ratio": 0.5, "negative": -3, "on": true, "none": null}
        });
        let mut w = Writer::new();
        write_json(&mut w, &value);
        assert_eq!(read_json(&mut Reader::new(&w.buf)).unwrap(), value);
        let deep = vec![0x91u8; CONVERTED_DEPTH_MAX + 5];
        assert!(read_json(&mut Reader::new(&deep)).is_err());
    }

    #[test]
    #[should_panic(expected = "go-msgpack sorts field names")]
    #[cfg(debug_assertions)]
    fn unsorted_fields_are_caught() {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 2);
        f.field("Key");
        f.field("Datacenter");
    }
}
