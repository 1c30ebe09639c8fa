//! Prepared queries in Consul's JSON: the body of `/v1/query` writes decoded leniently with
//! Consul's validation (`parseQuery`), and a stored query rendered as Consul's
//! `PreparedQuery` (field order and `null` for absent lists and maps, as Go writes them).
//!
//! Pure: no store access beyond the row types. The checks that need the state (unique
//! names, the session, the template's compilation) are the store's (`store::query`).

use crate::consul::body::{parse_strict, Obj};
use crate::consul::registration::validate_meta;
use crate::proto::duration::parse_go_duration_nanos;
use crate::store::query::{Failover, FailoverTarget, PreparedQuery, QueryTemplate, ServiceQuery};
use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};

/// Consul's placeholder for a token it will not show.
pub const REDACTED_TOKEN: &str = "<hidden>";
/// Most entries of any one list or map in a query (tags, datacenters, targets, ignored
/// checks, metadata filters).
pub const QUERY_LIST_ENTRIES_MAX: usize = 1024;
/// Longest name, service, session, near, token or regexp of a query.
pub const QUERY_STRING_BYTES_MAX: usize = 4096;

/// Decodes a query from a `/v1/query` body. The caller sets or checks the ID.
/// Errors are the text after Consul's "Request decode failed: ".
pub fn decode(body: &[u8]) -> Result<PreparedQuery, String> {
    let value = parse_strict(body, &super::bodies::PREPARED_QUERY)?;
    let obj = Obj::new(&value)?;
    let string = |o: &Obj, names: &[&str]| -> Result<String, String> {
        let text = o.string(names)?;
        if text.len() > QUERY_STRING_BYTES_MAX {
            return Err(format!(
                "{}: longer than {QUERY_STRING_BYTES_MAX} bytes",
                names[0]
            ));
        }
        Ok(text)
    };
    let list = |o: &Obj, names: &[&str]| -> Result<Option<Vec<String>>, String> {
        if !o.has(names) {
            return Ok(None);
        }
        let items = o.str_list(names)?;
        if items.len() > QUERY_LIST_ENTRIES_MAX {
            return Err(format!(
                "{}: more than {QUERY_LIST_ENTRIES_MAX} entries",
                names[0]
            ));
        }
        Ok(Some(items))
    };
    let map = |o: &Obj, names: &[&str]| -> Result<Option<Vec<(String, String)>>, String> {
        if !o.has(names) {
            return Ok(None);
        }
        let mut pairs = o.str_map(names)?;
        if pairs.len() > QUERY_LIST_ENTRIES_MAX {
            return Err(format!(
                "{}: more than {QUERY_LIST_ENTRIES_MAX} entries",
                names[0]
            ));
        }
        pairs.sort();
        Ok(Some(pairs))
    };
    let template = match obj.obj(&["template"])? {
        Some(t) => QueryTemplate {
            kind: string(&t, &["type"])?,
            regexp: string(&t, &["regexp"])?,
            remove_empty_tags: t.bool(&["removeemptytags"])?,
        },
        None => QueryTemplate::default(),
    };
    let service = match obj.obj(&["service"])? {
        Some(s) => {
            let failover = match s.obj(&["failover"])? {
                Some(f) => Failover {
                    nearest_n: f.i64(&["nearestn"])?,
                    datacenters: list(&f, &["datacenters"])?,
                    targets: if f.has(&["targets"]) {
                        let targets = f.obj_list(&["targets"])?;
                        if targets.len() > QUERY_LIST_ENTRIES_MAX {
                            return Err(format!(
                                "Targets: more than {QUERY_LIST_ENTRIES_MAX} entries"
                            ));
                        }
                        Some(
                            targets
                                .iter()
                                .map(|t| {
                                    Ok(FailoverTarget {
                                        peer: string(t, &["peer"])?,
                                        datacenter: string(t, &["datacenter"])?,
                                    })
                                })
                                .collect::<Result<_, String>>()?,
                        )
                    } else {
                        None
                    },
                },
                None => Failover::default(),
            };
            ServiceQuery {
                service: string(&s, &["service"])?,
                sameness_group: string(&s, &["samenessgroup"])?,
                failover,
                only_passing: s.bool(&["onlypassing"])?,
                ignore_check_ids: list(&s, &["ignorecheckids"])?,
                near: string(&s, &["near"])?,
                tags: list(&s, &["tags"])?,
                node_meta: map(&s, &["nodemeta"])?,
                service_meta: map(&s, &["servicemeta"])?,
                connect: s.bool(&["connect"])?,
                peer: string(&s, &["peer"])?,
            }
        }
        None => ServiceQuery::default(),
    };
    let dns_ttl = match obj.obj(&["dns"])? {
        Some(d) => string(&d, &["ttl"])?,
        None => String::new(),
    };
    Ok(PreparedQuery {
        id: string(&obj, &["id"])?,
        name: string(&obj, &["name"])?,
        session: string(&obj, &["session"])?,
        token: string(&obj, &["token"])?,
        template,
        service,
        dns_ttl,
        create_index: 0,
        modify_index: 0,
    })
}

