//! `FederationState.Apply` and `FederationState.List`, as Consul's
//! `federation_state_endpoint.go` serves them: a secondary datacenter's leader upserts its
//! own state in the primary (on the primary's leader, `operator:write`) and reads every
//! state back, blocking, to replicate them (`operator:read`). The store operation and the
//! refusals are the HTTP layer's (`api::federation_state::apply_op`). `Get` (one
//! datacenter's state, `operator:read`) and `ListMeshGateways` (each datacenter's mesh
//! gateways, filtered by the token as a `CheckServiceNode` is) are what
//! `/v1/internal/federation-state/<dc>` and `/federation-states/mesh-gateways` answer.

use super::{authorize, decode_error, elsewhere, error_text, propose, read, read_here, require};
use super::{Answer, Placement, Read};
use crate::api::federation_state::apply_op;
use crate::api::server::Server;
use crate::consul::rpc::catalog::DcSpecificRequest;
use crate::consul::rpc::federation_state::{
    write_mesh_gateways_reply, write_state_reply, write_states_reply, ApplyRequest, StateQuery,
};
use crate::consul::rpc::QueryMeta;
use crate::proto::msgpack::Writer;
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::federation;
use crate::store::{Command, CommandResult, StoreVersion, Table, Tables};

/// Every datacenter's state, watching the whole table.
struct List;

impl Read for List {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            federation::index(tables),
            WatchSet::new().table(Table::FederationStates),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let states: Vec<_> = federation::list(version).map(|state| &**state).collect();
        let mut w = Writer::new();
        write_states_reply(&mut w, meta, states.into_iter());
        Ok(w.into_inner())
    }
}

/// `FederationState.List`.
pub async fn list(server: &Server, call: &TypedCall) -> Answer {
    let request = DcSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    require(&authz, |a| a.operator_read())?;
    read(server, call, &request.options, List).await
}

/// `FederationState.Apply`: on the primary's leader; the reply is Consul's `true`.
pub async fn apply(server: &Server, call: &TypedCall) -> Answer {
    let request = ApplyRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let authz = authorize(server, request.token)?;
    require(&authz, |a| a.operator_write())?;
    let op = apply_op(server.context(), request.op, request.state).map_err(|e| error_text(&e))?;
    match propose(server, Command::FederationState(op)).await? {
        CommandResult::Error(reason) => Err(reason),
        _ => {
            let mut w = Writer::new();
            w.bool(true);
            Ok(w.into_inner())
        }
    }
}

/// Each datacenter's mesh gateways the token may read.
struct MeshGateways {
    rows: crate::api::authz::RowFilter,
}

impl Read for MeshGateways {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        List.evaluate(tables)
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let (shown, hidden) = crate::api::federation_state::readable_gateways(version, &self.rows);
        let mut w = Writer::new();
        write_mesh_gateways_reply(&mut w, &meta.filtered(hidden), &shown);
        Ok(w.into_inner())
    }
}

/// `FederationState.ListMeshGateways`.
pub async fn list_mesh_gateways(server: &Server, call: &TypedCall) -> Answer {
    let request = DcSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let query = MeshGateways {
        rows: super::rows(&authz),
    };
    read(server, call, &request.options, query).await
}

/// One datacenter's state, watching its key.
struct Get {
    datacenter: std::sync::Arc<str>,
}

impl Read for Get {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            federation::index(tables),
            WatchSet::new().key(Table::FederationStates, self.datacenter.clone()),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let state = federation::get(version, &self.datacenter).map(|state| &**state);
        let mut w = Writer::new();
        write_state_reply(&mut w, meta, state);
        Ok(w.into_inner())
    }
}

/// `FederationState.Get`: `TargetDatacenter`'s state (nil when it has none).
pub async fn get(server: &Server, call: &TypedCall) -> Answer {
    let request = StateQuery::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    require(&authz, |a| a.operator_read())?;
    let query = Get {
        datacenter: std::sync::Arc::from(request.target_datacenter),
    };
    read(server, call, &request.options, query).await
}
