//! A TLS stream over a monoio connection: rustls on top of any `AsyncReadRent +
//! AsyncWriteRent` (an accepted `TcpStream`, or either half of one), with monoio's owned-buffer
//! reads and writes.
//!
//! Data path: ciphertext is read from the socket into one owned staging buffer of
//! [`TLS_READ_CHUNK_BYTES`] (so a burst of records costs one system call), fed to rustls, and
//! decrypted straight into the caller's buffer; written plaintext is encrypted by rustls and
//! leaves in one `write_all` per [`TLS_SEND_BUFFER_BYTES_MAX`] of records.
//!
//! Invariants:
//! - Never panics on peer input or misuse. A read or write future dropped while its socket
//!   operation was in flight may have lost bytes of a record (io_uring completes it anyway),
//!   so the stream is then unusable: every later call returns an error instead of
//!   desynchronising the record layer. Handshakes run under a timeout ([`accept`],
//!   [`connect`]), and the stream is dropped when it expires.
//! - Reading never writes. Post-handshake output that reading produces (a key-update reply)
//!   leaves with the next write, flush or shutdown; so the read half and the write half of a
//!   split stream each touch only their own socket half, sharing the rustls state through a
//!   `RefCell` that is never borrowed across an `.await`.
//! - A clean `close_notify` from the peer reads as end of stream (`Ok(0)`); a TCP close
//!   without it is an `UnexpectedEof` error, so a truncated answer is never taken as whole.
//!
//! `monoio-rustls` (0.4) does the same job, but its staging buffers are lost for good when a
//! read is cancelled (the next call panics, which aborts a release build), it gives no access
//! to the peer's certificate after the handshake (needed for the server-role check), and it
//! moves records 16 KiB per system call.

use crate::proto::tls_record::{self, Entry, NotTls, PLAIN_HTTP_ANSWER};
use monoio::buf::{IoBuf, IoBufMut, IoVecBuf, IoVecBufMut, SliceMut};
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, Splitable};
use monoio::BufResult;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{
    ClientConfig, ClientConnection, ConnectionCommon, ServerConfig, ServerConnection, SideData,
};
use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::ops::{Deref, DerefMut};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Ciphertext read from the socket per system call: several full records.
pub const TLS_READ_CHUNK_BYTES: usize = 64 * 1024;
/// Encrypted bytes rustls may hold before a write must go to the socket; one `write_all`
/// moves up to this much.
pub const TLS_SEND_BUFFER_BYTES_MAX: usize = 256 * 1024;
/// Consul's `limits.https_handshake_timeout` and `limits.rpc_handshake_timeout` default.
pub const HANDSHAKE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

/// Why a handshake did not complete.
#[derive(Debug)]
pub enum HandshakeError {
    /// rustls refused the peer (or the peer refused us with an alert).
    Tls(rustls::Error),
    /// The socket failed.
    Io(io::Error),
    /// The peer closed the connection before the handshake finished.
    Closed,
    /// The peer closed (or reset) the connection before sending a single byte: a TCP
    /// health check or a port probe, which opens and closes a connection to see that
    /// something listens. No handshake was attempted, so none failed.
    NothingSent,
    /// The handshake took longer than its timeout.
    TimedOut(Duration),
    /// The first record was not a TLS handshake ([`crate::proto::tls_record`]).
    NotTls(NotTls),
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::Tls(error) => write!(f, "{}", super::verify::describe_error(error)),
            HandshakeError::Io(error) => write!(f, "{}", describe_io_error(error)),
            HandshakeError::Closed => write!(
                f,
                "the peer closed the connection during the handshake (it may have refused our certificate, or not speak TLS)"
            ),
            HandshakeError::NothingSent => write!(
                f,
                "the peer closed the connection before sending anything (a TCP probe, not a TLS client)"
            ),
            HandshakeError::TimedOut(limit) => {
                write!(f, "no complete handshake within {} ms", limit.as_millis())
            }
            HandshakeError::NotTls(why) => write!(f, "{why}"),
        }
    }
}

/// An I/O error from a TLS stream in words: a rustls error inside it is described as
/// [`super::verify::describe_error`] does.
pub fn describe_io_error(error: &io::Error) -> String {
    match error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    {
        Some(tls) => super::verify::describe_error(tls),
        None => error.to_string(),
    }
}

/// The error every call returns once a cancelled operation left the stream unusable.
fn unusable() -> io::Error {
    io::Error::other("TLS stream unusable: an earlier read or write was cancelled mid-record")
}