/// Consul's `parseQuery`: what a create or update must satisfy before it is proposed. The
/// error is the text after "Invalid prepared query: ".
pub fn validate(query: &PreparedQuery) -> Result<(), String> {
    if query.name.is_empty() && !query.is_template() && query.session.is_empty() {
        return Err("Must be bound to a session".to_string());
    }
    if query.token == REDACTED_TOKEN {
        return Err(format!(
            "Bad Token '{REDACTED_TOKEN}', it looks like a query definition with a redacted token was submitted"
        ));
    }
    let service = &query.service;
    if service.service.is_empty() {
        return Err("Must provide a Service name to query".to_string());
    }
    let failover = &service.failover;
    if failover.nearest_n < 0 {
        return Err(format!(
            "Bad NearestN '{}', must be >= 0",
            failover.nearest_n
        ));
    }
    let has_targets = failover.targets.as_ref().is_some_and(|t| !t.is_empty());
    let has_datacenters = failover.datacenters.as_ref().is_some_and(|d| !d.is_empty());
    if (failover.nearest_n != 0 || has_datacenters) && has_targets {
        return Err("Targets cannot be populated with NearestN or Datacenters".to_string());
    }
    // What Consul's community edition cannot do either, or praetor has no way to reach.
    if !service.sameness_group.is_empty() {
        return Err("sameness groups are a Consul Enterprise feature".to_string());
    }
    if !service.peer.is_empty()
        || failover
            .targets
            .iter()
            .flatten()
            .any(|t| !t.peer.is_empty())
    {
        return Err("cluster peering is not supported: a query cannot name a peer".to_string());
    }
    validate_meta(service.node_meta.as_deref().unwrap_or_default(), true)?;
    if !query.dns_ttl.is_empty() {
        let ttl = parse_go_duration_nanos(&query.dns_ttl)
            .map_err(|e| format!("Bad DNS TTL '{}': {e}", query.dns_ttl))?;
        if ttl < 0 {
            return Err(format!("DNS TTL '{ttl}', must be >=0"));
        }
    }
    Ok(())
}

/// A query as Consul renders it (`token` replaced by the caller when it must be hidden).
pub struct QueryJson<'a> {
    pub query: &'a PreparedQuery,
    /// The token to show: the stored one, or [`REDACTED_TOKEN`].
    pub token: &'a str,
}

impl Serialize for QueryJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let q = self.query;
        let mut out = serializer.serialize_struct("PreparedQuery", 10)?;
        out.serialize_field("ID", &q.id)?;
        out.serialize_field("Name", &q.name)?;
        out.serialize_field("Session", &q.session)?;
        out.serialize_field("Token", self.token)?;
        out.serialize_field("Template", &TemplateJson(&q.template))?;
        out.serialize_field("Service", &ServiceJson(&q.service))?;
        out.serialize_field("DNS", &DnsJson(&q.dns_ttl))?;
        out.serialize_field("CreateIndex", &q.create_index)?;
        out.serialize_field("ModifyIndex", &q.modify_index)?;
        out.end()
    }
}

struct TemplateJson<'a>(&'a QueryTemplate);

impl Serialize for TemplateJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_struct("QueryTemplateOptions", 3)?;
        out.serialize_field("Type", &self.0.kind)?;
        out.serialize_field("Regexp", &self.0.regexp)?;
        out.serialize_field("RemoveEmptyTags", &self.0.remove_empty_tags)?;
        out.end()
    }
}

/// `DNS`: `{"TTL": …}`.
struct DnsJson<'a>(&'a str);

impl Serialize for DnsJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_struct("QueryDNSOptions", 1)?;
        out.serialize_field("TTL", self.0)?;
        out.end()
    }
}

/// A string map in key order, `null` when absent.
struct PairsJson<'a>(&'a Option<Vec<(String, String)>>);

impl Serialize for PairsJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Some(pairs) = self.0 else {
            return serializer.serialize_none();
        };
        let mut out = serializer.serialize_map(Some(pairs.len()))?;
        for (k, v) in pairs {
            out.serialize_entry(k, v)?;
        }
        out.end()
    }
}

struct TargetJson<'a>(&'a FailoverTarget);

impl Serialize for TargetJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_struct("QueryFailoverTarget", 2)?;
        out.serialize_field("Peer", &self.0.peer)?;
        out.serialize_field("Datacenter", &self.0.datacenter)?;
        out.end()
    }
}

