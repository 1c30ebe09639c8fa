//! Cluster peering over HTTP (Consul's `agent/peering_endpoint.go` and the
//! `PeeringService` behind it, `agent/rpc/peering/service.go`):
//!
//! - `POST /v1/peering/token` `{PeerName, Meta, ServerExternalAddresses}` →
//!   `{PeeringToken}`: creates (or reuses) the acceptor's `PENDING` peering and a fresh
//!   establishment secret; a second token for the same name rotates the secret.
//! - `POST /v1/peering/establish` `{PeerName, PeeringToken, Meta}` → `{}`: validates the
//!   token and stores the dialer's peering as `ESTABLISHING`.
//! - `GET /v1/peering/<name>`, `GET /v1/peerings`: blocking reads of the table.
//! - `DELETE /v1/peering/<name>`: marks the peering `DELETING`, then removes it.
//!
//! `peering:write` for the writes, `peering:read` for the reads (the route's rule,
//! [`ACL_RULE`]). Writes run on the leader, as Consul forwards the RPC: a client agent, a
//! follower, and a request naming another datacenter (`?dc=`, [`across`]) send the typed
//! call `Peering.*` (praetor's own methods, `api::rpc::client_peering`), which the leader
//! serves from the same pieces (`api::rpc::peering`): the checked arguments
//! ([`TokenArgs`], [`EstablishArgs`]), the store command ([`token_write`],
//! [`establish_write`], [`deletion`]) and the renderers ([`read_answer`], [`list_answer`],
//! [`exported_answer`]), so every path answers the same bytes. The secret exchange and the
//! peer stream that move a peering to `ACTIVE` run on the gRPC thread (`xds::peerstream`).

use super::authz::{Authz, CustomRule};
use super::context::now_unix_ns;
use super::rpc::client_peering;
use super::{
    query_options, query_options_in, run_query, ApiError, AsyncResponder, Context, Outcome, Query,
    QueryMeta, QueryOptions, Reply, Request, WriteOp,
};
use crate::consul::peering::{self as shapes, PeeringToken, TokenRemote};
use crate::consul::rpc::peering::ExportedService;
use crate::proto::http::Method;
use crate::shard::watch::WatchSet;
use crate::store::peering::{self, Peering, PeeringOp, PeeringRemote, PeeringState, SecretsOp};
use crate::store::{Command, CommandResult, StoreVersion, Table, Tables};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// `peering:read` on GET, `peering:write` otherwise.
pub const ACL_RULE: CustomRule = CustomRule {
    name: "peering:read on GET, peering:write otherwise",
    check: acl_check,
};

fn acl_check(_ctx: &Context, request: &Request, authz: &Authz) -> Result<(), ApiError> {
    if request.method == Method::Get {
        authz.require(authz.authorizer.peering_read())
    } else {
        authz.require(authz.authorizer.peering_write())
    }
}

/// The request body as a JSON object, checked against the Consul struct it decodes into
/// (unknown fields and wrong types refused in Go's words), with Consul's 400.
fn body_object(
    request: &Request,
    schema: &'static crate::consul::body::Schema,
) -> Result<Map<String, Value>, ApiError> {
    if request.body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("Body decoding failed: EOF"));
    }
    match crate::consul::body::parse_strict(request.body, schema) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad_request("Body decoding failed: EOF")),
        Err(e) => Err(ApiError::bad_request(format!("Body decoding failed: {e}"))),
    }
}

/// A field of a Go-decoded body: Go matches field names case-insensitively.
fn field<'m>(map: &'m Map<String, Value>, name: &str) -> Option<&'m Value> {
    map.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
        .filter(|v| !v.is_null())
}

fn string_field(map: &Map<String, Value>, name: &str) -> Result<String, ApiError> {
    match field(map, name) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(ApiError::bad_request(format!(
            "Body decoding failed: json: cannot unmarshal into field {name} of type string"
        ))),
    }
}

fn string_list_field(map: &Map<String, Value>, name: &str) -> Result<Vec<String>, ApiError> {
    let wrong = || {
        ApiError::bad_request(format!(
            "Body decoding failed: json: cannot unmarshal into field {name} of type []string"
        ))
    };
    match field(map, name) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(wrong))
            .collect(),
        Some(_) => Err(wrong()),
    }
}

