//! Cluster peering served as typed calls: praetor's own `Peering.GenerateToken`,
//! `Peering.Establish`, `Peering.Read`, `Peering.List` and `Peering.Delete` (Consul's agents
//! use gRPC for these; see `docs/decisions.md`, *peering as typed calls*), and Consul's
//! `ConfigEntry.GetResolvedExportedServices`.
//!
//! They are the HTTP handlers of `api::peering` served from the same pieces: the writes
//! run on the leader (a follower hands the call there) with the same checked arguments and
//! store commands; the reads are blocking reads of the same index and watches, placed as
//! their consistency asks. `peering:write` for the writes, `peering:read` for the reads,
//! `mesh:read` for the exported services — the HTTP routes' rules — checked with the
//! call's token once the call is where it runs.

use super::{
    authorize, decode_error, elsewhere, error_text, propose, read, read_here, require, Answer,
    Placement, Read,
};
use crate::api::peering::{
    check_partition_name, deletion, establish_write, established, exported_services_of,
    exported_watch, list_watch, read_watch, removal_failed, token_write, with_stream_services,
    written, EstablishArgs, TokenArgs,
};
use crate::api::server::Server;
use crate::api::ApiError;
use crate::consul::peering::encode_token;
use crate::consul::rpc::peering::{
    empty_reply, encode_exported_services, encode_list_reply, encode_read_reply,
    encode_token_reply, EstablishRequest, GenerateTokenRequest, PartitionRequest,
    PeeringNameRequest,
};
use crate::consul::rpc::QueryMeta;
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::peering;
use crate::store::{StoreVersion, Tables};
use std::collections::BTreeMap;

fn text(error: ApiError) -> String {
    error_text(&error)
}

fn owned_meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Proposes a peering write on the leader: applied, or Consul's error for it.
async fn write(server: &Server, command: crate::store::Command) -> Result<(), String> {
    written(propose(server, command).await?).map_err(text)
}

/// `Peering.GenerateToken`: on the leader.
pub async fn generate_token(server: &Server, call: &TypedCall) -> Answer {
    let request = GenerateTokenRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let authz = authorize(server, request.token)?;
    require(&authz, |a| a.peering_write())?;
    let args = TokenArgs::checked(
        request.peer_name,
        request.partition,
        owned_meta(&request.meta),
        request
            .server_external_addresses
            .iter()
            .map(|a| a.to_string())
            .collect(),
    )
    .map_err(text)?;
    let (command, token) = token_write(server.context(), &args).map_err(text)?;
    write(server, command).await?;
    Ok(encode_token_reply(&encode_token(&token)))
}

/// `Peering.Establish`: on the leader.
pub async fn establish(server: &Server, call: &TypedCall) -> Answer {
    let request = EstablishRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let authz = authorize(server, request.token)?;
    require(&authz, |a| a.peering_write())?;
    let args = EstablishArgs::checked(
        request.peer_name,
        request.partition,
        request.peering_token,
        owned_meta(&request.meta),
    )
    .map_err(text)?;
    let (command, addresses) = establish_write(server.context(), &args).map_err(text)?;
    write(server, command).await?;
    established(&args.name, &addresses);
    Ok(empty_reply())
}

/// `Peering.Delete`: on the leader; marks the peering `DELETING`, then removes it (nothing
/// to delete answers as a deletion does).
pub async fn delete(server: &Server, call: &TypedCall) -> Answer {
    let request = PeeringNameRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let authz = authorize(server, request.options.token)?;
    require(&authz, |a| a.peering_write())?;
    check_partition_name(request.partition).map_err(text)?;
    if request.name.is_empty() {
        return Err("Must specify a name to fetch.".to_string());
    }
    let version = server.context().current_version();
    let Some((marked, remove)) = deletion(&version, request.name) else {
        return Ok(empty_reply());
    };
    drop(version);
    write(server, marked).await?;
    if let Err(reason) = write(server, remove).await {
        removal_failed(&ApiError::Internal(reason));
    }
    Ok(empty_reply())
}

/// One peering by name.
struct ReadPeering<'a> {
    name: &'a str,
}

impl Read for ReadPeering<'_> {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        read_watch(tables, self.name)
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let row = peering::get(version, self.name).map(|row| with_stream_services(version, row));
        Ok(encode_read_reply(meta, row.as_ref()))
    }
}

/// `Peering.Read`: a blocking read.
pub async fn read_peering(server: &Server, call: &TypedCall) -> Answer {
    let request = PeeringNameRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    require(&authz, |a| a.peering_read())?;
    check_partition_name(request.partition).map_err(text)?;
    if request.name.is_empty() {
        return Err("Must specify a name to fetch.".to_string());
    }
    let query = ReadPeering { name: request.name };
    read(server, call, &request.options, query).await
}

/// Every peering.
struct ListPeerings;

impl Read for ListPeerings {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        list_watch(tables)
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let rows: Vec<_> = peering::list(version)
            .map(|row| with_stream_services(version, row))
            .collect();
        Ok(encode_list_reply(meta, rows.iter()))
    }
}

/// `Peering.List`: a blocking read.
pub async fn list(server: &Server, call: &TypedCall) -> Answer {
    let request = PartitionRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    require(&authz, |a| a.peering_read())?;
    check_partition_name(request.partition).map_err(text)?;
    read(server, call, &request.options, ListPeerings).await
}

/// The exported services, resolved against the catalog.
struct ExportedServices;

impl Read for ExportedServices {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        exported_watch(tables)
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        Ok(encode_exported_services(
            meta,
            &exported_services_of(version),
        ))
    }
}

/// `ConfigEntry.GetResolvedExportedServices`: a blocking read, `mesh:read`.
pub async fn exported_services(server: &Server, call: &TypedCall) -> Answer {
    let request = PartitionRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    require(&authz, |a| a.mesh_read())?;
    check_partition_name(request.partition).map_err(text)?;
    read(server, call, &request.options, ExportedServices).await
}
