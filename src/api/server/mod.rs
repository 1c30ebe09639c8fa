//! The HTTP/1.1 server of a shard: accept, read, parse, dispatch, write.
//!
//! A request is dispatched synchronously ([`api::dispatch`]); what must wait comes back as an
//! owned [`api::Outcome`] that [`dispatch::complete`] carries out: propose a write, park a
//! blocking query, pass a read barrier, or await a typed call to another server (a
//! request this server does not answer itself goes as Consul's typed call,
//! `api::rpc::client`, never as HTTP). Three rooms:
//!
//! - [`connection`]: the connection loop. One task per connection with one input and one
//!   output buffer, reused across requests; pipelined requests are answered in order, their
//!   answers written with one syscall when no further complete request is buffered.
//! - [`dispatch`]: buffered dispatch. A request whose bytes are all in memory goes through
//!   `api::dispatch`, and its outcome is carried out.
//! - [`parking`]: blocking queries. A parked query holds no buffers, watches its client for
//!   a hang-up, and shares its rendered answer with identical woken queries.
//!
//! The connection loop and parking call each other by nature (a parked query keeps its
//! connection's socket and input).
//!
//! Limits and timeouts: head size and header count ([`HttpLimits`]), body size per endpoint
//! (`api::routes::body_limit`), `HEADER_READ_TIMEOUT` from the first byte of a request to the end of
//! its head, `BODY_READ_TIMEOUT` between body reads, `IDLE_TIMEOUT` between requests,
//! `WRITE_TIMEOUT` for a client that stops reading, `RPC_HOLD_TIMEOUT` waiting for a leader,
//! `FORWARD_HOPS_MAX` servers a typed call is handed through.
//!
//! [`HttpLimits`]: crate::proto::http::HttpLimits

mod connection;
mod dispatch;
mod parking;

pub use self::connection::{accept_loop, accept_tls_loop};

use crate::api;
use crate::api::agent_channel::AgentChannel;
use crate::api::shared_answers::SharedAnswers;
use crate::cluster::Pools;
use crate::shard::runtime::Shard;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a request waits for a leader to appear before "No cluster leader": the one
/// `rpc_hold_timeout` every RPC waits (Consul's default), which a client agent's calls wait
/// for a server too.
pub use crate::cluster::servers::RPC_HOLD_TIMEOUT;
/// Servers one typed call may be handed through (follower to leader, to another
/// datacenter) before it is refused as a loop.
pub const FORWARD_HOPS_MAX: u32 = 3;

/// One shard's HTTP server: the context its handlers see, and the runtime it carries their
/// outcomes out with.
pub struct Server {
    shard: Rc<Shard>,
    context: api::Context,
    /// Rendered answers of woken blocking queries, shared by identical requests; forgotten
    /// with every new version (they belong to the version they were rendered from).
    shared_answers: Rc<RefCell<SharedAnswers>>,
}

impl Server {
    /// The shard this server runs on (for `api::rpc`, which carries out what it decides
    /// as this loop does).
    pub(crate) fn shard(&self) -> &Rc<Shard> {
        &self.shard
    }

    /// What handlers see.
    pub(crate) fn context(&self) -> &api::Context {
        &self.context
    }

    pub fn new(shard: Rc<Shard>, pools: Arc<Pools>, agent: AgentChannel) -> Rc<Server> {
        let shared_answers = Rc::new(RefCell::new(SharedAnswers::new()));
        let forgotten = shared_answers.clone();
        shard.on_new_version(move |_| forgotten.borrow_mut().forget());
        Rc::new(Server {
            context: api::Context::new(shard.clone(), pools, agent),
            shard,
            shared_answers,
        })
    }
}

/// How a request's answer is framed.
#[derive(Clone, Copy)]
struct ReplyShape {
    keep_alive: bool,
    pretty: bool,
}
