//! The peer stream's decisions, without sockets or clocks: what one side of an open stream
//! sends and concludes on each message, on each tick of time, when its own peering is
//! deleted and when what it exports changed ([`Session`]); what this cluster exports to a
//! peer ([`exports_for`]); whether an acceptor admits an `Open` ([`admit`]); how long a
//! dialer waits before dialing again ([`redial_delay`]); and the peering row a state
//! change writes ([`with_state`]). Times are milliseconds given by the caller.
//!
//! Replication follows Consul's peer stream: each side subscribes to the resource types it
//! imports (a `Request` with a `ResourceURL` and no nonce, [`Session::subscriptions`]); the
//! other side then sends each exported service as an `ExportedService` (`UPSERT`, keyed by
//! the service name in `ResourceID`; no instances when the service is no longer exported or
//! has none) and the list of names as an `ExportedServiceList`, and sends again whatever
//! changes; the receiver answers each `Response` with an ACK (`Request` with its nonce) or
//! a NACK (the same with an `Error`).
//!
//! Invariants: a session sends a heartbeat whenever [`Timing::heartbeat_interval`] passed
//! since it last sent anything, and fails once [`Timing::heartbeat_timeout`] passed since
//! it last received anything; after `Terminated` (sent or received) it decides nothing
//! more; it sends a resource only for a type the peer subscribed to, and a service's
//! resource only when its encoding differs from the one last sent on this stream.

use super::messages::{
    AnyResource, Open, Payload, ReplicationMessage, ResourceRequest, ResourceResponse, RpcStatus,
};
use super::pbservice::{
    self, ExportedService, ExportedServiceList, EXPORTED_SERVICE_LIST_ID,
    EXPORTED_SERVICE_LIST_URL, EXPORTED_SERVICE_URL,
};
use crate::store::peering::{self, ImportedInstance, Peering, PeeringState};
use crate::store::{Table, Tables};
use prost::Message;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// Consul's `Operation` for a created or updated resource.
pub const OPERATION_UPSERT: i32 = 1;
/// gRPC's `INVALID_ARGUMENT`, the code of a NACK for a resource that could not be applied.
const NACK_CODE: i32 = 3;

/// How often a side sends a heartbeat (Consul's `defaultOutgoingHeartbeatInterval`).
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(15);
/// How long a side waits for any message before it calls the stream broken (Consul's
/// `defaultIncomingHeartbeatTimeout`).
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(120);
/// The first wait before dialing again after a failure; it doubles with each failure in a
/// row up to [`REDIAL_DELAY_MAX`] (Consul's peering retry backoff: 2^n seconds, at most 64).
pub const REDIAL_DELAY_MIN: Duration = Duration::from_secs(1);
pub const REDIAL_DELAY_MAX: Duration = Duration::from_secs(64);

/// The heartbeat settings of one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub heartbeat_interval: Duration,
    pub heartbeat_timeout: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            heartbeat_interval: HEARTBEAT_INTERVAL,
            heartbeat_timeout: HEARTBEAT_TIMEOUT,
        }
    }
}

/// What a session concluded.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Send this message to the other side.
    Send(ReplicationMessage),
    /// A heartbeat arrived (the peering's `LastHeartbeat`).
    HeartbeatReceived,
    /// The other side deleted the peering: mark it `TERMINATED` here and end the stream.
    PeerTerminated,
    /// This side's peering was deleted and `Terminated` is on its way: end the stream.
    LocallyDeleted,
    /// The stream is broken (the peering becomes `FAILING`), for this reason.
    Fail(String),
    /// The peer exports these instances of `service` now (none: it no longer does): write
    /// them, then answer `nonce` on `url` with an ACK, or a NACK if the write is refused.
    Import {
        url: String,
        nonce: String,
        service: String,
        instances: Vec<ImportedInstance>,
    },
    /// The peer exports exactly these services now: drop the imports of any other, then
    /// answer as for [`Step::Import`].
    ImportList {
        url: String,
        nonce: String,
        services: Vec<String>,
    },
    /// The peer refused a resource this side sent (logged; the next change sends again).
    Nacked { url: String, reason: String },
}

/// The ACK of response `nonce` on `url`.
pub fn ack(url: &str, nonce: &str) -> ReplicationMessage {
    ReplicationMessage::of(Payload::Request(ResourceRequest {
        peer_id: String::new(),
        response_nonce: nonce.to_string(),
        resource_url: url.to_string(),
        error: None,
    }))
}

