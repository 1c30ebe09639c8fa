//! `ACL.TokenRead`: a token by accessor ID (`acl:read` needed) or by its own secret (what
//! an agent resolving a request's token asks), as Consul's `acl_endpoint.go` serves it.

use super::{authorize, decode_error, elsewhere, read, require, Answer, Placement, Read};
use crate::api::server::Server;
use crate::consul::rpc::acl::{write_token_response, TokenGetRequest, TokenView};
use crate::consul::rpc::QueryMeta;
use crate::proto::msgpack::Writer;
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::acl::{self as acl_store, Token};
use crate::store::{StoreVersion, Table, Tables};
use std::sync::Arc;

/// Consul's answer when ACLs are off.
pub const ACL_DISABLED: &str = "ACL support disabled";

struct TokenQuery {
    id: String,
    by_secret: bool,
    datacenter: String,
    now_unix_ns: i64,
}

impl TokenQuery {
    fn find<'t>(&self, tables: &'t Tables) -> Option<&'t Arc<Token>> {
        let token = if self.by_secret {
            acl_store::token_by_secret(tables, &self.id)
        } else {
            acl_store::token_by_accessor(tables, &self.id)
        };
        token.filter(|t| !t.is_expired(self.now_unix_ns))
    }
}

impl Read for TokenQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            tables.table_index(Table::Acl),
            WatchSet::new().table(Table::Acl),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let token = self.find(version);
        let policies = token
            .map(|t| acl_store::policy_links(version, &t.policies))
            .unwrap_or_default();
        let roles = token
            .map(|t| acl_store::role_links(version, &t.roles))
            .unwrap_or_default();
        let view = token.map(|token| TokenView {
            token,
            policies: policies.iter().map(|(i, n)| (&**i, &**n)).collect(),
            roles: roles.iter().map(|(i, n)| (&**i, &**n)).collect(),
        });
        let mut w = Writer::new();
        write_token_response(&mut w, meta, view.as_ref(), &self.datacenter);
        Ok(w.into_inner())
    }
}

/// `ACL.TokenRead`.
pub async fn token_read(server: &Server, call: &TypedCall) -> Answer {
    let request = TokenGetRequest::decode(&call.body).map_err(decode_error)?;
    let wait = super::blocking_wait(server, &request.options);
    if let Some(answer) =
        elsewhere(server, call, request.datacenter, Placement::Anywhere, wait).await
    {
        return answer;
    }
    let ctx = server.context();
    if !ctx.acl_enabled() {
        return Err(ACL_DISABLED.to_string());
    }
    let by_secret = request.by_secret();
    // Reading a token by its own secret needs nothing more than knowing it.
    if !(by_secret && request.token_id == request.options.token) {
        let authz = authorize(server, request.options.token)?;
        require(&authz, |a| a.acl_read())?;
    }
    let query = TokenQuery {
        id: request.token_id.to_string(),
        by_secret,
        datacenter: ctx.config().datacenter.clone(),
        now_unix_ns: crate::api::context::now_unix_ns(),
    };
    read(server, call, &request.options, query).await
}