fn tls_error(error: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

/// Ciphertext read from the socket and not yet taken by rustls. `None` while a read is in
/// flight (and for good if that read was cancelled).
struct Incoming {
    buffer: Option<Vec<u8>>,
    /// Bytes of `buffer` already given to rustls.
    consumed: usize,
}

impl Incoming {
    fn new() -> Incoming {
        Incoming {
            buffer: Some(Vec::with_capacity(TLS_READ_CHUNK_BYTES)),
            consumed: 0,
        }
    }
}

/// Encrypted bytes on their way to the socket. `None` while a write is in flight.
struct Outgoing {
    buffer: Option<Vec<u8>>,
}

impl Outgoing {
    fn new() -> Outgoing {
        Outgoing {
            buffer: Some(Vec::new()),
        }
    }
}

/// Gives staged ciphertext to rustls, or reads more from the socket first. Returns `Ok(false)`
/// at the end of the socket's stream (rustls has been told).
async fn fill<IO, C, SD>(
    io: &mut IO,
    connection: &RefCell<C>,
    incoming: &mut Incoming,
) -> io::Result<bool>
where
    IO: AsyncReadRent,
    C: DerefMut + Deref<Target = ConnectionCommon<SD>>,
    SD: SideData,
{
    let Some(mut buffer) = incoming.buffer.take() else {
        return Err(unusable());
    };
    let mut open = true;
    if incoming.consumed == buffer.len() {
        buffer.clear();
        incoming.consumed = 0;
        let (result, returned) = io.read(buffer).await;
        buffer = returned;
        match result {
            Ok(0) => open = false,
            Ok(_) => {}
            Err(error) => {
                incoming.buffer = Some(buffer);
                return Err(error);
            }
        }
    }
    let mut connection = connection.borrow_mut();
    let outcome = if open {
        let mut staged = &buffer[incoming.consumed..];
        debug_assert!(
            !staged.is_empty(),
            "an empty read would tell rustls the stream ended"
        );
        match connection.read_tls(&mut staged) {
            Ok(taken) => {
                incoming.consumed += taken;
                Ok(())
            }
            Err(error) => Err(error),
        }
    } else {
        connection.read_tls(&mut io::empty()).map(|_| ())
    };
    incoming.buffer = Some(buffer);
    outcome?;
    connection.process_new_packets().map_err(tls_error)?;
    Ok(open)
}

/// Sends everything rustls has queued.
async fn flush_queued<IO, C, SD>(
    io: &mut IO,
    connection: &RefCell<C>,
    outgoing: &mut Outgoing,
) -> io::Result<()>
where
    IO: AsyncWriteRent,
    C: DerefMut + Deref<Target = ConnectionCommon<SD>>,
    SD: SideData,
{
    let Some(mut buffer) = outgoing.buffer.take() else {
        return Err(unusable());
    };
    buffer.clear();
    {
        let mut connection = connection.borrow_mut();
        while connection.wants_write() {
            if let Err(error) = connection.write_tls(&mut buffer) {
                outgoing.buffer = Some(buffer);
                return Err(error);
            }
        }
    }
    if buffer.is_empty() {
        outgoing.buffer = Some(buffer);
        return Ok(());
    }
    let (result, returned) = io.write_all(buffer).await;
    outgoing.buffer = Some(returned);
    result.map(|_| ())
}

/// Reads decrypted bytes into `buf`; `Ok(0)` after the peer's `close_notify`.
async fn read_plain<IO, C, SD>(
    io: &mut IO,
    connection: &RefCell<C>,
    incoming: &mut Incoming,
    buf: &mut [u8],
) -> io::Result<usize>
where
    IO: AsyncReadRent,
    C: DerefMut + Deref<Target = ConnectionCommon<SD>>,
    SD: SideData,
{
    if buf.is_empty() {
        return Ok(0);
    }
    loop {
        match connection.borrow_mut().reader().read(buf) {
            Ok(n) => return Ok(n),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error),
        }
        fill(io, connection, incoming).await?;
    }
}

