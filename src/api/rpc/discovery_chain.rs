//! `DiscoveryChain.Get`, as Consul's `discovery_chain_endpoint.go` serves it, from the
//! pieces `/v1/discovery-chain` uses (`api::config`): `service:read` on the chain's
//! service, the same compiler and the same watch (any config entry may change a chain),
//! the compiled chain written in the order the HTTP answer renders it
//! (`consul::rpc::discovery_chain`).

use super::{decode_error, read, read_here, require, Answer, Read};
use crate::api::config::ChainQuery;
use crate::api::server::Server;
use crate::api::Query;
use crate::consul::config_entry::doc::Doc;
use crate::consul::discovery_chain::{MeshGatewayMode, Overrides};
use crate::consul::rpc::discovery_chain::{write_response, DiscoveryChainRequest};
use crate::consul::rpc::QueryMeta;
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::{StoreVersion, Tables};

struct Chain(ChainQuery);

impl Read for Chain {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        self.0.evaluate(tables)
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let answer = self.0.compiled(version)?;
        let chain = answer.get("Chain").cloned().unwrap_or(Doc::Null);
        Ok(write_response(meta, &chain))
    }
}

/// `DiscoveryChain.Get`: the chain of `Name`, evaluated in `EvaluateInDatacenter` (this
/// datacenter when empty), with the caller's overrides.
pub async fn get(server: &Server, call: &TypedCall) -> Answer {
    let request = DiscoveryChainRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    if request.name.is_empty() {
        return Err("Must provide service name".to_string());
    }
    require(&authz, |a| a.service_read(request.name))?;
    let ours = &server.context().config().datacenter;
    let overrides = Overrides {
        connect_timeout_ns: (request.override_connect_timeout_ns > 0)
            .then_some(request.override_connect_timeout_ns),
        protocol: (!request.override_protocol.is_empty())
            .then(|| request.override_protocol.to_ascii_lowercase()),
        mesh_gateway: MeshGatewayMode::parse(request.override_mesh_gateway_mode)?,
    };
    let datacenter = match request.evaluate_in_datacenter {
        "" => ours.clone(),
        named => named.to_string(),
    };
    let query = Chain(ChainQuery {
        service: request.name.to_string(),
        datacenter,
        use_in_datacenter: ours.clone(),
        overrides,
    });
    read(server, call, &request.options, query).await
}
