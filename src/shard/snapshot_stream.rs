//! One byte-5 (`RPCSnapshot`) connection, as Consul's `SnapshotRPC` dials it and its
//! `handleSnapshotRequest` serves it: a connection of its own (never a pooled one), plain or
//! inside TLS, carrying a msgpack `SnapshotRequest`, then (a restore) the archive until the
//! caller half-closes, then the msgpack `SnapshotResponse`, then (a save) the archive until
//! the server closes. What the values mean sits above (`api::rpc::snapshot`); here are the
//! socket, its bounds and the dial.
//!
//! Invariants:
//! - every read, write and half-close finishes within [`SNAPSHOT_STALL_TIMEOUT`] or fails,
//!   so a stalled peer cannot hold a connection (or a relay's two) forever;
//! - bytes move [`SNAPSHOT_CHUNK_BYTES`] at a time; a relay ([`SnapshotStream::copy_to`])
//!   holds one chunk, never the archive;
//! - a msgpack value is read only up to the bound its caller names, checked as it arrives.
//!
//! Go's `SnapshotRPC` half-closes the TCP connection under TLS too (`CloseWrite` on the
//! socket, no `close_notify`), so on an accepted TLS stream a TCP end without
//! `close_notify` reads as the end of the caller's bytes; a truncated archive is still
//! caught, by its checksums, where it is read.

use crate::proto::msgpack_rpc::Scanner;
use crate::proto::rpc_select::rpc_type;
use crate::shard::rpc_client::RpcClient;
use crate::tls::stream::{ClientTlsStream, ServerTlsStream};
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// How long a snapshot connection may wait for one read, write or half-close: a peer that
/// moves no byte for this long loses the connection.
pub const SNAPSHOT_STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes moved per read or write of a snapshot connection; what a relay holds at once.
pub const SNAPSHOT_CHUNK_BYTES: usize = 256 * 1024;
/// How long a dial may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A byte-5 connection: accepted (plain or TLS) or dialed (plain or TLS).
pub enum SnapshotStream {
    Plain(TcpStream),
    Accepted(Box<ServerTlsStream<TcpStream>>),
    Dialed(Box<ClientTlsStream<TcpStream>>),
}

fn stalled() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no snapshot bytes moved for {SNAPSHOT_STALL_TIMEOUT:?}"),
    )
}

impl SnapshotStream {
    /// Reads up to [`SNAPSHOT_CHUNK_BYTES`] at the end of `buffer`; `Ok(0)` at the end.
    pub async fn read_more(&mut self, buffer: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        let mut buffer = buffer;
        buffer.reserve(SNAPSHOT_CHUNK_BYTES);
        let start = buffer.len();
        // Read into a slice past what is held, so earlier bytes stay where they are.
        let slice = monoio::buf::IoBufMut::slice_mut(buffer, start..start + SNAPSHOT_CHUNK_BYTES);
        let read = async {
            match self {
                SnapshotStream::Plain(stream) => stream.read(slice).await,
                SnapshotStream::Accepted(stream) => {
                    let (result, slice) = stream.read(slice).await;
                    match result {
                        // Go's half-close under TLS: the caller's bytes end here.
                        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => (Ok(0), slice),
                        other => (other, slice),
                    }
                }
                SnapshotStream::Dialed(stream) => stream.read(slice).await,
            }
        };
        match monoio::time::timeout(SNAPSHOT_STALL_TIMEOUT, read).await {
            Ok((result, slice)) => (result, slice.into_inner()),
            Err(_) => (Err(stalled()), Vec::new()),
        }
    }

    /// Writes all of `bytes`.
    pub async fn write_all(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        let write = async {
            match self {
                SnapshotStream::Plain(stream) => stream.write_all(bytes).await.0,
                SnapshotStream::Accepted(stream) => stream.write_all(bytes).await.0,
                SnapshotStream::Dialed(stream) => stream.write_all(bytes).await.0,
            }
        };
        match monoio::time::timeout(SNAPSHOT_STALL_TIMEOUT, write).await {
            Ok(result) => result.map(drop),
            Err(_) => Err(stalled()),
        }
    }

    /// Ends this side's bytes (TLS's `close_notify`, then the TCP half-close); the other
    /// direction stays open.
    pub async fn close_write(&mut self) -> io::Result<()> {
        let close = async {
            match self {
                SnapshotStream::Plain(stream) => stream.shutdown().await,
                SnapshotStream::Accepted(stream) => stream.shutdown().await,
                SnapshotStream::Dialed(stream) => stream.shutdown().await,
            }
        };
        match monoio::time::timeout(SNAPSHOT_STALL_TIMEOUT, close).await {
            Ok(result) => result,
            Err(_) => Err(stalled()),
        }
    }