/// `Meta`, validated with Consul's metadata rules.
fn meta_field(map: &Map<String, Value>) -> Result<BTreeMap<String, String>, ApiError> {
    let wrong = || {
        ApiError::bad_request(
            "Body decoding failed: json: cannot unmarshal into field Meta of type map[string]string",
        )
    };
    let meta: BTreeMap<String, String> = match field(map, "Meta") {
        None => BTreeMap::new(),
        Some(Value::Object(pairs)) => pairs
            .iter()
            .map(|(k, v)| Ok((k.clone(), v.as_str().ok_or_else(wrong)?.to_string())))
            .collect::<Result<_, ApiError>>()?,
        Some(_) => return Err(wrong()),
    };
    validate_meta(&meta)?;
    Ok(meta)
}

/// Consul's metadata rules for a peering's `Meta`.
fn validate_meta(meta: &BTreeMap<String, String>) -> Result<(), ApiError> {
    let pairs: Vec<(String, String)> = meta.clone().into_iter().collect();
    crate::consul::registration::validate_meta(&pairs, false)
        .map_err(|e| ApiError::bad_request(format!("meta tags failed validation: {e}")))
}

/// A partition other than `default` is enterprise-only, as Consul CE answers it.
fn check_partition(map: &Map<String, Value>, request: &Request) -> Result<(), ApiError> {
    let named = string_field(map, "Partition")?;
    let query = request.query.get("partition").unwrap_or_default();
    check_partition_name(&named)?;
    check_partition_name(query)
}

/// Only the `default` partition (or none) exists in CE.
pub fn check_partition_name(partition: &str) -> Result<(), ApiError> {
    if !partition.is_empty() && partition != "default" {
        return Err(ApiError::bad_request(
            "Partitions are a Consul Enterprise feature",
        ));
    }
    Ok(())
}

/// The server name and CA certificates of this cluster's peering endpoint (Consul's
/// `GetTLSMaterials`): both come from the Connect CA.
fn tls_materials(tables: &Tables, datacenter: &str) -> Result<(String, Vec<String>), ApiError> {
    let ca = &tables.mesh.ca;
    let trust_domain = ca.trust_domain().unwrap_or_default();
    if ca.roots.is_empty() || trust_domain.is_empty() {
        return Err(ApiError::Internal(
            "CA has not finished initializing".into(),
        ));
    }
    let pems = ca
        .roots
        .iter()
        .map(|root| {
            let mut pem = root.root_cert_pem.to_string();
            if !pem.ends_with('\n') {
                pem.push('\n');
            }
            pem
        })
        .collect();
    Ok((shapes::server_name(datacenter, &trust_domain), pems))
}

/// The addresses a peer dials this cluster's servers at: each server of the `consul`
/// service (its node's `wan` tagged address, else its address) at this server's gRPC TLS
/// port. praetor's servers do not advertise their gRPC ports in the catalog, so every
/// server is assumed to use this one's (see `docs/decisions.md`).
fn server_addresses(ctx: &Context, tables: &Tables) -> Result<Vec<String>, ApiError> {
    let port = ctx.config().ports.grpc_tls;
    if port <= 0 {
        return Err(ApiError::Internal(
            "a grpc bind port must be specified in the configuration for all servers".into(),
        ));
    }
    let mut addresses: Vec<String> =
        crate::store::catalog::read::check_service_nodes(tables, "consul")
            .iter()
            .map(|row| {
                let host = row
                    .node
                    .tagged_addresses
                    .get("wan")
                    .map_or(row.node.address.as_str(), |a| a.as_str());
                join_host_port(host, port)
            })
            .collect();
    if addresses.is_empty() {
        addresses.push(join_host_port(&ctx.config().advertise().to_string(), port));
    }
    addresses.sort();
    addresses.dedup();
    Ok(addresses)
}

fn join_host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Whether a request is made as its typed call: one naming another datacenter, or a write
/// on a client agent or a follower.
fn write_by_call(ctx: &Context, datacenter: &str) -> bool {
    !datacenter.is_empty() || ctx.writes_by_call()
}

