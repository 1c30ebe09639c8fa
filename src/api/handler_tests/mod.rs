//! In-process handler tests: a request's text goes through the route table, the route's ACL
//! rule and its handler exactly as a served request does, against a plain store on a fresh
//! shard — no socket, no Raft, no thread — so one check runs in well under a millisecond.
//!
//! The [`Harness`] stands in for the two things around a handler: the raft core, which
//! applies a write's command at the next index and installs the new version on the shard
//! (here `Tables::apply` on the harness's own copy, then the same `ShardMessage::Applied` the
//! core sends), and the HTTP server's parking loop, which evaluates a blocking read's query
//! at the current version and answers once its index passes the client's (here evaluated
//! when asked, see [`Harness::resume`]). Outcomes that need the rest of an agent —
//! forwarding, the agent thread, streams, leader-side work — fail the check: what those do
//! is the business of the real-socket tests in `tests/it`; these tests pin what each handler
//! decides.
//!
//! A check reads as the request line and body a client would send:
//! `h.check("PUT /v1/kv/a?cas=0", "v")` answers `status`, headers and body.

mod authz;
mod catalog;
mod health;
mod kv;
mod peering;

use super::agent_channel::{agent_channel, AgentCall};
use super::{dispatch, routes, BlockOp, Context, Outcome, Reply, Request};
use crate::cluster::Pools;
use crate::config::{self, AgentConfig, ConfigSources};
use crate::proto::http::{self, HttpLimits, QueryParams};
use crate::replica::{AppliedBatch, ClusterStatus};
use crate::shard::peer_transport::Faults;
use crate::shard::raft_inbox::{raft_inbox, RaftInboxReceiver};
use crate::shard::runtime::{shard_channel, Identity, Shard, ShardMessage, Shared};
use crate::store::{Command, CommandResult, Tables};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Instant;

/// The leader's wall clock every applied command carries in the harness (Unix
/// milliseconds): fixed, so lock-delays and expiry times are the same in every run.
const LEADER_TIME_MS: u64 = 1_800_000_000_000;

/// Requests a raft inbox may hold: the harness never sends one, the type needs a bound.
const RAFT_INBOX_CAPACITY: usize = 16;

/// One answer as a client would read it.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    /// The response head without its status line, as sent (`Name: value` lines).
    pub headers: String,
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as JSON; fails the test when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "answer {} is not JSON ({error}): {}",
                self.status,
                self.text()
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A header's value (names compare without case, as HTTP's do).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }

    /// `X-Consul-Index` as a number; fails the test when absent.
    pub fn index(&self) -> u64 {
        self.header("X-Consul-Index")
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no X-Consul-Index in {:?}", self.headers))
    }
}

/// What a check came to: an answer, or a blocking read still waiting for a change.
pub enum Checked {
    Answered(Answer),
    Parked(BlockOp),
}

/// A leader's shard over a plain store, serving requests in-process.
pub struct Harness {
    shard: Rc<Shard>,
    context: Context,
    /// The raft core's copy of the state: writes apply here, then install on the shard.
    tables: Tables,
    /// Kept so the channels the context holds stay open.
    _agent_calls: flume::Receiver<AgentCall>,
    _raft: RaftInboxReceiver,
}

impl Harness {
    /// A dev server (ACLs off) that leads.
    pub fn server() -> Harness {
        Harness::with_hcl("")
    }

    /// A dev server with `hcl` added to its configuration, leading.
    pub fn with_hcl(hcl: &str) -> Harness {
        let config = config::build(&ConfigSources {
            dev: true,
            hcl_snippets: vec![hcl.to_string()],
            ..Default::default()
        })
        .unwrap_or_else(|error| panic!("test configuration {hcl:?}: {error}"));
        Harness::leading(Arc::new(config))
    }

