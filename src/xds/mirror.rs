//! A client agent's store versions for its xDS server: a mirror of what the local proxies'
//! snapshots read, followed from the agent's servers with blocking typed calls (Consul's
//! proxycfg watches the same things through the agent's cache).
//!
//! A client agent has no store of its own, so the feed ([`super::feed::StoreFeed`]) is
//! fed from here instead of from a shard: every config entry (`ConfigEntry.ListAll`: the
//! discovery chains, protocols and `service-intentions`), the CA's roots
//! (`ConnectCA.Roots`), and the Connect-capable instances (`Health.ServiceNodes` with
//! `Connect`) of every service a local proxy's upstream targets in this datacenter. Which
//! services those are follows from the proxies' last snapshots, as in [`super::remote`]: a
//! watcher reports its targets after each build ([`Mirror::need`]), and a newly needed
//! service is followed from then on; its first answer publishes a new version, which
//! rebuilds the proxy.
//!
//! [`MirrorQuery`] names one read and parses its reply; [`tables_of`] turns the answers
//! into a store's tables (pure: the entries and roots installed as they are, the instances
//! registered through the store's own catalog apply), and [`Mirror`] runs the followers
//! and publishes a new version whenever an answer changes.
//!
//! Invariants: nothing is published before both the config entries and the roots have
//! answered, so no proxy is built without its intentions; published indexes only grow; at
//! most [`SERVICES_MAX`] services are followed, each answer is cut to
//! [`INSTANCES_PER_SERVICE_MAX`] instances and [`CONFIG_ENTRIES_MAX`] entries; a follower
//! that fails waits [`RETRY_PAUSE`] and keeps its last answer meanwhile (a server's restart
//! does not empty a cluster).

use super::feed::{AgentSource, StoreFeed};
use super::remote::RemoteQuery;
use super::snapshot::{Snapshot, XdsSettings, ENDPOINTS_PER_TARGET_MAX};
use crate::consul::rpc::catalog::{DcSpecificRequest, ServiceSpecificRequest};
use crate::consul::rpc::config_entry::{entry_of, read_generic_entries, ConfigEntryListAllRequest};
use crate::consul::rpc::connect_ca::{read_ca_roots_whole, CaRootsReply};
use crate::consul::rpc::rows::read_indexed_check_service_node_registrations;
use crate::consul::rpc::{decode_error, QueryOptions};
use crate::store::catalog::{CatalogOp, Registration};
use crate::store::mesh::ca::{CaConfig, CaState, PROVIDER_CONSUL};
use crate::store::mesh::config_entry::{entry_key, ConfigEntry, ConfigKind};
use crate::store::{Command, CommandResult, Tables};
use arcstr::ArcStr;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

/// How long one blocking read waits at the server.
pub const MIRROR_WAIT: Duration = Duration::from_secs(60);
/// How long a follower waits after a failed read before asking again.
pub const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// Most services whose instances are followed at once, over every local proxy.
pub const SERVICES_MAX: usize = 4096;
/// Most instances of one service kept from an answer.
pub const INSTANCES_PER_SERVICE_MAX: usize = ENDPOINTS_PER_TARGET_MAX;
/// Most config entries kept from an answer.
pub const CONFIG_ENTRIES_MAX: usize = 65_536;

/// The suffix of a trust domain after its cluster ID (`<cluster_id>.consul`).
const TRUST_DOMAIN_SUFFIX: &str = ".consul";

/// One read of the servers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MirrorQuery {
    /// Every config entry of every kind.
    ConfigEntries,
    /// The CA's roots and trust domain.
    Roots,
    /// The Connect-capable instances of a service (its sidecars and native instances).
    Connect(String),
    /// Every instance of a service with its own checks: a sidecar's destination whose
    /// checks the sidecar exposes (their listener ports are read from them).
    Instances(String),
}

/// What a read answered.
#[derive(Clone, Debug, PartialEq)]
pub enum MirrorAnswer {
    ConfigEntries(Vec<ConfigEntry>),
    Roots(CaRootsReply),
    Instances(Vec<Registration>),
}

