//! `/v1/agent/*` endpoints about this agent's own services and checks, reload and metrics
//! (members, join and leave are the gossip surface's, `api/members.rs`).
//!
//! The local state lives with the agent on shard 0: these handlers parse the request on the
//! shard that received it, send an [`AgentCall`] over the [`AgentChannel`] and answer with
//! what comes back (`Outcome::Async`). The channel's types live in `agent_channel.rs`,
//! below the agent that serves them, so that the HTTP layer never imports the agent.

use super::agent_channel::{AgentCall, AgentReply, AgentRequest};
use super::{ApiError, Context, Outcome, Reply, Request};
use crate::store::catalog::Status;
use std::time::Duration;

/// Longest a hash-blocking `/v1/agent/service/<id>` waits, whatever `max_query_time`
/// allows: the reply timeout below covers it.
const SERVICE_WAIT_MAX: Duration = Duration::from_secs(600);
/// How long a request waits for the agent before giving up.
const AGENT_REPLY_TIMEOUT: Duration = Duration::from_secs(660);

/// Sends `request` to the agent and answers with its reply.
fn call(ctx: &Context, request: AgentRequest, pretty: bool) -> Outcome {
    let (tx, rx) = flume::bounded(1);
    let sent = ctx.agent().tx.try_send(AgentCall {
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
    let value =
        crate::consul::body::parse_strict(request.body, &crate::consul::bodies::CHECK_UPDATE)
            .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    let obj = crate::consul::body::Obj::new(&value)
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

/// `GET /v1/agent/services`.
pub fn services(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let filter = request.query.get("filter").unwrap_or("").to_string();
    let rows = super::authz::RowFilter::of(request);
    Ok(call(
        ctx,
        AgentRequest::Services { filter, rows },
        reply.pretty,
    ))
}

/// `GET /v1/agent/checks`.
pub fn checks(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let filter = request.query.get("filter").unwrap_or("").to_string();
    let rows = super::authz::RowFilter::of(request);
    Ok(call(
        ctx,
        AgentRequest::Checks { filter, rows },
        reply.pretty,
    ))
}

/// `PUT /v1/agent/service/register`.
pub fn register_service(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let replace_existing_checks = request
        .query
        .get("replace-existing-checks")
        .is_some_and(|v| v.is_empty() || v == "true");
    let body = request.body.to_vec();
    let token = request.token().unwrap_or("").to_string();
    Ok(call(
        ctx,
        AgentRequest::RegisterService {
            body,
            replace_existing_checks,
            token,
        },
        reply.pretty,
    ))
}

/// `PUT /v1/agent/check/register`.
pub fn register_check(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let body = request.body.to_vec();
    let token = request.token().unwrap_or("").to_string();
    Ok(call(
        ctx,
        AgentRequest::RegisterCheck { body, token },
        reply.pretty,
    ))
}

/// `PUT /v1/agent/maintenance?enable=…&reason=…`.
pub fn node_maintenance(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let enable = enable_param(request)?;
    let reason = request.query.get("reason").unwrap_or("").to_string();
    Ok(call(
        ctx,
        AgentRequest::NodeMaintenance { enable, reason },
        reply.pretty,
    ))
}

/// `PUT /v1/agent/reload`.
pub fn reload(ctx: &Context, _: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    Ok(call(ctx, AgentRequest::Reload, reply.pretty))
}

/// `GET /v1/agent/metrics`, as go-metrics JSON or, asked for, Prometheus text.
pub fn metrics(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let prometheus = request.query.get("format") == Some("prometheus")
        || request
            .header("Accept")
            .is_some_and(|a| a.contains("application/openmetrics-text"));
    Ok(call(
        ctx,
        AgentRequest::Metrics { prometheus },
        reply.pretty,
    ))
}

/// Summaries a `/v1/agent/metrics/stream` client may have waiting before it is dropped as
/// not reading.
const METRICS_STREAM_QUEUE_MAX: usize = 4;

/// `GET /v1/agent/metrics/stream`: go-metrics' summary of every 10 s interval as it ends,
/// for as long as the client stays.
pub fn metrics_stream(ctx: &Context, _: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    let (chunks, receiver) = flume::bounded(METRICS_STREAM_QUEUE_MAX);
    let (reply, _) = flume::bounded(1);
    ctx.agent()
        .tx
        .try_send(AgentCall {
            request: AgentRequest::MetricsStream { chunks },
            pretty: true,
            reply,
        })
        .map_err(|_| ApiError::Internal("agent is busy; try again".into()))?;
    Ok(Outcome::Stream(super::StreamOp {
        // What Go's server sniffs from the first (empty) write, as Consul's answer carries.
        content_type: "text/plain; charset=utf-8",
        chunks: receiver,
    }))
}

/// `PUT /v1/agent/service/deregister/<id>`.
pub fn deregister_service(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let id = request.rest.to_string();
    Ok(call(
        ctx,
        AgentRequest::DeregisterService { id },
        reply.pretty,
    ))
}

/// `PUT /v1/agent/service/maintenance/<id>?enable=…&reason=…`.
pub fn service_maintenance(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    if request.rest.is_empty() {
        return Err(ApiError::bad_request("Missing service ID"));
    }
    let enable = enable_param(request)?;
    let reason = request.query.get("reason").unwrap_or("").to_string();
    Ok(call(
        ctx,
        AgentRequest::ServiceMaintenance {
            id: request.rest.to_string(),
            enable,
            reason,
        },
        reply.pretty,
    ))
}

/// `GET /v1/agent/connect/ca/leaf/<service>`, blocking on the leaf's index.
pub fn connect_leaf(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    super::intentions::require_connect(ctx)?;
    let service = request.rest.to_string();
    if service.is_empty() {
        return Err(ApiError::bad_request("Missing service name"));
    }
    let options = super::query_options(ctx, &request.query)?;
    Ok(call(
        ctx,
        AgentRequest::ConnectLeaf {
            service,
            dns_sans: Vec::new(),
            min_index: options.min_index,
            wait: options.wait,
            token: request.token().map(str::to_string),
        },
        reply.pretty,
    ))
}

/// `GET /v1/agent/service/<id>`, hash-blocking with `?hash=…&wait=…`.
pub fn service(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let wait = super::blocking_wait(ctx.config(), request.query.get("wait"))?.min(SERVICE_WAIT_MAX);
    let hash = request
        .query
        .get("hash")
        .filter(|h| !h.is_empty())
        .map(str::to_string);
    Ok(call(
        ctx,
        AgentRequest::Service {
            id: request.rest.to_string(),
            hash,
            wait,
        },
        reply.pretty,
    ))
}

/// `PUT /v1/agent/check/deregister/<id>`.
pub fn deregister_check(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let id = request.rest.to_string();
    Ok(call(
        ctx,
        AgentRequest::DeregisterCheck { id },
        reply.pretty,
    ))
}

/// `PUT /v1/agent/check/update/<id>` with `{"Status": …, "Output": …}`.
pub fn update_check(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    Ok(call(
        ctx,
        check_update(request, request.rest)?,
        reply.pretty,
    ))
}

/// `PUT /v1/agent/check/pass/<id>?note=…`.
pub fn pass_check(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    Ok(ttl_update(ctx, request, Status::Passing, reply.pretty))
}

/// `PUT /v1/agent/check/warn/<id>?note=…`.
pub fn warn_check(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    Ok(ttl_update(ctx, request, Status::Warning, reply.pretty))
}

/// `PUT /v1/agent/check/fail/<id>?note=…`.
pub fn fail_check(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    Ok(ttl_update(ctx, request, Status::Critical, reply.pretty))
}

fn ttl_update(ctx: &Context, request: &Request, status: Status, pretty: bool) -> Outcome {
    let output = request.query.get("note").unwrap_or("").to_string();
    call(
        ctx,
        AgentRequest::UpdateTtl {
            id: request.rest.to_string(),
            status,
            output,
        },
        pretty,
    )
}

/// `GET /v1/agent/health/service/name/<name>`.
pub fn health_by_name(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    if request.rest.is_empty() {
        return Err(ApiError::bad_request("Missing service Name"));
    }
    Ok(call(
        ctx,
        AgentRequest::HealthByName {
            name: request.rest.to_string(),
            text: text_format(request),
        },
        reply.pretty,
    ))
}

/// `GET /v1/agent/health/service/id/<id>`.
pub fn health_by_id(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    if request.rest.is_empty() {
        return Err(ApiError::bad_request("Missing serviceID"));
    }
    Ok(call(
        ctx,
        AgentRequest::HealthById {
            id: request.rest.to_string(),
            text: text_format(request),
        },
        reply.pretty,
    ))
}
