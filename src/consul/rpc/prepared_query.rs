//! Prepared queries' calls: `PreparedQuery.Apply` (`PreparedQueryRequest`), `Get` and
//! `Explain`'s lookups (`PreparedQuerySpecificRequest`, `PreparedQueryExecuteRequest`),
//! `List` (`DCSpecificRequest`), `Execute` (`PreparedQueryExecuteRequest`) and
//! `ExecuteRemote` (`PreparedQueryExecuteRemoteRequest`, the whole query travelling since
//! the other datacenter's store does not hold it), and their replies
//! (`IndexedPreparedQueries`, `PreparedQueryExplainResponse`,
//! `PreparedQueryExecuteResponse`).
//!
//! A query crosses in Consul's `structs.PreparedQuery` shape, read back into the store's
//! own [`PreparedQuery`], so a query written by [`write_query`] and read by [`read_query`]
//! is the same value (the tests check the round trip). `Connect` is Consul's
//! `QueryConnect{Enabled}`; a bare boolean is also read. An execution's rows come back as
//! the rows the catalog's replies carry ([`CheckServiceNodeRow`]), so the agent renders
//! them with the server's own functions.
//!
//! Bounded as every decoder here: each count is checked against the bytes left, nesting by
//! the reader's limit.

use super::catalog::write_check_service_node;
use super::rows::{read_check_service_node, CheckServiceNodeRow};
use super::{each_field, read_reply, Fields, QueryMeta, QueryOptions};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::catalog::read::CheckServiceNode;
use crate::store::query::{Failover, FailoverTarget, PreparedQuery, QueryTemplate, ServiceQuery};

/// A list of strings that may be absent (`nil`), as the store keeps `Tags` and kin.
fn write_optional_list(w: &mut Writer, items: &Option<Vec<String>>) {
    match items {
        None => w.nil(),
        Some(items) => {
            w.array_len(items.len());
            for item in items {
                w.str(item);
            }
        }
    }
}

fn read_optional_list(r: &mut Reader) -> Result<Option<Vec<String>>, WireError> {
    if r.try_nil()? {
        return Ok(None);
    }
    let count = r.array_len()?;
    let mut items = Vec::with_capacity(count);
    for _ in 0..count {
        items.push(r.str()?.to_string());
    }
    Ok(Some(items))
}

fn write_optional_pairs(w: &mut Writer, pairs: &Option<Vec<(String, String)>>) {
    match pairs {
        None => w.nil(),
        Some(pairs) => {
            w.map_len(pairs.len());
            for (k, v) in pairs {
                w.str(k);
                w.str(v);
            }
        }
    }
}

/// A `map[string]string` that may be absent, in key order as the store keeps it.
fn read_optional_pairs(r: &mut Reader) -> Result<Option<Vec<(String, String)>>, WireError> {
    if r.try_nil()? {
        return Ok(None);
    }
    let mut pairs: Vec<(String, String)> = super::string_map(r)?
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    pairs.sort();
    Ok(Some(pairs))
}

/// `QueryDNSOptions`: its `TTL`.
fn read_dns_ttl(r: &mut Reader) -> Result<String, WireError> {
    let mut ttl = String::new();
    each_field(r, |name, r| {
        if name != "TTL" {
            return Ok(false);
        }
        ttl = r.str()?.to_string();
        Ok(true)
    })?;
    Ok(ttl)
}

/// Consul's `structs.PreparedQuery`.
pub fn write_query(w: &mut Writer, query: &PreparedQuery) {
    let mut f = Fields::new(w, 9);
    f.field("CreateIndex").uint(query.create_index);
    {
        let mut dns = Fields::new(f.field("DNS"), 1);
        dns.field("TTL").str(&query.dns_ttl);
        dns.finish();
    }
    f.field("ID").str(&query.id);
    f.field("ModifyIndex").uint(query.modify_index);
    f.field("Name").str(&query.name);
    write_service_query(f.field("Service"), &query.service);
    f.field("Session").str(&query.session);
    {
        let template = &query.template;
        let mut t = Fields::new(f.field("Template"), 3);
        t.field("Regexp").str(&template.regexp);
        t.field("RemoveEmptyTags").bool(template.remove_empty_tags);
        t.field("Type").str(&template.kind);
        t.finish();
    }
    f.field("Token").str(&query.token);
    f.finish();
}

