//! DNS: the catalog's names, client agents' DNS, the server's protocol edges.

mod dns_catalog;
mod dns_client;
mod dns_server;
