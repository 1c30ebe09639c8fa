//! Everything that reaches the raft core thread: a bounded channel of [`RaftInput`]s from
//! shards and helper threads, and the peers' Raft streams, which the thread reads itself.
//!
//! Why the thread reads peer streams: a Raft message that a shard decoded and queued costs a
//! second thread wake-up before the core sees it, and on the replicated write path there are
//! two such messages per round (the append to the follower, its acknowledgement back). On
//! this class of machine a wake-up is tens of microseconds, a sizeable part of a replicated
//! write's latency. A shard still accepts the connection and reads its protocol byte, then
//! hands the socket over ([`RaftInput::PeerStream`]). A Raft stream inside TLS cannot be
//! handed over (the session lives in the shard's task), so the shard decrypts it and relays
//! the plaintext through one end of a socket pair ([`PeerSocket::Relayed`]); the thread reads
//! that end exactly as it reads a peer's socket.
//!
//! Waiting: the thread sleeps in `poll(2)` on an eventfd (the doorbell) and the peer
//! sockets. A sender rings the doorbell only when the thread announced it is about to sleep,
//! so a busy thread costs senders no syscall. The announcement and the senders' check are
//! ordered by sequentially consistent fences on both sides: either the sender sees the flag
//! and writes the eventfd, or the thread sees the queued input and does not sleep.
//!
//! Bounds: `PEER_STREAMS_MAX` streams (the oldest goes when a new one would exceed it; a
//! reconnecting peer leaves stale ones behind), `PEER_READ_BYTES_MAX` read per stream per
//! iteration so that one busy peer cannot starve the inbox, frame size as in
//! [`decode_frame`].

use crate::proto::rpc::{decode_frame, kind};
use crate::raft::{Message, NodeId};
use crate::shard::nonblocking::receive_now;
use crate::shard::peer_transport::Faults;
use crate::shard::runtime::RaftInput;
use bytes::BytesMut;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Inbound peer streams kept at once.
pub const PEER_STREAMS_MAX: usize = 64;
/// Bytes read from one peer stream per loop iteration.
const PEER_READ_BYTES_MAX: usize = 1 << 20;
/// Bytes asked for by one read.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// The eventfd a sleeping raft thread waits on, and its "about to sleep" flag.
struct Doorbell {
    event: OwnedFd,
    sleeping: AtomicBool,
}

impl Doorbell {
    fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no memory-safety preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Doorbell {
            // SAFETY: `fd` is a fresh descriptor that nothing else owns.
            event: unsafe { OwnedFd::from_raw_fd(fd) },
            sleeping: AtomicBool::new(false),
        })
    }

    fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) && self.sleeping.swap(false, Ordering::SeqCst) {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writes 8 bytes from a live buffer to our eventfd. A full counter
            // (EAGAIN) still leaves the fd readable, which is all a ring must achieve.
            unsafe { libc::write(self.event.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
    }

    fn drain(&self) {
        let mut count = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer from our non-blocking eventfd.
        unsafe {
            libc::read(
                self.event.as_raw_fd(),
                count.as_mut_ptr().cast(),
                count.len(),
            )
        };
    }
}

/// The sending side, shared by every thread that talks to the raft core.
#[derive(Clone)]
pub struct RaftInbox {
    sender: flume::Sender<RaftInput>,
    doorbell: Arc<Doorbell>,
}

/// The raft thread is gone (shutdown); the input was dropped.
#[derive(Debug)]
pub struct RaftInboxClosed;

impl RaftInbox {
    pub fn send(&self, input: RaftInput) -> Result<(), RaftInboxClosed> {
        self.sender.send(input).map_err(|_| RaftInboxClosed)?;
        self.doorbell.ring();
        Ok(())
    }

    pub async fn send_async(&self, input: RaftInput) -> Result<(), RaftInboxClosed> {
        self.sender
            .send_async(input)
            .await
            .map_err(|_| RaftInboxClosed)?;
        self.doorbell.ring();
        Ok(())
    }
}

/// Where a peer's Raft frames are read from.
#[derive(Debug)]
pub enum PeerSocket {
    /// The peer's own connection (plain TCP).
    Tcp(TcpStream),
    /// Our end of a socket pair whose other end a shard writes the plaintext of a peer's TLS
    /// session into.
    Relayed(UnixStream),
}

impl PeerSocket {
    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            PeerSocket::Tcp(socket) => socket.set_nonblocking(true),
            PeerSocket::Relayed(socket) => socket.set_nonblocking(true),
        }
    }
}

impl AsRawFd for PeerSocket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            PeerSocket::Tcp(socket) => socket.as_raw_fd(),
            PeerSocket::Relayed(socket) => socket.as_raw_fd(),
        }
    }
}

/// One peer's stream of Raft frames, read without blocking.
struct PeerStream {
    socket: PeerSocket,
    peer: SocketAddr,
    buffer: BytesMut,
    /// `poll` reported it readable, or a read stopped at the per-iteration budget.
    readable: bool,
}

/// The receiving side, owned by the raft core thread.
pub struct RaftInboxReceiver {
    receiver: flume::Receiver<RaftInput>,
    doorbell: Arc<Doorbell>,
    peers: Vec<PeerStream>,
    faults: Arc<Faults>,
    poll_fds: Vec<libc::pollfd>,
}

