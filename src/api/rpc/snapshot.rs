//! Snapshots on their own connection, both halves, as Consul's are (byte 5, `RPCSnapshot`):
//! the caller writes a `SnapshotRequest`, then (a restore) the archive and half-closes; the
//! server answers a `SnapshotResponse`, then (a save) the archive, and closes
//! (`shard::snapshot_stream` carries the bytes).
//!
//! The server ([`serve_stream`]) routes the request as Consul's `dispatchSnapshotRequest`
//! does: naming another datacenter, it goes to a server there; not `AllowStale` (every
//! restore a caller sends), to the leader; either way this server relays the stream a chunk
//! at a time ([`relay`]) and holds no archive. Otherwise it checks the management rule the
//! `/v1/snapshot` route checks (`acl:write`, Consul's `SnapshotAllowed`) and saves or
//! restores as the HTTP handler does (`api::snapshot`). A restore's archive is read whole
//! (its checksums are verified before anything is replicated), up to the HTTP route's
//! bound, [`SNAPSHOT_UPLOAD_BYTES_MAX`]. A refusal drains what the caller still sends, so
//! that it reads the answer's `Error` rather than a reset.
//!
//! A client agent, a follower (a save that is not `?stale`, every restore) and a `?dc=`
//! request ([`save`], [`restore`]) dial such a connection themselves and answer as the
//! server's handler does.

use super::client::{error_of, meta_of};
use super::{authorize, require, rpc_meta_of};
use crate::api::authz::request_secret;
use crate::api::context::Deferred;
use crate::api::server::Server;
use crate::api::snapshot::{
    archive_of, checked_state, replicate_restore, restored_answer, save_answer,
    SNAPSHOT_UPLOAD_BYTES_MAX,
};
use crate::api::{ApiError, AsyncResponder, Context, Outcome, Reply, Request};
use crate::cluster::router::{DialTarget, NO_PATH};
use crate::cluster::servers::{NO_SERVERS, RPC_HOLD_TIMEOUT};
use crate::consul::rpc::snapshot::{
    decode_response, encode_response, unrecognized_op, SnapshotOp, SnapshotRequest,
    SNAPSHOT_REQUEST_BYTES_MAX,
};
use crate::consul::rpc::QueryMeta;
use crate::replica::ProposalResult;
use crate::shard::rpc_client::CallError;
use crate::shard::runtime::Consistency;
use crate::shard::snapshot_stream::{self, SnapshotStream, SNAPSHOT_CHUNK_BYTES};
use crate::store::CommandResult;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The most bytes a save's answer may carry through a relay or to an agent: what a restore
/// accepts, so that every archive saved can be restored.
pub const SNAPSHOT_DOWNLOAD_BYTES_MAX: u64 = SNAPSHOT_UPLOAD_BYTES_MAX as u64;
/// How often a follower looks for a leader while it holds a snapshot for one.
const LEADER_POLL: Duration = Duration::from_millis(50);

/// Where a snapshot request is served.
enum Route {
    /// On this server.
    Here,
    /// On the server at `addr`, of `datacenter` (`None`: this one).
    To {
        addr: SocketAddr,
        datacenter: Option<String>,
    },
    /// On server `node` of `datacenter`, through the mesh gateway at `gateway`.
    ThroughGateway {
        gateway: SocketAddr,
        node: String,
        datacenter: String,
    },
}

impl Route {
    /// Dials the connection a request routed away from here is sent on.
    async fn dial(&self, deferred: &Deferred) -> Result<SnapshotStream, String> {
        let client = deferred.rpc_client();
        match self {
            Route::Here => snapshot_stream::dial(client, deferred.rpc_address(), None).await,
            Route::To { addr, datacenter } => {
                snapshot_stream::dial(client, *addr, datacenter.as_deref()).await
            }
            Route::ThroughGateway {
                gateway,
                node,
                datacenter,
            } => snapshot_stream::dial_through_gateway(client, *gateway, node, datacenter).await,
        }
    }
}