/// Encrypts all of `data` and sends it.
async fn write_plain<IO, C, SD>(
    io: &mut IO,
    connection: &RefCell<C>,
    outgoing: &mut Outgoing,
    mut data: &[u8],
) -> io::Result<usize>
where
    IO: AsyncWriteRent,
    C: DerefMut + Deref<Target = ConnectionCommon<SD>>,
    SD: SideData,
{
    let total = data.len();
    let mut stalled = false;
    while !data.is_empty() {
        let taken = connection.borrow_mut().writer().write(data)?;
        if taken == 0 && stalled {
            // rustls took nothing even with its buffer just flushed (e.g. after
            // close_notify): never spin on it.
            return Err(io::Error::other("TLS stream accepts no more data"));
        }
        stalled = taken == 0;
        data = &data[taken..];
        flush_queued(io, connection, outgoing).await?;
    }
    Ok(total)
}

/// Drives the handshake to completion, sending rustls' alert when it fails.
async fn handshake<IO, C, SD>(
    io: &mut IO,
    connection: &RefCell<C>,
    incoming: &mut Incoming,
    outgoing: &mut Outgoing,
) -> Result<(), HandshakeError>
where
    IO: AsyncReadRent + AsyncWriteRent,
    C: DerefMut + Deref<Target = ConnectionCommon<SD>>,
    SD: SideData,
{
    loop {
        flush_queued(io, connection, outgoing)
            .await
            .map_err(HandshakeError::Io)?;
        if !connection.borrow().is_handshaking() {
            return Ok(());
        }
        match fill(io, connection, incoming).await {
            Ok(true) => {}
            Ok(false) => return Err(HandshakeError::Closed),
            Err(error) => {
                // Tell the peer why (rustls queued an alert), then report.
                let _ = flush_queued(io, connection, outgoing).await;
                let tls = error
                    .get_ref()
                    .and_then(|e| e.downcast_ref::<rustls::Error>())
                    .cloned();
                return Err(match tls {
                    Some(tls) => HandshakeError::Tls(tls),
                    None => HandshakeError::Io(error),
                });
            }
        }
    }
}

/// A TLS session over `IO`; `C` is `rustls::ServerConnection` or `rustls::ClientConnection`.
pub struct TlsStream<IO, C> {
    io: IO,
    connection: Rc<RefCell<C>>,
    incoming: Incoming,
    outgoing: Outgoing,
}

/// A server-side TLS stream.
pub type ServerTlsStream<IO> = TlsStream<IO, ServerConnection>;
/// A client-side TLS stream.
pub type ClientTlsStream<IO> = TlsStream<IO, ClientConnection>;

impl<IO, C, SD> TlsStream<IO, C>
where
    IO: AsyncReadRent + AsyncWriteRent,
    C: DerefMut + Deref<Target = ConnectionCommon<SD>>,
    SD: SideData,
{
    fn new(io: IO, mut connection: C) -> TlsStream<IO, C> {
        connection.set_buffer_limit(Some(TLS_SEND_BUFFER_BYTES_MAX));
        TlsStream {
            io,
            connection: Rc::new(RefCell::new(connection)),
            incoming: Incoming::new(),
            outgoing: Outgoing::new(),
        }
    }

    /// Reads until the first record's header is in, and ends the connection unless it opens
    /// a handshake; the bytes read stay staged for rustls.
    async fn read_first_record(&mut self, first: FirstRecord) -> Result<(), HandshakeError> {
        let Some(mut buffer) = self.incoming.buffer.take() else {
            return Err(HandshakeError::Io(unusable()));
        };
        // Bytes a listener read before choosing TLS ([`accept_after`]) are staged already.
        debug_assert!(self.incoming.consumed == 0);
        debug_assert!(buffer.capacity() >= tls_record::RECORD_HEADER_BYTES);
        let verdict = loop {
            match tls_record::classify(&buffer) {
                Entry::Incomplete => {}
                Entry::Handshake { .. } => break Ok(()),
                Entry::PlainHttp => break Err(NotTls::PlainHttp),
                Entry::NotTls(why) => break Err(why),
            }
            let len = buffer.len();
            let (result, slice): (io::Result<usize>, SliceMut<Vec<u8>>) =
                self.io.read(buffer.slice_mut(len..)).await;
            buffer = slice.into_inner();
            // A connection that ends before its first byte never tried a handshake.
            let nothing_sent = buffer.is_empty();
            match result {
                Ok(0) => {
                    self.incoming.buffer = Some(buffer);
                    return Err(if nothing_sent {
                        HandshakeError::NothingSent
                    } else {
                        HandshakeError::Closed
                    });
                }
                Ok(_) => {}
                Err(error) => {
                    self.incoming.buffer = Some(buffer);
                    let reset = error.kind() == io::ErrorKind::ConnectionReset;
                    return Err(if nothing_sent && reset {
                        HandshakeError::NothingSent
                    } else {
                        HandshakeError::Io(error)
                    });
                }
            }
        };
        self.incoming.buffer = Some(buffer);
        match verdict {
            Ok(()) => Ok(()),
            Err(NotTls::PlainHttp) if first == FirstRecord::AnswerPlainHttp => {
                // As Go's HTTPS server: one answer the client can show, then the close.
                let (_, _) = self.io.write_all(PLAIN_HTTP_ANSWER.to_vec()).await;
                Err(HandshakeError::NotTls(NotTls::PlainHttp))
            }
            Err(why) => Err(HandshakeError::NotTls(why)),
        }
    }

    async fn handshake(&mut self) -> Result<(), HandshakeError> {
        handshake(
            &mut self.io,
            &self.connection,
            &mut self.incoming,
            &mut self.outgoing,
        )
        .await
    }

    /// The peer's certificate chain, end entity first, if it presented one.
    pub fn peer_certificates(&self) -> Option<Vec<CertificateDer<'static>>> {
        self.connection
            .borrow()
            .peer_certificates()
            .map(|chain| chain.to_vec())
    }

    /// Reads the rustls connection (negotiated version, ALPN, SNI, …).
    pub fn with_connection<R>(&self, f: impl FnOnce(&C) -> R) -> R {
        f(&self.connection.borrow())
    }

    /// The socket underneath.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }
}