/// A token request's checked arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenArgs {
    pub name: String,
    pub meta: BTreeMap<String, String>,
    pub external: Vec<String>,
}

impl TokenArgs {
    /// Checks a typed call's arguments as the HTTP handler checks its body.
    pub fn checked(
        name: &str,
        partition: &str,
        meta: BTreeMap<String, String>,
        external: Vec<String>,
    ) -> Result<TokenArgs, ApiError> {
        if name.is_empty() {
            return Err(ApiError::bad_request(
                "PeerName is required in the payload when generating a new peering token.",
            ));
        }
        check_partition_name(partition)?;
        shapes::validate_peer_name(name).map_err(ApiError::bad_request)?;
        validate_meta(&meta)?;
        Ok(TokenArgs {
            name: name.to_string(),
            meta,
            external,
        })
    }
}

/// `POST /v1/peering/token`.
pub fn generate_token(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    generate_token_in(ctx, request, reply, "")
}

/// `POST /v1/peering/token` in `datacenter` (empty: this one).
fn generate_token_in(
    ctx: &Context,
    request: &Request,
    _reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let body = body_object(
        request,
        &crate::consul::bodies::PEERING_GENERATE_TOKEN_REQUEST,
    )?;
    let name = string_field(&body, "PeerName")?;
    if name.is_empty() {
        return Err(ApiError::bad_request(
            "PeerName is required in the payload when generating a new peering token.",
        ));
    }
    check_partition(&body, request)?;
    shapes::validate_peer_name(&name).map_err(ApiError::bad_request)?;
    let meta = meta_field(&body)?;
    let external = string_list_field(&body, "ServerExternalAddresses")?;
    let args = TokenArgs {
        name,
        meta,
        external,
    };
    if write_by_call(ctx, datacenter) {
        return Ok(client_peering::generate_token(
            ctx, request, &args, datacenter,
        ));
    }
    let (command, token) = token_write(ctx, &args)?;
    let text = shapes::encode_token(&token);
    Ok(Outcome::Write(WriteOp {
        command,
        respond: Box::new(move |result, reply| match written(result) {
            Ok(()) => token_answer(&text, reply),
            Err(error) => reply.error(&error),
        }),
    }))
}

/// `{"PeeringToken": …}`, the token request's answer.
pub fn token_answer(text: &str, reply: &mut Reply) {
    reply.json(200, b"", &serde_json::json!({ "PeeringToken": text }));
}

/// On the leader: the peering write of a token request (a new `PENDING` peering, or the
/// stored one, with a fresh establishment secret) and the token that hands it out.
pub fn token_write(ctx: &Context, args: &TokenArgs) -> Result<(Command, PeeringToken), ApiError> {
    let config = ctx.config();
    if !config.connect.enabled {
        return Err(ApiError::Internal(
            "connect.enabled must be set to true in the server's configuration when generating peering tokens".into(),
        ));
    }
    if config.ports.grpc_tls <= 0 {
        return Err(ApiError::Internal(
            "TLS for gRPC must be enabled when generating peering tokens".into(),
        ));
    }
    let tables = ctx.current_version();
    let (server_name, ca) = tls_materials(&tables, &config.datacenter)?;
    let addresses = server_addresses(ctx, &tables)?;
    let row = match peering::get(&tables, &args.name) {
        Some(existing) if existing.should_dial() => {
            return Err(ApiError::Internal(format!(
                "cannot create peering with name: {:?}; there is already an established peering",
                existing.name
            )))
        }
        // Consul writes the stored peering back unchanged (its meta too) with the new
        // secret.
        Some(existing) => (**existing).clone(),
        None => Peering {
            id: uuid::Uuid::new_v4().to_string(),
            name: args.name.clone(),
            meta: args.meta.clone(),
            ..Default::default()
        },
    };
    let secret = uuid::Uuid::new_v4().to_string();
    let external = &args.external;
    let token = PeeringToken {
        ca: Some(ca),
        manual_server_addresses: (!external.is_empty()).then(|| external.clone()),
        server_addresses: Some(addresses),
        server_name,
        peer_id: row.id.clone(),
        establishment_secret: secret.clone(),
        remote: TokenRemote {
            partition: "default".into(),
            datacenter: config.datacenter.clone(),
            locality: None,
        },
    };
    let command = Command::Peering(PeeringOp::Write {
        peering: Box::new(row),
        secrets: Some(SecretsOp::GenerateToken {
            establishment_secret: secret,
        }),
    });
    Ok((command, token))
}

