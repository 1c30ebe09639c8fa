//! `loadgen fanout-floor --listen IP:PORT [--threads N] [--duration D]`: the least work a
//! server can do for the blocking fan-out benchmark, so its figures can be read against
//! what this machine's loopback TCP allows at all.
//!
//! It speaks just enough HTTP/1.1 for `loadgen blocking-fanout`: a GET without `index=`
//! answers at once with `X-Consul-Index: 1`; a GET with `index=` parks; any PUT answers
//! `true` and then wakes every parked GET on every thread, which each get one pre-rendered
//! answer of the size praetor sends for one small key. It keeps no per-request state beyond
//! the connection's task, renders nothing, and does not watch parked sockets — everything
//! praetor does on top is its own cost. Threads share one `SO_REUSEPORT` port, as praetor's
//! shards do.
//!
//! With `--answer-file` (and `--pretty-answer-file`) a GET without `index=` gets that file's
//! bytes instead — a whole response captured from praetor (say `/v1/health/service/web?passing`
//! for 1,000 instances), so the floor of a large read is writing the same bytes and nothing
//! else. The file must be one complete response whose `Content-Length` matches its body.
//!
//! Bounds: request heads up to `HEAD_BYTES_MAX`; bodies are skipped by `Content-Length` up to
//! `BODY_BYTES_MAX`; the server stops by itself after `--duration`.

use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use crate::config::FloorConfig;

const HEAD_BYTES_MAX: usize = 16 * 1024;
const BODY_BYTES_MAX: usize = 1 << 20;
const READ_BYTES: usize = 4096;
/// Largest answer file accepted.
const ANSWER_FILE_BYTES_MAX: usize = 64 << 20;

/// What a parked query gets when woken: the headers and body praetor sends for one small
/// key (`GET /v1/kv/bench/fanout`), byte counts within a few percent.
const WOKEN_ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nVary: Accept-Encoding\r\nX-Consul-Default-Acl-Policy: allow\r\nX-Consul-Index: 2\r\nX-Consul-Knownleader: true\r\nX-Consul-Lastcontact: 0\r\nX-Consul-Query-Backend: blocking-query\r\nDate: Sat, 21 Nov 2026 00:00:00 GMT\r\nContent-Length: 99\r\n\r\n[{\"LockIndex\":0,\"Key\":\"bench/fanout\",\"Flags\":0,\"Value\":\"d29rZW4=\",\"CreateIndex\":2,\"ModifyIndex\":2}]";
const INDEX_ANSWER: &[u8] =
    b"HTTP/1.1 404 Not Found\r\nX-Consul-Index: 1\r\nContent-Length: 0\r\n\r\n";
const PUT_ANSWER: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4\r\n\r\ntrue";

/// Per thread: parked tasks' wakers and the wake generation they wait past.
#[derive(Default)]
struct Parked {
    generation: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

impl Parked {
    fn wake_all(&self) {
        self.generation.set(self.generation.get() + 1);
        for waker in self.wakers.borrow_mut().drain(..) {
            waker.wake();
        }
    }
}

/// The pre-built answers to a GET without `index=`. Leaked once at start: the floor serves
/// them until it exits, and a `'static` slice is written without copying or counting.
#[derive(Clone, Copy)]
struct Answers {
    plain: &'static [u8],
    pretty: &'static [u8],
}

/// Reads one answer file and checks it is one whole response: a head, then exactly the body
/// its `Content-Length` declares (a wrong file would make the client misparse every answer).
fn answer_from_file(path: &str) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("reading {path}: {e}"))?;
    if bytes.len() > ANSWER_FILE_BYTES_MAX {
        return Err(format!(
            "{path}: {} bytes, more than {ANSWER_FILE_BYTES_MAX}",
            bytes.len()
        ));
    }
    if !bytes.starts_with(b"HTTP/1.1 ") {
        return Err(format!("{path}: not an HTTP/1.1 response"));
    }
    let head_end = memchr::memmem::find(&bytes, b"\r\n\r\n")
        .ok_or_else(|| format!("{path}: no end of head"))?
        + 4;
    let declared = content_length(&bytes[..head_end]);
    if declared != bytes.len() - head_end {
        return Err(format!(
            "{path}: Content-Length {declared} but a body of {} bytes",
            bytes.len() - head_end
        ));
    }
    Ok(bytes)
}

fn load_answers(config: &FloorConfig) -> Result<Option<Answers>, String> {
    let Some(plain_path) = &config.answer_file else {
        return Ok(None);
    };
    let plain: &'static [u8] = Box::leak(answer_from_file(plain_path)?.into_boxed_slice());
    let pretty: &'static [u8] = match &config.pretty_answer_file {
        Some(path) => Box::leak(answer_from_file(path)?.into_boxed_slice()),
        None => plain,
    };
    Ok(Some(Answers { plain, pretty }))
}

