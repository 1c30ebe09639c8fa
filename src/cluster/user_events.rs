//! The agent's ring of recent Consul user events, fed from the LAN pool.
//!
//! [`ingest_loop`] takes serf user events from the gossip driver, keeps the ones Consul fired
//! (`consul:event:<name>`) whose filters match this agent, and records them in the
//! [`EventLog`] that `/v1/event/list` reads on every shard.
//!
//! Invariants: the ring never holds more than [`EVENT_BUFFER_EVENTS`]; waiters are woken
//! after the event is visible.

use crate::cluster::gossip::GossipHandle;
use crate::consul::user_event::{
    matches_filters, ConsulEvent, EVENT_BUFFER_EVENTS, EVENT_NAME_PREFIX, EVENT_VERSION_MAX,
};
use crate::gossip::UserEvent;
use crate::shard::Shard;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// The agent's recent user events, shared by every shard.
#[derive(Default)]
pub struct EventLog {
    inner: Mutex<EventLogInner>,
}

#[derive(Default)]
struct EventLogInner {
    events: VecDeque<Arc<ConsulEvent>>,
    /// Blocking lists waiting for the next event; each is signalled once and dropped.
    waiters: Vec<flume::Sender<()>>,
}

impl EventLog {
    /// Records an event (evicting the oldest beyond [`EVENT_BUFFER_EVENTS`]) and wakes
    /// every waiter.
    pub fn push(&self, event: ConsulEvent) {
        let waiters = {
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            if inner.events.len() == EVENT_BUFFER_EVENTS {
                inner.events.pop_front();
            }
            inner.events.push_back(Arc::new(event));
            debug_assert!(inner.events.len() <= EVENT_BUFFER_EVENTS);
            std::mem::take(&mut inner.waiters)
        };
        for waiter in waiters {
            let _ = waiter.try_send(());
        }
    }

    /// The recent events, oldest first.
    pub fn events(&self) -> Vec<Arc<ConsulEvent>> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.events.iter().cloned().collect()
    }

    /// A receiver signalled when the next event is recorded. Subscribe before reading
    /// [`EventLog::events`] so that no event slips between the read and the wait.
    pub fn subscribe(&self) -> flume::Receiver<()> {
        let (tx, rx) = flume::bounded(1);
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        // Waiters whose request went away are dropped here rather than accumulating.
        inner.waiters.retain(|w| !w.is_disconnected());
        inner.waiters.push(tx);
        rx
    }
}

/// Takes the LAN pool's user events, keeps Consul's ones that match this agent and records
/// them. Runs on shard 0 until shutdown.
pub async fn ingest_loop(shard: Rc<Shard>, handle: GossipHandle, log: Arc<EventLog>) {
    let events = handle.user_events();
    while let Ok(serf_event) = events.recv_async().await {
        if shard.shutting_down() {
            return;
        }
        if let Some(event) = accept(&shard, &serf_event) {
            log::debug!("agent: new event {:?} ({})", event.name, event.id);
            log.push(event);
        }
    }
}

fn accept(shard: &Shard, serf_event: &UserEvent) -> Option<ConsulEvent> {
    // Events not fired through Consul's API (plain `serf event`) are not Consul's.
    serf_event.name.strip_prefix(EVENT_NAME_PREFIX)?;
    let mut event = match ConsulEvent::decode(&serf_event.payload) {
        Ok(event) => event,
        Err(e) => {
            log::warn!("agent: failed to decode event {:?}: {e}", serf_event.name);
            return None;
        }
    };
    event.ltime = serf_event.ltime;
    if event.version > EVENT_VERSION_MAX {
        log::warn!(
            "agent: event {:?} has version {}, which may have unsupported features",
            event.name,
            event.version
        );
    }
    let node_name = &shard.config().node_name;
    // Local services are this node's services in the catalog as this agent sees it.
    let version = shard.current_version();
    let node = version.catalog.node(node_name);
    let services = node.into_iter().flat_map(|entry| {
        entry
            .services
            .values()
            .map(|s| (&*s.name, s.tags.iter().map(|t| &**t).collect::<Vec<_>>()))
    });
    if !matches_filters(&event, node_name, services) {
        return None;
    }
    Some(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str) -> ConsulEvent {
        ConsulEvent {
            id: id.to_string(),
            name: "deploy".to_string(),
            version: 1,
            ..Default::default()
        }
    }

    #[test]
    fn log_is_bounded_and_wakes_waiters() {
        let log = EventLog::default();
        let waiter = log.subscribe();
        for i in 0..EVENT_BUFFER_EVENTS + 5 {
            log.push(event(&format!("{i}")));
        }
        assert_eq!(waiter.try_recv(), Ok(()));
        let events = log.events();
        assert_eq!(events.len(), EVENT_BUFFER_EVENTS);
        assert_eq!(events[0].id, "5");
    }
}