/// A peering write's result: applied, or Consul's error for it.
pub fn written(result: CommandResult) -> Result<(), ApiError> {
    match result {
        CommandResult::Bool(true) => Ok(()),
        other => Err(write_failure(other)),
    }
}

fn write_failure(result: CommandResult) -> ApiError {
    match result {
        CommandResult::Error(reason) => {
            ApiError::Internal(format!("failed to write peering: {reason}"))
        }
        other => ApiError::Internal(format!("failed to write peering: {other:?}")),
    }
}

/// An establishment request's checked arguments: the token decoded and validated.
#[derive(Clone, Debug)]
pub struct EstablishArgs {
    pub name: String,
    /// The token as the request carried it (base64).
    pub text: String,
    pub token: PeeringToken,
    pub meta: BTreeMap<String, String>,
}

impl EstablishArgs {
    /// Checks a typed call's arguments as the HTTP handler checks its body.
    pub fn checked(
        name: &str,
        partition: &str,
        text: &str,
        meta: BTreeMap<String, String>,
    ) -> Result<EstablishArgs, ApiError> {
        if name.is_empty() {
            return Err(ApiError::bad_request(
                "PeerName is required in the payload when establishing a peering.",
            ));
        }
        if text.is_empty() {
            return Err(ApiError::bad_request(
                "PeeringToken is required in the payload when establishing a peering.",
            ));
        }
        check_partition_name(partition)?;
        shapes::validate_peer_name(name).map_err(ApiError::bad_request)?;
        let token = decode_checked_token(text)?;
        validate_meta(&meta)?;
        Ok(EstablishArgs {
            name: name.to_string(),
            text: text.to_string(),
            token,
            meta,
        })
    }
}

fn decode_checked_token(text: &str) -> Result<PeeringToken, ApiError> {
    let token = shapes::decode_token(text).map_err(|e| ApiError::bad_request(e.to_string()))?;
    shapes::validate_token(&token).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(token)
}

/// `POST /v1/peering/establish`.
pub fn establish(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    establish_in(ctx, request, reply, "")
}

/// `POST /v1/peering/establish` in `datacenter` (empty: this one).
fn establish_in(
    ctx: &Context,
    request: &Request,
    _reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let body = body_object(request, &crate::consul::bodies::PEERING_ESTABLISH_REQUEST)?;
    let name = string_field(&body, "PeerName")?;
    if name.is_empty() {
        return Err(ApiError::bad_request(
            "PeerName is required in the payload when establishing a peering.",
        ));
    }
    let text = string_field(&body, "PeeringToken")?;
    if text.is_empty() {
        return Err(ApiError::bad_request(
            "PeeringToken is required in the payload when establishing a peering.",
        ));
    }
    check_partition(&body, request)?;
    shapes::validate_peer_name(&name).map_err(ApiError::bad_request)?;
    let token = decode_checked_token(&text)?;
    let meta = meta_field(&body)?;
    let args = EstablishArgs {
        name,
        text,
        token,
        meta,
    };
    if write_by_call(ctx, datacenter) {
        return Ok(client_peering::establish(ctx, request, &args, datacenter));
    }
    let (command, addresses) = establish_write(ctx, &args)?;
    let name = args.name;
    Ok(Outcome::Write(WriteOp {
        command,
        respond: Box::new(move |result, reply| match written(result) {
            Ok(()) => {
                established(&name, &addresses);
                empty_answer(reply);
            }
            Err(error) => reply.error(&error),
        }),
    }))
}

/// Logs a peering stored as `ESTABLISHING`, which the leader now dials.
pub fn established(name: &str, addresses: &str) {
    log::info!("peering: peering {name:?} stored as ESTABLISHING; the leader dials {addresses}");
}

/// `{}`, the answer of an establishment.
pub fn empty_answer(reply: &mut Reply) {
    reply.json(200, b"", &serde_json::json!({}));
}

