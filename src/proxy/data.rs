//! The proxy's data plane: per-core monoio runtimes with `SO_REUSEPORT` listeners, the
//! inbound mTLS path, the upstream path, and the byte copy between two sockets.
//!
//! The byte path reads up to [`COPY_BUFFER_BYTES`] at a time and writes it whole before the
//! next read, one buffer per direction, reused for the connection's life: plaintext moves
//! through no other copy than rustls' encryption into its record buffer. Sockets run with
//! `TCP_NODELAY`, so a small exchange (a new connection's first bytes) is not held back.

use super::{trusted, ProxyState, Upstream, AUTHZ_CACHE_ENTRIES_MAX};
use crate::tls::connect_ca::service_id_of;
use crate::tls::stream;
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, Splitable};
use monoio::net::{TcpListener, TcpStream};
use rustls::pki_types::ServerName;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Bytes moved per read, per direction of a connection.
pub const COPY_BUFFER_BYTES: usize = 256 * 1024;
/// How long a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long dialing the local service or an upstream proxy may take.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an authorization call to the agent may take.
pub const AUTHORIZE_TIMEOUT: Duration = Duration::from_secs(5);
/// Listener backlog.
const BACKLOG: i32 = 4096;

/// Consul's SNI of a service's proxies (`<service>.default.<dc>.internal.<trust domain>`),
/// which Envoy sidecars expect; identity is still checked by SPIFFE ID.
pub fn upstream_sni(service: &str, datacenter: &str, trust_domain: &str) -> String {
    format!("{service}.default.{datacenter}.internal.{trust_domain}")
}

fn reuseport_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_tcp_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Starts `threads` data-plane threads, each with its own listeners. Binds every listener
/// before returning, so a port in use fails the start.
pub fn start(state: Arc<ProxyState>, threads: usize) -> Result<(), String> {
    let mut binds = Vec::new();
    if let Some(listen) = state.listen {
        binds.push((None, listen, String::new()));
    }
    for (i, upstream) in state.upstreams.iter().enumerate() {
        let what = format!(" for upstream {}", upstream.spec.destination);
        binds.push((Some(i), upstream.spec.bind, what));
    }
    serve("proxy", threads, &binds, move |upstream, socket, peer| {
        let state = state.clone();
        async move {
            match upstream {
                None => inbound(&state, socket, peer).await,
                Some(i) => outbound(&state, &state.upstreams[i], socket).await,
            }
        }
    })
}

/// Runs `threads` threads named `<name>-<n>`, each a monoio runtime with its own
/// `SO_REUSEPORT` listener on every address of `binds` (`(key, address, what it is for)`),
/// handing each accepted connection to `handle` with its listener's key. Every listener is
/// bound before this returns, so a port in use fails the start.
pub fn serve<K, H, F>(
    name: &str,
    threads: usize,
    binds: &[(K, SocketAddr, String)],
    handle: H,
) -> Result<(), String>
where
    K: Copy + Send + 'static,
    H: Fn(K, TcpStream, SocketAddr) -> F + Clone + Send + 'static,
    F: std::future::Future<Output = Result<(), String>> + 'static,
{
    for thread in 0..threads.max(1) {
        let mut listeners = Vec::new();
        for (key, addr, what) in binds {
            let listener = reuseport_listener(*addr)
                .map_err(|e| format!("cannot listen{what} on {addr}: {e}"))?;
            listeners.push((*key, listener));
        }
        let handle = handle.clone();
        std::thread::Builder::new()
            .name(format!("{name}-{thread}"))
            .spawn(move || {
                let mut runtime = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
                    .enable_timer()
                    .build()
                    .expect("building a proxy runtime");
                runtime.block_on(async move {
                    let mut tasks = Vec::new();
                    for (key, listener) in listeners {
                        let listener = TcpListener::from_std(listener).expect("a bound listener");
                        tasks.push(monoio::spawn(accept_loop(key, listener, handle.clone())));
                    }
                    for task in tasks {
                        task.await;
                    }
                });
            })
            .map_err(|e| format!("cannot start a proxy thread: {e}"))?;
    }
    Ok(())
}

async fn accept_loop<K, H, F>(key: K, listener: TcpListener, handle: H)
where
    K: Copy + 'static,
    H: Fn(K, TcpStream, SocketAddr) -> F,
    F: std::future::Future<Output = Result<(), String>> + 'static,
{
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                log::warn!("proxy: accept failed: {e}");
                monoio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        let connection = handle(key, socket, peer);
        monoio::spawn(async move {
            if let Err(e) = connection.await {
                log::warn!("proxy: connection from {peer}: {e}");
            }
        });
    }
}