pub fn raft_inbox(
    capacity: usize,
    faults: Arc<Faults>,
) -> io::Result<(RaftInbox, RaftInboxReceiver)> {
    let (sender, receiver) = flume::bounded(capacity);
    let doorbell = Arc::new(Doorbell::new()?);
    Ok((
        RaftInbox {
            sender,
            doorbell: doorbell.clone(),
        },
        RaftInboxReceiver {
            receiver,
            doorbell,
            peers: Vec::new(),
            faults,
            poll_fds: Vec::new(),
        },
    ))
}

impl RaftInboxReceiver {
    pub fn try_recv(&self) -> Result<RaftInput, flume::TryRecvError> {
        self.receiver.try_recv()
    }

    /// Takes over a peer's Raft stream (its protocol byte already consumed).
    pub fn adopt(&mut self, socket: PeerSocket, peer: SocketAddr) {
        if let Err(e) = socket.set_nonblocking() {
            log::warn!("raft: cannot use the stream from {peer}: {e}");
            return;
        }
        if self.peers.len() >= PEER_STREAMS_MAX {
            let oldest = self.peers.remove(0);
            log::debug!(
                "raft: too many peer streams; closing the one from {}",
                oldest.peer
            );
        }
        self.peers.push(PeerStream {
            socket,
            peer,
            buffer: BytesMut::with_capacity(READ_CHUNK_BYTES),
            readable: true,
        });
    }

    /// Returns when an input may be waiting: at once if the channel holds one or a stream
    /// has unread bytes, else when the doorbell rings, a peer stream becomes readable, or
    /// `timeout` passes. Either way it learns which streams are readable.
    pub fn wait(&mut self, timeout: Duration) {
        let busy = !self.receiver.is_empty() || self.peers.iter().any(|p| p.readable);
        let mut timeout_ms = if busy {
            0
        } else {
            timeout.as_millis().clamp(1, i32::MAX as u128) as i32
        };
        if timeout_ms > 0 {
            self.doorbell.sleeping.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if !self.receiver.is_empty() {
                timeout_ms = 0;
            }
        }
        self.poll_fds.clear();
        self.poll_fds.push(libc::pollfd {
            fd: self.doorbell.event.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        for peer in &self.peers {
            self.poll_fds.push(libc::pollfd {
                fd: peer.socket.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // SAFETY: `poll_fds` is a live, correctly sized array of pollfd structures.
        let ready = unsafe {
            libc::poll(
                self.poll_fds.as_mut_ptr(),
                self.poll_fds.len() as libc::nfds_t,
                timeout_ms,
            )
        };
        self.doorbell.sleeping.store(false, Ordering::SeqCst);
        if ready <= 0 {
            // Timeout, or EINTR: the caller loops back here soon either way.
            return;
        }
        if self.poll_fds[0].revents != 0 {
            self.doorbell.drain();
        }
        for (peer, fd) in self.peers.iter_mut().zip(&self.poll_fds[1..]) {
            if fd.revents != 0 {
                peer.readable = true;
            }
        }
    }

    /// Reads what the readable peer streams hold, within the per-stream budget, and appends
    /// each decoded message to `messages`. Streams that ended or sent garbage are closed.
    pub fn read_peers(&mut self, messages: &mut Vec<(NodeId, Message)>) {
        let faults = &self.faults;
        self.peers.retain_mut(|stream| {
            if !stream.readable {
                return true;
            }
            match read_stream(stream, faults, messages) {
                Ok(()) => true,
                Err(reason) => {
                    log::debug!("raft: closing the stream from {}: {reason}", stream.peer);
                    false
                }
            }
        });
    }
}

/// Reads one stream until it would block or the budget is spent; decodes whole frames.
fn read_stream(
    stream: &mut PeerStream,
    faults: &Faults,
    messages: &mut Vec<(NodeId, Message)>,
) -> Result<(), String> {
    let mut read_bytes = 0;
    loop {
        if read_bytes >= PEER_READ_BYTES_MAX {
            // Budget spent: stay marked readable so the next wait does not sleep.
            return Ok(());
        }
        if stream.buffer.capacity() - stream.buffer.len() < READ_CHUNK_BYTES / 4 {
            stream.buffer.reserve(READ_CHUNK_BYTES);
        }
        // One `recv` into the buffer's spare capacity (no zero-filling of a chunk per read).
        let got = match receive_now(&stream.socket, &mut stream.buffer, usize::MAX) {
            Ok(Some(0)) => return Err("end of stream".to_string()),
            Ok(Some(n)) => n,
            Ok(None) => 0,
            Err(e) => return Err(e.to_string()),
        };
        read_bytes += got;
        loop {
            match decode_frame(&mut stream.buffer) {
                Ok(Some(frame)) => {
                    if frame.kind != kind::RAFT_MESSAGE {
                        return Err(format!("unexpected frame kind {}", frame.kind));
                    }
                    if faults.is_blocked(stream.peer.ip()) {
                        continue;
                    }
                    match rmp_serde::from_slice::<(NodeId, Message)>(&frame.payload) {
                        Ok(pair) => messages.push(pair),
                        Err(e) => return Err(format!("undecodable raft message: {e}")),
                    }
                }
                Ok(None) => break,
                Err(e) => return Err(format!("bad frame: {e}")),
            }
        }
        if got == 0 {
            stream.readable = false;
            return Ok(());
        }
    }
}
