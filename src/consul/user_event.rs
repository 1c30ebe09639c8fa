//! Consul's user events (`/v1/event/fire`, `/v1/event/list`) on top of serf user events.
//!
//! Consul fires an event as a serf user event named `consul:event:<name>` whose payload is
//! Consul's own msgpack `UserEvent` envelope (ID, name, payload, node/service/tag filters,
//! version). Every agent decodes the events it hears, drops those whose filters do not
//! match it (this module: the envelope, the filters, the list index), and keeps the most
//! recent [`EVENT_BUFFER_EVENTS`] in a ring that `/v1/event/list` reads
//! (`crate::cluster::user_events`). The list's index is derived from the newest event's UUID
//! (Consul's `uuidToUint64`), so a blocking list wakes when the newest event changes, not
//! when a counter grows.
//!
//! Invariant: decoding untrusted payloads is bounded by their size.

use std::sync::Arc;

use crate::proto::msgpack::{Reader, WireError, Writer};

/// Prefix of the serf event names Consul uses for its user events.
pub const EVENT_NAME_PREFIX: &str = "consul:event:";
/// How many recent events an agent keeps (Consul's `eventBuf` size).
pub const EVENT_BUFFER_EVENTS: usize = 256;
/// The envelope version praetor writes and fully understands (Consul's
/// `userEventMaxVersion`).
pub const EVENT_VERSION_MAX: i64 = 1;
/// Longest filter expression accepted, in bytes (the whole event must fit serf's 9 KiB
/// limit anyway).
pub const EVENT_FILTER_BYTES_MAX: usize = 1024;

/// Consul's `UserEvent` envelope, carried as the serf event's payload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsulEvent {
    pub id: String,
    pub name: String,
    /// `None` when the event was fired without a body (JSON `null`).
    pub payload: Option<Vec<u8>>,
    pub node_filter: String,
    pub service_filter: String,
    pub tag_filter: String,
    pub version: i64,
    /// serf's Lamport time of the event; set on receipt, never sent.
    pub ltime: u64,
}

impl ConsulEvent {
    /// Encodes the envelope as Consul's msgpack handle does: fields in declaration order,
    /// empty optional fields left out, the payload as msgpack bin.
    pub fn encode(&self) -> Vec<u8> {
        let optional = [
            ("nf", &self.node_filter),
            ("sf", &self.service_filter),
            ("tf", &self.tag_filter),
        ];
        let fields = 3
            + usize::from(self.payload.as_ref().is_some_and(|p| !p.is_empty()))
            + optional.iter().filter(|(_, v)| !v.is_empty()).count();
        let mut w = Writer::new();
        w.map_len(fields);
        w.str("ID");
        w.str(&self.id);
        w.str("n");
        w.str(&self.name);
        if let Some(payload) = self.payload.as_ref().filter(|p| !p.is_empty()) {
            w.str("p");
            write_bin(&mut w, payload);
        }
        for (key, value) in optional {
            if !value.is_empty() {
                w.str(key);
                w.str(value);
            }
        }
        w.str("v");
        w.int(self.version);
        w.into_inner()
    }

    /// Decodes an envelope; unknown fields are skipped, as Go's decoder does.
    pub fn decode(bytes: &[u8]) -> Result<ConsulEvent, WireError> {
        let mut r = Reader::new(bytes);
        let mut event = ConsulEvent::default();
        for _ in 0..r.map_len()? {
            let key = r.str()?;
            match key {
                "ID" => event.id = r.str()?.to_owned(),
                "n" => event.name = r.str()?.to_owned(),
                "p" => event.payload = r.opt_bytes()?.map(<[u8]>::to_vec),
                "nf" => event.node_filter = r.str()?.to_owned(),
                "sf" => event.service_filter = r.str()?.to_owned(),
                "tf" => event.tag_filter = r.str()?.to_owned(),
                "v" => event.version = r.i64("v")?,
                _ => r.skip()?,
            }
        }
        Ok(event)
    }

    /// Consul's `uuidToUint64`: the UUID's two 64-bit halves XORed. Malformed IDs give 0.
    pub fn index(&self) -> u64 {
        event_id_to_index(&self.id).unwrap_or(0)
    }

    /// Consul's JSON shape of a user event.
    pub fn to_json(&self) -> serde_json::Value {
        use base64::Engine;
        serde_json::json!({
            "ID": self.id,
            "Name": self.name,
            "Payload": self.payload.as_ref().map(|p| base64::engine::general_purpose::STANDARD.encode(p)),
            "NodeFilter": self.node_filter,
            "ServiceFilter": self.service_filter,
            "TagFilter": self.tag_filter,
            "Version": self.version,
            "LTime": self.ltime,
        })
    }
}

fn write_bin(w: &mut Writer, bytes: &[u8]) {
    let len = bytes.len();
    if len <= u8::MAX as usize {
        w.raw(&[0xc4, len as u8]);
    } else if len <= u16::MAX as usize {
        w.raw(&[0xc5]);
        w.raw(&(len as u16).to_be_bytes());
    } else {
        w.raw(&[0xc6]);
        w.raw(&(len as u32).to_be_bytes());
    }
    w.raw(bytes);
}