/// Whether `source` may connect to this proxy's service: the cached decision of this
/// intentions generation, else the agent's.
async fn authorized(state: &ProxyState, source_uri: &str, source: &str) -> Result<bool, String> {
    let generation = state.intentions_generation.load(Ordering::Acquire);
    let caching = state.cache_enabled.load(Ordering::Acquire);
    if caching {
        let cache = state.authz.lock().expect("authz cache lock");
        if cache.generation == generation {
            if let Some(allowed) = cache.decisions.get(source) {
                return Ok(*allowed);
            }
        }
    }
    let body = serde_json::json!({
        "Target": state.service,
        "ClientCertURI": source_uri,
    })
    .to_string();
    let answer = state
        .agent
        .request(
            "POST",
            "/v1/agent/connect/authorize",
            body.as_bytes(),
            AUTHORIZE_TIMEOUT,
        )
        .await?;
    if answer.status != 200 {
        return Err(format!("authorize: {} {}", answer.status, answer.text()));
    }
    let value = answer.json()?;
    let allowed = value["Authorized"].as_bool().unwrap_or(false);
    if caching {
        let mut cache = state.authz.lock().expect("authz cache lock");
        if cache.generation != generation {
            cache.generation = generation;
            cache.decisions.clear();
        }
        // A generation that moved while the agent answered keeps this decision out.
        if state.intentions_generation.load(Ordering::Acquire) == generation
            && cache.decisions.len() < AUTHZ_CACHE_ENTRIES_MAX
        {
            cache.decisions.insert(source.to_string(), allowed);
        }
    }
    if !allowed {
        log::warn!(
            "proxy: connection from {source:?} refused: {}",
            value["Reason"].as_str().unwrap_or_default()
        );
    }
    Ok(allowed)
}

async fn dial(addr: SocketAddr) -> Result<TcpStream, String> {
    dial_from(addr, None).await
}

/// The address to dial `to` from, given this proxy's own IP: that IP when it is a specific
/// address of the same family and the same reach (loopback or not) as `to`, so connections
/// carry the proxy's own address; otherwise none, the kernel choosing.
fn source_for(own: Option<IpAddr>, to: SocketAddr) -> Option<SocketAddr> {
    let own = own?;
    let usable = !own.is_unspecified()
        && own.is_ipv4() == to.is_ipv4()
        && own.is_loopback() == to.ip().is_loopback();
    usable.then_some(SocketAddr::new(own, 0))
}

