//! The dialer's half, run while this server leads: one task per peering this cluster
//! established (a row that knows server addresses to dial), which exchanges the token's
//! secret once, dials the peer's servers over TLS and keeps the stream open, dialing again
//! with backoff ([`super::machine::redial_delay`]) whenever it breaks.

use super::machine::{self, StatusUpdate};
use super::messages::{
    ExchangeSecretRequest, ExchangeSecretResponse, Open, Payload, RemoteInfo, ReplicationMessage,
    EXCHANGE_SECRET_PATH, STREAM_RESOURCES_PATH,
};
use super::session::{self, End};
use super::{now_text, Shared, LEADERSHIP_CHECK_INTERVAL, MESSAGE_BYTES_MAX, SEND_QUEUE};
use crate::store::peering::{self, Peering, PeeringOp, PeeringState, SecretsOp};
use crate::store::Command;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http;

/// Longest a TCP connect plus TLS handshake to a peer's server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest an `ExchangeSecret` call or the opening of a stream may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a dialer that sent `Terminated` waits for the acceptor to close the stream.
pub const TERMINATE_GRACE: Duration = Duration::from_secs(2);

/// Starts the dial tasks, one per dialed peering while this server leads, and stops them
/// all when it stops leading; runs until `shutdown` fires.
pub async fn run(shared: Arc<Shared>, mut shutdown: tokio::sync::broadcast::Receiver<()>) {
    let mut tasks: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut store = shared.store.subscribe();
    let mut leadership = tokio::time::interval(LEADERSHIP_CHECK_INTERVAL);
    let mut leads = false;
    loop {
        tokio::select! {
            changed = store.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            _ = leadership.tick() => {
                leads = shared.agent.leads().await.unwrap_or(false);
            }
            _ = shutdown.recv() => break,
        }
        let tables = store.borrow_and_update().clone();
        let wanted: HashSet<String> = if leads {
            peering::list(&tables)
                .filter(|p| p.should_dial() && p.is_active())
                .map(|p| p.id.clone())
                .collect()
        } else {
            HashSet::new()
        };
        // A task whose peering was deleted ends by itself, after its session told the
        // peer (`Terminated`); only a lost leadership stops tasks from here.
        tasks.retain(|_, task| {
            if !leads {
                task.abort();
            }
            leads && !task.is_finished()
        });
        for id in wanted {
            if let std::collections::hash_map::Entry::Vacant(slot) = tasks.entry(id) {
                let task_id = slot.key().clone();
                slot.insert(tokio::spawn(dial_loop(shared.clone(), task_id)));
            }
        }
    }
    for (_, task) in tasks {
        task.abort();
    }
}

/// Keeps peering `id`'s stream open while the peering wants one.
async fn dial_loop(shared: Arc<Shared>, id: String) {
    let mut failures = 0u32;
    let mut attempt = 0usize;
    loop {
        let row = {
            let tables = shared.store.current();
            match peering::get_by_id(&tables, &id) {
                Some(row) if row.is_active() && row.should_dial() => row.clone(),
                _ => return,
            }
        };
        let outcome = dial_once(&shared, &row, attempt).await;
        attempt = attempt.wrapping_add(1);
        match outcome {
            Ok(end) => {
                session::settle(&shared, &row.id, &row.name, &end).await;
                match end {
                    End::Failed(_) => failures = 1,
                    End::PeerTerminated
                    | End::LocallyDeleted
                    | End::Replaced
                    | End::LostLeadership => return,
                }
            }
            Err(reason) => {
                failures = failures.saturating_add(1);
                log::warn!(
                    "peering: could not open the stream of peering {:?}: {reason}",
                    row.name
                );
                if row.state == PeeringState::Active {
                    shared
                        .mark(&row.id, PeeringState::Failing, StatusUpdate::default())
                        .await;
                }
            }
        }
        tokio::time::sleep(machine::redial_delay(failures)).await;
    }
}

/// One connection: exchange the secret if none is held yet, open the stream, run the
/// session. `Err` when the stream never opened.
async fn dial_once(shared: &Arc<Shared>, row: &Peering, attempt: usize) -> Result<End, String> {
    let addresses = if row.manual_server_addresses.is_empty() {
        &row.peer_server_addresses
    } else {
        &row.manual_server_addresses
    };
    let Some(address) = addresses.get(attempt % addresses.len().max(1)) else {
        return Err("the peering has no server address".to_string());
    };
    let channel = connect(address, &row.peer_ca_pems, &row.peer_server_name).await?;
    let mut grpc = tonic::client::Grpc::new(channel)
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);
    let secret = stream_secret(shared, row, &mut grpc, address).await?;
    let (tx, rx) = mpsc::channel(SEND_QUEUE);
    let open = ReplicationMessage::of(Payload::Open(Open {
        peer_id: row.peer_id.clone(),
        stream_secret_id: secret,
        remote: Some(RemoteInfo {
            partition: "default".to_string(),
            datacenter: shared.datacenter.clone(),
        }),
    }));
    tx.send(open)
        .await
        .map_err(|_| "the stream closed before Open".to_string())?;
    let call = async {
        grpc.ready().await.map_err(|e| e.to_string())?;
        grpc.streaming::<_, ReplicationMessage, ReplicationMessage, _>(
            tonic::Request::new(ReceiverStream::new(rx)),
            http::uri::PathAndQuery::from_static(STREAM_RESOURCES_PATH),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
    };
    let mut inbound = tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| "opening the stream timed out".to_string())?
        .map_err(|e| format!("StreamResources at {address}: {e}"))?
        .into_inner();
    let (number, replaced) = shared.register(&row.id)?;
    let update = StatusUpdate {
        last_send: Some(now_text()),
        ..Default::default()
    };
    shared.mark(&row.id, PeeringState::Active, update).await;
    log::info!(
        "peering: the stream of peering {:?} to {address} is open",
        row.name
    );
    let end = session::run(shared, &row.id, &mut inbound, &tx, replaced).await;
    shared.release(&row.id, number);
    if end == End::LocallyDeleted {
        // `Terminated` is queued: close our half and give the acceptor a moment to read it.
        drop(tx);
        let _ = tokio::time::timeout(TERMINATE_GRACE, async {
            while let Ok(Some(_)) = inbound.message().await {}
        })
        .await;
    }
    Ok(end)
}