impl<IO, C> TlsStream<IO, C>
where
    IO: Splitable,
{
    /// Splits into a read half and a write half that can be used from two tasks; each owns its
    /// half of the socket and its own buffer, and they share the rustls state.
    pub fn into_split(
        self,
    ) -> (
        TlsReadHalf<IO::OwnedRead, C>,
        TlsWriteHalf<IO::OwnedWrite, C>,
    ) {
        let (read, write) = self.io.into_split();
        (
            TlsReadHalf {
                io: read,
                connection: self.connection.clone(),
                incoming: self.incoming,
            },
            TlsWriteHalf {
                io: write,
                connection: self.connection,
                outgoing: self.outgoing,
            },
        )
    }
}

/// What a listener does with a first record that is not a TLS handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FirstRecord {
    /// Ends the connection (the server RPC port).
    Close,
    /// Answers a plaintext HTTP request with Go's 400 before closing (HTTPS listeners, as
    /// Consul's Go server does); anything else is closed.
    AnswerPlainHttp,
}

/// Accepts a TLS session on `io` with `config`, within `timeout`. A first record that is no
/// TLS handshake ends it before rustls runs, with the reason ([`HandshakeError::NotTls`]).
pub async fn accept<IO>(
    config: Arc<ServerConfig>,
    io: IO,
    timeout: Duration,
    first: FirstRecord,
) -> Result<ServerTlsStream<IO>, HandshakeError>
where
    IO: AsyncReadRent + AsyncWriteRent,
{
    accept_after(config, io, &[], timeout, first).await
}

/// Bytes of a connection a listener may have read before choosing TLS: the server port reads
/// one, the type byte that turned out to open a ClientHello.
pub const READ_AHEAD_BYTES_MAX: usize = tls_record::RECORD_HEADER_BYTES;

/// [`accept`] for a connection whose first bytes the listener already read (`read_already`,
/// at most [`READ_AHEAD_BYTES_MAX`]): they are given to rustls before anything else.
pub async fn accept_after<IO>(
    config: Arc<ServerConfig>,
    io: IO,
    read_already: &[u8],
    timeout: Duration,
    first: FirstRecord,
) -> Result<ServerTlsStream<IO>, HandshakeError>
where
    IO: AsyncReadRent + AsyncWriteRent,
{
    assert!(read_already.len() <= READ_AHEAD_BYTES_MAX);
    let connection = ServerConnection::new(config).map_err(HandshakeError::Tls)?;
    let mut stream = TlsStream::new(io, connection);
    if let Some(buffer) = stream.incoming.buffer.as_mut() {
        buffer.extend_from_slice(read_already);
    }
    let opened = async {
        stream.read_first_record(first).await?;
        stream.handshake().await
    };
    match monoio::time::timeout(timeout, opened).await {
        Ok(Ok(())) => Ok(stream),
        Ok(Err(error)) => Err(error),
        Err(_) => Err(HandshakeError::TimedOut(timeout)),
    }
}