/// Dials `to` within [`DIAL_TIMEOUT`], from `own`'s address when [`source_for`] allows.
pub async fn dial_from(to: SocketAddr, own: Option<IpAddr>) -> Result<TcpStream, String> {
    let connecting = async {
        let Some(source) = source_for(own, to) else {
            return TcpStream::connect_addr(to).await;
        };
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(to),
            socket2::Type::STREAM,
            None,
        )?;
        // Without IP_BIND_ADDRESS_NO_PORT, binding before connecting reserves an ephemeral
        // port for the address alone, and a proxy opening many connections would run out of
        // ports long before the 4-tuples run out; with it, the port is picked at connect.
        let enable: libc::c_int = 1;
        // SAFETY: a valid descriptor, an option the kernel reads as an int of this size.
        let _ = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&socket),
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                (&enable as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        socket.bind(&source.into())?;
        socket.set_nonblocking(true)?;
        match socket.connect(&to.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        let std_stream: std::net::TcpStream = socket.into();
        let stream = TcpStream::from_std(std_stream)?;
        stream.writable(false).await?;
        // SAFETY: the descriptor belongs to `stream`, which outlives this borrow.
        let fd = unsafe {
            std::os::fd::BorrowedFd::borrow_raw(std::os::fd::AsRawFd::as_raw_fd(&stream))
        };
        if let Some(e) = socket2::SockRef::from(&fd).take_error()? {
            return Err(e);
        }
        Ok(stream)
    };
    let stream = monoio::time::timeout(DIAL_TIMEOUT, connecting)
        .await
        .map_err(|_| format!("dialing {to} timed out"))?
        .map_err(|e| format!("dialing {to}: {e}"))?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// The public listener: mTLS in, the local service out.
async fn inbound(state: &ProxyState, socket: TcpStream, peer: SocketAddr) -> Result<(), String> {
    let tls = state.tls.load_full();
    let accepted = stream::accept(
        tls.server.clone(),
        socket,
        HANDSHAKE_TIMEOUT,
        stream::FirstRecord::Close,
    )
    .await;
    let session = match accepted {
        Ok(session) => session,
        // The agent's "Connect Sidecar Listening" check opens and closes a connection every
        // interval to see that the proxy listens; that is no client and no failure, so it is
        // worth a line only when debugging (Envoy does not log such probes either).
        Err(stream::HandshakeError::NothingSent) => {
            log::debug!(
                "proxy: connection from {peer} closed before sending anything (a TCP check)"
            );
            return Ok(());
        }
        Err(e) => return Err(format!("TLS handshake: {e}")),
    };
    let chain = session.peer_certificates().unwrap_or_default();
    let id = chain
        .first()
        .and_then(|leaf| service_id_of(leaf))
        .ok_or("the client certificate carries no service SPIFFE ID")?;
    if !trusted(state, &id) {
        return Err(format!(
            "client from trust domain {:?} refused",
            id.trust_domain
        ));
    }
    if !authorized(state, &id.uri(), &id.service).await? {
        // Closing the session is the refusal the client sees.
        return Ok(());
    }
    let service_addr = state.service_addr.ok_or("no local service address")?;
    let local = dial(service_addr).await?;
    let (tls_read, tls_write) = session.into_split();
    let (local_read, local_write) = local.into_split();
    pipe(tls_read, tls_write, local_read, local_write).await;
    Ok(())
}

/// An upstream listener: plain in, mTLS out to a healthy proxy of the destination.
async fn outbound(
    state: &ProxyState,
    upstream: &Upstream,
    socket: TcpStream,
) -> Result<(), String> {
    let endpoints = upstream.endpoints.load_full();
    if endpoints.is_empty() {
        // Say why, as this is what a user sees right after registering a sidecar: its
        // "Connect Sidecar Listening" check starts critical and passes only after its first
        // probe, up to one check interval later (Consul staggers first runs the same way).
        return Err(format!(
            "no healthy proxy of {}: none is registered, or none passes its health checks yet",
            upstream.spec.destination
        ));
    }
    let own = state.listen.map(|l| l.ip());
    let remote = super::gateway::dial_any(&upstream.next, &endpoints, own).await?;
    let remote_addr = remote
        .peer_addr()
        .map_or_else(|_| "the upstream".to_string(), |a| a.to_string());
    let tls = state.tls.load_full();
    // A cross-datacenter upstream names its own datacenter, which routes the connection
    // through mesh gateways and is the datacenter its certificate must carry.
    let datacenter = upstream.spec.datacenter.as_deref();
    let sni = upstream_sni(
        &upstream.spec.destination,
        datacenter.unwrap_or(&tls.datacenter),
        &tls.trust_domain,
    );
    let name = ServerName::try_from(sni.clone())
        .map_err(|e| format!("the SNI {sni:?} of {}: {e}", upstream.spec.destination))?;
    let session = stream::connect(tls.client.clone(), name, remote, HANDSHAKE_TIMEOUT)
        .await
        .map_err(|e| format!("TLS handshake with {remote_addr}: {e}"))?;
    let chain = session.peer_certificates().unwrap_or_default();
    let id = chain
        .first()
        .and_then(|leaf| service_id_of(leaf))
        .ok_or("the upstream's certificate carries no service SPIFFE ID")?;
    let wrong_datacenter = datacenter.is_some_and(|dc| !dc.eq_ignore_ascii_case(&id.datacenter));
    if id.service != upstream.spec.destination || wrong_datacenter || !trusted(state, &id) {
        return Err(format!(
            "upstream {} presented the identity of {:?} in {:?} of {:?}",
            upstream.spec.destination, id.service, id.datacenter, id.trust_domain
        ));
    }
    let (tls_read, tls_write) = session.into_split();
    let (plain_read, plain_write) = socket.into_split();
    pipe(plain_read, plain_write, tls_read, tls_write).await;
    Ok(())
}

/// Copies both ways until both directions end; a direction that ends half-closes the other
/// side's write half, as a TCP proxy should.
pub async fn pipe<AR, AW, BR, BW>(a_read: AR, a_write: AW, b_read: BR, b_write: BW)
where
    AR: AsyncReadRent + 'static,
    AW: AsyncWriteRent + 'static,
    BR: AsyncReadRent + 'static,
    BW: AsyncWriteRent + 'static,
{
    let there = monoio::spawn(copy(a_read, b_write));
    copy(b_read, a_write).await;
    there.await;
}

async fn copy<R: AsyncReadRent, W: AsyncWriteRent>(mut from: R, mut to: W) {
    let mut buffer: Vec<u8> = Vec::with_capacity(COPY_BUFFER_BYTES);
    loop {
        let (result, filled) = from.read(buffer).await;
        buffer = filled;
        match result {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let (result, written) = to.write_all(buffer).await;
        buffer = written;
        if result.is_err() {
            break;
        }
        buffer.clear();
    }
    let _ = to.shutdown().await;
}