/// Consul's routing of a snapshot request on a server: another datacenter's server (the
/// WAN router's pick), then the leader unless `allow_stale` (waiting up to
/// `RPC_HOLD_TIMEOUT` for one), else here.
async fn route(deferred: &Deferred, datacenter: &str, allow_stale: bool) -> Result<Route, String> {
    let ours = &deferred.config().datacenter;
    if !datacenter.is_empty() && !datacenter.eq_ignore_ascii_case(ours) {
        let datacenter = datacenter.to_ascii_lowercase();
        return match deferred.router().dial_target(&datacenter) {
            None => Err(NO_PATH.to_string()),
            Some(DialTarget::Server(addr)) => Ok(Route::To {
                addr,
                datacenter: Some(datacenter),
            }),
            Some(DialTarget::Gateway { gateway, node }) => Ok(Route::ThroughGateway {
                gateway,
                node,
                datacenter,
            }),
        };
    }
    if allow_stale {
        return Ok(Route::Here);
    }
    let started = Instant::now();
    loop {
        let status = deferred.cluster_status();
        if status.is_leader {
            return Ok(Route::Here);
        }
        if let Ok(addr) = status.leader_rpc_address.parse::<SocketAddr>() {
            if addr != deferred.rpc_address() {
                return Ok(Route::To {
                    addr,
                    datacenter: None,
                });
            }
        }
        if started.elapsed() >= RPC_HOLD_TIMEOUT {
            return Err(ProposalResult::NotLeader.to_string());
        }
        monoio::time::sleep(LEADER_POLL).await;
    }
}

/// Serves a byte-5 connection to its end. A request that does not decode closes the
/// connection unanswered, as Consul's `handleSnapshotRequest` returns its decode error.
pub async fn serve_stream(server: &Server, mut stream: SnapshotStream, peer: SocketAddr) {
    let (header, rest) = match stream.read_value(SNAPSHOT_REQUEST_BYTES_MAX).await {
        Ok(read) => read,
        Err(reason) => {
            log::warn!("rpc: snapshot from {peer}: failed to decode request: {reason}");
            return;
        }
    };
    let request = match SnapshotRequest::decode(&header) {
        Ok(request) => request,
        Err(error) => {
            log::warn!("rpc: snapshot from {peer}: failed to decode request: {error}");
            return;
        }
    };
    log::debug!("rpc: snapshot {:?} from {peer}", request.op);
    if let Err(reason) = Box::pin(dispatch(server, &request, &mut stream, rest)).await {
        log::warn!("rpc: snapshot from {peer}: {reason}");
        return;
    }
    let _ = stream.close_write().await;
}

/// Answers `error` in the response's `Error`, after draining what the caller still sends.
async fn refuse(stream: &mut SnapshotStream, error: &str) -> Result<(), String> {
    stream.drain(SNAPSHOT_DOWNLOAD_BYTES_MAX).await;
    stream
        .write_all(encode_response(&QueryMeta::default(), error))
        .await
        .map_err(|e| format!("failed to encode response: {e}"))
}