/// Opens a TLS session to `server_name` on `io` with `config`, within `timeout`.
pub async fn connect<IO>(
    config: Arc<ClientConfig>,
    server_name: ServerName<'static>,
    io: IO,
    timeout: Duration,
) -> Result<ClientTlsStream<IO>, HandshakeError>
where
    IO: AsyncReadRent + AsyncWriteRent,
{
    let connection = ClientConnection::new(config, server_name).map_err(HandshakeError::Tls)?;
    let mut stream = TlsStream::new(io, connection);
    match monoio::time::timeout(timeout, stream.handshake()).await {
        Ok(Ok(())) => Ok(stream),
        Ok(Err(error)) => Err(error),
        Err(_) => Err(HandshakeError::TimedOut(timeout)),
    }
}

/// The caller's buffer as a slice it may fill.
fn writable<T: IoBufMut>(buf: &mut T) -> &mut [u8] {
    // SAFETY: `write_ptr` points at `bytes_total` bytes owned by `buf`, which outlives the
    // slice; they may be uninitialised, but are only written (rustls copies into them).
    unsafe { std::slice::from_raw_parts_mut(buf.write_ptr(), buf.bytes_total()) }
}

fn readable<T: IoBuf>(buf: &T) -> &[u8] {
    // SAFETY: `read_ptr` points at `bytes_init` initialised bytes owned by `buf`.
    unsafe { std::slice::from_raw_parts(buf.read_ptr(), buf.bytes_init()) }
}

/// The bytes of every buffer in a vectored write, in order.
fn gather<T: IoVecBuf>(buf: &T) -> Vec<u8> {
    // SAFETY: `read_iovec_ptr` points at `read_iovec_len` iovecs describing initialised
    // bytes owned by `buf`.
    let iovecs = unsafe { std::slice::from_raw_parts(buf.read_iovec_ptr(), buf.read_iovec_len()) };
    let mut data = Vec::new();
    for iovec in iovecs {
        // SAFETY: as above, each iovec names `iov_len` readable bytes.
        let part =
            unsafe { std::slice::from_raw_parts(iovec.iov_base as *const u8, iovec.iov_len) };
        data.extend_from_slice(part);
    }
    data
}

/// Copies decrypted bytes into a vectored read's buffers; returns how many.
fn scatter<T: IoVecBufMut>(buf: &mut T, mut data: &[u8]) -> usize {
    // SAFETY: `write_iovec_ptr` points at `write_iovec_len` iovecs describing writable bytes
    // owned by `buf`.
    let iovecs =
        unsafe { std::slice::from_raw_parts(buf.write_iovec_ptr(), buf.write_iovec_len()) };
    let mut copied = 0;
    for iovec in iovecs {
        if data.is_empty() {
            break;
        }
        let n = iovec.iov_len.min(data.len());
        // SAFETY: the iovec names at least `n` writable bytes that do not overlap `data`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), iovec.iov_base as *mut u8, n) };
        data = &data[n..];
        copied += n;
    }
    copied
}

/// Room in a vectored read's buffers.
fn iovec_capacity<T: IoVecBufMut>(buf: &mut T) -> usize {
    // SAFETY: as in `scatter`.
    let iovecs =
        unsafe { std::slice::from_raw_parts(buf.write_iovec_ptr(), buf.write_iovec_len()) };
    iovecs.iter().map(|iovec| iovec.iov_len).sum()
}

/// Most bytes one vectored read takes, so its bounce buffer stays small.
const VECTORED_READ_BYTES_MAX: usize = TLS_READ_CHUNK_BYTES;

impl<IO, C, SD> AsyncReadRent for TlsStream<IO, C>
where
    IO: AsyncReadRent + AsyncWriteRent,
    C: DerefMut + Deref<Target = ConnectionCommon<SD>>,
    SD: SideData,
{
    async fn read<T: IoBufMut>(&mut self, mut buf: T) -> BufResult<usize, T> {
        let result = read_plain(
            &mut self.io,
            &self.connection,
            &mut self.incoming,
            writable(&mut buf),
        )
        .await;
        if let Ok(n) = result {
            // SAFETY: rustls wrote `n` bytes at the start of the buffer's free space.
            unsafe { buf.set_init(n) };
        }
        (result, buf)
    }

    async fn readv<T: IoVecBufMut>(&mut self, mut buf: T) -> BufResult<usize, T> {
        let mut bounce = vec![0u8; iovec_capacity(&mut buf).min(VECTORED_READ_BYTES_MAX)];
        let result = read_plain(
            &mut self.io,
            &self.connection,
            &mut self.incoming,
            &mut bounce,
        )
        .await
        .map(|n| scatter(&mut buf, &bounce[..n]));
        if let Ok(n) = result {
            // SAFETY: `scatter` initialised the first `n` bytes across the iovecs.
            unsafe { buf.set_init(n) };
        }
        (result, buf)
    }
}

