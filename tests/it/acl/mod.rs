//! ACLs: tokens, policies, roles, auth methods, binding rules, login, JWT, the routing
//! table's rules, a cluster with ACLs.

mod acl_auth_calls;
mod acl_client_calls;
mod acl_cluster;
mod acl_http;
mod acl_jwt;
mod acl_routes;