async fn dispatch(
    server: &Server,
    request: &SnapshotRequest<'_>,
    stream: &mut SnapshotStream,
    rest: Vec<u8>,
) -> Result<(), String> {
    let deferred = server.context().deferred();
    match route(&deferred, request.datacenter, request.allow_stale).await {
        Err(error) => return refuse(stream, &error).await,
        Ok(Route::Here) => {}
        Ok(away) => return relay(&deferred, stream, request, rest, &away).await,
    }
    let authorized = authorize(server, request.token)
        .and_then(|authz| require(&authz, |a| a.snapshot()).map(drop));
    if let Err(error) = authorized {
        return refuse(stream, &error).await;
    }
    let ctx = server.context();
    match request.op {
        SnapshotOp::Save => {
            let (archive, index) = match archive_of(ctx) {
                Ok(saved) => saved,
                Err(error) => return refuse(stream, &error.text()).await,
            };
            let consistency = if request.allow_stale {
                Consistency::Stale
            } else {
                Consistency::Leader
            };
            let meta = rpc_meta_of(&ctx.query_meta(index, consistency), false);
            let write = |e: std::io::Error| format!("failed to stream snapshot: {e}");
            stream
                .write_all(encode_response(&meta, ""))
                .await
                .map_err(write)?;
            for chunk in archive.chunks(SNAPSHOT_CHUNK_BYTES) {
                stream.write_all(chunk.to_vec()).await.map_err(write)?;
            }
            Ok(())
        }
        SnapshotOp::Restore if request.allow_stale => {
            refuse(stream, "stale not allowed for restore").await
        }
        SnapshotOp::Restore => {
            let archive = match stream
                .read_to_end(rest, SNAPSHOT_UPLOAD_BYTES_MAX as u64)
                .await
            {
                Ok(archive) => archive,
                Err(error) => return refuse(stream, &error).await,
            };
            let state = match checked_state(&archive) {
                Ok(state) => state,
                Err(error) => return refuse(stream, &error.text()).await,
            };
            drop(archive);
            let error = match Box::pin(replicate_restore(server.shard(), state)).await {
                ProposalResult::Applied(CommandResult::Error(reason)) => reason,
                ProposalResult::Applied(_) => String::new(),
                refused => ApiError::from_proposal(&refused)
                    .map(|e| e.text())
                    .unwrap_or_else(|| refused.to_string()),
            };
            stream
                .write_all(encode_response(&QueryMeta::default(), &error))
                .await
                .map_err(|e| format!("failed to encode response: {e}"))
        }
        SnapshotOp::Unknown(number) => refuse(stream, &unrecognized_op(number)).await,
    }
}

/// Hands the connection on to the server `route` names: the request, what the caller sends
/// (the archive of a restore) until it half-closes, then the server's answer back until it
/// closes, one chunk in hand at a time.
async fn relay(
    deferred: &Deferred,
    inbound: &mut SnapshotStream,
    request: &SnapshotRequest<'_>,
    rest: Vec<u8>,
    route: &Route,
) -> Result<(), String> {
    let upstream = async {
        let mut upstream = route.dial(deferred).await?;
        let written = upstream.write_all(request.encode()).await;
        written.map_err(|e| format!("failed to encode request: {e}"))?;
        Ok::<_, String>(upstream)
    };
    let mut upstream = match upstream.await {
        Ok(upstream) => upstream,
        Err(error) => return refuse(inbound, &error).await,
    };
    let sent = inbound
        .copy_to(&mut upstream, rest, SNAPSHOT_UPLOAD_BYTES_MAX as u64)
        .await;
    if let Err(error) = sent {
        return refuse(inbound, &format!("failed to copy snapshot in: {error}")).await;
    }
    upstream
        .close_write()
        .await
        .map_err(|e| format!("failed to close snapshot connection: {e}"))?;
    let limit = SNAPSHOT_DOWNLOAD_BYTES_MAX + SNAPSHOT_REQUEST_BYTES_MAX as u64;
    upstream.copy_to(inbound, Vec::new(), limit).await.map(drop)
}

/// The datacenter a request names: `datacenter`, or this agent's when empty.
fn named<'a>(ctx: &'a Context, datacenter: &'a str) -> &'a str {
    if datacenter.is_empty() {
        &ctx.config().datacenter
    } else {
        datacenter
    }
}

/// What the agent's own snapshot connection came back with: the answering server's
/// metadata and, for a save, the archive.
type Exchanged = Result<(crate::api::QueryMeta, Vec<u8>), ApiError>;