/// On the leader: the dialer's peering write of an establishment, and the addresses it
/// dials (for the log).
pub fn establish_write(ctx: &Context, args: &EstablishArgs) -> Result<(Command, String), ApiError> {
    let token = &args.token;
    let name = &args.name;
    let tables = ctx.current_version();
    let (own_server_name, _) = tls_materials(&tables, &ctx.config().datacenter)
        .map_err(|e| ApiError::Internal(format!("failed to fetch TLS materials: {}", e.text())))?;
    if own_server_name == token.server_name {
        return Err(ApiError::bad_request(format!(
            "cannot create a peering within the same cluster {own_server_name:?}. Refer to the `exported-services` documentation if you want to export between partitions without peering"
        )));
    }
    let existing = peering::get(&tables, name);
    check_token_unused(&tables, name, existing, token)?;
    let id = match existing {
        Some(existing) if !existing.should_dial() => {
            return Err(ApiError::Internal(format!(
                "cannot create peering with name: {:?}; there is an existing peering expecting to be dialed",
                existing.name
            )))
        }
        Some(existing) => existing.id.clone(),
        None => uuid::Uuid::new_v4().to_string(),
    };
    let row = Peering {
        id,
        name: name.clone(),
        meta: args.meta.clone(),
        state: PeeringState::Establishing,
        peer_id: token.peer_id.clone(),
        peer_ca_pems: token.ca().to_vec(),
        peer_server_name: token.server_name.clone(),
        peer_server_addresses: token.server_addresses().to_vec(),
        manual_server_addresses: token.manual_server_addresses().to_vec(),
        remote: PeeringRemote {
            datacenter: token.remote.datacenter.clone(),
            partition: token.remote.partition.clone(),
        },
        ..Default::default()
    };
    let addresses = row.peer_server_addresses.join(", ");
    let command = Command::Peering(PeeringOp::Write {
        peering: Box::new(row),
        secrets: Some(SecretsOp::Dialed {
            establishment_secret: token.establishment_secret.clone(),
        }),
    });
    Ok((command, addresses))
}

/// A token is single use: the dialer refuses one it has established with before (under
/// this name, or one naming a peer another peering already dials), and the acceptor's
/// `ExchangeSecret` refuses it once its secret was consumed.
fn check_token_unused(
    tables: &Tables,
    name: &str,
    existing: Option<&std::sync::Arc<Peering>>,
    token: &PeeringToken,
) -> Result<(), ApiError> {
    let reused = "a new peering token must be generated: this token was already used";
    if let Some(existing) = existing {
        let used = peering::secrets(tables, &existing.id)
            .and_then(|s| s.establishment_secret.as_deref())
            == Some(token.establishment_secret.as_str());
        if used {
            return Err(ApiError::Status(403, reused.into()));
        }
    }
    let other = peering::list(tables)
        .find(|p| p.peer_id == token.peer_id && !p.name.eq_ignore_ascii_case(name));
    if let Some(other) = other {
        return Err(ApiError::Status(
            403,
            format!("{reused} by peering {:?}", other.name),
        ));
    }
    Ok(())
}

/// What a read of one peering depends on: the peerings table's index, the peering's key,
/// and its imports (its `StreamStatus.ImportedServices`).
pub fn read_watch(tables: &Tables, name: &str) -> (u64, WatchSet) {
    let key = crate::store::catalog::rows::fold(name).into_owned();
    (
        peering::index(tables),
        WatchSet::new()
            .key(Table::Peerings, key.clone())
            .key(Table::ImportedServices, key),
    )
}

/// What the list of peerings depends on.
pub fn list_watch(tables: &Tables) -> (u64, WatchSet) {
    (
        peering::index(tables),
        WatchSet::new()
            .table(Table::Peerings)
            .table(Table::ImportedServices),
    )
}

/// `row` with its stream status's service lists filled in from the store, as Consul fills
/// them from its stream tracker: the services imported from the peer, and those this
/// cluster's `exported-services` entry exports to it (while the peering is not deleted).
pub fn with_stream_services(tables: &Tables, row: &Peering) -> Peering {
    let mut row = row.clone();
    row.stream_status.imported_services = peering::imported_services(tables, &row.name)
        .map(|s| s.service.clone())
        .collect();
    row.stream_status.exported_services = if row.is_active() {
        services_exported_to(tables, &row.name)
    } else {
        Vec::new()
    };
    row
}

