//! The acceptor's half: `PeerStreamService` served on the `grpc_tls` port, written by hand
//! as tonic's generated servers are (no protoc at build time), with the two methods:
//! `ExchangeSecret` (unary) and `StreamResources` (bidirectional).

use super::machine::{self, Refusal, StatusUpdate};
use super::messages::{
    ExchangeSecretRequest, ExchangeSecretResponse, Payload, ReplicationMessage,
    EXCHANGE_SECRET_PATH, STREAM_RESOURCES_PATH,
};
use super::session::{self, End};
use super::{now_text, Shared, MESSAGE_BYTES_MAX, OPEN_TIMEOUT, SEND_QUEUE};
use crate::store::peering::{self, PeeringOp, PeeringState, SecretsOp};
use crate::store::Command;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::codegen::{http, Body, Bytes, StdError};
use tonic::{Request, Response, Status, Streaming};

/// What `StreamResources` answers with.
pub type Outbound =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<ReplicationMessage, Status>> + Send>>;
type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Infallible>> + Send>>;

/// The service, as the gRPC server routes to it.
#[derive(Clone)]
pub struct PeerStreamServer {
    shared: Arc<Shared>,
}

impl PeerStreamServer {
    pub fn new(shared: Arc<Shared>) -> PeerStreamServer {
        PeerStreamServer { shared }
    }
}

struct StreamResources(Arc<Shared>);

impl tonic::server::StreamingService<ReplicationMessage> for StreamResources {
    type Response = ReplicationMessage;
    type ResponseStream = Outbound;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Outbound>, Status>> + Send>>;

    fn call(&mut self, request: Request<Streaming<ReplicationMessage>>) -> Self::Future {
        let shared = self.0.clone();
        Box::pin(async move { accept(shared, request.into_inner()).await })
    }
}

struct ExchangeSecret(Arc<Shared>);

impl tonic::server::UnaryService<ExchangeSecretRequest> for ExchangeSecret {
    type Response = ExchangeSecretResponse;
    type Future =
        Pin<Box<dyn Future<Output = Result<Response<ExchangeSecretResponse>, Status>> + Send>>;

    fn call(&mut self, request: Request<ExchangeSecretRequest>) -> Self::Future {
        let shared = self.0.clone();
        Box::pin(async move {
            exchange_secret(&shared, request.into_inner())
                .await
                .map(Response::new)
        })
    }
}

impl<B> tower_service::Service<http::Request<B>> for PeerStreamServer
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let shared = self.shared.clone();
        let limits = (Some(MESSAGE_BYTES_MAX), Some(MESSAGE_BYTES_MAX));
        match request.uri().path() {
            STREAM_RESOURCES_PATH => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default())
                    .apply_max_message_size_config(limits.0, limits.1);
                Ok(grpc.streaming(StreamResources(shared), request).await)
            }),
            EXCHANGE_SECRET_PATH => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default())
                    .apply_max_message_size_config(limits.0, limits.1);
                Ok(grpc.unary(ExchangeSecret(shared), request).await)
            }),
            other => {
                let status = Status::unimplemented(format!("unknown method {other}"));
                Box::pin(async move { Ok(status.into_http()) })
            }
        }
    }
}

fn not_leader() -> Status {
    Status::failed_precondition("cannot serve peering on a server that does not lead its cluster")
}

