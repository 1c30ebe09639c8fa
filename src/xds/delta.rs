//! The incremental (delta) ADS protocol of one stream, as Consul serves it (`delta.go`):
//! what Envoy subscribed to, what it has confirmed, what is in flight, and the next
//! response to send. Pure: requests and resource sets come in, responses go out.
//!
//! Invariants, as Consul keeps them:
//! - One response in flight at a time: nothing more is sent while any type waits for its
//!   ACK, so Envoy sees clusters, then endpoints, then listeners, then routes, and the
//!   removals of clusters and endpoints last (Consul's `xDSUpdateOrder`).
//! - Versions are the resources' content hashes; a resource is sent when Envoy's confirmed
//!   version differs from the current one, and forgotten once its removal is ACKed.
//! - A NACK drops the pending update, and the rejected versions are never sent again:
//!   only a resource whose content changed is (Consul only waits for the next event, so a
//!   snapshot that changes something else would send the rejected resource once more).
//! - An ACKed cluster or listener makes Envoy forget its endpoints or routes; they are
//!   marked for resending so Envoy gets them back.
//! - A resource named in `resource_names_subscribe` is always sent, even if Envoy was
//!   thought to have it; `initial_resource_versions` on a stream's first request of a type
//!   seeds what Envoy has.

use super::resources::{Resource, ResourceType, Resources};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, Resource as WireResource,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// Most resource names a stream may subscribe to per type (a bound on per-stream state).
pub const SUBSCRIPTIONS_PER_TYPE_MAX: usize = 16_384;
/// Most responses one stream may have in flight (only one is, by construction; this bounds
/// the map should a client echo nonces back in odd ways).
const PENDING_MAX: usize = 16;