/// Makes one snapshot request on its own connection: to one of a client agent's servers
/// (which routes it on), or where a server would route it itself ([`route`]; this server's
/// own port when it now leads). `archive` is sent after the request; a save's archive is
/// read back, at most [`SNAPSHOT_DOWNLOAD_BYTES_MAX`] bytes.
async fn exchange(
    deferred: &Deferred,
    request: Vec<u8>,
    datacenter: &str,
    allow_stale: bool,
    archive: Option<Vec<u8>>,
) -> Exchanged {
    let internal = |e: String| ApiError::Internal(format!("rpc error: {e}"));
    let route = if deferred.is_client() {
        let addr = deferred.servers().pick();
        Route::To {
            addr: addr.ok_or_else(|| internal(NO_SERVERS.into()))?,
            datacenter: None,
        }
    } else {
        match route(deferred, datacenter, allow_stale).await {
            Ok(route) => route,
            Err(error) => return Err(error_of(CallError::Remote(error))),
        }
    };
    let mut stream = match route.dial(deferred).await {
        Ok(stream) => stream,
        Err(reason) => {
            if let (true, Route::To { addr, .. }) = (deferred.is_client(), &route) {
                deferred.servers().failed(*addr, &reason, Instant::now());
            }
            return Err(internal(reason));
        }
    };
    let saving = archive.is_none();
    let sent = async {
        stream.write_all(request).await?;
        for chunk in archive.iter().flat_map(|a| a.chunks(SNAPSHOT_CHUNK_BYTES)) {
            stream.write_all(chunk.to_vec()).await?;
        }
        stream.close_write().await
    };
    sent.await.map_err(|e| internal(e.to_string()))?;
    let (response, rest) = stream
        .read_value(SNAPSHOT_REQUEST_BYTES_MAX)
        .await
        .map_err(internal)?;
    let meta = match decode_response(&response) {
        Ok(meta) => meta_of(&meta),
        Err(error) => return Err(error_of(CallError::Remote(error))),
    };
    if !saving {
        return Ok((meta, Vec::new()));
    }
    let archive = stream
        .read_to_end(rest, SNAPSHOT_DOWNLOAD_BYTES_MAX)
        .await
        .map_err(internal)?;
    Ok((meta, archive))
}

/// `GET /v1/snapshot` on its own connection, of `datacenter` (empty: this one), answered
/// with the archive and the answering server's query headers.
pub fn save(
    ctx: &Context,
    request: &Request,
    options: &crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let allow_stale = options.consistency == Consistency::Stale;
    let header = SnapshotRequest {
        allow_stale,
        datacenter: named(ctx, datacenter),
        op: SnapshotOp::Save,
        token: &secret,
    }
    .encode();
    let (deferred, datacenter) = (ctx.deferred(), datacenter.to_string());
    Outcome::Async(Box::pin(async move {
        let answer = exchange(&deferred, header, &datacenter, allow_stale, None).await;
        Box::new(move |reply: &mut Reply| match answer {
            Ok((meta, archive)) => save_answer(archive, meta, reply),
            Err(error) => reply.error(&error),
        }) as AsyncResponder
    }))
}

/// `PUT /v1/snapshot` on its own connection, to the leader of `datacenter` (empty: this
/// one), with the request's archive; the handler checked the archive.
pub fn restore(ctx: &Context, request: &Request, datacenter: &str) -> Result<Outcome, ApiError> {
    let secret = request_secret(ctx, request);
    let header = SnapshotRequest {
        allow_stale: false,
        datacenter: named(ctx, datacenter),
        op: SnapshotOp::Restore,
        token: &secret,
    }
    .encode();
    let (deferred, datacenter) = (ctx.deferred(), datacenter.to_string());
    let archive = request.body.to_vec();
    Ok(Outcome::Async(Box::pin(async move {
        let answer = exchange(&deferred, header, &datacenter, false, Some(archive)).await;
        Box::new(move |reply: &mut Reply| match answer {
            Ok(_) => restored_answer(reply),
            Err(error) => reply.error(&error),
        }) as AsyncResponder
    })))
}

/// `/v1/snapshot?dc=<other>` on its own connection naming that datacenter
/// ([`super::client::across_datacenters`]); `None` for other paths.
pub fn across_datacenters(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    crate::api::snapshot::across(ctx, request, datacenter)
}