/// `ExchangeSecret`: the establishment secret of the peering `PeerID` (this cluster's ID
/// for it) is consumed and a new stream secret becomes its pending one.
async fn exchange_secret(
    shared: &Arc<Shared>,
    request: ExchangeSecretRequest,
) -> Result<ExchangeSecretResponse, Status> {
    if request.peer_id.is_empty() {
        return Err(Status::invalid_argument("PeerID is required"));
    }
    if request.establishment_secret.is_empty() {
        return Err(Status::invalid_argument("EstablishmentSecret is required"));
    }
    if !shared.agent.leads().await.unwrap_or(false) {
        return Err(not_leader());
    }
    let tables = shared.store.current();
    let row = match peering::get_by_id(&tables, &request.peer_id) {
        Some(row) if row.is_active() && !row.should_dial() => row.clone(),
        _ => return Err(Status::not_found("peering not found")),
    };
    let stream_secret = uuid::Uuid::new_v4().to_string();
    let command = Command::Peering(PeeringOp::Write {
        peering: Box::new((*row).clone()),
        secrets: Some(SecretsOp::ExchangeSecret {
            establishment_secret: request.establishment_secret,
            pending_stream_secret: stream_secret.clone(),
        }),
    });
    match shared.agent.propose(&command).await {
        Ok(()) => {
            log::info!(
                "peering: peer of {:?} exchanged its token's secret",
                row.name
            );
            Ok(ExchangeSecretResponse { stream_secret })
        }
        Err(reason) if reason.contains("establishment secret") => {
            Err(Status::permission_denied(reason))
        }
        Err(reason) => Err(Status::internal(format!(
            "failed to persist the peering secret: {reason}"
        ))),
    }
}

/// `StreamResources` on the acceptor: the first message must be an `Open` with a valid
/// stream secret; the session then runs on a task of its own.
async fn accept(
    shared: Arc<Shared>,
    mut inbound: Streaming<ReplicationMessage>,
) -> Result<Response<Outbound>, Status> {
    if !shared.agent.leads().await.unwrap_or(false) {
        return Err(not_leader());
    }
    let first = match tokio::time::timeout(OPEN_TIMEOUT, inbound.message()).await {
        Ok(Ok(Some(message))) => message,
        Ok(Ok(None)) => return Err(Status::cancelled("the stream ended before Open")),
        Ok(Err(status)) => return Err(status),
        Err(_) => {
            return Err(Status::deadline_exceeded(format!(
                "no Open within {} s",
                OPEN_TIMEOUT.as_secs()
            )))
        }
    };
    let Some(Payload::Open(open)) = first.payload else {
        return Err(Status::invalid_argument(
            "the first message of a peering stream must be Open",
        ));
    };
    let admission = machine::admit(&shared.store.current(), &open).map_err(|r| match r {
        Refusal::InvalidArgument(m) => Status::invalid_argument(m),
        Refusal::NotFound(m) => Status::not_found(m),
        Refusal::PermissionDenied(m) => Status::permission_denied(m),
    })?;
    let row = admission.peering;
    if let Some(secret) = admission.promote {
        let command = Command::Peering(PeeringOp::Write {
            peering: Box::new((*row).clone()),
            secrets: Some(SecretsOp::PromotePending {
                active_stream_secret: secret,
            }),
        });
        shared.agent.propose(&command).await.map_err(|reason| {
            Status::internal(format!("failed to promote the stream secret: {reason}"))
        })?;
    }
    let (number, replaced) = shared
        .register(&row.id)
        .map_err(Status::resource_exhausted)?;
    let remote = open.remote.map(|r| (r.datacenter, r.partition));
    let update = StatusUpdate {
        last_receive: Some(now_text()),
        remote,
        ..Default::default()
    };
    shared.mark(&row.id, PeeringState::Active, update).await;
    log::info!("peering: accepted the stream of peering {:?}", row.name);
    let (tx, rx) = mpsc::channel(SEND_QUEUE);
    // A heartbeat at once: the dialer learns the stream is up without waiting 15 s.
    let _ = tx.send(ReplicationMessage::heartbeat()).await;
    tokio::spawn(async move {
        let end = session::run(&shared, &row.id, &mut inbound, &tx, replaced).await;
        shared.release(&row.id, number);
        if end == End::LocallyDeleted {
            // Let `Terminated` reach the dialer before the stream closes.
            drop(tx);
        }
        session::settle(&shared, &row.id, &row.name, &end).await;
    });
    let outbound: Outbound = Box::pin(ReceiverStream::new(rx).map(Ok));
    Ok(Response::new(outbound))
}
