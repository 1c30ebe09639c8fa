//! gRPC over TLS (`ports.grpc_tls`, Consul's 8503): TCP connections accepted, TLS
//! handshakes run one task each (bounded by [`HANDSHAKE_TIMEOUT`]), and finished sessions
//! handed to the gRPC server as its incoming connections.
//!
//! The server configuration comes from the agent's `tls.grpc` settings through a getter
//! called once per connection, so a configuration reload reaches the next handshake; HTTP/2
//! is offered by ALPN (`h2`), which gRPC clients ask for. A handshake that fails or stalls
//! costs its own task and nothing else.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

/// Longest a client may take to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Finished sessions waiting for the gRPC server to take them.
const ACCEPTED_QUEUE: usize = 64;

/// The current `tls.grpc` server configuration, `None` when it has no certificate.
pub type ConfigSource = Arc<dyn Fn() -> Option<Arc<rustls::ServerConfig>> + Send + Sync>;

/// The configuration for a client that asked for `server_name` by SNI when that name is
/// this cluster's peering endpoint (`server.<dc>.peering.<trust domain>`), `None` for any
/// other name: peers verify this server against the Connect CA roots their token carried,
/// everyone else against `tls.grpc`'s certificate.
pub type PeeringConfigSource = Arc<dyn Fn(&str) -> Option<Arc<rustls::ServerConfig>> + Send + Sync>;

/// A TLS session the gRPC server serves.
pub struct TlsConnection(tokio_rustls::server::TlsStream<tokio::net::TcpStream>);

impl tonic::transport::server::Connected for TlsConnection {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for TlsConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

/// `config` with `h2` offered by ALPN, made once per distinct configuration.
fn with_h2(config: &Arc<rustls::ServerConfig>) -> Arc<rustls::ServerConfig> {
    if config.alpn_protocols.iter().any(|p| p == b"h2") {
        return config.clone();
    }
    let mut owned = (**config).clone();
    owned.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(owned)
}

/// Accepts on `listener`, runs handshakes, and yields the sessions as the gRPC server's
/// incoming connections.
pub fn incoming(
    listener: tokio::net::TcpListener,
    config: ConfigSource,
    peering: Option<PeeringConfigSource>,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<TlsConnection>> {
    let (tx, rx) = mpsc::channel(ACCEPTED_QUEUE);
    tokio::spawn(async move {
        let mut cached: Option<(Arc<rustls::ServerConfig>, Arc<rustls::ServerConfig>)> = None;
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    log::warn!("grpc: accepting a TLS connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if tx.is_closed() {
                return;
            }
            let Some(current) = config() else {
                log::warn!(
                    "grpc: a TLS connection from {peer} refused: tls.grpc has no certificate"
                );
                continue;
            };
            let server = match &cached {
                Some((source, made)) if Arc::ptr_eq(source, &current) => made.clone(),
                _ => {
                    let made = with_h2(&current);
                    cached = Some((current, made.clone()));
                    made
                }
            };
            let tx = tx.clone();
            let peering = peering.clone();
            tokio::spawn(async move {
                let handshake = async move {
                    // The ClientHello is read first so that a peer asking for the peering
                    // endpoint's name gets the Connect CA certificate.
                    let start = tokio_rustls::LazyConfigAcceptor::new(
                        rustls::server::Acceptor::default(),
                        tcp,
                    )
                    .await?;
                    let chosen = match (&peering, start.client_hello().server_name()) {
                        (Some(peering), Some(name)) => peering(name),
                        _ => None,
                    };
                    start.into_stream(chosen.unwrap_or(server)).await
                };
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                    Ok(Ok(session)) => {
                        let _ = tx.send(Ok(TlsConnection(session))).await;
                    }
                    Ok(Err(e)) => log::debug!("grpc: TLS handshake with {peer}: {e}"),
                    Err(_) => log::debug!("grpc: TLS handshake with {peer} timed out"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