fn write_service_query(w: &mut Writer, service: &ServiceQuery) {
    let mut f = Fields::new(w, 11);
    {
        let mut connect = Fields::new(f.field("Connect"), 1);
        connect.field("Enabled").bool(service.connect);
        connect.finish();
    }
    {
        let failover = &service.failover;
        let mut o = Fields::new(f.field("Failover"), 3);
        write_optional_list(o.field("Datacenters"), &failover.datacenters);
        o.field("NearestN").int(failover.nearest_n);
        let w = o.field("Targets");
        match &failover.targets {
            None => w.nil(),
            Some(targets) => {
                w.array_len(targets.len());
                for target in targets {
                    let mut t = Fields::new(w, 2);
                    t.field("Datacenter").str(&target.datacenter);
                    t.field("Peer").str(&target.peer);
                    t.finish();
                }
            }
        }
        o.finish();
    }
    write_optional_list(f.field("IgnoreCheckIDs"), &service.ignore_check_ids);
    f.field("Near").str(&service.near);
    write_optional_pairs(f.field("NodeMeta"), &service.node_meta);
    f.field("OnlyPassing").bool(service.only_passing);
    f.field("Peer").str(&service.peer);
    f.field("SamenessGroup").str(&service.sameness_group);
    f.field("Service").str(&service.service);
    write_optional_pairs(f.field("ServiceMeta"), &service.service_meta);
    write_optional_list(f.field("Tags"), &service.tags);
    f.finish();
}

