//! `ConnectCA.Roots`, `ConnectCA.Sign`, as Consul's `connect_ca_endpoint.go` serves
//! them: the roots from this server's store version (blocking on the roots' key, as
//! `/v1/connect/ca/roots` does); a CSR signed on the leader by the active root, after the
//! token's `service:write` on the service the CSR names, as Consul checks it; a secondary
//! datacenter's intermediate signed by the primary's leader (`ConnectCA.SignIntermediate`,
//! `operator:write`). The CA's configuration: `ConnectCA.ConfigurationGet` (blocking on the configuration's key, as
//! `GET /v1/connect/ca/configuration` does; `operator:read`, the HTTP route's rule) and
//! `ConnectCA.ConfigurationSet` (on the leader, `operator:write`; the HTTP handler's own
//! command, root rotation included).

use super::{authorize, decode_error, elsewhere, error_text, propose, read, read_here, require};
use super::{Answer, Placement, Read};
use crate::api::connect::{
    ca_config_command, ca_config_index, ca_configuration_of, csr_pem_service, sign_csr,
    CaConfigSet, CA_NOT_INITIALIZED,
};
use crate::api::intentions::require_connect;
use crate::api::server::Server;
use crate::consul::rpc::catalog::DcSpecificRequest;
use crate::consul::rpc::connect_ca::{
    write_ca_roots, write_issued_cert, CaRequest, CaSignRequest, IssuedCert,
};
use crate::consul::rpc::QueryMeta;
use crate::proto::msgpack::Writer;
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::mesh::ca;
use crate::store::{CommandResult, StoreVersion, Table, Tables};
use std::sync::Arc;

struct Roots;

impl Read for Roots {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            ca::roots_index(tables),
            WatchSet::new().key(Table::ConnectCa, Arc::<str>::from(ca::ROOTS_WATCH_KEY)),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let state = &version.mesh.ca;
        let active = state.active_root().map(|r| r.id.to_string());
        let mut w = Writer::new();
        write_ca_roots(
            &mut w,
            meta,
            active.as_deref().unwrap_or(""),
            &state.trust_domain().unwrap_or_default(),
            &state.roots,
        );
        Ok(w.into_inner())
    }
}

/// `ConnectCA.Roots`.
pub async fn roots(server: &Server, call: &TypedCall) -> Answer {
    let request = DcSpecificRequest::decode(&call.body).map_err(decode_error)?;
    if let Err(answer) = read_here(server, call, request.datacenter, &request.options).await {
        return answer;
    }
    require_connect(server.context()).map_err(|e| error_text(&e))?;
    read(server, call, &request.options, Roots).await
}

/// `ConnectCA.Sign`: on the leader, which signs with the roots it has applied.
pub async fn sign(server: &Server, call: &TypedCall) -> Answer {
    let request = CaSignRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let ctx = server.context();
    require_connect(ctx).map_err(|e| error_text(&e))?;
    let authz = authorize(server, request.token)?;
    if let Some(service) = csr_pem_service(request.csr) {
        require(&authz, |a| a.service_write(&service))?;
    }
    let version = ctx.current_version();
    let leaf = sign_csr(
        &version,
        &ctx.config().datacenter,
        request.csr,
        crate::api::context::now_unix_ns() / 1_000_000_000,
    )
    .map_err(|e| error_text(&e))?;
    let mut w = Writer::new();
    write_issued_cert(
        &mut w,
        &IssuedCert {
            serial_number: &leaf.signed.serial_number,
            agent: "",
            agent_uri: "",
            cert_pem: &leaf.chain_pem,
            service: &leaf.signed.service,
            service_uri: &leaf.signed.service_uri,
            valid_after_unix_s: leaf.signed.valid_after_unix_s,
            valid_before_unix_s: leaf.signed.valid_before_unix_s,
            index: leaf.index,
        },
    );
    Ok(w.into_inner())
}

struct Configuration;

impl Read for Configuration {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        ca_config_index(tables)
    }

    fn reply(&self, version: &StoreVersion, _meta: &QueryMeta) -> Answer {
        // `CAConfiguration` carries no `QueryMeta`, as in Consul.
        match &version.mesh.ca.config {
            Some(config) => Ok(ca_configuration_of(config).encode()),
            None => Err(CA_NOT_INITIALIZED.to_string()),
        }
    }
}

/// `ConnectCA.ConfigurationGet`.
pub async fn configuration_get(server: &Server, call: &TypedCall) -> Answer {
    let request = DcSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    require_connect(server.context()).map_err(|e| error_text(&e))?;
    require(&authz, |a| a.operator_read())?;
    read(server, call, &request.options, Configuration).await
}

/// `ConnectCA.ConfigurationSet`: on the leader, which alone holds the key a rotation
/// cross-signs with. Answers nil.
pub async fn configuration_set(server: &Server, call: &TypedCall) -> Answer {
    let request = CaRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let ctx = server.context();
    require_connect(ctx).map_err(|e| error_text(&e))?;
    let authz = authorize(server, request.token)?;
    require(&authz, |a| a.operator_write())?;
    let Some(config) = request.config else {
        return Err("missing CA configuration".to_string());
    };
    let command =
        ca_config_command(ctx, &CaConfigSet::of_wire(config)).map_err(|e| error_text(&e))?;
    match propose(server, command).await? {
        CommandResult::Bool(_) => {
            let mut w = Writer::new();
            w.nil();
            Ok(w.into_inner())
        }
        CommandResult::Error(reason) => Err(reason),
        _ => Err("unexpected result for a CA write".to_string()),
    }
}

/// `ConnectCA.SignIntermediate`: on the primary's leader, which signs a secondary
/// datacenter's intermediate CSR with its active root after the token's `operator:write`;
/// the reply is the certificate's PEM, as Consul's is.
pub async fn sign_intermediate(server: &Server, call: &TypedCall) -> Answer {
    let request = CaSignRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let authz = authorize(server, request.token)?;
    require(&authz, |a| a.operator_write())?;
    let pem = crate::api::connect::sign_intermediate_pem(server.context(), request.csr)
        .map_err(|e| error_text(&e))?;
    let mut w = Writer::new();
    w.str(&pem);
    Ok(w.into_inner())
}