pub fn serve(config: &FloorConfig) -> Result<(), String> {
    let answers = load_answers(config)?;
    let deadline = Instant::now() + config.duration;
    let mut wake_senders = Vec::new();
    let mut wake_receivers = Vec::new();
    for _ in 0..config.threads {
        let (tx, rx) = flume::unbounded::<()>();
        wake_senders.push(tx);
        wake_receivers.push(rx);
    }
    let wake_senders = Arc::new(wake_senders);
    let mut listeners = Vec::new();
    for _ in 0..config.threads {
        listeners.push(crate::net::reuseport_listener(config.listen)?);
    }
    eprintln!(
        "[fanout-floor] serving {} on {} threads for {:?}",
        config.listen, config.threads, config.duration
    );
    let threads: Vec<_> = listeners
        .into_iter()
        .zip(wake_receivers)
        .map(|(listener, wakes)| {
            let wake_senders = wake_senders.clone();
            std::thread::spawn(move || {
                let mut runtime = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
                    .enable_timer()
                    .build()
                    .expect("building the runtime");
                runtime.block_on(async move {
                    let parked = Rc::new(Parked::default());
                    let listener = monoio::net::TcpListener::from_std(listener).expect("listener");
                    let waker_task = parked.clone();
                    monoio::spawn(async move {
                        while wakes.recv_async().await.is_ok() {
                            waker_task.wake_all();
                        }
                    });
                    loop {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            return;
                        }
                        let Ok(Ok((stream, _))) =
                            monoio::time::timeout(left, listener.accept()).await
                        else {
                            continue;
                        };
                        let _ = stream.set_nodelay(true);
                        monoio::spawn(connection(
                            stream,
                            parked.clone(),
                            wake_senders.clone(),
                            answers,
                        ));
                    }
                });
            })
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
    Ok(())
}

async fn connection(
    mut stream: monoio::net::TcpStream,
    parked: Rc<Parked>,
    wake_senders: Arc<Vec<flume::Sender<()>>>,
    answers: Option<Answers>,
) {
    let mut input: Vec<u8> = Vec::with_capacity(READ_BYTES);
    loop {
        let head_end = loop {
            if let Some(end) = memchr::memmem::find(&input, b"\r\n\r\n") {
                break end + 4;
            }
            if input.len() > HEAD_BYTES_MAX {
                return;
            }
            if !read_more(&mut stream, &mut input).await {
                return;
            }
        };
        let head = &input[..head_end];
        let body_bytes = content_length(head).min(BODY_BYTES_MAX);
        while input.len() < head_end + body_bytes {
            if !read_more(&mut stream, &mut input).await {
                return;
            }
        }
        let is_put = input.starts_with(b"PUT ");
        let first_line_end = memchr::memchr(b'\n', &input).unwrap_or(0);
        let blocking = memchr::memmem::find(&input[..first_line_end], b"index=").is_some();
        let pretty = memchr::memmem::find(&input[..first_line_end], b"pretty").is_some();
        input.drain(..head_end + body_bytes);
        if let (false, false, Some(answers)) = (is_put, blocking, answers) {
            // The byte floor: the pre-built response, written as is.
            let answer = if pretty {
                answers.pretty
            } else {
                answers.plain
            };
            let (result, _) = stream.write_all(answer).await;
            if result.is_err() {
                return;
            }
            continue;
        }
        let answer: &'static [u8] = if is_put {
            let (result, _) = stream.write_all(PUT_ANSWER).await;
            if result.is_err() {
                return;
            }
            for sender in wake_senders.iter() {
                let _ = sender.send(());
            }
            continue;
        } else if blocking {
            let seen = parked.generation.get();
            std::future::poll_fn(|cx| {
                if parked.generation.get() != seen {
                    return std::task::Poll::Ready(());
                }
                parked.wakers.borrow_mut().push(cx.waker().clone());
                std::task::Poll::Pending
            })
            .await;
            WOKEN_ANSWER
        } else {
            INDEX_ANSWER
        };
        let (result, _) = stream.write_all(answer).await;
        if result.is_err() {
            return;
        }
    }
}

/// Reads more of the request into `input`; false once the client is gone.
async fn read_more(stream: &mut monoio::net::TcpStream, input: &mut Vec<u8>) -> bool {
    input.reserve(READ_BYTES);
    let len = input.len();
    let (result, buf) = stream
        .read(monoio::buf::IoBufMut::slice_mut(
            std::mem::take(input),
            len..,
        ))
        .await;
    *input = buf.into_inner();
    matches!(result, Ok(n) if n > 0)
}

fn content_length(head: &[u8]) -> usize {
    let text = String::from_utf8_lossy(head);
    text.lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared_and_actual(answer: &[u8]) -> (usize, usize) {
        let end = memchr::memmem::find(answer, b"\r\n\r\n").expect("a head") + 4;
        (content_length(&answer[..end]), answer.len() - end)
    }

    #[test]
    fn fixed_answers_declare_their_body_length() {
        for answer in [WOKEN_ANSWER, INDEX_ANSWER, PUT_ANSWER] {
            let (declared, actual) = declared_and_actual(answer);
            assert_eq!(declared, actual, "{}", String::from_utf8_lossy(answer));
        }
    }

    #[test]
    fn answer_files_must_declare_their_body_length() {
        let dir = std::env::temp_dir().join(format!("loadgen-floor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let good = dir.join("good");
        std::fs::write(&good, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]").expect("write");
        let bad = dir.join("bad");
        std::fs::write(&bad, b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n[]").expect("write");
        assert!(answer_from_file(good.to_str().expect("utf-8")).is_ok());
        let error = answer_from_file(bad.to_str().expect("utf-8")).expect_err("length mismatch");
        assert!(error.contains("Content-Length 3"), "{error}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn content_length_is_found_in_any_case_and_defaults_to_zero() {
        assert_eq!(
            content_length(b"PUT / HTTP/1.1\r\ncontent-LENGTH: 12\r\n\r\n"),
            12
        );
        assert_eq!(content_length(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
    }
}
