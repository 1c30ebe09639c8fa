//! ACLs: tokens, policies, roles, auth methods, JWT, the routing table's rules, a cluster
//! with ACLs.

mod acl_client_calls;
mod acl_cluster;
mod acl_http;
mod acl_jwt;
mod acl_routes;