impl MirrorQuery {
    /// The typed call of the read in `datacenter` (this agent's), blocking past `index`.
    pub fn call(&self, datacenter: &str, index: u64) -> (&'static str, Vec<u8>) {
        let options = QueryOptions {
            min_query_index: index,
            max_query_time_ns: MIRROR_WAIT.as_nanos() as i64,
            allow_stale: true,
            ..QueryOptions::default()
        };
        match self {
            MirrorQuery::ConfigEntries => (
                "ConfigEntry.ListAll",
                ConfigEntryListAllRequest {
                    kinds: ConfigKind::ALL.iter().map(|k| k.as_str()).collect(),
                    datacenter,
                    options,
                }
                .encode(),
            ),
            MirrorQuery::Roots => (
                "ConnectCA.Roots",
                DcSpecificRequest {
                    datacenter,
                    node_meta_filters: Vec::new(),
                    options,
                }
                .encode(),
            ),
            // The same read another datacenter's instances are followed with.
            MirrorQuery::Connect(service) => RemoteQuery::Connect {
                datacenter: datacenter.to_string(),
                service: service.clone(),
            }
            .call(index, ""),
            MirrorQuery::Instances(service) => (
                "Health.ServiceNodes",
                ServiceSpecificRequest {
                    datacenter,
                    service_name: service,
                    options,
                    ..ServiceSpecificRequest::default()
                }
                .encode(),
            ),
        }
    }

    /// Reads the reply of [`MirrorQuery::call`]: its index and what it says.
    pub fn read(&self, reply: &[u8]) -> Result<(u64, MirrorAnswer), String> {
        let malformed = |e| format!("a malformed answer: {}", decode_error(e));
        match self {
            MirrorQuery::ConfigEntries => {
                let (meta, fields) = read_generic_entries(reply).map_err(malformed)?;
                let entries = fields
                    .iter()
                    .take(CONFIG_ENTRIES_MAX)
                    .map(entry_of)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(malformed)?;
                Ok((meta.index, MirrorAnswer::ConfigEntries(entries)))
            }
            MirrorQuery::Roots => {
                let (meta, roots) = read_ca_roots_whole(reply).map_err(malformed)?;
                Ok((meta.index, MirrorAnswer::Roots(roots)))
            }
            MirrorQuery::Connect(_) | MirrorQuery::Instances(_) => {
                let (meta, mut rows) =
                    read_indexed_check_service_node_registrations(reply).map_err(malformed)?;
                rows.truncate(INSTANCES_PER_SERVICE_MAX);
                Ok((meta.index, MirrorAnswer::Instances(rows)))
            }
        }
    }
}

/// The answers held at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Answers {
    pub entries: Option<Vec<ConfigEntry>>,
    pub roots: Option<CaRootsReply>,
    /// Each followed instance read's answer, as registrations.
    pub services: BTreeMap<MirrorQuery, Vec<Registration>>,
}

impl Answers {
    /// Keeps `answer` to `query`.
    pub fn record(&mut self, query: &MirrorQuery, answer: MirrorAnswer) {
        match (query, answer) {
            (MirrorQuery::ConfigEntries, MirrorAnswer::ConfigEntries(entries)) => {
                self.entries = Some(entries)
            }
            (MirrorQuery::Roots, MirrorAnswer::Roots(roots)) => self.roots = Some(roots),
            (
                MirrorQuery::Connect(_) | MirrorQuery::Instances(_),
                MirrorAnswer::Instances(rows),
            ) => {
                self.services.insert(query.clone(), rows);
            }
            (query, _) => debug_assert!(false, "an answer that is not {query:?}'s"),
        }
    }

    /// Whether a proxy can be built from these answers without missing its intentions or
    /// its roots.
    pub fn complete(&self) -> bool {
        self.entries.is_some() && self.roots.is_some()
    }
}