/// What a request meant.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// The first request of a type.
    NewSubscription(ResourceType),
    /// An ACK, or a change of subscriptions.
    Ack(ResourceType),
    /// A NACK, with Envoy's error.
    Nack {
        kind: ResourceType,
        nonce: String,
        error: String,
    },
    /// A type Consul does not serve; ignored.
    UnknownType(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct PendingUpdate {
    remove: bool,
    version: String,
    children: Vec<String>,
}

#[derive(Debug, Default)]
struct TypeState {
    registered: bool,
    wildcard: bool,
    sent_once: bool,
    subscriptions: BTreeSet<String>,
    /// Envoy's confirmed view: name → version ("" forces the next send).
    versions: HashMap<String, String>,
    /// Unconfirmed updates by nonce.
    pending: HashMap<String, BTreeMap<String, PendingUpdate>>,
    /// Versions Envoy rejected, by name: not sent again until their content changes.
    rejected: HashMap<String, String>,
}

impl TypeState {
    fn subscribed(&self, name: &str) -> bool {
        self.wildcard || self.subscriptions.contains(name)
    }
}

/// The protocol state of one delta stream.
#[derive(Debug, Default)]
pub struct DeltaStream {
    types: [TypeState; 4],
    nonce: u64,
}

/// Consul's send order: (type, upsert, remove).
const UPDATE_ORDER: [(ResourceType, bool, bool); 6] = [
    (ResourceType::Cluster, true, false),
    (ResourceType::Endpoint, true, false),
    (ResourceType::Listener, true, true),
    (ResourceType::Route, true, true),
    (ResourceType::Cluster, false, true),
    (ResourceType::Endpoint, false, true),
];

impl DeltaStream {
    pub fn new() -> DeltaStream {
        DeltaStream::default()
    }

    /// Takes in one request. `Err` is a protocol violation that ends the stream.
    pub fn receive(&mut self, request: &DeltaDiscoveryRequest) -> Result<Received, String> {
        if request.type_url.is_empty() {
            return Err("type URL is required for ADS".to_string());
        }
        let Some(kind) = ResourceType::from_type_url(&request.type_url) else {
            return Ok(Received::UnknownType(request.type_url.clone()));
        };
        let state = &mut self.types[kind as usize];
        let first = !state.registered;
        if first {
            // Wildcard when the first request names nothing (or names `*`).
            state.wildcard = request.resource_names_subscribe.is_empty()
                || request.resource_names_subscribe.iter().any(|n| n == "*");
            state.registered = true;
        }
        if !request.response_nonce.is_empty() {
            match &request.error_detail {
                None => Self::ack(&mut self.types, kind, &request.response_nonce),
                Some(status) => {
                    let state = &mut self.types[kind as usize];
                    if let Some(updates) = state.pending.remove(&request.response_nonce) {
                        for (name, update) in updates {
                            if !update.remove {
                                state.rejected.insert(name, update.version);
                            }
                        }
                    }
                    return Ok(Received::Nack {
                        kind,
                        nonce: request.response_nonce.clone(),
                        error: status.message.clone(),
                    });
                }
            }
        }
        let state = &mut self.types[kind as usize];
        if first && !request.initial_resource_versions.is_empty() {
            state.versions = request
                .initial_resource_versions
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if !state.wildcard {
                state
                    .subscriptions
                    .extend(request.initial_resource_versions.keys().cloned());
            }
        }
        if !state.wildcard {
            for name in &request.resource_names_subscribe {
                if state.subscriptions.len() >= SUBSCRIPTIONS_PER_TYPE_MAX
                    && !state.subscriptions.contains(name)
                {
                    return Err(format!(
                        "more than {SUBSCRIPTIONS_PER_TYPE_MAX} subscriptions to {}",
                        request.type_url
                    ));
                }
                state.subscriptions.insert(name.clone());
                // A (re)subscription is always answered: Envoy may have dropped it.
                if let Some(version) = state.versions.get_mut(name) {
                    version.clear();
                }
            }
            for name in &request.resource_names_unsubscribe {
                state.subscriptions.remove(name);
            }
        }
        Ok(if first {
            Received::NewSubscription(kind)
        } else {
            Received::Ack(kind)
        })
    }

    fn ack(types: &mut [TypeState; 4], kind: ResourceType, nonce: &str) {
        let Some(updates) = types[kind as usize].pending.remove(nonce) else {
            return;
        };
        let mut resend_children = Vec::new();
        {
            let state = &mut types[kind as usize];
            for (name, update) in updates {
                if update.remove {
                    state.versions.remove(&name);
                    continue;
                }
                state.rejected.remove(&name);
                state.versions.insert(name, update.version);
                resend_children.extend(update.children);
            }
            state.sent_once = true;
        }
        if let Some(child) = kind.child() {
            let child_state = &mut types[child as usize];
            for name in resend_children {
                if child_state.subscribed(&name) {
                    if let Some(version) = child_state.versions.get_mut(&name) {
                        version.clear();
                    }
                }
            }
        }
    }

    /// Whether a response waits for its ACK.
    pub fn in_flight(&self) -> bool {
        self.types.iter().any(|t| !t.pending.is_empty())
    }

    /// The next response to send for `resources`, if any; at most one is in flight.
    pub fn next_response(&mut self, resources: &Resources) -> Option<DeltaDiscoveryResponse> {
        if self.in_flight() {
            return None;
        }
        for (kind, upsert, remove) in UPDATE_ORDER {
            if let Some(response) = self.response_for(kind, resources, upsert, remove) {
                return Some(response);
            }
        }
        None
    }

    /// The response of one pass (`upsert` sends new and changed resources, `remove`
    /// removed ones) for one type, if it has anything relevant to send.
    fn response_for(
        &mut self,
        kind: ResourceType,
        resources: &Resources,
        upsert: bool,
        remove: bool,
    ) -> Option<DeltaDiscoveryResponse> {
        let state = &mut self.types[kind as usize];
        if !state.registered {
            return None;
        }
        // An unsubscribed name is forgotten: Envoy dropped it itself, nothing to tell it.
        let TypeState {
            versions,
            wildcard,
            subscriptions,
            ..
        } = state;
        versions.retain(|name, _| *wildcard || subscriptions.contains(name));
        let state = &self.types[kind as usize];
        let current = resources.of(kind);
        if current.is_empty() && !state.sent_once && kind != ResourceType::Cluster {
            // Nothing of this type yet (a proxy without upstreams has no endpoints):
            // Consul sends nothing until there is.
            return None;
        }
        let mut updates = BTreeMap::new();
        let changed = state.changed_updates(current, &mut updates);
        let added = state.added_updates(current, &mut updates);
        let relevant = (changed.removes && remove) || ((changed.upserts || added) && upsert);
        if !relevant && state.sent_once {
            return None;
        }
        if !relevant && !upsert {
            // The first response of a type is an upsert pass's.
            return None;
        }
        let (mut response, sent) = compose(kind, current, updates, upsert, remove);
        self.nonce += 1;
        response.nonce = format!("{:08x}", self.nonce);
        let state = &mut self.types[kind as usize];
        assert!(
            state.pending.len() < PENDING_MAX,
            "one response in flight at a time"
        );
        state.pending.insert(response.nonce.clone(), sent);
        Some(response)
    }
}

/// What a type's confirmed names need: removals and upserts.
struct Changed {
    removes: bool,
    upserts: bool,
}

impl TypeState {
    /// The updates of the names Envoy holds: removed ones, and changed ones unless Envoy
    /// rejected exactly that version.
    fn changed_updates(
        &self,
        current: &BTreeMap<String, Arc<Resource>>,
        updates: &mut BTreeMap<String, PendingUpdate>,
    ) -> Changed {
        let mut changed = Changed {
            removes: false,
            upserts: false,
        };
        for (name, have) in &self.versions {
            match current.get(name) {
                None => {
                    updates.insert(
                        name.clone(),
                        PendingUpdate {
                            remove: true,
                            version: String::new(),
                            children: Vec::new(),
                        },
                    );
                    changed.removes = true;
                }
                Some(resource)
                    if resource.version != *have
                        && self.rejected.get(name) != Some(&resource.version) =>
                {
                    updates.insert(name.clone(), PendingUpdate::upsert(resource));
                    changed.upserts = true;
                }
                Some(_) => {}
            }
        }
        changed
    }

    /// The updates of names Envoy wants (all of them on a wildcard stream) and does not
    /// hold yet; whether there was any.
    fn added_updates(
        &self,
        current: &BTreeMap<String, Arc<Resource>>,
        updates: &mut BTreeMap<String, PendingUpdate>,
    ) -> bool {
        let wanted: Box<dyn Iterator<Item = &String>> = if self.wildcard {
            Box::new(current.keys())
        } else {
            Box::new(self.subscriptions.iter())
        };
        let mut added = false;
        for name in wanted {
            if self.versions.contains_key(name) {
                continue;
            }
            if let Some(resource) = current.get(name) {
                if self.rejected.get(name) == Some(&resource.version) {
                    continue;
                }
                updates.insert(name.clone(), PendingUpdate::upsert(resource));
                added = true;
            }
        }
        added
    }
}

impl PendingUpdate {
    fn upsert(resource: &Resource) -> PendingUpdate {
        PendingUpdate {
            remove: false,
            version: resource.version.clone(),
            children: resource.children.clone(),
        }
    }
}

/// The response carrying this pass's updates (removals on a remove pass, upserts on an
/// upsert pass), and the updates it sent, to confirm on its ACK.
fn compose(
    kind: ResourceType,
    current: &BTreeMap<String, Arc<Resource>>,
    updates: BTreeMap<String, PendingUpdate>,
    upsert: bool,
    remove: bool,
) -> (DeltaDiscoveryResponse, BTreeMap<String, PendingUpdate>) {
    let mut response = DeltaDiscoveryResponse {
        type_url: kind.type_url().to_string(),
        ..Default::default()
    };
    let mut sent = BTreeMap::new();
    for (name, update) in updates {
        if update.remove {
            if remove {
                response.removed_resources.push(name.clone());
                sent.insert(name, update);
            }
        } else if upsert {
            let resource = &current[&name];
            response.resources.push(WireResource {
                name: name.clone(),
                version: resource.version.clone(),
                resource: Some(resource.any.clone()),
                ..Default::default()
            });
            sent.insert(name, update);
        }
    }
    (response, sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::resources::Resource;
    use envoy_types::pb::google::rpc::Status;
    use std::sync::Arc;

    fn resource(version: &str, children: &[&str]) -> Arc<Resource> {
        Arc::new(Resource {
            version: version.into(),
            any: Default::default(),
            children: children.iter().map(|c| c.to_string()).collect(),
        })
    }

    fn resources(entries: &[(ResourceType, &str, &str, &[&str])]) -> Resources {
        let mut r = Resources::default();
        for (kind, name, version, children) in entries {
            r.by_type[*kind as usize].insert(name.to_string(), resource(version, children));
        }
        r
    }

    fn request(kind: ResourceType, subscribe: &[&str], nonce: &str) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            type_url: kind.type_url().into(),
            resource_names_subscribe: subscribe.iter().map(|s| s.to_string()).collect(),
            response_nonce: nonce.into(),
            ..Default::default()
        }
    }

    fn names(response: &DeltaDiscoveryResponse) -> Vec<&str> {
        response.resources.iter().map(|r| r.name.as_str()).collect()
    }

    fn base() -> Resources {
        resources(&[
            (ResourceType::Cluster, "local_app", "c1", &[]),
            (ResourceType::Cluster, "db", "c1", &["db"]),
            (ResourceType::Endpoint, "db", "e1", &[]),
            (ResourceType::Listener, "public", "l1", &[]),
        ])
    }

    /// Subscribes to every type as Envoy does and ACKs each response; returns the stream.
    fn synced(r: &Resources) -> DeltaStream {
        let mut s = DeltaStream::new();
        s.receive(&request(ResourceType::Cluster, &[], "")).unwrap();
        s.receive(&request(ResourceType::Listener, &[], ""))
            .unwrap();
        let cds = s.next_response(r).unwrap();
        assert_eq!(cds.type_url, ResourceType::Cluster.type_url());
        assert!(s.next_response(r).is_none(), "one response in flight");
        s.receive(&request(ResourceType::Cluster, &[], &cds.nonce))
            .unwrap();
        s.receive(&request(ResourceType::Endpoint, &["db"], ""))
            .unwrap();
        let eds = s.next_response(r).unwrap();
        assert_eq!(names(&eds), vec!["db"]);
        s.receive(&request(ResourceType::Endpoint, &[], &eds.nonce))
            .unwrap();
        let lds = s.next_response(r).unwrap();
        assert_eq!(names(&lds), vec!["public"]);
        s.receive(&request(ResourceType::Listener, &[], &lds.nonce))
            .unwrap();
        assert!(s.next_response(r).is_none());
        s
    }

    #[test]
    fn responses_follow_consuls_order_one_at_a_time() {
        synced(&base());
    }

    #[test]
    fn a_changed_cluster_resends_its_endpoints() {
        let mut s = synced(&base());
        let mut r = base();
        r.by_type[ResourceType::Cluster as usize].insert("db".into(), resource("c2", &["db"]));
        let cds = s.next_response(&r).unwrap();
        assert_eq!(names(&cds), vec!["db"]);
        s.receive(&request(ResourceType::Cluster, &[], &cds.nonce))
            .unwrap();
        let eds = s.next_response(&r).unwrap();
        assert_eq!(names(&eds), vec!["db"], "same endpoints, sent again");
    }

    #[test]
    fn a_nack_is_logged_not_answered_with_the_same_resources() {
        let mut s = synced(&base());
        let mut r = base();
        r.by_type[ResourceType::Listener as usize].insert("public".into(), resource("l2", &[]));
        let lds = s.next_response(&r).unwrap();
        let mut nack = request(ResourceType::Listener, &[], &lds.nonce);
        nack.error_detail = Some(Status {
            code: 3,
            message: "bad listener".into(),
            details: Vec::new(),
        });
        let got = s.receive(&nack).unwrap();
        assert!(matches!(got, Received::Nack { ref error, .. } if error == "bad listener"));
        // Envoy kept l1; the rejected l2 is not pushed again, whatever else happens.
        let again = s.next_response(&r);
        assert!(again.is_none(), "{again:?}");
        s.receive(&request(ResourceType::Endpoint, &["db"], ""))
            .unwrap();
        let eds = s.next_response(&r).unwrap();
        assert_eq!(eds.type_url, ResourceType::Endpoint.type_url());
        s.receive(&request(ResourceType::Endpoint, &[], &eds.nonce))
            .unwrap();
        assert!(s.next_response(&r).is_none());
        // A changed listener is sent.
        r.by_type[ResourceType::Listener as usize].insert("public".into(), resource("l3", &[]));
        assert_eq!(names(&s.next_response(&r).unwrap()), vec!["public"]);
    }

    #[test]
    fn a_removed_listener_is_removed_and_forgotten_once_acked() {
        let mut s = synced(&base());
        let mut r = base();
        r.by_type[ResourceType::Listener as usize].clear();
        let lds = s.next_response(&r).unwrap();
        assert_eq!(lds.removed_resources, vec!["public".to_string()]);
        s.receive(&request(ResourceType::Listener, &[], &lds.nonce))
            .unwrap();
        assert!(s.next_response(&r).is_none());
    }

    #[test]
    fn initial_versions_spare_what_envoy_already_has() {
        let r = base();
        let mut s = DeltaStream::new();
        let mut first = request(ResourceType::Cluster, &[], "");
        first
            .initial_resource_versions
            .insert("local_app".into(), "c1".into());
        first
            .initial_resource_versions
            .insert("db".into(), "c1".into());
        first
            .initial_resource_versions
            .insert("gone".into(), "c0".into());
        s.receive(&first).unwrap();
        // Consul's first answer of a type, empty here: Envoy has both clusters.
        let cds = s.next_response(&r).unwrap();
        assert!(cds.resources.is_empty() && cds.removed_resources.is_empty());
        s.receive(&request(ResourceType::Cluster, &[], &cds.nonce))
            .unwrap();
        // Removals come last.
        let removal = s.next_response(&r).unwrap();
        assert_eq!(removal.removed_resources, vec!["gone".to_string()]);
        s.receive(&request(ResourceType::Cluster, &[], &removal.nonce))
            .unwrap();
        assert!(s.next_response(&r).is_none());
    }

    #[test]
    fn unknown_and_missing_types() {
        let mut s = DeltaStream::new();
        let got = s
            .receive(&DeltaDiscoveryRequest {
                type_url: "type.googleapis.com/envoy.nope".into(),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            got,
            Received::UnknownType("type.googleapis.com/envoy.nope".into())
        );
        assert!(s.receive(&DeltaDiscoveryRequest::default()).is_err());
    }
}