/// The stream secret to open with: the one this peering holds, else the one the peer's
/// `ExchangeSecret` gives for the token's establishment secret (written through Raft before
/// it is used, so a redial after a crash does not spend the establishment secret twice).
async fn stream_secret(
    shared: &Arc<Shared>,
    row: &Peering,
    grpc: &mut tonic::client::Grpc<tonic::transport::Channel>,
    address: &str,
) -> Result<String, String> {
    let secrets = peering::secrets(&shared.store.current(), &row.id).cloned();
    match secrets
        .as_ref()
        .and_then(|s| s.active_stream_secret.clone())
    {
        Some(secret) => Ok(secret),
        None => {
            let establishment_secret = secrets
                .and_then(|s| s.establishment_secret.clone())
                .ok_or("the peering holds no establishment secret")?;
            let request = ExchangeSecretRequest {
                peer_id: row.peer_id.clone(),
                establishment_secret,
            };
            let call = async {
                grpc.ready().await.map_err(|e| e.to_string())?;
                grpc.unary::<_, ExchangeSecretResponse, _>(
                    tonic::Request::new(request),
                    http::uri::PathAndQuery::from_static(EXCHANGE_SECRET_PATH),
                    tonic_prost::ProstCodec::default(),
                )
                .await
                .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
            };
            let answer = tokio::time::timeout(CALL_TIMEOUT, call)
                .await
                .map_err(|_| "ExchangeSecret timed out".to_string())?
                .map_err(|e| format!("ExchangeSecret at {address}: {e}"))?
                .into_inner();
            if answer.stream_secret.is_empty() {
                return Err("ExchangeSecret answered no stream secret".to_string());
            }
            let command = Command::Peering(PeeringOp::Write {
                peering: Box::new(row.clone()),
                secrets: Some(SecretsOp::Establish {
                    active_stream_secret: answer.stream_secret.clone(),
                }),
            });
            shared.agent.propose(&command).await?;
            Ok(answer.stream_secret)
        }
    }
}

/// A gRPC channel to `address` over TLS that trusts only `ca_pems` and expects
/// `server_name`.
async fn connect(
    address: &str,
    ca_pems: &[String],
    server_name: &str,
) -> Result<tonic::transport::Channel, String> {
    let mut roots = rustls::RootCertStore::empty();
    for pem in ca_pems {
        for cert in crate::tls::files::pem_slice_certificates(pem.as_bytes(), "the peer's CA")? {
            roots
                .add(cert)
                .map_err(|e| format!("the peer's CA certificate: {e}"))?;
        }
    }
    let mut config =
        rustls::ClientConfig::builder_with_provider(crate::tls::files::crypto_provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup failed: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let server_name = rustls::pki_types::ServerName::try_from(server_name.to_string())
        .map_err(|e| format!("invalid peer server name {server_name:?}: {e}"))?;
    let connector = TlsConnector {
        config: Arc::new(config),
        server_name,
        address: address.to_string(),
    };
    tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .map_err(|e| format!("invalid peer address {address:?}: {e}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .connect_with_connector(connector)
        .await
        .map_err(|e| format!("connecting to {address}: {}", error_chain(&e)))
}

/// An error with its causes, as one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Connects TCP, then TLS with the peering's trust settings; the gRPC channel speaks
/// HTTP/2 over what it returns.
#[derive(Clone)]
struct TlsConnector {
    config: Arc<rustls::ClientConfig>,
    server_name: rustls::pki_types::ServerName<'static>,
    address: String,
}

type Connection = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;

impl tower_service::Service<http::Uri> for TlsConnector {
    type Response = Connection;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Connection, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let timed_out =
                || std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out");
            let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&this.address))
                .await
                .map_err(|_| timed_out())??;
            let _ = tcp.set_nodelay(true);
            let tls = tokio_rustls::TlsConnector::from(this.config);
            let session = tokio::time::timeout(CONNECT_TIMEOUT, tls.connect(this.server_name, tcp))
                .await
                .map_err(|_| timed_out())??;
            Ok(hyper_util::rt::TokioIo::new(session))
        })
    }
}
