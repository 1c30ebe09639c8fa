//! `/v1/agent/*` endpoints about this agent's own services and checks, members, reload,
//! leave and metrics.
//!
//! The local state lives with the agent on shard 0: these handlers parse the request on the
//! shard that received it, send an [`AgentCall`] over the agent channel and answer with what
//! comes back (`Outcome::Async`). Members and leave are answered here directly.

use super::filter::{self, Filter};
use super::json::JsonWriter;
use super::{ApiError, Outcome, Reply, Request};
use crate::agent::api::{AgentCall, AgentReply, AgentRequest};
use crate::gossip::MemberStatus;
use crate::proto::duration::parse_go_duration;
use crate::shard::Shard;
use crate::store::catalog::Status;
use std::time::Duration;

const GET: &[&str] = &["GET"];
const PUT: &[&str] = &["PUT"];
const GET_PUT: &[&str] = &["GET", "PUT"];
/// Longest a hash-blocking `/v1/agent/service/<id>` waits.
const SERVICE_WAIT_MAX: Duration = Duration::from_secs(600);
/// How long a request waits for the agent before giving up.
const AGENT_REPLY_TIMEOUT: Duration = Duration::from_secs(660);

/// Sends `request` to the agent and answers with its reply.
fn call(shard: &Shard, request: AgentRequest, pretty: bool) -> Outcome {
    let (tx, rx) = flume::bounded(1);
    let sent = shard.shared().agent.tx.try_send(AgentCall {
        request,
        pretty,
        reply: tx,
    });
    Outcome::Async(Box::pin(async move {
        let reply = match sent {
            Err(_) => AgentReply::text(503, "agent is busy; try again"),
            Ok(()) => match monoio::time::timeout(AGENT_REPLY_TIMEOUT, rx.recv_async()).await {
                Ok(Ok(reply)) => reply,
                _ => AgentReply::text(500, "agent did not answer"),
            },
        };
        Box::new(move |out: &mut Reply| {
            out.send(
                reply.status,
                reply.content_type,
                &reply.headers,
                &reply.body,
            )
        }) as super::AsyncResponder
    }))
}

/// Consul's `?enable=` for maintenance endpoints.
fn enable_param(request: &Request) -> Result<bool, ApiError> {
    let Some(raw) = request.query.get("enable") else {
        return Err(ApiError::bad_request("Missing value for enable"));
    };
    match raw {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(ApiError::bad_request(format!(
            "Invalid value for enable: {raw:?}"
        ))),
    }
}

fn check_update(request: &Request, id: &str) -> Result<AgentRequest, ApiError> {
    let value = super::body::parse_json(request.body)
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    let obj = super::body::Obj::new(&value)
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    let status_text = obj
        .string(&["status"])
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    let status = match status_text.as_str() {
        "passing" => Status::Passing,
        "warning" => Status::Warning,
        "critical" => Status::Critical,
        other => {
            return Err(ApiError::bad_request(format!(
                "Invalid check status: '{other}'"
            )))
        }
    };
    let output = obj
        .string(&["output"])
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    Ok(AgentRequest::UpdateTtl {
        id: id.to_string(),
        status,
        output,
    })
}

fn text_format(request: &Request) -> bool {
    if request
        .header("Accept")
        .is_some_and(|a| a.starts_with("text/plain"))
    {
        return true;
    }
    request.query.get("format") == Some("text")
}