/// `GET /v1/peering/<name>`'s answer: the peering, or Consul's 404.
pub fn read_answer(name: &str, row: Option<&Peering>, meta: QueryMeta, reply: &mut Reply) {
    match row {
        Some(row) => {
            let mut headers = Vec::with_capacity(128);
            meta.write_headers(&mut headers);
            reply.json(200, &headers, &shapes::api_peering(row));
        }
        None => reply.error(&ApiError::NotFound(format!(
            "Peering not found for {name:?}"
        ))),
    }
}

/// `GET /v1/peerings`' answer.
pub fn list_answer(rows: &[&Peering], meta: QueryMeta, reply: &mut Reply) {
    let mut headers = Vec::with_capacity(128);
    meta.write_headers(&mut headers);
    let rows: Vec<_> = rows.iter().map(|p| shapes::api_peering(p)).collect();
    reply.json(200, &headers, &rows);
}

/// `GET /v1/peering/<name>`.
struct ReadQuery {
    name: String,
}

impl Query for ReadQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        read_watch(tables, &self.name)
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let row = peering::get(tables, &self.name).map(|row| with_stream_services(tables, row));
        read_answer(&self.name, row.as_ref(), meta, reply);
    }
}

/// `GET /v1/peerings`.
struct ListQuery;

impl Query for ListQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        list_watch(tables)
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let rows: Vec<Peering> = peering::list(tables)
            .map(|p| with_stream_services(tables, p))
            .collect();
        let rows: Vec<&Peering> = rows.iter().collect();
        list_answer(&rows, meta, reply);
    }
}

/// A read's options: `?dc` checked when the request is this datacenter's.
fn read_options(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Result<QueryOptions, ApiError> {
    if datacenter.is_empty() {
        query_options(ctx, &request.query)
    } else {
        query_options_in(ctx, &request.query)
    }
}

pub fn list(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    list_in(ctx, request, reply, "")
}

/// `GET /v1/peerings` in `datacenter` (empty: this one).
fn list_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let options = read_options(ctx, request, datacenter)?;
    if !datacenter.is_empty() || ctx.reads_by_call(&options) {
        return Ok(client_peering::list(ctx, request, options, datacenter));
    }
    run_query(ctx, ListQuery, options, reply)
}

/// `GET|DELETE /v1/peering/<name>`.
pub fn by_name(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    by_name_in(ctx, request, reply, "")
}

/// `GET|DELETE /v1/peering/<name>` in `datacenter` (empty: this one).
fn by_name_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let name = request.rest;
    if name.is_empty() {
        return Err(ApiError::bad_request("Must specify a name to fetch."));
    }
    if request.method == Method::Delete {
        return delete(ctx, request, name, datacenter);
    }
    let options = read_options(ctx, request, datacenter)?;
    if !datacenter.is_empty() || ctx.reads_by_call(&options) {
        return Ok(client_peering::read(
            ctx, request, name, options, datacenter,
        ));
    }
    run_query(
        ctx,
        ReadQuery {
            name: name.to_string(),
        },
        options,
        reply,
    )
}

/// Marks the peering `DELETING` (with the time), then removes it. The stream of this
/// peering sees the mark and sends the peer `Terminated` before it ends. Consul's leader
/// removes the row once it has torn down what was imported; nothing is imported yet
/// (docs/peering.md), so the removal follows at once. A missing peering, or one already
/// being deleted, answers 200 as Consul does.
fn delete(
    ctx: &Context,
    request: &Request,
    name: &str,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    if write_by_call(ctx, datacenter) {
        return Ok(client_peering::delete(ctx, request, name, datacenter));
    }
    let Some((marked, remove)) = deletion(&ctx.current_version(), name) else {
        return Ok(Outcome::Async(Box::pin(async { done() })));
    };
    let deferred = ctx.deferred();
    Ok(Outcome::Async(Box::pin(async move {
        if let Some(error) = proposal_error(deferred.propose(&marked).await) {
            return Box::new(move |reply: &mut Reply| reply.error(&error)) as AsyncResponder;
        }
        if let Some(error) = proposal_error(deferred.propose(&remove).await) {
            removal_failed(&error);
        }
        done()
    })))
}