/// The NACK of response `nonce` on `url`, for `reason`.
pub fn nack(url: &str, nonce: &str, reason: &str) -> ReplicationMessage {
    ReplicationMessage::of(Payload::Request(ResourceRequest {
        peer_id: String::new(),
        response_nonce: nonce.to_string(),
        resource_url: url.to_string(),
        error: Some(RpcStatus {
            code: NACK_CODE,
            message: reason.to_string(),
        }),
    }))
}

/// What the exporting half of a session sent, to send only what changed.
#[derive(Debug, Default)]
struct Exported {
    /// The resource types the peer subscribed to.
    subscribed: BTreeSet<String>,
    /// Service name → the `ExportedService` bytes last sent.
    services: BTreeMap<String, Vec<u8>>,
    /// The exported-service list last sent.
    list: Option<Vec<String>>,
    /// The number in the next response's nonce.
    next_nonce: u64,
}

/// What this cluster exports to the peering it calls `peer_name`: every service the
/// `exported-services` entry names for it (a wildcard stands for every typical service, as
/// `GET /v1/exported-services` resolves it), each with its instances and their node and
/// checks (node checks first).
pub fn exports_for(tables: &Tables, peer_name: &str) -> BTreeMap<String, ExportedService> {
    crate::api::peering::services_exported_to(tables, peer_name)
        .into_iter()
        .map(|service| {
            let nodes = crate::store::catalog::read::check_service_nodes(tables, &service)
                .into_iter()
                .map(|row| {
                    pbservice::check_service_node(row.node, row.service, row.checks().map(|c| &**c))
                })
                .collect();
            (service, ExportedService { nodes })
        })
        .collect()
}

/// The store indexes [`exports_for`] depends on: when none moved, the exports did not.
pub fn exports_version(tables: &Tables) -> u64 {
    tables.max_table_index(&[
        Table::Nodes,
        Table::Services,
        Table::Checks,
        Table::ConfigEntries,
        Table::Peerings,
    ])
}

/// One side of an open stream.
#[derive(Debug)]
pub struct Session {
    timing: Timing,
    last_sent_ms: u64,
    last_received_ms: u64,
    ended: bool,
    exported: Exported,
}

impl Session {
    /// A session opened at `now_ms` (the `Open` just went one way or the other).
    pub fn new(timing: Timing, now_ms: u64) -> Session {
        Session {
            timing,
            last_sent_ms: now_ms,
            last_received_ms: now_ms,
            ended: false,
            exported: Exported::default(),
        }
    }

    /// The subscriptions a side sends when the stream opens: the resource types it imports.
    pub fn subscriptions() -> Vec<ReplicationMessage> {
        [EXPORTED_SERVICE_URL, EXPORTED_SERVICE_LIST_URL]
            .into_iter()
            .map(|url| {
                ReplicationMessage::of(Payload::Request(ResourceRequest {
                    resource_url: url.to_string(),
                    ..Default::default()
                }))
            })
            .collect()
    }

    /// How many resource types the peer subscribed to (a new one means everything is due).
    pub fn subscription_count(&self) -> usize {
        self.exported.subscribed.len()
    }

    fn response(&mut self, url: &str, id: &str, bytes: Vec<u8>) -> Step {
        self.exported.next_nonce += 1;
        Step::Send(ReplicationMessage::of(Payload::Response(
            ResourceResponse {
                nonce: format!("{:x}", self.exported.next_nonce),
                resource_url: url.to_string(),
                resource_id: id.to_string(),
                resource: Some(AnyResource {
                    type_url: url.to_string(),
                    value: bytes,
                }),
                operation: OPERATION_UPSERT,
            },
        )))
    }

