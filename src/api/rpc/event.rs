//! A user event fired in another datacenter (`PUT /v1/event/fire/<name>?dc=<other>`) as
//! Consul's agent fires it: `Internal.EventFire` naming that datacenter, with the event's
//! name and the envelope this agent built (`consul::user_event`) as its payload. This
//! agent's server (or this server, through the WAN router) hands the call to a server
//! there, which broadcasts the event in its own datacenter's LAN pool
//! (`api::rpc::internal::event_fire`); the answer is the event as this agent built it, as
//! the local fire answers.

use super::client::{call, CALL_TIMEOUT};
use crate::api::authz::request_secret;
use crate::api::{Context, Outcome, Request};
use crate::cluster::servers::Retry;
use crate::consul::rpc::QueryOptions as RpcQueryOptions;
use crate::consul::user_event::ConsulEvent;

/// `EventFireRequest` as Consul's agent sends it: any server may broadcast, so the call
/// allows stale reads (as Consul's agent sets `AllowStale`).
fn encode_fire(datacenter: &str, name: &str, payload: &[u8], token: &str) -> Vec<u8> {
    let options = RpcQueryOptions {
        token,
        allow_stale: true,
        ..RpcQueryOptions::default()
    };
    let mut w = crate::proto::msgpack::Writer::new();
    options.write_request(
        &mut w,
        &["Datacenter", "Name", "Payload"],
        |field, w| match field {
            "Datacenter" => w.str(datacenter),
            "Name" => w.str(name),
            _ => w.bytes(payload),
        },
    );
    w.into_inner()
}

/// Fires `event` in `datacenter`: `Internal.EventFire` naming it, sent once (a broadcast
/// that may have happened is not repeated); answered with the event as a local fire is.
pub fn fire_in(ctx: &Context, request: &Request, event: ConsulEvent, datacenter: &str) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = encode_fire(datacenter, &event.name, &event.encode(), &secret);
    call(
        ctx,
        datacenter,
        "Internal.EventFire",
        body,
        CALL_TIMEOUT,
        Retry::NotSent,
        move |_, reply| {
            reply.json(200, b"", &event.to_json());
            Ok(())
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consul::rpc::internal::EventFireRequest;

    #[test]
    fn an_event_fire_request_reads_back_as_the_server_decodes_it() {
        let body = encode_fire("dc2", "deploy", b"envelope", "secret");
        let request = EventFireRequest::decode(&body).unwrap();
        assert_eq!(request.datacenter, "dc2");
        assert_eq!(request.name, "deploy");
        assert_eq!(request.payload, Some(&b"envelope"[..]));
        assert_eq!(request.options.token, "secret");
        assert!(request.options.allow_stale);
    }
}