/// The two writes of a deletion — the mark, then the removal — or `None` when there is
/// nothing to delete (no such peering, or one already being deleted), which answers 200.
pub fn deletion(tables: &Tables, name: &str) -> Option<(Command, Command)> {
    let existing = peering::get(tables, name)?;
    if existing.state == PeeringState::Deleting {
        return None;
    }
    let marked = Command::Peering(PeeringOp::Write {
        peering: Box::new(Peering {
            id: existing.id.clone(),
            name: existing.name.clone(),
            state: PeeringState::Deleting,
            peer_server_addresses: existing.peer_server_addresses.clone(),
            manual_server_addresses: existing.manual_server_addresses.clone(),
            deleted_at: Some(crate::proto::rfc3339::format_ns(now_unix_ns())),
            ..(**existing).clone()
        }),
        secrets: None,
    });
    let remove = Command::Peering(PeeringOp::Remove {
        name: existing.name.clone(),
    });
    Some((marked, remove))
}

/// The peering stays marked; a later DELETE answers 200 and the operator sees it as
/// DELETING.
pub fn removal_failed(error: &ApiError) {
    log::warn!(
        "peering: removing a peering marked for deletion failed: {}",
        error.text()
    );
}

/// A deletion's answer: 200, empty.
pub fn deleted_answer(reply: &mut Reply) {
    reply.send(200, None, b"", b"");
}

fn done() -> AsyncResponder {
    Box::new(deleted_answer)
}

fn proposal_error(result: crate::replica::ProposalResult) -> Option<ApiError> {
    match result {
        crate::replica::ProposalResult::Applied(CommandResult::Bool(true)) => None,
        crate::replica::ProposalResult::Applied(other) => Some(write_failure(other)),
        other => ApiError::from_proposal(&other),
    }
}

/// `GET /v1/exported-services`: Consul's `mesh:read`, as its
/// `ConfigEntry.GetResolvedExportedServices` checks.
pub const EXPORTED_SERVICES_RULE: CustomRule = CustomRule {
    name: "mesh:read",
    check: mesh_read,
};

fn mesh_read(_ctx: &Context, _request: &Request, authz: &Authz) -> Result<(), ApiError> {
    authz.require(authz.authorizer.mesh_read())
}

/// `GET /v1/exported-services` (blocking): the `exported-services` entry resolved, as
/// Consul's `ResolvedExportedServices` resolves it — a wildcard name expands to every
/// service of the catalog — one row per service, in name order, with the peers (and
/// partitions) that may import it, sorted and without repeats.
pub fn exported_services(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    exported_services_in(ctx, request, reply, "")
}

/// `GET /v1/exported-services` in `datacenter` (empty: this one).
fn exported_services_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let options = read_options(ctx, request, datacenter)?;
    if !datacenter.is_empty() || ctx.reads_by_call(&options) {
        return Ok(client_peering::exported_services(
            ctx, request, options, datacenter,
        ));
    }
    run_query(ctx, ExportedServicesQuery, options, reply)
}

/// What the exported services depend on: the config entries and the catalog's services.
pub fn exported_watch(tables: &Tables) -> (u64, WatchSet) {
    (
        tables
            .max_table_index(&[Table::ConfigEntries, Table::Services])
            .max(1),
        WatchSet::new()
            .table(Table::ConfigEntries)
            .table(Table::Services),
    )
}

/// The exported services of `tables`, one per service in name order.
pub fn exported_services_of(tables: &Tables) -> Vec<ExportedService> {
    resolved_exports(tables)
        .into_iter()
        .map(|(service, consumers)| ExportedService {
            service,
            peers: consumers.peers.into_iter().collect(),
            partitions: consumers.partitions.into_iter().collect(),
        })
        .collect()
}

