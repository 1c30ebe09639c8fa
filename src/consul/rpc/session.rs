//! Sessions: `Session.Apply` (`SessionRequest`: create or destroy a `Session`),
//! `Session.Get` and `Session.Renew` (`SessionSpecificRequest`), and the `Session` rows of
//! `IndexedSessions` — written by a server, and read back into the store's rows by a client
//! agent, which renders them as a server's HTTP answer does.
//!
//! A server's `Session.Apply` takes the session as sent: the defaults of a create (the
//! agent's node, the `serfHealth` check, a 15 s lock-delay) are the agent's business, applied
//! before the call, as Consul's HTTP handler applies them.

use super::{
    each_field, read_reply, string_list, write_request_field, write_string_list, Fields, QueryMeta,
    QueryOptions,
};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::session::{Behavior, ServiceCheck, Session};
use std::sync::Arc;

/// `SessionRequest`: the operation, its session (with `Behavior` still as text: an invalid
/// one is refused by the endpoint in Consul's words) and the token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRequest {
    pub datacenter: String,
    pub op: String,
    pub session: Session,
    pub behavior: String,
    pub token: String,
}

fn read_service_checks(r: &mut Reader) -> Result<Option<Vec<ServiceCheck>>, WireError> {
    if r.try_nil()? {
        return Ok(None);
    }
    let count = r.array_len()?;
    let mut checks = Vec::with_capacity(count);
    for _ in 0..count {
        let mut check = ServiceCheck {
            id: String::new(),
            namespace: String::new(),
        };
        each_field(r, |name, r| {
            match name {
                "ID" => check.id = r.str()?.to_string(),
                "Namespace" => check.namespace = r.str()?.to_string(),
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        checks.push(check);
    }
    Ok(Some(checks))
}

fn read_optional_list(r: &mut Reader) -> Result<Option<Vec<String>>, WireError> {
    if r.try_nil()? {
        return Ok(None);
    }
    Ok(Some(
        string_list(r)?.into_iter().map(str::to_string).collect(),
    ))
}

/// One field of a `Session` (`Behavior` as text: the caller parses or refuses it).
fn session_field(
    session: &mut Session,
    behavior: &mut String,
    name: &str,
    r: &mut Reader,
) -> Result<bool, WireError> {
    match name {
        "ID" => session.id = Arc::from(r.str()?.to_ascii_lowercase().as_str()),
        "Name" => session.name = r.str()?.to_string(),
        "Node" => session.node = r.str()?.to_string(),
        "LockDelay" => session.lock_delay_ns = r.i64("LockDelay")?,
        "Behavior" => *behavior = r.str()?.to_string(),
        "TTL" => session.ttl = r.str()?.to_string(),
        "NodeChecks" => session.node_checks = read_optional_list(r)?,
        "ServiceChecks" => session.service_checks = read_service_checks(r)?,
        "Checks" => session.checks = string_list(r)?.into_iter().map(str::to_string).collect(),
        "CreateIndex" => session.create_index = r.u64("CreateIndex")?,
        "ModifyIndex" => session.modify_index = r.u64("ModifyIndex")?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// A session with every field empty (the `release` behavior), to be filled in.
pub fn empty_session() -> Session {
    Session {
        id: Arc::from(""),
        name: String::new(),
        node: String::new(),
        lock_delay_ns: 0,
        behavior: Behavior::Release,
        ttl: String::new(),
        node_checks: None,
        service_checks: None,
        checks: Vec::new(),
        create_index: 0,
        modify_index: 0,
    }
}

/// `Session.Apply`'s request as a client agent sends it: `op` (`create` or `destroy`),
/// the session with its behavior as the caller wrote it, and the token; `datacenter` the
/// one it is applied in (empty: the server's own).
pub fn encode_apply(
    datacenter: &str,
    op: &str,
    session: &Session,
    behavior: &str,
    token: &str,
) -> Vec<u8> {
    let mut w = Writer::new();
    let mut f = Fields::new(&mut w, 4);
    f.field("Datacenter").str(datacenter);
    f.field("Op").str(op);
    write_session_as(f.field("Session"), session, behavior);
    f.field("Token").str(token);
    f.finish();
    w.into_inner()
}

/// An `IndexedSessions` reply: its `QueryMeta` and its sessions as the store's rows. A
/// behavior Consul does not know is refused: the server is not speaking Consul's RPC.
pub fn read_indexed_sessions(body: &[u8]) -> Result<(QueryMeta, Vec<Session>), WireError> {
    let mut sessions = Vec::new();
    let meta = read_reply(body, |name, r| {
        if name != "Sessions" {
            return Ok(false);
        }
        let count = r.array_len()?;
        sessions.reserve(count);
        for _ in 0..count {
            let mut session = empty_session();
            let mut behavior = String::new();
            each_field(r, |name, r| {
                session_field(&mut session, &mut behavior, name, r)
            })?;
            session.behavior = Behavior::parse(&behavior).ok_or(WireError::Invalid(
                "a session Behavior Consul does not know",
            ))?;
            sessions.push(session);
        }
        Ok(true)
    })?;
    Ok((meta, sessions))
}

/// Decodes `Session.Apply`'s request; a session without a node gets `default_node`
/// (the server's own, as a request from an agent always names its node).
pub fn decode_apply(body: &[u8], default_node: &str) -> Result<SessionRequest, String> {
    let mut request = SessionRequest {
        datacenter: String::new(),
        op: String::new(),
        session: empty_session(),
        behavior: String::new(),
        token: String::new(),
    };
    let mut token = "";
    each_field(&mut Reader::new(body), |name, r| {
        match name {
            "Datacenter" => request.datacenter = r.str()?.to_string(),
            "Op" => request.op = r.str()?.to_string(),
            "Session" => {
                each_field(r, |name, r| {
                    session_field(&mut request.session, &mut request.behavior, name, r)
                })?;
            }
            _ => return write_request_field(&mut token, name, r),
        }
        Ok(true)
    })
    .map_err(super::decode_error)?;
    request.token = token.to_string();
    let session = &mut request.session;
    if session.node.is_empty() && request.op == "create" {
        session.node = default_node.to_string();
    }
    session.check_limits()?;
    Ok(request)
}

/// `SessionSpecificRequest`: one session by ID (`SessionID`, or the deprecated `Session`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionSpecificRequest<'a> {
    pub datacenter: &'a str,
    pub session_id: &'a str,
    pub options: QueryOptions<'a>,
}

impl<'a> SessionSpecificRequest<'a> {
    /// The request as a client sends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options
            .write_request(&mut w, &["Datacenter", "SessionID"], |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                _ => w.str(self.session_id),
            });
        w.into_inner()
    }

    pub fn decode(body: &'a [u8]) -> Result<SessionSpecificRequest<'a>, WireError> {
        let mut request = SessionSpecificRequest::default();
        let mut deprecated = "";
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "SessionID" => request.session_id = r.str()?,
                "Session" => deprecated = r.str()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        if request.session_id.is_empty() {
            request.session_id = deprecated;
        }
        Ok(request)
    }
}

/// One `Session`.
pub fn write_session(w: &mut Writer, session: &Session) {
    write_session_as(w, session, session.behavior.as_str());
}

/// One `Session` with `behavior` as its `Behavior` text.
fn write_session_as(w: &mut Writer, session: &Session, behavior: &str) {
    let mut f = Fields::new(w, 11);
    f.field("Behavior").str(behavior);
    write_string_list(
        f.field("Checks"),
        session.checks.iter().map(String::as_str),
        true,
    );
    f.field("CreateIndex").uint(session.create_index);
    f.field("ID").str(&session.id);
    f.field("LockDelay").int(session.lock_delay_ns);
    f.field("ModifyIndex").uint(session.modify_index);
    f.field("Name").str(&session.name);
    f.field("Node").str(&session.node);
    match &session.node_checks {
        Some(checks) => write_string_list(
            f.field("NodeChecks"),
            checks.iter().map(String::as_str),
            false,
        ),
        None => f.field("NodeChecks").nil(),
    }
    {
        let w = f.field("ServiceChecks");
        match &session.service_checks {
            None => w.nil(),
            Some(checks) => {
                w.array_len(checks.len());
                for check in checks {
                    let mut c = Fields::new(w, 2);
                    c.field("ID").str(&check.id);
                    c.field("Namespace").str(&check.namespace);
                    c.finish();
                }
            }
        }
    }
    f.field("TTL").str(&session.ttl);
    f.finish();
}

/// `Sessions`; nil when empty.
pub fn write_sessions<'s>(w: &mut Writer, sessions: impl ExactSizeIterator<Item = &'s Session>) {
    if sessions.len() == 0 {
        w.nil();
        return;
    }
    w.array_len(sessions.len());
    for session in sessions {
        write_session(w, session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_decodes_as_sent_with_the_node_defaulted() {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 3);
        f.field("Op").str("create");
        {
            let w = f.field("Session");
            let mut s = Fields::new(w, 4);
            s.field("Behavior").str("delete");
            s.field("LockDelay").int(5_000_000_000);
            s.field("NodeChecks").nil();
            s.field("TTL").str("30s");
            s.finish();
        }
        f.field("Token").str("t");
        f.finish();
        let request = decode_apply(&w.buf, "server-1").unwrap();
        assert_eq!(request.op, "create");
        assert_eq!(request.behavior, "delete");
        assert_eq!(request.session.node, "server-1");
        assert_eq!(request.session.lock_delay_ns, 5_000_000_000);
        assert_eq!(request.session.node_checks, None);
        assert_eq!(request.token, "t");
        let mut out = Writer::new();
        write_session(&mut out, &request.session);
        let mut names = Vec::new();
        each_field(&mut Reader::new(&out.buf), |name, _| {
            names.push(name);
            Ok(false)
        })
        .unwrap();
        assert_eq!(names.len(), 11);
    }
}