struct ServiceJson<'a>(&'a ServiceQuery);

impl Serialize for ServiceJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let s = self.0;
        let failover = FailoverJson(&s.failover);
        let mut out = serializer.serialize_struct("ServiceQuery", 12)?;
        out.serialize_field("Service", &s.service)?;
        out.serialize_field("SamenessGroup", &s.sameness_group)?;
        out.serialize_field("Failover", &failover)?;
        out.serialize_field("OnlyPassing", &s.only_passing)?;
        out.serialize_field("IgnoreCheckIDs", &s.ignore_check_ids)?;
        out.serialize_field("Near", &s.near)?;
        out.serialize_field("Tags", &s.tags)?;
        out.serialize_field("NodeMeta", &PairsJson(&s.node_meta))?;
        out.serialize_field("ServiceMeta", &PairsJson(&s.service_meta))?;
        out.serialize_field("Connect", &s.connect)?;
        out.serialize_field("Peer", &s.peer)?;
        out.end()
    }
}

struct FailoverJson<'a>(&'a Failover);

impl Serialize for FailoverJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let f = self.0;
        let targets: Option<Vec<TargetJson>> = f
            .targets
            .as_ref()
            .map(|t| t.iter().map(TargetJson).collect());
        let mut out = serializer.serialize_struct("QueryFailoverOptions", 3)?;
        out.serialize_field("NearestN", &f.nearest_n)?;
        out.serialize_field("Datacenters", &f.datacenters)?;
        out.serialize_field("Targets", &targets)?;
        out.end()
    }
}

/// The whole query as JSON text, for the body of a remote execution.
pub fn to_json(query: &PreparedQuery) -> Vec<u8> {
    serde_json::to_vec(&QueryJson {
        query,
        token: &query.token,
    })
    .expect("a query always serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_decodes_in_any_letter_case_and_renders_back_as_consul_writes_it() {
        let body = br#"{"name":"web-query","Session":"","service":{"Service":"web",
            "failover":{"nearestn":2,"Datacenters":["dc2","dc3"]},"onlypassing":true,
            "Tags":["primary","!canary"],"NodeMeta":{"rack":"a"}},"DNS":{"TTL":"10s"}}"#;
        let query = decode(body).unwrap();
        assert_eq!(query.name, "web-query");
        assert_eq!(query.service.failover.nearest_n, 2);
        assert!(query.service.only_passing);
        assert_eq!(query.service.ignore_check_ids, None);
        validate(&query).unwrap();
        let json = serde_json::to_value(QueryJson {
            query: &query,
            token: "",
        })
        .unwrap();
        assert_eq!(json["Service"]["Failover"]["Datacenters"][1], "dc3");
        assert_eq!(
            json["Service"]["Failover"]["Targets"],
            serde_json::Value::Null
        );
        assert_eq!(json["Service"]["IgnoreCheckIDs"], serde_json::Value::Null);
        assert_eq!(json["Service"]["NodeMeta"]["rack"], "a");
        assert_eq!(json["DNS"]["TTL"], "10s");
        assert_eq!(json["Template"]["Type"], "");
        // The round trip keeps everything.
        assert_eq!(decode(&to_json(&query)).unwrap(), query);
        let text = String::from_utf8(to_json(&query)).unwrap();
        assert!(
            text.starts_with(r#"{"ID":"","Name":"web-query","Session":"""#),
            "{text}"
        );
    }

    #[test]
    fn invalid_queries_get_consuls_reasons() {
        let check = |body: &str| validate(&decode(body.as_bytes()).unwrap()).unwrap_err();
        assert_eq!(
            check(r#"{"Service":{"Service":"web"}}"#),
            "Must be bound to a session"
        );
        assert_eq!(
            check(r#"{"Name":"q"}"#),
            "Must provide a Service name to query"
        );
        assert_eq!(
            check(r#"{"Name":"q","Service":{"Service":"w","Failover":{"NearestN":-1}}}"#),
            "Bad NearestN '-1', must be >= 0"
        );
        assert_eq!(
            check(
                r#"{"Name":"q","Service":{"Service":"w","Failover":{"NearestN":1,"Targets":[{"Datacenter":"dc2"}]}}}"#
            ),
            "Targets cannot be populated with NearestN or Datacenters"
        );
        assert!(
            check(r#"{"Name":"q","Service":{"Service":"w"},"DNS":{"TTL":"soon"}}"#)
                .starts_with("Bad DNS TTL 'soon': ")
        );
        assert!(
            check(r#"{"Name":"q","Token":"<hidden>","Service":{"Service":"w"}}"#)
                .starts_with("Bad Token '<hidden>'")
        );
        assert!(decode(br#"{"Service":{"Tags":{"a":1}}}"#).is_err());
        assert!(decode(b"[1]").is_err());
    }
}