    /// What this side exports now (from [`exports_for`]): the resources that differ from
    /// what was sent, for the types the peer subscribed to — changed services, an empty one
    /// for each service no longer exported, then the list of names if it changed.
    pub fn on_exports(&mut self, desired: &BTreeMap<String, ExportedService>) -> Vec<Step> {
        if self.ended {
            return Vec::new();
        }
        let mut steps = Vec::new();
        if self.exported.subscribed.contains(EXPORTED_SERVICE_URL) {
            for (name, service) in desired {
                let bytes = service.encode_to_vec();
                if self.exported.services.get(name) != Some(&bytes) {
                    self.exported.services.insert(name.clone(), bytes.clone());
                    steps.push(self.response(EXPORTED_SERVICE_URL, name, bytes));
                }
            }
            let gone: Vec<String> = self
                .exported
                .services
                .keys()
                .filter(|name| !desired.contains_key(*name))
                .cloned()
                .collect();
            for name in gone {
                self.exported.services.remove(&name);
                steps.push(self.response(EXPORTED_SERVICE_URL, &name, Vec::new()));
            }
        }
        if self.exported.subscribed.contains(EXPORTED_SERVICE_LIST_URL) {
            let names: Vec<String> = desired.keys().cloned().collect();
            if self.exported.list.as_ref() != Some(&names) {
                let bytes = ExportedServiceList {
                    services: names.clone(),
                }
                .encode_to_vec();
                self.exported.list = Some(names);
                steps.push(self.response(
                    EXPORTED_SERVICE_LIST_URL,
                    EXPORTED_SERVICE_LIST_ID,
                    bytes,
                ));
            }
        }
        steps
    }

    /// A subscription, ACK or NACK from the peer.
    fn on_request(&mut self, request: ResourceRequest) -> Vec<Step> {
        if let Some(error) = request.error {
            return vec![Step::Nacked {
                url: request.resource_url,
                reason: error.message,
            }];
        }
        let ours = [EXPORTED_SERVICE_URL, EXPORTED_SERVICE_LIST_URL];
        if request.response_nonce.is_empty() && ours.contains(&request.resource_url.as_str()) {
            // A new subscription (again after a redial on the same session is harmless):
            // everything of that type is due.
            if self
                .exported
                .subscribed
                .insert(request.resource_url.clone())
            {
                if request.resource_url == EXPORTED_SERVICE_URL {
                    self.exported.services.clear();
                } else {
                    self.exported.list = None;
                }
            }
        }
        Vec::new()
    }

    /// A resource from the peer: what to import, or a NACK for what cannot be.
    fn on_response(&mut self, response: ResourceResponse) -> Vec<Step> {
        let url = response.resource_url;
        let nonce = response.nonce;
        let value = response.resource.map(|r| r.value).unwrap_or_default();
        match url.as_str() {
            EXPORTED_SERVICE_URL => {
                let service = response.resource_id;
                let decoded = ExportedService::decode(&value[..])
                    .map_err(|e| format!("decoding ExportedService: {e}"))
                    .and_then(|list| {
                        list.nodes
                            .into_iter()
                            .map(|row| pbservice::imported_instance(row, &service))
                            .collect::<Result<Vec<_>, String>>()
                    });
                match decoded {
                    Ok(_) if service.is_empty() => {
                        vec![Step::Send(nack(&url, &nonce, "ResourceID is required"))]
                    }
                    Ok(instances) => vec![Step::Import {
                        url,
                        nonce,
                        service,
                        instances,
                    }],
                    Err(reason) => vec![Step::Send(nack(&url, &nonce, &reason))],
                }
            }
            EXPORTED_SERVICE_LIST_URL => match ExportedServiceList::decode(&value[..]) {
                Ok(list) => vec![Step::ImportList {
                    url,
                    nonce,
                    services: list.services,
                }],
                Err(e) => {
                    let reason = format!("decoding ExportedServiceList: {e}");
                    vec![Step::Send(nack(&url, &nonce, &reason))]
                }
            },
            // A type this side never subscribed to (trust bundles, server addresses).
            other => {
                let reason = format!("resource type {other:?} is not supported");
                vec![Step::Send(nack(&url, &nonce, &reason))]
            }
        }
    }

    fn interval_ms(&self) -> u64 {
        self.timing.heartbeat_interval.as_millis() as u64
    }

    fn timeout_ms(&self) -> u64 {
        self.timing.heartbeat_timeout.as_millis() as u64
    }

    /// When [`Session::on_tick`] next has something to do.
    pub fn next_deadline_ms(&self) -> u64 {
        (self.last_sent_ms + self.interval_ms()).min(self.last_received_ms + self.timeout_ms())
    }

    /// Whether the session decided it is over.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// A message from the other side.
    pub fn on_message(&mut self, message: ReplicationMessage, now_ms: u64) -> Vec<Step> {
        if self.ended {
            return Vec::new();
        }
        self.last_received_ms = now_ms;
        match message.payload {
            Some(Payload::Heartbeat(_)) => vec![Step::HeartbeatReceived],
            Some(Payload::Terminated(_)) => {
                self.ended = true;
                vec![Step::PeerTerminated]
            }
            Some(Payload::Open(_)) => {
                self.ended = true;
                vec![Step::Fail(
                    "the peer sent Open on a stream that is already open".to_string(),
                )]
            }
            Some(Payload::Request(request)) => self.on_request(request),
            Some(Payload::Response(response)) => self.on_response(response),
            None => Vec::new(),
        }
    }