/// The CA state the roots answer describes: the trust domain's cluster ID and the roots
/// (without keys: a client agent signs nothing with them).
pub fn ca_state_of(roots: &CaRootsReply) -> CaState {
    let cluster_id = roots
        .trust_domain
        .strip_suffix(TRUST_DOMAIN_SUFFIX)
        .unwrap_or(&roots.trust_domain);
    CaState {
        config: (!roots.trust_domain.is_empty()).then(|| {
            Arc::new(CaConfig {
                cluster_id: ArcStr::from(cluster_id),
                provider: ArcStr::from(PROVIDER_CONSUL),
                ..CaConfig::default()
            })
        }),
        roots: roots.roots.iter().cloned().map(Arc::new).collect(),
    }
}

/// The tables a proxy snapshot reads, built from `answers` with indexes from
/// `first_index` on (each registration takes one): the result's index is the last used,
/// never below `first_index`. The registrations the store refused come back with their
/// reasons (a server's answer the local catalog cannot hold).
pub fn tables_of(answers: &Answers, first_index: u64) -> (Tables, Vec<String>) {
    let mut tables = Tables::default();
    let mut refused = Vec::new();
    let mut changes = Vec::new();
    let mut index = first_index;
    for regs in answers.services.values() {
        for registration in regs {
            let command = Command::Catalog(CatalogOp::Register(Box::new(registration.clone())));
            changes.clear();
            let result = tables.apply(index, &command, &mut changes);
            if let CommandResult::Catalog(crate::store::CatalogResult::Refused(reason))
            | CommandResult::Error(reason) = result
            {
                refused.push(format!(
                    "{} on node {}: {reason}",
                    registration.service.as_ref().map_or("", |s| &s.id),
                    registration.node
                ));
            }
            index += 1;
        }
    }
    // The servers checked the entries' chains when they were written; they are installed
    // as the servers hold them, indexes included.
    let mut entries = tables.mesh.config_entries.entries.clone();
    for entry in answers.entries.iter().flatten() {
        entries.insert(entry_key(entry.kind, &entry.name), Arc::new(entry.clone()));
    }
    tables.mesh.config_entries.entries = entries;
    if let Some(roots) = &answers.roots {
        tables.mesh.ca = ca_state_of(roots);
    }
    tables.index = tables.index.max(first_index);
    (tables, refused)
}

/// The services of this datacenter a snapshot's upstreams target, and its own destination
/// when it exposes its destination's checks (their listener ports are read from the
/// destination's instance on this node): what the mirror follows for that proxy.
pub fn local_needs(snapshot: &Snapshot, settings: &XdsSettings) -> BTreeSet<MirrorQuery> {
    let mut needs: BTreeSet<MirrorQuery> = snapshot
        .upstreams
        .iter()
        .flat_map(|upstream| upstream.targets.values())
        .filter(|target| target.datacenter == settings.datacenter)
        .map(|target| MirrorQuery::Connect(target.service.clone()))
        .collect();
    if snapshot.exposes_checks && !snapshot.destination.is_empty() {
        needs.insert(MirrorQuery::Instances(snapshot.destination.clone()));
    }
    needs
}

/// The followers and what they hold.
struct Inner {
    answers: Answers,
    /// Each proxy watcher's needs, by the watcher's key.
    needs: BTreeMap<String, BTreeSet<MirrorQuery>>,
    /// One follower per needed instance read.
    followers: BTreeMap<MirrorQuery, JoinHandle<()>>,
    /// The index of the version last published.
    published: u64,
    /// Whether too many services were needed (warned once per excess).
    warned_excess: bool,
}

/// A client agent's mirror of its servers, publishing into the xDS server's feed.
pub struct Mirror {
    agent: AgentSource,
    datacenter: String,
    feed: StoreFeed,
    inner: Mutex<Inner>,
}

impl Mirror {
    pub fn new(agent: AgentSource, datacenter: String, feed: StoreFeed) -> Arc<Mirror> {
        let published = feed.current().index;
        Arc::new(Mirror {
            agent,
            datacenter,
            feed,
            inner: Mutex::new(Inner {
                answers: Answers::default(),
                needs: BTreeMap::new(),
                followers: BTreeMap::new(),
                published,
                warned_excess: false,
            }),
        })
    }

