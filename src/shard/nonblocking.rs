//! One non-blocking `send` or `recv` on a socket, by its descriptor.
//!
//! For the paths that keep their own readiness (the raft thread's peer streams, a parked
//! HTTP connection's readiness poll) or that expect the kernel to take a small write at
//! once (Raft frames to a peer, the answers of woken blocking queries): neither a thread nor
//! an io_uring operation should wait for bytes that are there, or room that is there, now.
//! `MSG_DONTWAIT` makes each call non-blocking whatever the socket's mode, so the same
//! helpers serve std sockets set non-blocking and monoio's io_uring sockets.

use bytes::BufMut;
use std::io;
use std::os::fd::AsRawFd;

/// Sends what the socket's buffer takes now: `Ok(0)` when it is full. `MSG_NOSIGNAL` turns a
/// reset peer into an error instead of SIGPIPE.
pub fn send_now(socket: &impl AsRawFd, bytes: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `bytes` is valid for reads of its length for the duration of the call, and
        // the descriptor belongs to a live socket the caller borrows.
        let sent = unsafe {
            libc::send(
                socket.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if sent >= 0 {
            let sent = sent as usize;
            debug_assert!(sent <= bytes.len());
            return Ok(sent);
        }
        let error = io::Error::last_os_error();
        match error.kind() {
            io::ErrorKind::WouldBlock => return Ok(0),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(error),
        }
    }
}

/// Receives what the socket holds now, at most `room_bytes`, into `buffer`'s spare capacity
/// (never zero-filled first). `Ok(None)` when nothing was there after all, `Ok(Some(0))` at
/// end of stream.
pub fn receive_now(
    socket: &impl AsRawFd,
    buffer: &mut impl BufMut,
    room_bytes: usize,
) -> io::Result<Option<usize>> {
    loop {
        let spare = buffer.chunk_mut();
        let len = spare.len().min(room_bytes);
        // SAFETY: the kernel writes at most `len` bytes into the spare chunk, which is live,
        // writable memory owned by `buffer`; the descriptor belongs to a live socket.
        let received = unsafe {
            libc::recv(
                socket.as_raw_fd(),
                spare.as_mut_ptr().cast(),
                len,
                libc::MSG_DONTWAIT,
            )
        };
        if received >= 0 {
            let received = received as usize;
            debug_assert!(received <= len);
            // SAFETY: `recv` initialized exactly `received` bytes at the start of the chunk.
            unsafe { buffer.advance_mut(received) };
            return Ok(Some(received));
        }
        let error = io::Error::last_os_error();
        match error.kind() {
            io::ErrorKind::WouldBlock => return Ok(None),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn receive_and_send_do_not_wait() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let mut buffer: Vec<u8> = Vec::with_capacity(64);
        // Nothing sent yet: no waiting, no bytes.
        assert_eq!(receive_now(&server, &mut buffer, 64).unwrap(), None);
        client.write_all(b"hello world").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let got = loop {
            if let Some(n) = receive_now(&server, &mut buffer, 5).unwrap() {
                break n;
            }
            assert!(std::time::Instant::now() < deadline, "bytes never arrived");
        };
        assert_eq!(got, 5, "room_bytes bounds the read");
        assert_eq!(buffer, b"hello");
        assert_eq!(send_now(&server, b"back").unwrap(), 4);
        drop(client);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match receive_now(&server, &mut buffer, 64) {
                Ok(Some(0)) => break,
                Ok(_) => {}
                // The client closed with our unread "back" in flight: a reset is an end too.
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("{e}"),
            }
            assert!(
                std::time::Instant::now() < deadline,
                "end of stream never seen"
            );
        }
        assert!(buffer.starts_with(b"hello world"));
    }
}