    /// Time passed: a heartbeat due, or the other side silent for too long.
    pub fn on_tick(&mut self, now_ms: u64) -> Vec<Step> {
        if self.ended {
            return Vec::new();
        }
        if now_ms.saturating_sub(self.last_received_ms) >= self.timeout_ms() {
            self.ended = true;
            return vec![Step::Fail(format!(
                "no message from the peer for {} s",
                self.timing.heartbeat_timeout.as_secs()
            ))];
        }
        if now_ms.saturating_sub(self.last_sent_ms) >= self.interval_ms() {
            self.last_sent_ms = now_ms;
            return vec![Step::Send(ReplicationMessage::heartbeat())];
        }
        Vec::new()
    }

    /// Anything went out at `now_ms` (a heartbeat is due only after a quiet interval).
    pub fn sent(&mut self, now_ms: u64) {
        self.last_sent_ms = self.last_sent_ms.max(now_ms);
    }

    /// This side's peering was deleted (or marked for deletion): tell the other side.
    pub fn on_local_delete(&mut self) -> Vec<Step> {
        if self.ended {
            return Vec::new();
        }
        self.ended = true;
        vec![
            Step::Send(ReplicationMessage::terminated()),
            Step::LocallyDeleted,
        ]
    }
}

/// Whether the peering with local ID `id` should still stream: it exists, is not marked
/// for deletion and was not terminated by the peer.
pub fn still_wanted(tables: &Tables, id: &str) -> bool {
    peering::get_by_id(tables, id).is_some_and(|p| p.is_active())
}

/// Why an acceptor refuses an `Open`: a gRPC code and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    InvalidArgument(String),
    NotFound(String),
    PermissionDenied(String),
}

/// An admitted `Open`.
#[derive(Clone, Debug, PartialEq)]
pub struct Admission {
    pub peering: Arc<Peering>,
    /// The pending stream secret the dialer used for the first time: it becomes the
    /// active one (a Raft write before the stream counts as open).
    pub promote: Option<String>,
}

/// Whether the acceptor side of `tables` admits `open`: it names a peering this cluster
/// accepted (a row with no `PeerID` of its own, not deleted) and that peering's active or
/// pending stream secret.
pub fn admit(tables: &Tables, open: &Open) -> Result<Admission, Refusal> {
    if open.peer_id.is_empty() {
        return Err(Refusal::InvalidArgument(
            "the Open message must name a PeerID".to_string(),
        ));
    }
    let Some(row) = peering::get_by_id(tables, &open.peer_id) else {
        return Err(Refusal::NotFound(format!(
            "no peering with ID {:?}",
            open.peer_id
        )));
    };
    if !row.is_active() {
        return Err(Refusal::NotFound(format!(
            "the peering with ID {:?} was deleted",
            open.peer_id
        )));
    }
    if row.should_dial() {
        return Err(Refusal::InvalidArgument(format!(
            "the peering with ID {:?} is dialed by this cluster, not accepted",
            open.peer_id
        )));
    }
    let secrets = peering::secrets(tables, &row.id);
    let given = open.stream_secret_id.as_str();
    let active = secrets.and_then(|s| s.active_stream_secret.as_deref());
    let pending = secrets.and_then(|s| s.pending_stream_secret.as_deref());
    if !given.is_empty() && active == Some(given) {
        return Ok(Admission {
            peering: row.clone(),
            promote: None,
        });
    }
    if !given.is_empty() && pending == Some(given) {
        return Ok(Admission {
            peering: row.clone(),
            promote: Some(given.to_string()),
        });
    }
    Err(Refusal::PermissionDenied(
        "invalid peering stream secret".to_string(),
    ))
}

/// How long a dialer waits before its next attempt after `failures` failed ones in a row
/// (the first wait follows one failure).
pub fn redial_delay(failures: u32) -> Duration {
    let shift = failures.saturating_sub(1).min(16);
    (REDIAL_DELAY_MIN * (1u32 << shift)).min(REDIAL_DELAY_MAX)
}