    /// Starts following the config entries and the roots (inside the runtime).
    pub fn start(self: &Arc<Self>) {
        for query in [MirrorQuery::ConfigEntries, MirrorQuery::Roots] {
            tokio::spawn(follow(self.clone(), query));
        }
    }

    /// Makes `services` what the watcher `watcher` needs (its proxy's last snapshot's
    /// local targets).
    pub fn need(self: &Arc<Self>, watcher: &str, services: BTreeSet<MirrorQuery>) {
        let mut inner = self.inner.lock().expect("mirror lock");
        if inner.needs.get(watcher) == Some(&services) {
            return;
        }
        inner.needs.insert(watcher.to_string(), services);
        self.refollow(&mut inner);
    }

    /// Forgets the needs of a watcher that stopped.
    pub fn release(self: &Arc<Self>, watcher: &str) {
        let mut inner = self.inner.lock().expect("mirror lock");
        if inner.needs.remove(watcher).is_some() {
            self.refollow(&mut inner);
        }
    }

    /// Follows exactly the services some proxy needs (up to [`SERVICES_MAX`]); a service
    /// no longer needed is dropped with its answer.
    fn refollow(self: &Arc<Self>, inner: &mut Inner) {
        let mut wanted: BTreeSet<MirrorQuery> = inner.needs.values().flatten().cloned().collect();
        if wanted.len() > SERVICES_MAX {
            if !inner.warned_excess {
                log::warn!(
                    "xds: the local proxies target {} services; a client agent follows at most {SERVICES_MAX}",
                    wanted.len()
                );
                inner.warned_excess = true;
            }
            wanted = wanted.into_iter().take(SERVICES_MAX).collect();
        } else {
            inner.warned_excess = false;
        }
        let Inner {
            followers, answers, ..
        } = inner;
        followers.retain(|query, task| {
            let keep = wanted.contains(query);
            if !keep {
                task.abort();
                answers.services.remove(query);
            }
            keep
        });
        // A watcher dropped as the runtime stops releases its needs outside it: nothing
        // new is started then.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for query in wanted {
            if let std::collections::btree_map::Entry::Vacant(slot) = followers.entry(query) {
                let query = slot.key().clone();
                slot.insert(runtime.spawn(follow(self.clone(), query)));
            }
        }
    }

    /// Keeps a follower's new answer and publishes the version it makes.
    fn record(&self, query: &MirrorQuery, answer: MirrorAnswer) {
        let mut inner = self.inner.lock().expect("mirror lock");
        let instance_read = matches!(query, MirrorQuery::Connect(_) | MirrorQuery::Instances(_));
        // An answer that arrived as its read stopped being needed.
        if instance_read && !inner.followers.contains_key(query) {
            return;
        }
        inner.answers.record(query, answer);
        if !inner.answers.complete() {
            return;
        }
        let (tables, refused) = tables_of(&inner.answers, inner.published + 1);
        for reason in refused {
            log::warn!("xds: the mirrored catalog refused an instance: {reason}");
        }
        inner.published = tables.index;
        self.feed.publish(Arc::new(tables));
    }
}