    fn leading(config: Arc<AgentConfig>) -> Harness {
        assert!(
            config.server,
            "the harness stands in for a server's raft core"
        );
        let faults = Arc::new(Faults::default());
        let (raft_tx, raft_rx) =
            raft_inbox(RAFT_INBOX_CAPACITY, faults.clone()).expect("raft inbox doorbell");
        let tls = crate::tls::TlsConfigurator::new(&config.tls, crate::tls::Identity::of(&config))
            .expect("a dev agent's TLS settings load");
        let shared = Arc::new(Shared {
            config: config.clone(),
            identity: Identity {
                node_id: "00000000-0000-4000-8000-000000000001".into(),
                raft_id: 1,
            },
            raft_inbox: raft_tx,
            published_index: AtomicU64::new(0),
            shutting_down: AtomicBool::new(false),
            shard_count: 1,
            http_limits: HttpLimits::default(),
            started_at: Instant::now(),
            clock_origin: Instant::now(),
            lease_until_ms: AtomicU64::new(0),
            last_leader_contact_ms: AtomicU64::new(0),
            faults,
            rpc_address: "127.0.0.1:8300".parse().expect("an address"),
            tls: Arc::new(tls),
            acl_tokens: std::sync::RwLock::new(Default::default()),
            acl_token_file: None,
            exit_error: std::sync::OnceLock::new(),
            node_meta: arc_swap::ArcSwap::from_pointee(config.node_meta.clone()),
            reload_listeners: std::sync::Mutex::new(Vec::new()),
            wan_gossip_pool: std::sync::OnceLock::new(),
        });
        let (_sender, inbox) = shard_channel();
        let tables = Tables::default();
        let shard = Shard::new(0, shared, Arc::new(tables.clone()), inbox);
        shard.handle_message(ShardMessage::Status(Arc::new(ClusterStatus {
            is_leader: true,
            leader_rpc_address: "127.0.0.1:8300".into(),
            leader_name: config.node_name.clone(),
            leader_raft_id: Some(1),
            term: 1,
            ..Default::default()
        })));
        let pools = Arc::new(Pools {
            lan: None,
            wan: None,
            events: Arc::default(),
            servers: Arc::default(),
            router: Arc::new(crate::cluster::router::Router::new(
                &config.datacenter,
                None,
            )),
        });
        let (agent, agent_calls) = agent_channel();
        let context = Context::new(shard.clone(), pools, agent);
        Harness {
            shard,
            context,
            tables,
            _agent_calls: agent_calls,
            _raft: raft_rx,
        }
    }

    /// The store's index: the last applied write's.
    pub fn index(&self) -> u64 {
        self.shard.local_index()
    }

    /// Applies `command` as the raft core would at the next index, and installs the
    /// result on the shard; what the store answered.
    pub fn apply(&mut self, command: &Command) -> CommandResult {
        let index = self.shard.local_index() + 1;
        self.tables.leader_time_ms = LEADER_TIME_MS;
        let mut changes = Vec::new();
        let result = self.tables.apply(index, command, &mut changes);
        assert_eq!(
            self.tables.index, index,
            "an applied command moves the store to its index"
        );
        self.shard.handle_message(ShardMessage::Applied(
            Arc::new(AppliedBatch {
                version: Arc::new(self.tables.clone()),
                changes,
            }),
            Vec::new(),
        ));
        assert_eq!(
            self.shard.local_index(),
            index,
            "the shard took the version"
        );
        result
    }

    /// Serves `request` (`"METHOD /path?query"`) with `body`; a blocking read that must
    /// wait fails the check (use [`Harness::serve`] for those).
    pub fn check(&mut self, request: &str, body: &str) -> Answer {
        match self.serve(request, body) {
            Checked::Answered(answer) => answer,
            Checked::Parked(_) => panic!("{request} parked: it waits for a change"),
        }
    }