/// What the stream reports about a peering, to merge into its row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusUpdate {
    pub last_heartbeat: Option<String>,
    pub last_receive: Option<String>,
    pub last_send: Option<String>,
    /// The other side's datacenter and partition, as its `Open` named them.
    pub remote: Option<(String, String)>,
}

/// `row` in `state` with `update` merged, or `None` when the write would say nothing new
/// or the row must not be written (marked for deletion, or already terminated: a stream
/// ending after `Terminated` does not make it `FAILING`).
pub fn with_state(row: &Peering, state: PeeringState, update: &StatusUpdate) -> Option<Peering> {
    if !row.is_active() {
        return None;
    }
    let mut next = row.clone();
    next.state = state;
    let status = &mut next.stream_status;
    for (field, value) in [
        (&mut status.last_heartbeat, &update.last_heartbeat),
        (&mut status.last_receive, &update.last_receive),
        (&mut status.last_send, &update.last_send),
    ] {
        if value.is_some() {
            field.clone_from(value);
        }
    }
    if let Some((datacenter, partition)) = &update.remote {
        if !datacenter.is_empty() {
            next.remote.datacenter.clone_from(datacenter);
            next.remote.partition.clone_from(partition);
        }
    }
    (next != *row).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::peering::{PeeringOp, SecretsOp};
    use crate::store::{Command, CommandResult};

    const TIMING: Timing = Timing {
        heartbeat_interval: Duration::from_secs(15),
        heartbeat_timeout: Duration::from_secs(120),
    };

    #[test]
    fn heartbeats_go_out_every_interval_of_silence() {
        let mut session = Session::new(TIMING, 0);
        assert_eq!(session.next_deadline_ms(), 15_000);
        assert!(session.on_tick(14_999).is_empty());
        assert_eq!(
            session.on_tick(15_000),
            vec![Step::Send(ReplicationMessage::heartbeat())]
        );
        // Something else went out at 20 s: the next heartbeat waits a full interval.
        session.sent(20_000);
        assert!(session.on_tick(34_999).is_empty());
        assert_eq!(session.next_deadline_ms(), 35_000);
        assert_eq!(
            session.on_tick(35_000),
            vec![Step::Send(ReplicationMessage::heartbeat())]
        );
    }

    #[test]
    fn a_silent_peer_fails_the_stream_after_the_timeout_and_any_message_resets_it() {
        let mut session = Session::new(TIMING, 0);
        assert_eq!(
            session.on_message(ReplicationMessage::heartbeat(), 100_000),
            vec![Step::HeartbeatReceived]
        );
        // Sending does not count as hearing from the peer.
        for now in [
            115_000, 130_000, 145_000, 160_000, 175_000, 190_000, 205_000,
        ] {
            assert_eq!(
                session.on_tick(now),
                vec![Step::Send(ReplicationMessage::heartbeat())]
            );
        }
        assert!(session.on_tick(219_999).is_empty());
        let steps = session.on_tick(220_000);
        assert!(matches!(&steps[..], [Step::Fail(reason)] if reason.contains("120 s")));
        assert!(session.ended());
        assert!(session.on_tick(300_000).is_empty());
    }

    #[test]
    fn terminated_ends_the_session_either_way() {
        let mut session = Session::new(TIMING, 0);
        assert_eq!(
            session.on_message(ReplicationMessage::terminated(), 5),
            vec![Step::PeerTerminated]
        );
        assert!(session.on_local_delete().is_empty());

        let mut session = Session::new(TIMING, 0);
        assert_eq!(
            session.on_local_delete(),
            vec![
                Step::Send(ReplicationMessage::terminated()),
                Step::LocallyDeleted
            ]
        );
        assert!(session
            .on_message(ReplicationMessage::heartbeat(), 10)
            .is_empty());
    }

    #[test]
    fn a_second_open_fails_and_resources_are_left_alone() {
        let mut session = Session::new(TIMING, 0);
        let request = ReplicationMessage::of(Payload::Request(Default::default()));
        assert!(session.on_message(request, 1).is_empty());
        let open = ReplicationMessage::of(Payload::Open(Default::default()));
        assert!(matches!(&session.on_message(open, 2)[..], [Step::Fail(_)]));
    }

    fn subscribed() -> Session {
        let mut session = Session::new(TIMING, 0);
        for message in Session::subscriptions() {
            assert!(session.on_message(message, 1).is_empty());
        }
        assert_eq!(session.subscription_count(), 2);
        session
    }

    fn one_node(name: &str) -> ExportedService {
        ExportedService {
            nodes: vec![pbservice::CheckServiceNode {
                node: Some(pbservice::PbNode {
                    node: name.into(),
                    ..Default::default()
                }),
                service: Some(pbservice::PbNodeService {
                    id: "web-1".into(),
                    service: "web".into(),
                    ..Default::default()
                }),
                checks: Vec::new(),
            }],
        }
    }

    /// The responses among `steps`: (URL, resource ID, decoded payload bytes).
    fn responses(steps: &[Step]) -> Vec<(String, String, Vec<u8>)> {
        steps
            .iter()
            .map(|step| match step {
                Step::Send(ReplicationMessage {
                    payload: Some(Payload::Response(r)),
                }) => {
                    assert_eq!(r.operation, OPERATION_UPSERT);
                    assert!(!r.nonce.is_empty());
                    let any = r.resource.clone().unwrap();
                    assert_eq!(any.type_url, r.resource_url);
                    (r.resource_url.clone(), r.resource_id.clone(), any.value)
                }
                other => panic!("not a response: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn exports_go_out_once_subscribed_and_again_only_when_they_change() {
        let mut desired = BTreeMap::new();
        desired.insert("web".to_string(), one_node("n1"));
        let mut session = Session::new(TIMING, 0);
        assert!(
            session.on_exports(&desired).is_empty(),
            "nothing before the peer subscribes"
        );
        let mut session = subscribed();
        let sent = responses(&session.on_exports(&desired));
        assert_eq!(
            sent,
            vec![
                (
                    EXPORTED_SERVICE_URL.to_string(),
                    "web".to_string(),
                    one_node("n1").encode_to_vec()
                ),
                (
                    EXPORTED_SERVICE_LIST_URL.to_string(),
                    EXPORTED_SERVICE_LIST_ID.to_string(),
                    ExportedServiceList {
                        services: vec!["web".into()]
                    }
                    .encode_to_vec()
                ),
            ]
        );
        assert!(session.on_exports(&desired).is_empty(), "nothing changed");
        // An instance moved: that service alone goes out again.
        desired.insert("web".to_string(), one_node("n2"));
        let sent = responses(&session.on_exports(&desired));
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].2, one_node("n2").encode_to_vec());
        // No longer exported: an empty resource, then the list without it.
        desired.clear();
        let sent = responses(&session.on_exports(&desired));
        assert_eq!(
            sent,
            vec![
                (
                    EXPORTED_SERVICE_URL.to_string(),
                    "web".to_string(),
                    Vec::new()
                ),
                (
                    EXPORTED_SERVICE_LIST_URL.to_string(),
                    EXPORTED_SERVICE_LIST_ID.to_string(),
                    Vec::new()
                ),
            ]
        );
        // Ended sessions send nothing.
        session.on_local_delete();
        desired.insert("web".to_string(), one_node("n1"));
        assert!(session.on_exports(&desired).is_empty());
    }

    /// A catalog with `web` (a passing check) and `api` on node `n1`, and an
    /// `exported-services` entry from `entry`'s `Services`.
    fn catalog_exporting(services: &str) -> Tables {
        use crate::store::catalog::{
            CatalogOp, CheckRegistration, Registration, ServiceRegistration,
        };
        use crate::store::mesh::config_entry::ConfigEntryOp;
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        for (index, (service, checks)) in [("web", vec!["web-ok"]), ("api", vec![])]
            .into_iter()
            .enumerate()
        {
            let registration = Registration {
                node: "n1".into(),
                address: "10.0.0.1".into(),
                service: Some(ServiceRegistration {
                    id: service.into(),
                    name: service.into(),
                    port: 80,
                    ..Default::default()
                }),
                checks: checks
                    .into_iter()
                    .map(|id| CheckRegistration {
                        check_id: id.into(),
                        name: id.into(),
                        status: "passing".into(),
                        service_id: service.into(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            };
            let command = Command::Catalog(CatalogOp::Register(Box::new(registration)));
            tables.apply(index as u64 + 1, &command, &mut changes);
        }
        let body =
            format!(r#"{{"Kind":"exported-services","Name":"default","Services":{services}}}"#);
        let entry = crate::consul::config_entry::decode_body(body.as_bytes()).unwrap();
        let command = Command::ConfigEntry(ConfigEntryOp::Set {
            entry: Box::new(entry),
            cas: None,
        });
        assert_eq!(
            tables.apply(5, &command, &mut changes),
            CommandResult::Bool(true)
        );
        tables
    }

    #[test]
    fn a_peer_is_sent_what_the_entry_exports_to_it_with_instances_and_checks() {
        let tables = catalog_exporting(
            r#"[{"Name":"web","Consumers":[{"Peer":"other"}]},{"Name":"api","Consumers":[{"Peer":"third"}]}]"#,
        );
        let exports = exports_for(&tables, "Other");
        assert_eq!(exports.keys().collect::<Vec<_>>(), ["web"]);
        let nodes = &exports["web"].nodes;
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].node.as_ref().unwrap().node, "n1");
        assert_eq!(nodes[0].service.as_ref().unwrap().id, "web");
        let checks: Vec<(&str, &str)> = nodes[0]
            .checks
            .iter()
            .map(|c| (c.check_id.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(checks, [("web-ok", "passing")]);
        assert!(exports_for(&tables, "nobody").is_empty());
        // A wildcard exports every typical service.
        let tables = catalog_exporting(r#"[{"Name":"*","Consumers":[{"Peer":"other"}]}]"#);
        let exports = exports_for(&tables, "other");
        assert_eq!(exports.keys().collect::<Vec<_>>(), ["api", "web"]);
        assert!(exports["api"].nodes[0].checks.is_empty());
    }

    fn response(url: &str, id: &str, value: Vec<u8>) -> ReplicationMessage {
        ReplicationMessage::of(Payload::Response(ResourceResponse {
            nonce: "7".into(),
            resource_url: url.into(),
            resource_id: id.into(),
            resource: Some(AnyResource {
                type_url: url.into(),
                value,
            }),
            operation: OPERATION_UPSERT,
        }))
    }

    #[test]
    fn received_resources_are_imported_and_what_cannot_be_is_nacked() {
        let mut session = Session::new(TIMING, 0);
        let steps = session.on_message(
            response(EXPORTED_SERVICE_URL, "web", one_node("n1").encode_to_vec()),
            1,
        );
        match &steps[..] {
            [Step::Import {
                url,
                nonce,
                service,
                instances,
            }] => {
                assert_eq!((url.as_str(), nonce.as_str()), (EXPORTED_SERVICE_URL, "7"));
                assert_eq!(service, "web");
                assert_eq!(instances.len(), 1);
                assert_eq!(&*instances[0].node.name, "n1");
            }
            other => panic!("{other:?}"),
        }
        let list = ExportedServiceList {
            services: vec!["web".into()],
        };
        assert_eq!(
            session.on_message(
                response(EXPORTED_SERVICE_LIST_URL, "x", list.encode_to_vec()),
                2
            ),
            vec![Step::ImportList {
                url: EXPORTED_SERVICE_LIST_URL.into(),
                nonce: "7".into(),
                services: vec!["web".into()],
            }]
        );
        // Garbage, an instance of another service, an unknown type: NACKs with reasons.
        for (message, why) in [
            (
                response(EXPORTED_SERVICE_URL, "web", vec![0x0a, 9, 1]),
                "decoding",
            ),
            (
                response(EXPORTED_SERVICE_URL, "api", one_node("n1").encode_to_vec()),
                "in the resource of",
            ),
            (
                response("type.googleapis.com/other", "x", Vec::new()),
                "not supported",
            ),
        ] {
            let steps = session.on_message(message, 3);
            match &steps[..] {
                [Step::Send(ReplicationMessage {
                    payload: Some(Payload::Request(r)),
                })] => {
                    assert_eq!(r.response_nonce, "7");
                    let error = r.error.as_ref().expect("a NACK");
                    assert!(error.message.contains(why), "{}", error.message);
                }
                other => panic!("{other:?}"),
            }
        }
        // A NACK of what this side sent is reported.
        let refused = nack(EXPORTED_SERVICE_URL, "3", "too many");
        assert_eq!(
            session.on_message(refused, 4),
            vec![Step::Nacked {
                url: EXPORTED_SERVICE_URL.into(),
                reason: "too many".into(),
            }]
        );
        assert_eq!(
            ack(EXPORTED_SERVICE_URL, "3")
                .payload
                .map(|p| matches!(p, Payload::Request(ResourceRequest { error: None, .. }))),
            Some(true)
        );
    }

    #[test]
    fn redials_back_off_from_one_second_to_sixty_four() {
        let waits: Vec<u64> = (1..=9).map(|n| redial_delay(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 64, 64]);
        assert_eq!(redial_delay(u32::MAX), REDIAL_DELAY_MAX);
        assert_eq!(redial_delay(0), REDIAL_DELAY_MIN);
    }

    fn apply(tables: &mut Tables, index: u64, op: PeeringOp) {
        let mut changes = Vec::new();
        let result = tables.apply(index, &Command::Peering(op), &mut changes);
        assert_eq!(result, CommandResult::Bool(true));
    }

    /// An acceptor's peering `p1` whose token was exchanged for the pending secret `s1`.
    fn exchanged() -> Tables {
        let mut tables = Tables::default();
        let row = Peering {
            id: "p1".into(),
            name: "other".into(),
            ..Default::default()
        };
        apply(
            &mut tables,
            1,
            PeeringOp::Write {
                peering: Box::new(row.clone()),
                secrets: Some(SecretsOp::GenerateToken {
                    establishment_secret: "e1".into(),
                }),
            },
        );
        apply(
            &mut tables,
            2,
            PeeringOp::Write {
                peering: Box::new(row),
                secrets: Some(SecretsOp::ExchangeSecret {
                    establishment_secret: "e1".into(),
                    pending_stream_secret: "s1".into(),
                }),
            },
        );
        tables
    }

    fn open(peer_id: &str, secret: &str) -> Open {
        Open {
            peer_id: peer_id.into(),
            stream_secret_id: secret.into(),
            remote: None,
        }
    }

    #[test]
    fn the_pending_secret_is_promoted_once_and_the_active_one_admits_after() {
        let mut tables = exchanged();
        let admitted = admit(&tables, &open("p1", "s1")).unwrap();
        assert_eq!(admitted.promote.as_deref(), Some("s1"));
        apply(
            &mut tables,
            3,
            PeeringOp::Write {
                peering: Box::new((*admitted.peering).clone()),
                secrets: Some(SecretsOp::PromotePending {
                    active_stream_secret: "s1".into(),
                }),
            },
        );
        let again = admit(&tables, &open("p1", "s1")).unwrap();
        assert_eq!(again.promote, None);
    }

    #[test]
    fn unknown_peers_wrong_secrets_and_dialed_peerings_are_refused() {
        let tables = exchanged();
        assert!(matches!(
            admit(&tables, &open("", "s1")),
            Err(Refusal::InvalidArgument(_))
        ));
        assert!(matches!(
            admit(&tables, &open("nope", "s1")),
            Err(Refusal::NotFound(_))
        ));
        for secret in ["", "e1", "wrong"] {
            assert_eq!(
                admit(&tables, &open("p1", secret)),
                Err(Refusal::PermissionDenied(
                    "invalid peering stream secret".into()
                ))
            );
        }
        let mut tables = tables;
        let dialed = Peering {
            id: "d1".into(),
            name: "dialed".into(),
            peer_server_addresses: vec!["127.0.0.1:8503".into()],
            ..Default::default()
        };
        apply(
            &mut tables,
            3,
            PeeringOp::Write {
                peering: Box::new(dialed),
                secrets: Some(SecretsOp::Establish {
                    active_stream_secret: "x".into(),
                }),
            },
        );
        assert!(matches!(
            admit(&tables, &open("d1", "x")),
            Err(Refusal::InvalidArgument(_))
        ));
    }

    #[test]
    fn a_state_write_merges_the_status_and_skips_deleted_or_unchanged_rows() {
        let row = Peering {
            id: "p1".into(),
            name: "other".into(),
            state: PeeringState::Pending,
            ..Default::default()
        };
        let update = StatusUpdate {
            last_receive: Some("2026-01-01T00:00:00Z".into()),
            remote: Some(("dc2".into(), "default".into())),
            ..Default::default()
        };
        let next = with_state(&row, PeeringState::Active, &update).unwrap();
        assert_eq!(next.state, PeeringState::Active);
        assert_eq!(next.remote.datacenter, "dc2");
        assert_eq!(
            next.stream_status.last_receive.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(with_state(&next, PeeringState::Active, &update), None);
        let deleting = Peering {
            state: PeeringState::Deleting,
            deleted_at: Some("2026-01-01T00:00:00Z".into()),
            ..row.clone()
        };
        assert_eq!(with_state(&deleting, PeeringState::Failing, &update), None);
        let terminated = Peering {
            state: PeeringState::Terminated,
            ..row
        };
        assert_eq!(
            with_state(&terminated, PeeringState::Failing, &update),
            None
        );
    }
}