impl<IO, C, SD> AsyncWriteRent for TlsStream<IO, C>
where
    IO: AsyncReadRent + AsyncWriteRent,
    C: DerefMut + Deref<Target = ConnectionCommon<SD>>,
    SD: SideData,
{
    async fn write<T: IoBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        let result = write_plain(
            &mut self.io,
            &self.connection,
            &mut self.outgoing,
            readable(&buf),
        )
        .await;
        (result, buf)
    }

    async fn writev<T: IoVecBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        let data = gather(&buf);
        let result = write_plain(&mut self.io, &self.connection, &mut self.outgoing, &data).await;
        (result, buf)
    }

    async fn flush(&mut self) -> io::Result<()> {
        flush_queued(&mut self.io, &self.connection, &mut self.outgoing).await?;
        self.io.flush().await
    }

    async fn shutdown(&mut self) -> io::Result<()> {
        self.connection.borrow_mut().send_close_notify();
        flush_queued(&mut self.io, &self.connection, &mut self.outgoing).await?;
        self.io.shutdown().await
    }
}

/// The reading half of a split [`TlsStream`].
pub struct TlsReadHalf<R, C> {
    io: R,
    connection: Rc<RefCell<C>>,
    incoming: Incoming,
}

/// The writing half of a split [`TlsStream`].
pub struct TlsWriteHalf<W, C> {
    io: W,
    connection: Rc<RefCell<C>>,
    outgoing: Outgoing,
}

impl<R, C, SD> AsyncReadRent for TlsReadHalf<R, C>
where
    R: AsyncReadRent,
    C: DerefMut + Deref<Target = ConnectionCommon<SD>>,
    SD: SideData,
{
    async fn read<T: IoBufMut>(&mut self, mut buf: T) -> BufResult<usize, T> {
        let result = read_plain(
            &mut self.io,
            &self.connection,
            &mut self.incoming,
            writable(&mut buf),
        )
        .await;
        if let Ok(n) = result {
            // SAFETY: rustls wrote `n` bytes at the start of the buffer's free space.
            unsafe { buf.set_init(n) };
        }
        (result, buf)
    }

    async fn readv<T: IoVecBufMut>(&mut self, mut buf: T) -> BufResult<usize, T> {
        let mut bounce = vec![0u8; iovec_capacity(&mut buf).min(VECTORED_READ_BYTES_MAX)];
        let result = read_plain(
            &mut self.io,
            &self.connection,
            &mut self.incoming,
            &mut bounce,
        )
        .await
        .map(|n| scatter(&mut buf, &bounce[..n]));
        if let Ok(n) = result {
            // SAFETY: `scatter` initialised the first `n` bytes across the iovecs.
            unsafe { buf.set_init(n) };
        }
        (result, buf)
    }
}

impl<W, C, SD> AsyncWriteRent for TlsWriteHalf<W, C>
where
    W: AsyncWriteRent,
    C: DerefMut + Deref<Target = ConnectionCommon<SD>>,
    SD: SideData,
{
    async fn write<T: IoBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        let result = write_plain(
            &mut self.io,
            &self.connection,
            &mut self.outgoing,
            readable(&buf),
        )
        .await;
        (result, buf)
    }

    async fn writev<T: IoVecBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        let data = gather(&buf);
        let result = write_plain(&mut self.io, &self.connection, &mut self.outgoing, &data).await;
        (result, buf)
    }

    async fn flush(&mut self) -> io::Result<()> {
        flush_queued(&mut self.io, &self.connection, &mut self.outgoing).await?;
        self.io.flush().await
    }

    async fn shutdown(&mut self) -> io::Result<()> {
        self.connection.borrow_mut().send_close_notify();
        flush_queued(&mut self.io, &self.connection, &mut self.outgoing).await?;
        self.io.shutdown().await
    }
}