    /// Serves `request` with `body`: the answer, or the parked blocking read.
    pub fn serve(&mut self, request: &str, body: &str) -> Checked {
        let (method_and_target, extra_headers) = request.split_once('\n').unwrap_or((request, ""));
        let mut input = format!(
            "{method_and_target} HTTP/1.1\r\nHost: harness\r\nContent-Length: {}\r\n",
            body.len()
        );
        for header in extra_headers.lines().filter(|line| !line.is_empty()) {
            input.push_str(header);
            input.push_str("\r\n");
        }
        input.push_str("\r\n");
        let head_len = input.len();
        input.push_str(body);
        let input = input.into_bytes();
        let head = http::parse_head(&input, self.shard.http_limits())
            .unwrap_or_else(|error| panic!("{request}: not a request head: {error:?}"))
            .expect("the whole head is in the buffer");
        assert_eq!(head.head_len, head_len, "the parser read the head we wrote");
        let raw_path =
            std::str::from_utf8(&input[head.path.start as usize..head.path.end as usize])
                .expect("UTF-8 path");
        let raw_query =
            std::str::from_utf8(&input[head.query.start as usize..head.query.end as usize])
                .expect("UTF-8 query");
        let path = http::percent_decode(raw_path, false).expect("valid escapes");
        let query = QueryParams::parse(raw_query).expect("a valid query string");
        let route = routes::find(&path);
        let request_view = Request {
            method: head.method,
            path: &path,
            query,
            rest: route.map_or("", |route| route.path.rest(&path)),
            head: &head,
            buf: &input,
            body: &input[head_len..],
            acl: std::cell::OnceCell::new(),
        };
        let mut output = Vec::new();
        let outcome = dispatch(
            &self.context,
            route,
            &request_view,
            &mut Reply::new(&mut output, true, false),
        );
        match outcome {
            Outcome::Done => Checked::Answered(parse_answer(&output)),
            Outcome::Write(op) => {
                let result = self.apply(&op.command);
                (op.respond)(result, &mut Reply::new(&mut output, true, false));
                Checked::Answered(parse_answer(&output))
            }
            Outcome::Block(op) => self.resume(op),
            Outcome::Leader(_) | Outcome::Async(_) | Outcome::Stream(_) => {
                panic!("{request}: needs the agent around the handler, not in-process")
            }
        }
    }

    /// Evaluates a blocking read at the current version, as the parking loop does after
    /// every change: answered once its index passed the client's, else still parked.
    pub fn resume(&mut self, op: BlockOp) -> Checked {
        let version = self.shard.current_version();
        let (index, _watched) = op.query.evaluate(&version);
        if op.options.is_blocking() && index <= op.options.min_index {
            return Checked::Parked(op);
        }
        let meta = self.context.query_meta(index, op.options.consistency);
        let mut output = Vec::new();
        op.query
            .respond(&version, meta, &mut Reply::new(&mut output, true, false));
        Checked::Answered(parse_answer(&output))
    }
}

/// Splits a whole HTTP/1.1 response (as `Reply` wrote it) into status, headers and body.
fn parse_answer(output: &[u8]) -> Answer {
    let text_end = output
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .expect("a response head ends with an empty line");
    let head = std::str::from_utf8(&output[..text_end]).expect("an ASCII head");
    let (status_line, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not a status line: {status_line:?}"));
    let headers = headers.replace("\r\n", "\n");
    let mut body = output[text_end + 4..].to_vec();
    if headers
        .lines()
        .any(|line| line.eq_ignore_ascii_case("transfer-encoding: chunked"))
    {
        body = dechunk(&body);
    }
    Answer {
        status,
        headers,
        body,
    }
}

/// The payload of a chunked body (`size CRLF data CRLF … 0 CRLF CRLF`).
fn dechunk(mut chunked: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let line_end = chunked
            .windows(2)
            .position(|window| window == b"\r\n")
            .expect("a chunk size line");
        let size_text = std::str::from_utf8(&chunked[..line_end]).expect("hex size");
        let size = usize::from_str_radix(size_text.trim(), 16).expect("hex size");
        if size == 0 {
            return body;
        }
        let data_start = line_end + 2;
        body.extend_from_slice(&chunked[data_start..data_start + size]);
        chunked = &chunked[data_start + size + 2..];
    }
}
