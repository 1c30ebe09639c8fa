//! Forwarding: a request this server does not answer itself and that has no typed call yet
//! (those go as Consul's calls, `api::rpc::client`) goes to the leader, or to a server of
//! another datacenter, as its raw HTTP/1.1 bytes over RPC, and the raw answer comes back
//! into the output buffer.
//!
//! A forwarded request is re-framed with `Content-Length` and an `X-Praetor-Forwarded` hop
//! count (at most [`FORWARD_HOPS_MAX`]); the receiving server answers it through the very
//! same dispatch path as a local client ([`answer_forwarded`]), so every endpoint forwards
//! without endpoint-specific RPCs. Without a known leader a request is held up to
//! [`RPC_HOLD_TIMEOUT`]; a write is retried on another server only when it certainly never
//! left this one, so none applies twice.

use super::dispatch::{complete, dispatch_buffered, no_leader, Buffered, Dispatched};
use super::{Server, FORWARD_HOPS_MAX, RPC_HOLD_TIMEOUT};
use crate::api::routes;
use crate::api::{self, Outcome, Reply, BLOCKING_JITTER_FRACTION, ORIGIN_NODE_HEADER};
use crate::cluster::servers::{self, Retry};
use crate::proto::http::{self, BodyFraming, HttpLimits, QueryParams, RequestHead};
use crate::proto::rpc::{kind, Frame};
use crate::shard::rpc_server::ForwardedHttp;
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Pause between looks for a leader while a request is held for one.
const LEADER_RETRY_PAUSE: Duration = Duration::from_millis(50);
/// Timeout of a forwarded non-blocking request.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(15);
/// Header carrying the forward hop count between servers.
const FORWARDED_HEADER: &str = "X-Praetor-Forwarded";

/// A blocking query may legitimately take its whole wait on the leader.
pub(super) fn forward_timeout_for(
    config: &crate::config::AgentConfig,
    query: &QueryParams,
) -> Duration {
    if query
        .get("index")
        .is_some_and(|i| !i.is_empty() && i != "0")
    {
        // An unparsable wait is refused before anything is forwarded.
        let wait = api::blocking_wait(config, query.get("wait"))
            .unwrap_or(config.process.default_query_time);
        return wait + wait / BLOCKING_JITTER_FRACTION + FORWARD_TIMEOUT;
    }
    FORWARD_TIMEOUT
}