/// The services this cluster exports to the peering it calls `peer_name` (a consumer's
/// `Peer`, compared as Consul compares peer names: without regard to case), in name order.
pub fn services_exported_to(tables: &Tables, peer_name: &str) -> Vec<String> {
    resolved_exports(tables)
        .into_iter()
        .filter(|(_, consumers)| {
            consumers
                .peers
                .iter()
                .any(|p| p.eq_ignore_ascii_case(peer_name))
        })
        .map(|(service, _)| service)
        .collect()
}

/// `GET /v1/exported-services`' answer.
pub fn exported_answer(services: &[ExportedService], meta: QueryMeta, reply: &mut Reply) {
    let mut headers = Vec::with_capacity(128);
    meta.write_headers(&mut headers);
    let rows: Vec<Value> = services
        .iter()
        .map(|service| {
            let mut resolved = Map::new();
            if !service.peers.is_empty() {
                resolved.insert("Peers".into(), service.peers.clone().into());
            }
            if !service.partitions.is_empty() {
                resolved.insert("Partitions".into(), service.partitions.clone().into());
            }
            serde_json::json!({"Service": service.service, "Consumers": resolved})
        })
        .collect();
    reply.json(200, &headers, &rows);
}

struct ExportedServicesQuery;

impl Query for ExportedServicesQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        exported_watch(tables)
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        exported_answer(&exported_services_of(tables), meta, reply);
    }
}

/// The peering requests that name another datacenter (`?dc=`), as their typed calls
/// naming it, parsed and checked as for this one (the same errors); `None` for other paths.
pub fn across(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    let handler: super::DatacenterHandler = match request.path {
        "/v1/peering/token" => generate_token_in,
        "/v1/peering/establish" => establish_in,
        "/v1/peerings" => list_in,
        "/v1/exported-services" => exported_services_in,
        path if path.starts_with("/v1/peering/") => by_name_in,
        _ => return None,
    };
    Some(super::run_for_datacenter(ctx, request, datacenter, handler))
}

/// Who may import one exported service.
#[derive(Debug, Default, PartialEq)]
struct Consumers {
    peers: std::collections::BTreeSet<String>,
    partitions: std::collections::BTreeSet<String>,
}

/// The service Consul never exports: the servers' own registration.
const CONSUL_SERVICE: &str = "consul";

/// The `exported-services` entry (`default`) resolved against the catalog: service name →
/// its consumers. A wildcard `Name` stands for every service registered now (typical
/// services: not the servers' `consul`, not proxies or gateways), so the answer moves with
/// the catalog as Consul's does.
fn resolved_exports(tables: &Tables) -> BTreeMap<String, Consumers> {
    use crate::store::mesh::config_entry::{get, ConfigKind, EntryBody};
    let mut resolved: BTreeMap<String, Consumers> = BTreeMap::new();
    let Some(entry) = get(tables, ConfigKind::ExportedServices, "default") else {
        return resolved;
    };
    let EntryBody::Json(body) = &entry.body else {
        return resolved;
    };
    // Validated when written; a body that no longer parses exports nothing.
    let Ok(body) = serde_json::from_str::<Value>(body) else {
        return resolved;
    };
    let catalog_services: Vec<String> = tables
        .catalog
        .services
        .values()
        .filter_map(|group| group.instances.values().next())
        .map(|view| &view.service)
        .filter(|instance| instance.kind().is_empty() && &*instance.name != CONSUL_SERVICE)
        .map(|instance| instance.name.to_string())
        .collect();
    for service in body["Services"].as_array().into_iter().flatten() {
        let name = service["Name"].as_str().unwrap_or_default();
        let names: Vec<String> = if name == "*" {
            catalog_services.clone()
        } else if name.is_empty() {
            continue;
        } else {
            vec![name.to_string()]
        };
        for name in names {
            let consumers = resolved.entry(name).or_default();
            for consumer in service["Consumers"].as_array().into_iter().flatten() {
                if let Some(peer) = consumer["Peer"].as_str().filter(|p| !p.is_empty()) {
                    consumers.peers.insert(peer.to_string());
                }
                if let Some(partition) = consumer["Partition"].as_str().filter(|p| !p.is_empty()) {
                    consumers.partitions.insert(partition.to_string());
                }
            }
        }
    }
    resolved
}
