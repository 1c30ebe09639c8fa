//! `ACL.TokenRead`: a token by accessor ID (`acl:read` needed) or by its own secret (what
//! an agent resolving a request's token asks), as Consul's `acl_endpoint.go` serves it;
//! with `Expanded`, also every policy that applies to it (its own, its roles', and those
//! its identities and templated policies synthesize) and its roles — all a client agent
//! needs to compile the token (`api::client_tokens`).

use super::{authorize, decode_error, elsewhere, read, require, Answer, Placement, Read};
use crate::api::server::Server;
use crate::config::acl::DownPolicy;
use crate::consul::rpc::acl::{write_token_response, ExpandedView, TokenGetRequest, TokenView};
use crate::consul::rpc::QueryMeta;
use crate::proto::msgpack::Writer;
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::acl::authorizer::DefaultPolicy;
use crate::store::acl::{self as acl_store, cache, Token};
use crate::store::{StoreVersion, Table, Tables};
use std::sync::Arc;

/// Consul's answer when ACLs are off.
pub const ACL_DISABLED: &str = "ACL support disabled";

struct TokenQuery {
    id: String,
    by_secret: bool,
    expanded: bool,
    datacenter: String,
    now_unix_ns: i64,
    default_policy: &'static str,
    down_policy: &'static str,
    node_name: String,
}

impl TokenQuery {
    fn find(&self, tables: &Tables) -> Option<Arc<Token>> {
        if self.by_secret {
            // The anonymous token answers by its secret even before the leader has
            // written its row, as it does for the server's own requests.
            if self.id.is_empty() {
                return None;
            }
            return cache::token_for_secret(tables, &self.id, self.now_unix_ns);
        }
        acl_store::token_by_accessor(tables, &self.id)
            .filter(|t| !t.is_expired(self.now_unix_ns))
            .cloned()
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
            .as_ref()
            .map(|t| acl_store::policy_links(version, &t.policies))
            .unwrap_or_default();
        let roles = token
            .as_ref()
            .map(|t| acl_store::role_links(version, &t.roles))
            .unwrap_or_default();
        let view = token.as_ref().map(|token| TokenView {
            token,
            policies: policies.iter().map(|(i, n)| (&**i, &**n)).collect(),
            roles: roles.iter().map(|(i, n)| (&**i, &**n)).collect(),
        });
        let (expanded_policies, expanded_roles) = match (&token, self.expanded) {
            (Some(token), true) => cache::expanded_policies(version, token),
            _ => Default::default(),
        };
        let role_policy_links: Vec<_> = expanded_roles
            .iter()
            .map(|role| acl_store::policy_links(version, &role.policies))
            .collect();
        let expanded = (self.expanded && token.is_some()).then(|| ExpandedView {
            policies: &expanded_policies,
            roles: expanded_roles
                .iter()
                .zip(&role_policy_links)
                .map(|(role, links)| {
                    let links = links.iter().map(|(i, n)| (&**i, &**n)).collect();
                    (&**role, links)
                })
                .collect(),
            default_policy: self.default_policy,
            down_policy: self.down_policy,
            resolved_by: &self.node_name,
        });
        let mut w = Writer::new();
        write_token_response(
            &mut w,
            meta,
            view.as_ref(),
            &self.datacenter,
            expanded.as_ref(),
        );
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
    let config = ctx.config();
    let query = TokenQuery {
        id: request.token_id.to_string(),
        by_secret,
        expanded: request.expanded,
        datacenter: config.datacenter.clone(),
        now_unix_ns: crate::api::context::now_unix_ns(),
        default_policy: match config.acl.default_policy {
            DefaultPolicy::Allow => "allow",
            DefaultPolicy::Deny => "deny",
        },
        down_policy: match config.acl.down_policy {
            DownPolicy::Allow => "allow",
            DownPolicy::Deny => "deny",
            DownPolicy::ExtendCache => "extend-cache",
            DownPolicy::AsyncCache => "async-cache",
        },
        node_name: config.node_name.clone(),
    };
    read(server, call, &request.options, query).await
}