/// Follows one read with blocking calls, recording each answer whose index moved.
async fn follow(mirror: Arc<Mirror>, query: MirrorQuery) {
    let mut index = 0;
    let mut seen: Option<u64> = None;
    let mut failing = false;
    loop {
        let (method, body) = query.call(&mirror.datacenter, index);
        let answer = mirror
            .agent
            .datacenter_call(&mirror.datacenter, method, body, MIRROR_WAIT)
            .await
            .and_then(|reply| query.read(&reply));
        match answer {
            Ok((next, answer)) => {
                failing = false;
                if seen != Some(next) {
                    seen = Some(next);
                    mirror.record(&query, answer);
                }
                // An index that went back (a restored snapshot) starts over, as Consul's
                // blocking clients do; an index of 0 would not block.
                index = next.max(1);
            }
            Err(reason) => {
                if !failing {
                    log::warn!("xds: the mirror's read {query:?} failed: {reason}");
                    failing = true;
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consul::rpc::catalog::write_check_service_node;
    use crate::proto::msgpack::Writer;
    use crate::store::catalog::read::check_service_nodes;
    use crate::store::catalog::{CheckRegistration, ServiceRegistration};
    use crate::store::mesh::ca::CaRoot;

    fn sidecar(node: &str, address: &str, port: i32, status: &str) -> Registration {
        Registration {
            node: node.to_string(),
            address: address.to_string(),
            datacenter: "dc1".to_string(),
            service: Some(ServiceRegistration {
                kind: "connect-proxy".to_string(),
                id: "db-sidecar-proxy".to_string(),
                name: "db-sidecar-proxy".to_string(),
                port,
                proxy_json: Some(r#"{"DestinationServiceName":"db"}"#.to_string()),
                ..ServiceRegistration::default()
            }),
            checks: vec![CheckRegistration {
                node: node.to_string(),
                check_id: "sidecar".to_string(),
                name: "sidecar".to_string(),
                status: status.to_string(),
                service_id: "db-sidecar-proxy".to_string(),
                ..CheckRegistration::default()
            }],
            ..Registration::default()
        }
    }

    fn roots() -> CaRootsReply {
        CaRootsReply {
            active_root_id: "aa:bb".to_string(),
            trust_domain: "11111111-2222-3333-4444-555555555555.consul".to_string(),
            roots: vec![CaRoot {
                id: ArcStr::from("aa:bb"),
                root_cert_pem: ArcStr::from("-----BEGIN CERTIFICATE-----"),
                active: true,
                ..CaRoot::default()
            }],
        }
    }

    fn intentions(action: &str) -> ConfigEntry {
        let body = format!(
            r#"{{"Kind":"service-intentions","Name":"db","Sources":[{{"Name":"web","Action":"{action}"}}]}}"#
        );
        crate::consul::config_entry::decode_body(body.as_bytes()).expect("a valid entry")
    }

    #[test]
    fn nothing_is_complete_without_the_entries_and_the_roots() {
        let mut answers = Answers::default();
        assert!(!answers.complete());
        answers.record(&MirrorQuery::Roots, MirrorAnswer::Roots(roots()));
        assert!(!answers.complete());
        answers.record(
            &MirrorQuery::ConfigEntries,
            MirrorAnswer::ConfigEntries(Vec::new()),
        );
        assert!(answers.complete());
    }

    #[test]
    fn answers_become_the_tables_a_snapshot_reads() {
        let mut answers = Answers::default();
        answers.record(&MirrorQuery::Roots, MirrorAnswer::Roots(roots()));
        answers.record(
            &MirrorQuery::ConfigEntries,
            MirrorAnswer::ConfigEntries(vec![intentions("deny")]),
        );
        answers.record(
            &MirrorQuery::Connect("db".to_string()),
            MirrorAnswer::Instances(vec![
                sidecar("n1", "10.0.0.1", 21000, "passing"),
                sidecar("n2", "10.0.0.2", 21001, "critical"),
            ]),
        );
        let (tables, refused) = tables_of(&answers, 7);
        assert!(refused.is_empty(), "{refused:?}");
        assert!(tables.index >= 7);
        assert_eq!(
            tables.mesh.ca.trust_domain().as_deref(),
            Some("11111111-2222-3333-4444-555555555555.consul")
        );
        assert_eq!(tables.mesh.ca.active_root().unwrap().id, "aa:bb");
        let matched = crate::store::mesh::intentions::matches(&tables, "db", true);
        assert_eq!(matched.len(), 1);
        assert_eq!(matched[0].1.name, "web");
        let rows = crate::store::catalog::read::connect_rows(&tables, "db");
        assert_eq!(rows.views.len(), 2);
        let nodes: Vec<_> = check_service_nodes(&tables, "db-sidecar-proxy")
            .iter()
            .map(|row| row.node.name.to_string())
            .collect();
        assert_eq!(nodes, ["n1", "n2"]);
    }

    #[test]
    fn each_version_has_a_higher_index_than_the_last() {
        let mut answers = Answers::default();
        answers.record(&MirrorQuery::Roots, MirrorAnswer::Roots(roots()));
        answers.record(
            &MirrorQuery::ConfigEntries,
            MirrorAnswer::ConfigEntries(Vec::new()),
        );
        let (empty, _) = tables_of(&answers, 1);
        assert_eq!(empty.index, 1);
        answers.record(
            &MirrorQuery::Connect("db".to_string()),
            MirrorAnswer::Instances(vec![sidecar("n1", "10.0.0.1", 21000, "passing")]),
        );
        let (next, _) = tables_of(&answers, empty.index + 1);
        assert!(next.index > empty.index);
    }

    #[test]
    fn a_health_answer_reads_back_as_registrations() {
        let mut source = Tables::default();
        let mut changes = Vec::new();
        for (index, registration) in [
            sidecar("n1", "10.0.0.1", 21000, "passing"),
            sidecar("n2", "10.0.0.2", 21001, "warning"),
        ]
        .into_iter()
        .enumerate()
        {
            let command = Command::Catalog(CatalogOp::Register(Box::new(registration)));
            source.apply(index as u64 + 1, &command, &mut changes);
        }
        let rows = check_service_nodes(&source, "db-sidecar-proxy");
        let mut w = Writer::new();
        w.map_len(2);
        w.str("Index");
        w.uint(42);
        w.str("Nodes");
        w.array_len(rows.len());
        for row in &rows {
            write_check_service_node(&mut w, row);
        }
        let body = w.into_inner();
        let query = MirrorQuery::Connect("db".to_string());
        let (index, answer) = query.read(&body).unwrap();
        assert_eq!(index, 42);
        let MirrorAnswer::Instances(registrations) = answer else {
            panic!("not instances");
        };
        assert_eq!(registrations.len(), 2);
        assert_eq!(registrations[1].node, "n2");
        assert_eq!(registrations[1].address, "10.0.0.2");
        let service = registrations[1].service.as_ref().unwrap();
        assert_eq!(
            (service.kind.as_str(), service.port),
            ("connect-proxy", 21001)
        );
        assert!(service.proxy_json.as_deref().unwrap().contains("db"));
        assert_eq!(registrations[1].checks[0].status, "warning");
        // Registered again, they make the same rows.
        let mut answers = Answers::default();
        answers.record(&query, MirrorAnswer::Instances(registrations));
        let (mirrored, refused) = tables_of(&answers, 1);
        assert!(refused.is_empty(), "{refused:?}");
        let again = check_service_nodes(&mirrored, "db-sidecar-proxy");
        assert_eq!(again.len(), 2);
        assert_eq!(again[1].service.port, 21001);
    }

    #[test]
    fn a_sidecar_exposing_checks_needs_its_destinations_own_instances() {
        let settings = XdsSettings {
            datacenter: "dc1".into(),
            default_allow: true,
            dns_domain: "consul".into(),
            alt_domain: None,
            node_name: "n1".into(),
            advertise_address: "10.0.0.1".into(),
        };
        let mut snapshot = crate::xds::resources::tests::snapshot(Vec::new());
        snapshot.destination = "web".into();
        assert!(!local_needs(&snapshot, &settings).contains(&MirrorQuery::Instances("web".into())));
        snapshot.exposes_checks = true;
        assert!(local_needs(&snapshot, &settings).contains(&MirrorQuery::Instances("web".into())));
        // Its answer is kept like a Connect read's, and dropped with it.
        let mut answers = Answers::default();
        let query = MirrorQuery::Instances("web".into());
        answers.record(&query, MirrorAnswer::Instances(Vec::new()));
        assert!(answers.services.contains_key(&query));
    }
}
