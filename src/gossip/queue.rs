//! memberlist's `TransmitLimitedQueue`: broadcasts piggybacked on outgoing packets, each
//! retransmitted up to `retransmit_mult * ceil(log10(n + 1))` times. Messages with the
//! fewest transmits go first, larger before smaller, newer before older. A named
//! broadcast (memberlist's alive/suspect/dead, named by node) replaces any earlier one
//! with the same name. A broadcast may carry a notification id that is reported when it
//! is finished (sent enough times, replaced, or pruned), which is how leave waits.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

/// memberlist `retransmitLimit`.
pub fn retransmit_limit(retransmit_mult: usize, n: usize) -> usize {
    let node_scale = ((n + 1) as f64).log10().ceil() as usize;
    retransmit_mult * node_scale
}

type Key = (usize, Reverse<usize>, Reverse<u64>);

#[derive(Debug)]
struct Item {
    transmits: usize,
    msg: Vec<u8>,
    name: Option<String>,
    notify: Option<u64>,
}

#[derive(Debug, Default)]
pub struct BroadcastQueue {
    order: BTreeSet<Key>,
    items: HashMap<u64, Item>,
    by_name: HashMap<String, u64>,
    next_id: u64,
}

impl BroadcastQueue {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn key(id: u64, item: &Item) -> Key {
        (item.transmits, Reverse(item.msg.len()), Reverse(id))
    }

    fn remove(&mut self, id: u64, finished: &mut Vec<u64>) -> Option<Item> {
        let item = self.items.remove(&id)?;
        self.order.remove(&Self::key(id, &item));
        if let Some(name) = &item.name {
            if self.by_name.get(name) == Some(&id) {
                self.by_name.remove(name);
            }
        }
        if let Some(n) = item.notify {
            finished.push(n);
        }
        Some(item)
    }

    /// Queues a broadcast; ids of broadcasts it replaced are appended to `finished`.
    pub fn push(
        &mut self,
        name: Option<String>,
        msg: Vec<u8>,
        notify: Option<u64>,
        finished: &mut Vec<u64>,
    ) {
        if let Some(name) = &name {
            if let Some(&old) = self.by_name.get(name) {
                self.remove(old, finished);
            }
        }
        self.next_id += 1;
        let id = self.next_id;
        let item = Item {
            transmits: 0,
            msg,
            name,
            notify,
        };
        self.order.insert(Self::key(id, &item));
        if let Some(name) = &item.name {
            self.by_name.insert(name.clone(), id);
        }
        self.items.insert(id, item);
    }

    /// memberlist `GetBroadcasts`: messages fitting in `limit` bytes, counting
    /// `overhead` per message. Finished notification ids are appended to `finished`.
    pub fn take(
        &mut self,
        overhead: usize,
        limit: usize,
        num_nodes: usize,
        retransmit_mult: usize,
        finished: &mut Vec<u64>,
    ) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        if self.items.is_empty() {
            return out;
        }
        let transmit_limit = retransmit_limit(retransmit_mult, num_nodes);
        let (Some(first), Some(last)) = (self.order.first(), self.order.last()) else {
            return out;
        };
        let (min_tr, max_tr) = (first.0, last.0);
        let mut used = 0usize;
        let mut reinsert = Vec::new();
        let mut transmits = min_tr;
        while transmits <= max_tr {
            if limit <= used + overhead {
                break;
            }
            let free = limit - used - overhead;
            let lo: Key = (transmits, Reverse(free), Reverse(u64::MAX));
            let hi: Key = (transmits + 1, Reverse(usize::MAX), Reverse(u64::MAX));
            let Some(&key) = self.order.range(lo..hi).next() else {
                transmits += 1;
                continue;
            };
            let id = key.2 .0;
            self.order.remove(&key);
            let Some(item) = self.items.get_mut(&id) else {
                continue;
            };
            used += overhead + item.msg.len();
            out.push(item.msg.clone());
            if item.transmits + 1 >= transmit_limit {
                self.remove_unordered(id, finished);
            } else {
                item.transmits += 1;
                reinsert.push(id);
            }
        }
        for id in reinsert {
            if let Some(item) = self.items.get(&id) {
                self.order.insert(Self::key(id, item));
            }
        }
        out
    }

    /// Removes an item already taken out of `order`.
    fn remove_unordered(&mut self, id: u64, finished: &mut Vec<u64>) {
        if let Some(item) = self.items.remove(&id) {
            if let Some(name) = &item.name {
                if self.by_name.get(name) == Some(&id) {
                    self.by_name.remove(name);
                }
            }
            if let Some(n) = item.notify {
                finished.push(n);
            }
        }
    }

    /// memberlist `Prune`: keep at most `max_retain`, dropping the most-sent first.
    pub fn prune(&mut self, max_retain: usize, finished: &mut Vec<u64>) {
        while self.items.len() > max_retain {
            let Some(&key) = self.order.last() else { break };
            self.remove(key.2 .0, finished);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_scales_with_log_n() {
        assert_eq!(retransmit_limit(4, 1), 4);
        assert_eq!(retransmit_limit(4, 9), 4);
        assert_eq!(retransmit_limit(4, 10), 8);
        assert_eq!(retransmit_limit(4, 999), 12);
        assert_eq!(retransmit_limit(4, 1000), 16);
    }

    #[test]
    fn fewest_transmits_first_and_names_replace() {
        let mut q = BroadcastQueue::default();
        let mut fin = Vec::new();
        q.push(Some("a".into()), b"a1".to_vec(), Some(1), &mut fin);
        q.push(Some("a".into()), b"a22".to_vec(), None, &mut fin);
        assert_eq!(fin, vec![1]);
        q.push(None, b"x".to_vec(), None, &mut fin);
        let first = q.take(2, 100, 3, 1, &mut fin);
        assert_eq!(first, vec![b"a22".to_vec(), b"x".to_vec()]);
        // Limit 1 * ceil(log10(4)) = 1 transmit: both finished now.
        assert!(q.is_empty());
    }

    #[test]
    fn respects_byte_limit() {
        let mut q = BroadcastQueue::default();
        let mut fin = Vec::new();
        q.push(None, vec![0; 50], None, &mut fin);
        q.push(None, vec![1; 10], None, &mut fin);
        let got = q.take(2, 30, 10, 4, &mut fin);
        assert_eq!(got, vec![vec![1; 10]]);
        assert_eq!(q.len(), 2);
    }
}