/// `GET /v1/agent/members`: the LAN gossip members (this agent alone without gossip).
fn members(shard: &Shard, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let filter = match request.query.get("filter") {
        Some(text) => Filter::parse(text, filter::MEMBER).map_err(|e| {
            ApiError::bad_request(format!(
                "Failed to create boolean expression evaluator: {e}"
            ))
        })?,
        None => None,
    };
    let wan = request
        .query
        .get("wan")
        .is_some_and(|w| !w.is_empty() && w != "0" && w != "false");
    let config = shard.config();
    let mut list: Vec<crate::gossip::MemberInfo> = Vec::new();
    if !wan {
        match &shard.shared().gossip_lan {
            Some(gossip) => list.extend(gossip.members().iter().cloned()),
            None => list.push(crate::gossip::MemberInfo {
                name: config.node_name.clone(),
                addr: config.advertise(),
                port: config.ports.serf_lan.max(0) as u16,
                tags: crate::shard::cluster::lan_tags(config, &shard.identity().node_id),
                status: MemberStatus::Alive,
                protocol_min: 1,
                protocol_max: 5,
                protocol_cur: 2,
                delegate_min: 2,
                delegate_max: 5,
                delegate_cur: 4,
            }),
        }
    }
    // Consul's `serf.Member` field order.
    let render = |w: &mut JsonWriter, m: &crate::gossip::MemberInfo| {
        w.begin_object();
        w.field_str("Name", &m.name);
        w.field_str("Addr", &m.addr.to_string());
        w.field_u64("Port", m.port as u64);
        w.field_str_map(
            "Tags",
            Some(m.tags.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
        );
        w.field_u64("Status", m.status as u64);
        for (name, value) in [
            ("ProtocolMin", m.protocol_min),
            ("ProtocolMax", m.protocol_max),
            ("ProtocolCur", m.protocol_cur),
            ("DelegateMin", m.delegate_min),
            ("DelegateMax", m.delegate_max),
            ("DelegateCur", m.delegate_cur),
        ] {
            w.field_u64(name, value as u64);
        }
        w.end_object();
    };
    let mut body = Vec::with_capacity(512 * list.len().max(1));
    let mut w = JsonWriter::new(&mut body, reply.pretty);
    w.begin_array();
    for member in &list {
        if let Some(filter) = &filter {
            if !filter.matches(&super::render::as_value(|w| render(w, member))) {
                continue;
            }
        }
        render(&mut w, member);
    }
    w.end_array();
    w.finish();
    reply.json_bytes(200, b"", &body);
    Ok(Outcome::Done)
}

/// `PUT /v1/agent/leave`: leave the gossip pool gracefully, then shut down.
fn leave(shard: &Shard) -> Result<Outcome, ApiError> {
    let gossip = shard.shared().gossip_lan.clone();
    Ok(Outcome::Async(Box::pin(async move {
        if let Some(gossip) = gossip {
            if let Err(e) = gossip.leave().await {
                log::warn!("agent: leaving the gossip pool failed: {e}");
            }
        }
        // Let the answer go out before the process stops.
        monoio::spawn(async {
            monoio::time::sleep(Duration::from_millis(200)).await;
            log::info!("agent: leaving on request");
            // SAFETY: signalling our own process, whose main thread waits for SIGTERM.
            unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        });
        Box::new(|out: &mut Reply| out.send(200, None, b"", b"")) as super::AsyncResponder
    })))
}

/// Builds the outcome of an agent endpoint once its method is allowed.
type Handler<'r> = Box<dyn FnOnce(&mut Reply) -> Result<Outcome, ApiError> + 'r>;

/// Routes the agent-local endpoints; `None` for paths handled elsewhere.
pub fn route(
    shard: &Shard,
    request: &Request,
    reply: &mut Reply,
) -> Option<Result<Outcome, ApiError>> {
    let path = request.path;
    let rest = path.strip_prefix("/v1/agent/")?;
    let pretty = reply.pretty;
    let (methods, build): (&'static [&'static str], Handler<'_>) = match rest {
        "services" => (
            GET,
            Box::new(|_| {
                let filter = request.query.get("filter").unwrap_or("").to_string();
                Ok(call(shard, AgentRequest::Services { filter }, pretty))
            }),
        ),
        "checks" => (
            GET,
            Box::new(|_| {
                let filter = request.query.get("filter").unwrap_or("").to_string();
                Ok(call(shard, AgentRequest::Checks { filter }, pretty))
            }),
        ),
        "service/register" => (
            PUT,
            Box::new(|_| {
                let replace = request
                    .query
                    .get("replace-existing-checks")
                    .is_some_and(|v| v.is_empty() || v == "true");
                Ok(call(
                    shard,
                    AgentRequest::RegisterService {
                        body: request.body.to_vec(),
                        replace_existing_checks: replace,
                    },
                    pretty,
                ))
            }),
        ),
        "check/register" => (
            PUT,
            Box::new(|_| {
                Ok(call(
                    shard,
                    AgentRequest::RegisterCheck {
                        body: request.body.to_vec(),
                    },
                    pretty,
                ))
            }),
        ),
        "maintenance" => (
            PUT,
            Box::new(|_| {
                let enable = enable_param(request)?;
                let reason = request.query.get("reason").unwrap_or("").to_string();
                Ok(call(
                    shard,
                    AgentRequest::NodeMaintenance { enable, reason },
                    pretty,
                ))
            }),
        ),
        "reload" => (
            PUT,
            Box::new(|_| Ok(call(shard, AgentRequest::Reload, pretty))),
        ),
        "leave" => (PUT, Box::new(|_| leave(shard))),
        "members" => (GET, Box::new(|r| members(shard, request, r))),
        "metrics" => (
            GET,
            Box::new(|_| {
                let prometheus = request.query.get("format") == Some("prometheus")
                    || request
                        .header("Accept")
                        .is_some_and(|a| a.contains("application/openmetrics-text"));
                Ok(call(shard, AgentRequest::Metrics { prometheus }, pretty))
            }),
        ),
        _ => {
            if let Some(id) = rest.strip_prefix("service/deregister/") {
                (
                    GET_PUT,
                    Box::new(move |_| {
                        Ok(call(
                            shard,
                            AgentRequest::DeregisterService { id: id.to_string() },
                            pretty,
                        ))
                    }),
                )
            } else if let Some(id) = rest.strip_prefix("service/maintenance/") {
                (
                    PUT,
                    Box::new(move |_| {
                        if id.is_empty() {
                            return Err(ApiError::bad_request("Missing service ID"));
                        }
                        let enable = enable_param(request)?;
                        let reason = request.query.get("reason").unwrap_or("").to_string();
                        Ok(call(
                            shard,
                            AgentRequest::ServiceMaintenance {
                                id: id.to_string(),
                                enable,
                                reason,
                            },
                            pretty,
                        ))
                    }),
                )
            } else if let Some(id) = rest.strip_prefix("service/") {
                (
                    GET,
                    Box::new(move |_| {
                        let wait = match request.query.get("wait") {
                            Some(w) if !w.is_empty() => parse_go_duration(w)
                                .map_err(|_| ApiError::bad_request("Invalid wait time"))?
                                .min(SERVICE_WAIT_MAX),
                            _ => super::BLOCKING_WAIT_DEFAULT,
                        };
                        let hash = request
                            .query
                            .get("hash")
                            .filter(|h| !h.is_empty())
                            .map(str::to_string);
                        Ok(call(
                            shard,
                            AgentRequest::Service {
                                id: id.to_string(),
                                hash,
                                wait,
                            },
                            pretty,
                        ))
                    }),
                )
            } else if let Some(id) = rest.strip_prefix("check/deregister/") {
                (
                    GET_PUT,
                    Box::new(move |_| {
                        Ok(call(
                            shard,
                            AgentRequest::DeregisterCheck { id: id.to_string() },
                            pretty,
                        ))
                    }),
                )
            } else if let Some(id) = rest.strip_prefix("check/update/") {
                (
                    PUT,
                    Box::new(move |_| Ok(call(shard, check_update(request, id)?, pretty))),
                )
            } else if let Some((verb, id)) = rest
                .strip_prefix("check/")
                .and_then(|r| r.split_once('/'))
                .filter(|(verb, _)| matches!(*verb, "pass" | "warn" | "fail"))
            {
                let status = match verb {
                    "pass" => Status::Passing,
                    "warn" => Status::Warning,
                    _ => Status::Critical,
                };
                (
                    GET_PUT,
                    Box::new(move |_| {
                        let output = request.query.get("note").unwrap_or("").to_string();
                        Ok(call(
                            shard,
                            AgentRequest::UpdateTtl {
                                id: id.to_string(),
                                status,
                                output,
                            },
                            pretty,
                        ))
                    }),
                )
            } else if let Some(name) = rest.strip_prefix("health/service/name/") {
                (
                    GET,
                    Box::new(move |_| {
                        if name.is_empty() {
                            return Err(ApiError::bad_request("Missing service Name"));
                        }
                        Ok(call(
                            shard,
                            AgentRequest::HealthByName {
                                name: name.to_string(),
                                text: text_format(request),
                            },
                            pretty,
                        ))
                    }),
                )
            } else if let Some(id) = rest.strip_prefix("health/service/id/") {
                (
                    GET,
                    Box::new(move |_| {
                        if id.is_empty() {
                            return Err(ApiError::bad_request("Missing serviceID"));
                        }
                        Ok(call(
                            shard,
                            AgentRequest::HealthById {
                                id: id.to_string(),
                                text: text_format(request),
                            },
                            pretty,
                        ))
                    }),
                )
            } else {
                return None;
            }
        }
    };
    Some(match super::allow(request, reply, methods) {
        Ok(true) => build(reply),
        Ok(false) => Ok(Outcome::Done),
        Err(e) => Err(e),
    })
}