/// Rebuilds a request for another server: the same method, target and headers, with the
/// body framed by `Content-Length` and the hop count updated.
pub(super) fn reframe_for_forwarding(
    input: &[u8],
    head: &RequestHead,
    body: &[u8],
    hops: u32,
    origin_node: &str,
    default_token: Option<String>,
) -> Vec<u8> {
    let target_end = if head.query.end > head.query.start {
        head.query.end
    } else {
        head.path.end
    };
    let mut out = Vec::with_capacity(head.head_len + body.len() + 64);
    out.extend_from_slice(&input[head.method_range.start as usize..head.method_range.end as usize]);
    out.push(b' ');
    out.extend_from_slice(&input[head.path.start as usize..target_end as usize]);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let has_origin = head.headers.iter().any(|h| {
        input[h.name.start as usize..h.name.end as usize]
            .eq_ignore_ascii_case(ORIGIN_NODE_HEADER.as_bytes())
    });
    if !has_origin {
        out.extend_from_slice(format!("{ORIGIN_NODE_HEADER}: {origin_node}\r\n").as_bytes());
    }
    if let Some(token) = default_token.filter(|t| !t.contains(['\r', '\n'])) {
        out.extend_from_slice(format!("X-Consul-Token: {token}\r\n").as_bytes());
    }
    for header in &head.headers {
        let name = &input[header.name.start as usize..header.name.end as usize];
        let dropped = [
            "content-length",
            "transfer-encoding",
            "connection",
            "expect",
            "keep-alive",
            FORWARDED_HEADER,
        ];
        if dropped
            .iter()
            .any(|d| name.eq_ignore_ascii_case(d.as_bytes()))
        {
            continue;
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(&input[header.value.start as usize..header.value.end as usize]);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(
        format!(
            "{FORWARDED_HEADER}: {hops}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(body);
    out
}

/// Whether a failed forwarded request may be sent to another server: reads may; a write
/// only when it certainly never left this agent.
fn forward_retry(payload: &[u8]) -> Retry {
    let read = payload.starts_with(b"GET ") || payload.starts_with(b"HEAD ");
    if read {
        Retry::Always
    } else {
        Retry::NotSent
    }
}

/// Hands a request for another datacenter to a server of it and copies its raw answer into
/// `output`. A client agent sends it to its own server, which makes the hop; a server
/// sends it through the WAN router, which fails over among that datacenter's servers.
pub(super) async fn forward_to_datacenter(
    server: &Server,
    datacenter: &str,
    payload: Vec<u8>,
    timeout: Duration,
    output: &mut Vec<u8>,
    keep_alive: bool,
) {
    let retry = forward_retry(&payload);
    let answer = if server.shard.is_client() {
        servers::call(
            server.context.servers(),
            &server.shard.forward,
            kind::FORWARD_HTTP,
            &payload,
            timeout,
            retry,
        )
        .await
    } else {
        server
            .context
            .router()
            .forward(
                &server.shard.forward,
                datacenter,
                kind::FORWARD_HTTP,
                &payload,
                timeout,
                retry,
            )
            .await
    };
    let start = output.len();
    write_forwarded_answer(answer, output, keep_alive);
    if server.shard.config().translate_wan_addrs {
        crate::api::translate::translate_answer(
            &server.context,
            &payload,
            datacenter,
            output,
            start,
        );
    }
}

/// Hands a request to the leader and copies its raw answer into `output`, waiting up to
/// `RPC_HOLD_TIMEOUT` for a leader to be known.
pub(super) async fn forward_to_leader(
    server: &Server,
    payload: Vec<u8>,
    timeout: Duration,
    output: &mut Vec<u8>,
    keep_alive: bool,
) {
    if server.shard.is_client() {
        // A client agent sends it to the server its server manager picks, which fails
        // over to the next server when this one cannot be reached.
        let answer = servers::call(
            server.context.servers(),
            &server.shard.forward,
            kind::FORWARD_HTTP,
            &payload,
            timeout,
            forward_retry(&payload),
        )
        .await;
        write_forwarded_answer(answer, output, keep_alive);
        return;
    }
    let started = Instant::now();
    loop {
        let Some(leader) = wait_for_leader(server, started, &payload, output, keep_alive).await
        else {
            return;
        };
        if server.shard.shared().faults.is_blocked(leader.ip()) {
            monoio::time::sleep(timeout.min(RPC_HOLD_TIMEOUT)).await;
            Reply::new(output, keep_alive, false).error(&api::ApiError::Internal(
                "rpc error: leader unreachable".to_string(),
            ));
            return;
        }
        let answer = server
            .shard
            .forward
            .call_checked(leader, kind::FORWARD_HTTP, &payload, timeout)
            .await;
        match answer {
            // The leader could not be reached and the request never left: it is likely
            // gone and an election under way. Look for the leader again while the hold
            // lasts, as for a server without one; sending again cannot apply it twice.
            Err(failure) if !failure.sent && started.elapsed() < RPC_HOLD_TIMEOUT => {
                log::debug!(
                    "agent: forwarding to the leader failed, retrying: {}",
                    failure.reason
                );
                monoio::time::sleep(LEADER_RETRY_PAUSE).await;
            }
            answer => {
                let answer = answer.map_err(|failure| format!("rpc error: {}", failure.reason));
                write_forwarded_answer(answer, output, keep_alive);
                return;
            }
        }
    }
}

/// The leader to forward to, waiting up to `RPC_HOLD_TIMEOUT` since `started` for one to
/// be known; `None` once the request was answered here instead (this server took the lead
/// meanwhile, or no leader appeared in time).
async fn wait_for_leader(
    server: &Server,
    started: Instant,
    payload: &[u8],
    output: &mut Vec<u8>,
    keep_alive: bool,
) -> Option<SocketAddr> {
    loop {
        let status = server.shard.cluster_status();
        if let Ok(addr) = status.leader_rpc_address.parse::<SocketAddr>() {
            // A leader that has not applied its first entry yet is ourselves: wait for it.
            if !status.is_leader && addr != server.shard.shared().rpc_address {
                return Some(addr);
            }
        }
        if status.is_leader {
            // Leadership arrived here while we waited: answer locally.
            let answer = Box::pin(answer_forwarded(
                server,
                bytes::Bytes::copy_from_slice(payload),
            ))
            .await;
            output.extend_from_slice(&answer);
            return None;
        }
        if started.elapsed() >= RPC_HOLD_TIMEOUT {
            // Consul's words for a server without a leader.
            Reply::new(output, keep_alive, false).error(&no_leader());
            return None;
        }
        monoio::time::sleep(LEADER_RETRY_PAUSE).await;
    }
}

/// Copies a forwarded request's raw answer into `output`, or answers the failure.
fn write_forwarded_answer(answer: Result<Frame, String>, output: &mut Vec<u8>, keep_alive: bool) {
    match answer {
        Ok(frame) if frame.kind == kind::FORWARD_HTTP_RESPONSE => {
            output.extend_from_slice(&frame.payload)
        }
        Ok(frame) => {
            let reason = String::from_utf8_lossy(&frame.payload).into_owned();
            Reply::new(output, keep_alive, false).error(&api::ApiError::Internal(reason));
        }
        Err(reason) => {
            Reply::new(output, keep_alive, false).error(&api::ApiError::Internal(reason))
        }
    }
}

impl ForwardedHttp for Server {
    fn answer(&self, request: bytes::Bytes) -> impl Future<Output = Vec<u8>> {
        answer_forwarded(self, request)
    }
}

/// The answer to a request forwarded more than [`FORWARD_HOPS_MAX`] times.
const TOO_MANY_HOPS: &[u8] = b"No cluster leader (request forwarded too many times)";

/// Appends a refusal of a forwarded request to `output`, in plain text; the connection
/// between the servers stays open.
fn plain_answer(mut output: Vec<u8>, status: u16, text: &[u8]) -> Vec<u8> {
    http::write_response(
        &mut output,
        status,
        Some("text/plain; charset=utf-8"),
        b"",
        text,
        true,
    );
    output
}

/// Answers a request another server forwarded to us: the raw HTTP/1.1 request in, the raw
/// response out, through the same dispatch path as a local client.
async fn answer_forwarded(server: &Server, payload: bytes::Bytes) -> Vec<u8> {
    let mut output = Vec::with_capacity(1024);
    let limits = HttpLimits {
        body_bytes_max: usize::MAX,
        ..*server.shard.http_limits()
    };
    let head = match http::parse_head(&payload, &limits) {
        Ok(Some(head)) => head,
        Ok(None) => {
            return plain_answer(output, 400, b"incomplete forwarded request");
        }
        Err(error) => {
            return plain_answer(output, error.status, error.message.as_bytes());
        }
    };
    let body_end = match head.framing {
        BodyFraming::Length(n) => (head.head_len + n as usize).min(payload.len()),
        _ => head.head_len,
    };
    let hops: u32 = head
        .header(&payload, FORWARDED_HEADER)
        .and_then(|h| h.trim().parse().ok())
        .unwrap_or(0);
    if hops > FORWARD_HOPS_MAX {
        return plain_answer(output, 500, TOO_MANY_HOPS);
    }
    let body = &payload[head.head_len..body_end];
    let Dispatched {
        outcome,
        shape,
        forward,
        tail,
        answer_key,
        ..
    } = dispatch_buffered(
        server,
        Buffered {
            input: &payload,
            head: &head,
            body,
            route: std::str::from_utf8(&payload[head.path.start as usize..head.path.end as usize])
                .ok()
                .and_then(routes::find),
        },
        true,
        &mut output,
        hops,
    );
    // The answer travels back as one RPC message: no streaming here.
    if let Some(mut tail) = tail {
        tail.fill_all(&mut output);
    }
    if matches!(outcome, Outcome::Forward | Outcome::ForwardDatacenter(_))
        && hops >= FORWARD_HOPS_MAX
    {
        return plain_answer(output, 500, TOO_MANY_HOPS);
    }
    if let Ok(Some(answer)) =
        complete(server, outcome, shape, &mut output, forward, answer_key).await
    {
        output.extend_from_slice(&answer);
    }
    output
}