/// Checks the filters Consul validates before firing.
pub fn validate_filters(event: &ConsulEvent) -> Result<(), String> {
    if event.name.is_empty() {
        return Err("User event missing name".to_string());
    }
    if !event.tag_filter.is_empty() && event.service_filter.is_empty() {
        return Err("Cannot provide tag filter without service filter".to_string());
    }
    for (what, filter) in [
        ("node", &event.node_filter),
        ("service", &event.service_filter),
        ("tag", &event.tag_filter),
    ] {
        if filter.len() > EVENT_FILTER_BYTES_MAX {
            return Err(format!(
                "Invalid {what} filter: longer than {EVENT_FILTER_BYTES_MAX} bytes"
            ));
        }
        if !filter.is_empty() {
            regex::Regex::new(filter).map_err(|e| format!("Invalid {what} filter: {e}"))?;
        }
    }
    Ok(())
}

/// Consul's `shouldProcessUserEvent`: does this agent (its node name and local services,
/// as `(name, tags)`) match the event's filters? Filters are unanchored regexps.
pub fn matches_filters<'a>(
    event: &ConsulEvent,
    node_name: &str,
    services: impl IntoIterator<Item = (&'a str, Vec<&'a str>)>,
) -> bool {
    let compile = |f: &str| {
        if f.len() > EVENT_FILTER_BYTES_MAX {
            return None;
        }
        regex::Regex::new(f).ok()
    };
    if !event.node_filter.is_empty() {
        match compile(&event.node_filter) {
            Some(re) if re.is_match(node_name) => {}
            _ => return false,
        }
    }
    if event.service_filter.is_empty() {
        return true;
    }
    let Some(service_re) = compile(&event.service_filter) else {
        return false;
    };
    let tag_re = if event.tag_filter.is_empty() {
        None
    } else {
        match compile(&event.tag_filter) {
            Some(re) => Some(re),
            None => return false,
        }
    };
    services.into_iter().any(|(name, tags)| {
        service_re.is_match(name)
            && tag_re
                .as_ref()
                .is_none_or(|re| tags.iter().any(|t| re.is_match(t)))
    })
}

/// Consul's list index: the newest event's UUID-derived index, or 1 when there is none
/// (never 0, which would make a watcher spin).
/// Consul's `uuidToUint64` (the index an event ID stands for): the UUID's two 64-bit halves
/// XORed; `None` for an ID that is not a UUID. `praetor watch -type event` uses it too.
pub fn event_id_to_index(id: &str) -> Option<u64> {
    uuid::Uuid::parse_str(id).ok().map(|u| {
        let v = u.as_u128();
        (v >> 64) as u64 ^ v as u64
    })
}

pub fn list_index(events: &[Arc<ConsulEvent>]) -> u64 {
    events.last().map(|e| e.index()).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str) -> ConsulEvent {
        ConsulEvent {
            id: id.to_string(),
            name: "deploy".to_string(),
            payload: Some(b"v1".to_vec()),
            service_filter: "web".to_string(),
            version: 1,
            ..Default::default()
        }
    }

    #[test]
    fn envelope_round_trips_and_has_consul_field_names() {
        let e = event("6f3e7d53-3a2c-4c2e-9b7f-0d1e2f3a4b5c");
        let bytes = e.encode();
        // map of 5: ID, n, p, sf, v
        assert_eq!(bytes[0], 0x85);
        assert!(bytes.windows(4).any(|w| w == [0xa1, b'p', 0xc4, 2]));
        assert_eq!(ConsulEvent::decode(&bytes).unwrap(), e);
        let empty = ConsulEvent {
            payload: None,
            service_filter: String::new(),
            ..e
        };
        assert_eq!(empty.encode()[0], 0x83);
        assert_eq!(ConsulEvent::decode(&empty.encode()).unwrap(), empty);
        assert!(ConsulEvent::decode(&[0x85, 0xa1]).is_err());
    }

    #[test]
    fn index_xors_the_uuid_halves() {
        let e = event("00000000-0000-0001-0000-000000000003");
        assert_eq!(e.index(), 1 ^ 3);
        assert_eq!(event("nonsense").index(), 0);
        assert_eq!(list_index(&[]), 1);
    }

    #[test]
    fn filters_match_like_consul() {
        let mut e = event("x");
        e.service_filter.clear();
        e.node_filter = "^web-".to_string();
        assert!(matches_filters(&e, "web-1", []));
        assert!(!matches_filters(&e, "db-1", []));
        e.node_filter.clear();
        e.service_filter = "api".to_string();
        e.tag_filter = "^v2$".to_string();
        assert!(!matches_filters(&e, "n", [("api", vec!["v1"])]));
        assert!(matches_filters(&e, "n", [("api", vec!["v1", "v2"])]));
        assert!(!matches_filters(&e, "n", [("db", vec!["v2"])]));
        e.tag_filter = "(".to_string();
        assert!(validate_filters(&e).is_err());
        assert!(!matches_filters(&e, "n", [("api", vec!["v2"])]));
    }
}