/// A `structs.PreparedQuery` read back into the store's shape.
pub fn read_query(r: &mut Reader) -> Result<PreparedQuery, WireError> {
    let mut query = PreparedQuery::default();
    each_field(r, |name, r| {
        match name {
            "ID" => query.id = r.str()?.to_string(),
            "Name" => query.name = r.str()?.to_string(),
            "Session" => query.session = r.str()?.to_string(),
            "Token" => query.token = r.str()?.to_string(),
            "CreateIndex" => query.create_index = r.u64("CreateIndex")?,
            "ModifyIndex" => query.modify_index = r.u64("ModifyIndex")?,
            "DNS" => query.dns_ttl = read_dns_ttl(r)?,
            "Template" => query.template = read_template(r)?,
            "Service" => query.service = read_service_query(r)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(query)
}

fn read_template(r: &mut Reader) -> Result<QueryTemplate, WireError> {
    let mut template = QueryTemplate::default();
    each_field(r, |name, r| {
        match name {
            "Type" => template.kind = r.str()?.to_string(),
            "Regexp" => template.regexp = r.str()?.to_string(),
            "RemoveEmptyTags" => template.remove_empty_tags = r.bool()?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(template)
}

fn read_service_query(r: &mut Reader) -> Result<ServiceQuery, WireError> {
    let mut service = ServiceQuery::default();
    each_field(r, |name, r| {
        match name {
            "Service" => service.service = r.str()?.to_string(),
            "SamenessGroup" => service.sameness_group = r.str()?.to_string(),
            "Failover" => service.failover = read_failover(r)?,
            "OnlyPassing" => service.only_passing = r.bool()?,
            "IgnoreCheckIDs" => service.ignore_check_ids = read_optional_list(r)?,
            "Near" => service.near = r.str()?.to_string(),
            "Tags" => service.tags = read_optional_list(r)?,
            "NodeMeta" => service.node_meta = read_optional_pairs(r)?,
            "ServiceMeta" => service.service_meta = read_optional_pairs(r)?,
            "Peer" => service.peer = r.str()?.to_string(),
            // Consul's `QueryConnect{Enabled}`; a plain boolean is taken as well.
            "Connect" => {
                if matches!(r.peek()?, 0xc2 | 0xc3) {
                    service.connect = r.bool()?;
                } else {
                    each_field(r, |name, r| match name {
                        "Enabled" => {
                            service.connect = r.bool()?;
                            Ok(true)
                        }
                        _ => Ok(false),
                    })?;
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(service)
}

fn read_failover(r: &mut Reader) -> Result<Failover, WireError> {
    let mut failover = Failover::default();
    each_field(r, |name, r| {
        match name {
            "NearestN" => failover.nearest_n = r.i64("NearestN")?,
            "Datacenters" => failover.datacenters = read_optional_list(r)?,
            "Targets" => {
                if r.try_nil()? {
                    failover.targets = None;
                } else {
                    let count = r.array_len()?;
                    let mut targets = Vec::with_capacity(count);
                    for _ in 0..count {
                        let mut target = FailoverTarget::default();
                        each_field(r, |name, r| {
                            match name {
                                "Peer" => target.peer = r.str()?.to_string(),
                                "Datacenter" => target.datacenter = r.str()?.to_string(),
                                _ => return Ok(false),
                            }
                            Ok(true)
                        })?;
                        targets.push(target);
                    }
                    failover.targets = Some(targets);
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(failover)
}

/// `PreparedQueryRequest`: create, update or delete one query (`Op`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueryRequest<'a> {
    pub datacenter: &'a str,
    /// `create`, `update` or `delete`.
    pub op: &'a str,
    pub query: PreparedQuery,
    pub token: &'a str,
}

impl<'a> QueryRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<QueryRequest<'a>, WireError> {
        let mut request = QueryRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Op" => request.op = r.str()?,
                "Query" => request.query = read_query(r)?,
                "Token" => request.token = r.str()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 4);
        f.field("Datacenter").str(self.datacenter);
        f.field("Op").str(self.op);
        write_query(f.field("Query"), &self.query);
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

/// `PreparedQuerySpecificRequest`: one query by ID (`PreparedQuery.Get`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecificRequest<'a> {
    pub datacenter: &'a str,
    pub query_id: &'a str,
    pub options: QueryOptions<'a>,
}

impl<'a> SpecificRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<SpecificRequest<'a>, WireError> {
        let mut request = SpecificRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "QueryID" => request.query_id = r.str()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options
            .write_request(&mut w, &["Datacenter", "QueryID"], |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                _ => w.str(self.query_id),
            });
        w.into_inner()
    }
}

/// `QuerySource`: the node (and its datacenter) an execution sorts by distance from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuerySource<'a> {
    pub datacenter: &'a str,
    pub node: &'a str,
    pub ip: &'a str,
    pub segment: &'a str,
}

impl<'a> QuerySource<'a> {
    fn read(r: &mut Reader<'a>) -> Result<QuerySource<'a>, WireError> {
        let mut source = QuerySource::default();
        each_field(r, |name, r| {
            match name {
                "Datacenter" => source.datacenter = r.str()?,
                "Node" => source.node = r.str()?,
                "Ip" => source.ip = r.str()?,
                "Segment" => source.segment = r.str()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(source)
    }

    fn write(&self, w: &mut Writer) {
        let mut f = Fields::new(w, 4);
        f.field("Datacenter").str(self.datacenter);
        f.field("Ip").str(self.ip);
        f.field("Node").str(self.node);
        f.field("Segment").str(self.segment);
        f.finish();
    }
}

/// `PreparedQueryExecuteRequest`: run (or, for `PreparedQuery.Explain`, render) the query
/// an ID or name resolves to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecuteRequest<'a> {
    pub datacenter: &'a str,
    pub query_id_or_name: &'a str,
    /// At most this many instances; 0 (or less) for all.
    pub limit: i64,
    /// Only Connect-capable instances.
    pub connect: bool,
    /// `?near=`: the node to sort by distance from.
    pub source: QuerySource<'a>,
    /// The agent the request reached (what `_agent` names).
    pub agent: QuerySource<'a>,
    pub options: QueryOptions<'a>,
}

impl<'a> ExecuteRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<ExecuteRequest<'a>, WireError> {
        let mut request = ExecuteRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "QueryIDOrName" => request.query_id_or_name = r.str()?,
                "Limit" => request.limit = r.i64("Limit")?,
                "Connect" => request.connect = r.bool()?,
                "Source" => request.source = QuerySource::read(r)?,
                "Agent" => request.agent = QuerySource::read(r)?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let own = [
            "Agent",
            "Connect",
            "Datacenter",
            "Limit",
            "QueryIDOrName",
            "Source",
        ];
        self.options
            .write_request(&mut w, &own, |name, w| match name {
                "Agent" => self.agent.write(w),
                "Connect" => w.bool(self.connect),
                "Datacenter" => w.str(self.datacenter),
                "Limit" => w.int(self.limit),
                "QueryIDOrName" => w.str(self.query_id_or_name),
                _ => self.source.write(w),
            });
        w.into_inner()
    }
}

/// `PreparedQueryExecuteRemoteRequest`: another datacenter's query, already rendered,
/// run here without failing over further.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecuteRemoteRequest<'a> {
    pub datacenter: &'a str,
    pub query: PreparedQuery,
    pub limit: i64,
    pub connect: bool,
    pub options: QueryOptions<'a>,
}

impl<'a> ExecuteRemoteRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<ExecuteRemoteRequest<'a>, WireError> {
        let mut request = ExecuteRemoteRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Query" => request.query = read_query(r)?,
                "Limit" => request.limit = r.i64("Limit")?,
                "Connect" => request.connect = r.bool()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let own = ["Connect", "Datacenter", "Limit", "Query"];
        self.options
            .write_request(&mut w, &own, |name, w| match name {
                "Connect" => w.bool(self.connect),
                "Datacenter" => w.str(self.datacenter),
                "Limit" => w.int(self.limit),
                _ => write_query(w, &self.query),
            });
        w.into_inner()
    }
}

/// What an execution answers, besides its `QueryMeta`.
pub struct Execution<'a> {
    pub service: &'a str,
    pub dns_ttl: &'a str,
    /// The datacenter whose instances these are.
    pub datacenter: &'a str,
    /// How many other datacenters were asked.
    pub failovers: u64,
}

/// `PreparedQueryExecuteResponse`.
pub fn write_execute_response(
    meta: &QueryMeta,
    execution: &Execution,
    rows: &[CheckServiceNode],
) -> Vec<u8> {
    let mut w = Writer::new();
    let own = [
        "DNS",
        "Datacenter",
        "Failovers",
        "Nodes",
        "PeerName",
        "Service",
    ];
    meta.write_reply(&mut w, &own, |name, w| match name {
        "DNS" => {
            let mut dns = Fields::new(w, 1);
            dns.field("TTL").str(execution.dns_ttl);
            dns.finish();
        }
        "Datacenter" => w.str(execution.datacenter),
        "Failovers" => w.uint(execution.failovers),
        "Nodes" => {
            w.array_len(rows.len());
            for row in rows {
                write_check_service_node(w, row);
            }
        }
        "PeerName" => w.str(""),
        _ => w.str(execution.service),
    });
    w.into_inner()
}

/// A `PreparedQueryExecuteResponse` read back.
pub struct ExecuteReply {
    pub meta: QueryMeta,
    pub service: String,
    pub dns_ttl: String,
    pub datacenter: String,
    pub failovers: u64,
    pub nodes: Vec<CheckServiceNodeRow>,
}

impl ExecuteReply {
    /// Its rows as the catalog's read rows, to render or write again.
    pub fn rows(&self) -> Vec<CheckServiceNode<'_>> {
        self.nodes.iter().map(CheckServiceNodeRow::as_row).collect()
    }

    /// What it answers besides its meta and rows.
    pub fn execution(&self) -> Execution<'_> {
        Execution {
            service: &self.service,
            dns_ttl: &self.dns_ttl,
            datacenter: &self.datacenter,
            failovers: self.failovers,
        }
    }
}

pub fn read_execute_response(body: &[u8]) -> Result<ExecuteReply, WireError> {
    let mut service = String::new();
    let mut dns_ttl = String::new();
    let mut datacenter = String::new();
    let mut failovers = 0;
    let mut nodes = Vec::new();
    let meta = read_reply(body, |name, r| {
        match name {
            "Service" => service = r.str()?.to_string(),
            "Datacenter" => datacenter = r.str()?.to_string(),
            "Failovers" => failovers = r.u64("Failovers")?,
            "DNS" => dns_ttl = read_dns_ttl(r)?,
            "Nodes" => {
                let count = r.array_len()?;
                nodes = Vec::with_capacity(count);
                for _ in 0..count {
                    nodes.push(read_check_service_node(r)?);
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(ExecuteReply {
        meta,
        service,
        dns_ttl,
        datacenter,
        failovers,
        nodes,
    })
}

/// `IndexedPreparedQueries`; each query's token as the caller may see it (`token_shown`).
pub fn write_indexed_queries<'q>(
    meta: &QueryMeta,
    queries: &[&'q PreparedQuery],
    token_shown: impl Fn(&'q PreparedQuery) -> &'q str,
) -> Vec<u8> {
    let mut w = Writer::new();
    meta.write_reply(&mut w, &["Queries"], |_, w| {
        if queries.is_empty() {
            w.nil();
            return;
        }
        w.array_len(queries.len());
        for query in queries {
            write_shown(w, query, token_shown(query));
        }
    });
    w.into_inner()
}

/// A query with `token` in place of its own.
fn write_shown(w: &mut Writer, query: &PreparedQuery, token: &str) {
    if token == query.token {
        write_query(w, query);
    } else {
        let shown = PreparedQuery {
            token: token.to_string(),
            ..query.clone()
        };
        write_query(w, &shown);
    }
}

pub fn read_indexed_queries(body: &[u8]) -> Result<(QueryMeta, Vec<PreparedQuery>), WireError> {
    let mut queries = Vec::new();
    let meta = read_reply(body, |name, r| {
        if name != "Queries" {
            return Ok(false);
        }
        let count = r.array_len()?;
        queries = Vec::with_capacity(count);
        for _ in 0..count {
            queries.push(read_query(r)?);
        }
        Ok(true)
    })?;
    Ok((meta, queries))
}

/// `PreparedQueryExplainResponse`: the query a name resolved to, rendered.
pub fn write_explain_response(meta: &QueryMeta, query: &PreparedQuery, token: &str) -> Vec<u8> {
    let mut w = Writer::new();
    meta.write_reply(&mut w, &["Query"], |_, w| write_shown(w, query, token));
    w.into_inner()
}

pub fn read_explain_response(body: &[u8]) -> Result<(QueryMeta, PreparedQuery), WireError> {
    let mut query = PreparedQuery::default();
    let meta = read_reply(body, |name, r| {
        if name != "Query" {
            return Ok(false);
        }
        query = read_query(r)?;
        Ok(true)
    })?;
    Ok((meta, query))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full_query() -> PreparedQuery {
        PreparedQuery {
            id: "5e1e24e5-1329-f86f-18c6-3d3734edb2cd".into(),
            name: "web-fast".into(),
            session: "adf4238a-882b-9ddc-4a9d-5b6758e4159e".into(),
            token: "secret".into(),
            template: QueryTemplate {
                kind: "name_prefix_match".into(),
                regexp: "^web-(.*)$".into(),
                remove_empty_tags: true,
            },
            service: ServiceQuery {
                service: "web".into(),
                sameness_group: String::new(),
                failover: Failover {
                    nearest_n: 2,
                    datacenters: Some(vec!["dc2".into(), "dc3".into()]),
                    targets: Some(vec![FailoverTarget {
                        peer: String::new(),
                        datacenter: "dc4".into(),
                    }]),
                },
                only_passing: true,
                ignore_check_ids: Some(vec!["serfHealth".into()]),
                near: "_agent".into(),
                tags: Some(vec!["v1".into(), "!canary".into()]),
                node_meta: Some(vec![("rack".into(), "a".into())]),
                service_meta: None,
                connect: true,
                peer: String::new(),
            },
            dns_ttl: "10s".into(),
            create_index: 7,
            modify_index: 9,
        }
    }

    #[test]
    fn a_query_reads_back_as_written() {
        let query = full_query();
        let mut w = Writer::new();
        write_query(&mut w, &query);
        assert_eq!(read_query(&mut Reader::new(&w.buf)), Ok(query));
        let bare = PreparedQuery::default();
        let mut w = Writer::new();
        write_query(&mut w, &bare);
        assert_eq!(read_query(&mut Reader::new(&w.buf)), Ok(bare));
    }

    #[test]
    fn requests_decode_as_encoded() {
        let apply = QueryRequest {
            datacenter: "dc1",
            op: "create",
            query: full_query(),
            token: "t",
        };
        assert_eq!(QueryRequest::decode(&apply.encode()), Ok(apply));
        let execute = ExecuteRequest {
            datacenter: "dc2",
            query_id_or_name: "web-fast",
            limit: 3,
            connect: true,
            source: QuerySource {
                datacenter: "dc1",
                node: "n1",
                ..QuerySource::default()
            },
            agent: QuerySource {
                datacenter: "dc1",
                node: "agent",
                ..QuerySource::default()
            },
            options: QueryOptions {
                token: "t",
                allow_stale: true,
                ..QueryOptions::default()
            },
        };
        assert_eq!(ExecuteRequest::decode(&execute.encode()), Ok(execute));
        let remote = ExecuteRemoteRequest {
            datacenter: "dc3",
            query: full_query(),
            limit: 0,
            connect: false,
            options: QueryOptions::default(),
        };
        assert_eq!(ExecuteRemoteRequest::decode(&remote.encode()), Ok(remote));
        let get = SpecificRequest {
            datacenter: "dc1",
            query_id: "abc",
            options: QueryOptions {
                min_query_index: 4,
                ..QueryOptions::default()
            },
        };
        assert_eq!(SpecificRequest::decode(&get.encode()), Ok(get));
    }

    #[test]
    fn connect_is_read_as_consuls_struct_or_a_boolean() {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 2);
        f.field("Connect").bool(true);
        f.field("Service").str("web");
        f.finish();
        let service = read_service_query(&mut Reader::new(&w.buf)).unwrap();
        assert!(service.connect);
        assert_eq!(service.service, "web");
    }

    #[test]
    fn an_empty_execution_reads_back() {
        let meta = QueryMeta {
            index: 12,
            known_leader: true,
            consistency_level: "leader",
            ..QueryMeta::default()
        };
        let execution = Execution {
            service: "web",
            dns_ttl: "5s",
            datacenter: "dc2",
            failovers: 1,
        };
        let body = write_execute_response(&meta, &execution, &[]);
        let reply = read_execute_response(&body).unwrap();
        assert_eq!(reply.meta, meta);
        assert_eq!(
            (reply.service.as_str(), reply.dns_ttl.as_str()),
            ("web", "5s")
        );
        assert_eq!((reply.datacenter.as_str(), reply.failovers), ("dc2", 1));
        assert!(reply.nodes.is_empty());
    }

    #[test]
    fn listings_show_the_token_they_are_given() {
        let query = full_query();
        let body = write_indexed_queries(&QueryMeta::default(), &[&query], |_| "<hidden>");
        let (_, queries) = read_indexed_queries(&body).unwrap();
        assert_eq!(queries.len(), 1);
        assert_eq!(queries[0].token, "<hidden>");
        assert_eq!(queries[0].name, query.name);
        let (_, explained) =
            read_explain_response(&write_explain_response(&QueryMeta::default(), &query, "x"))
                .unwrap();
        assert_eq!(explained.token, "x");
    }

    #[test]
    fn truncated_bodies_are_refused() {
        let body = QueryRequest {
            query: full_query(),
            ..QueryRequest::default()
        }
        .encode();
        for cut in [1, body.len() / 2, body.len() - 1] {
            assert!(QueryRequest::decode(&body[..cut]).is_err(), "cut at {cut}");
        }
    }
}