    /// Reads one msgpack value of at most `limit` bytes: the value, and the bytes that came
    /// after it in the same reads. `Err` when the value is not msgpack, is larger, or the
    /// connection ends first.
    pub async fn read_value(&mut self, limit: usize) -> Result<(Vec<u8>, Vec<u8>), String> {
        let mut scanner = Scanner::new();
        let mut buffer = Vec::new();
        loop {
            if let Some(length) = scanner.advance(&buffer).map_err(|e| e.to_string())? {
                let rest = buffer.split_off(length);
                return Ok((buffer, rest));
            }
            if buffer.len() > limit {
                return Err(format!("a snapshot message is larger than {limit} bytes"));
            }
            let (read, returned) = self.read_more(buffer).await;
            buffer = returned;
            match read {
                Ok(0) => return Err("the connection ended inside a snapshot message".into()),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Reads to the end into `out` (which may hold bytes already read), at most `limit`
    /// bytes in all.
    pub async fn read_to_end(&mut self, mut out: Vec<u8>, limit: u64) -> Result<Vec<u8>, String> {
        loop {
            if out.len() as u64 > limit {
                return Err(too_large(limit));
            }
            let (read, returned) = self.read_more(out).await;
            out = returned;
            match read {
                Ok(0) => return Ok(out),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Copies what is left of this connection to `to`, a chunk at a time, after `first`
    /// (bytes already read); at most `limit` bytes in all. The count copied.
    pub async fn copy_to(
        &mut self,
        to: &mut SnapshotStream,
        first: Vec<u8>,
        limit: u64,
    ) -> Result<u64, String> {
        let mut copied = first.len() as u64;
        if !first.is_empty() {
            to.write_all(first).await.map_err(|e| e.to_string())?;
        }
        loop {
            if copied > limit {
                return Err(too_large(limit));
            }
            let (read, chunk) = self.read_more(Vec::new()).await;
            match read {
                Ok(0) => return Ok(copied),
                Ok(n) => copied += n as u64,
                Err(e) => return Err(e.to_string()),
            }
            to.write_all(chunk).await.map_err(|e| e.to_string())?;
        }
    }

    /// Reads and drops what is left, up to `limit` bytes: so that a caller still sending an
    /// archive the server will not take reads the answer rather than a reset.
    pub async fn drain(&mut self, limit: u64) {
        let mut drained = 0u64;
        let mut buffer = Vec::new();
        while drained <= limit {
            buffer.clear();
            let (read, returned) = self.read_more(buffer).await;
            buffer = returned;
            match read {
                Ok(n) if n > 0 => drained += n as u64,
                _ => return,
            }
        }
    }
}

fn too_large(limit: u64) -> String {
    format!("snapshot archive exceeds {limit} bytes")
}

/// Dials a snapshot connection to server `node` of `datacenter` through the mesh gateway at
/// `gateway` (WAN federation through mesh gateways): native TLS without a type byte, ALPN
/// `consul/rpc-snapshot` and SNI `<node>.server.<datacenter>.<domain>`, which the gateway
/// routes to that server's RPC port, as Consul's servers dial each other in that mode.
pub async fn dial_through_gateway(
    client: &RpcClient,
    gateway: SocketAddr,
    node: &str,
    datacenter: &str,
) -> Result<SnapshotStream, String> {
    let session = super::wanfed::dial_through_gateway(
        client.tls(),
        client.bind_addr(),
        gateway,
        node,
        datacenter,
        crate::proto::rpc_select::alpn::RPC_SNAPSHOT,
    )
    .await?;
    Ok(SnapshotStream::Dialed(Box::new(session)))
}

/// Dials a byte-5 connection to the server at `addr` (of `datacenter`, whose server name a
/// TLS connection asks for; `None`: this agent's), as `client`'s typed calls dial: from the
/// bind address, inside TLS (byte 3, then 5) under `verify_outgoing`.
pub async fn dial(
    client: &RpcClient,
    addr: SocketAddr,
    datacenter: Option<&str>,
) -> Result<SnapshotStream, String> {
    let source = crate::shard::dial::source_for(client.bind_addr(), addr);
    let stream =
        match monoio::time::timeout(CONNECT_TIMEOUT, crate::shard::dial::connect(source, addr))
            .await
        {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(format!("cannot connect to {addr}: {e}")),
            Err(_) => return Err(format!("timed out connecting to {addr}")),
        };
    let _ = stream.set_nodelay(true);
    let tls = match datacenter {
        None => client.tls().rpc_client(),
        Some(datacenter) => client.tls().rpc_client_for(datacenter)?,
    };
    let mut stream = match tls {
        None => SnapshotStream::Plain(stream),
        Some((config, server_name)) => {
            let session = super::forward::dial_tls(stream, config, server_name, addr).await?;
            SnapshotStream::Dialed(Box::new(session))
        }
    };
    stream
        .write_all(vec![rpc_type::SNAPSHOT])
        .await
        .map_err(|e| format!("cannot write to {addr}: {e}"))?;
    Ok(stream)
}
