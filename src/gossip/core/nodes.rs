//! Node state changes, memberlist's `aliveNode`, `suspectNode`, `deadNode` and `refute`:
//! the only place a node's state or incarnation changes. An alive message with a higher
//! incarnation wins; a suspicion starts a Lifeguard timer that confirmations shorten; an
//! accusation of the local node is refuted with a higher incarnation. Every change is also
//! reported to the serf layer (`serf_node_join` / `serf_node_leave` / `serf_node_update`).

use super::*;

impl Gossip {
    pub(super) fn refute(&mut self, i: usize, accused: u32) {
        let mut inc = self.next_incarnation();
        if accused >= inc {
            self.incarnation = accused.wrapping_add(1);
            inc = self.incarnation;
        }
        debug_assert_eq!(
            self.nodes[i].name, self.config.node_name,
            "only the local node refutes"
        );
        debug_assert!(
            inc > accused || accused == u32::MAX,
            "a refutation outbids the accusation"
        );
        self.nodes[i].incarnation = inc;
        self.apply_awareness(1);
        let me = &self.nodes[i];
        let a = Alive {
            incarnation: inc,
            node: me.name.clone(),
            addr: ip_to_wire(me.addr),
            port: me.port,
            meta: me.meta.clone(),
            vsn: me.vsn.to_vec(),
        };
        let name = me.name.clone();
        self.ml_broadcast(&name, &Message::Alive(a), None);
    }

    /// Adds a node we had never heard of to the table; returns its slot.
    pub(super) fn insert_node(&mut self, node: Node) -> usize {
        debug_assert!(!self.index.contains_key(&node.name));
        // Insert at a random position so probe order stays random.
        let n = self.nodes.len();
        let offset = self.random_index(n + 1);
        let name = node.name.clone();
        self.nodes.push(node);
        self.nodes.swap(offset, n);
        if offset != n {
            let moved = self.nodes[n].name.clone();
            self.index.insert(moved, n);
        }
        self.index.insert(name, offset);
        debug_assert_eq!(self.index.len(), self.nodes.len());
        debug_assert_eq!(self.index.get(&self.nodes[offset].name), Some(&offset));
        offset
    }

    pub(super) fn alive_node(&mut self, a: Alive, notify: Option<u64>, bootstrap: bool) {
        let is_local = a.node == self.config.node_name;
        if self.left && is_local {
            return;
        }
        if a.vsn.len() >= 3 && (a.vsn[0] == 0 || a.vsn[1] == 0 || a.vsn[0] > a.vsn[1]) {
            return;
        }
        let Ok(addr) = ip_from_wire(&a.addr) else {
            self.stats.decode_errors += 1;
            return;
        };
        let mut vsn = [0u8; 6];
        if a.vsn.len() >= 6 {
            vsn.copy_from_slice(&a.vsn[..6]);
        }
        let mut updates_node = false;
        let i = match self.index.get(&a.node) {
            Some(&i) => {
                let n = &self.nodes[i];
                if n.addr != addr || n.port != a.port {
                    let reclaim = self.config.dead_node_reclaim_time > Duration::ZERO
                        && self.now.saturating_sub(n.state_change)
                            > self.config.dead_node_reclaim_time;
                    if n.state == NodeStateKind::Left || (n.state == NodeStateKind::Dead && reclaim)
                    {
                        updates_node = true;
                    } else {
                        // Name conflict: another node claims this name. memberlist only logs.
                        return;
                    }
                }
                i
            }
            None => {
                let node = Node {
                    name: a.node.clone(),
                    addr,
                    port: a.port,
                    meta: a.meta.clone(),
                    incarnation: 0,
                    state: NodeStateKind::Dead,
                    state_change: self.now,
                    vsn,
                };
                self.insert_node(node)
            }
        };
        let state = &self.nodes[i];
        if a.incarnation <= state.incarnation && !is_local && !updates_node {
            return;
        }
        if a.incarnation < state.incarnation && is_local {
            return;
        }
        self.suspicions.remove(&a.node);
        let old_incarnation = state.incarnation;
        let old_state = state.state;
        let old_meta = state.meta.clone();
        if !bootstrap && is_local {
            let same = a.incarnation == state.incarnation
                && a.meta == state.meta
                && a.vsn[..] == state.vsn[..];
            if same {
                return;
            }
            self.refute(i, a.incarnation);
        } else {
            self.ml_broadcast(&a.node, &Message::Alive(a.clone()), notify);
            let now = self.now;
            let n = &mut self.nodes[i];
            if a.vsn.len() >= 6 {
                n.vsn = vsn;
            }
            n.incarnation = a.incarnation;
            n.meta = a.meta;
            n.addr = addr;
            n.port = a.port;
            if n.state != NodeStateKind::Alive {
                n.state = NodeStateKind::Alive;
                n.state_change = now;
            }
        }
        debug_assert!(
            self.nodes[i].state == NodeStateKind::Alive
                && !self.suspicions.contains_key(&self.nodes[i].name),
            "an accepted alive message leaves the node alive and unsuspected"
        );
        // Only a node that returns from another address after leaving starts over.
        debug_assert!(self.nodes[i].incarnation >= old_incarnation || updates_node);
        if matches!(old_state, NodeStateKind::Dead | NodeStateKind::Left) {
            self.serf_node_join(i);
        } else if old_meta != self.nodes[i].meta {
            self.serf_node_update(i);
        }
    }

    pub(super) fn suspect_node(&mut self, s: Suspect) {
        let Some(&i) = self.index.get(&s.node) else {
            return;
        };
        if s.incarnation < self.nodes[i].incarnation {
            return;
        }
        if let Some(susp) = self.suspicions.get_mut(&s.node) {
            // Lifeguard: an independent confirmation shortens the timeout.
            if susp.n < susp.k && !susp.confirmations.contains(&s.from) {
                susp.confirmations.insert(s.from.clone());
                susp.n += 1;
                let total = suspicion_total(susp.n, susp.k, susp.min, susp.max);
                let deadline = susp.start + total;
                self.suspicion_generation += 1;
                susp.generation = self.suspicion_generation;
                let generation = susp.generation;
                self.schedule(
                    deadline.max(self.now),
                    Timer::Suspicion(s.node.clone(), generation),
                );
                let node = s.node.clone();
                self.ml_broadcast(&node, &Message::Suspect(s), None);
            }
            return;
        }
        if self.nodes[i].state != NodeStateKind::Alive {
            return;
        }
        if s.node == self.config.node_name {
            self.refute(i, s.incarnation);
            return;
        }
        let node = s.node.clone();
        self.ml_broadcast(&node, &Message::Suspect(s.clone()), None);
        let now = self.now;
        let n = &mut self.nodes[i];
        debug_assert!(
            s.incarnation >= n.incarnation,
            "a suspicion lowers no incarnation"
        );
        n.incarnation = s.incarnation;
        n.state = NodeStateKind::Suspect;
        n.state_change = now;
        let mut k = self.config.suspicion_mult.saturating_sub(2);
        let count = self.nodes.len();
        if (count as i64 - 2) < k as i64 {
            k = 0;
        }
        let min = suspicion_timeout(
            self.config.suspicion_mult,
            count,
            self.config.probe_interval,
        );
        let max = min * self.config.suspicion_max_timeout_mult;
        let timeout = if k < 1 { min } else { max };
        self.suspicion_generation += 1;
        let generation = self.suspicion_generation;
        let mut confirmations = HashSet::new();
        confirmations.insert(s.from);
        self.suspicions.insert(
            node.clone(),
            Suspicion {
                k,
                n: 0,
                min,
                max,
                start: now,
                confirmations,
                generation,
                state_change: now,
            },
        );
        debug_assert!(
            self.nodes[i].state == NodeStateKind::Suspect && self.suspicions.contains_key(&node)
        );
        self.schedule(now + timeout, Timer::Suspicion(node, generation));
    }

    pub(super) fn suspicion_fired(&mut self, node: &str, generation: u64) {
        let Some(s) = self.suspicions.get(node) else {
            return;
        };
        if s.generation != generation {
            return;
        }
        let Some(&i) = self.index.get(node) else {
            return;
        };
        let n = &self.nodes[i];
        if n.state != NodeStateKind::Suspect || n.state_change != s.state_change {
            return;
        }
        let d = Suspect {
            incarnation: n.incarnation,
            node: n.name.clone(),
            from: self.config.node_name.clone(),
        };
        self.dead_node(d);
    }

    pub(super) fn dead_node(&mut self, d: Suspect) {
        let Some(&i) = self.index.get(&d.node) else {
            return;
        };
        if d.incarnation < self.nodes[i].incarnation {
            return;
        }
        self.suspicions.remove(&d.node);
        if self.nodes[i].dead_or_left() {
            return;
        }
        if d.node == self.config.node_name {
            if !self.left {
                self.refute(i, d.incarnation);
                return;
            }
            let notify = self.new_notify();
            let node = d.node.clone();
            self.ml_broadcast(&node, &Message::Dead(d.clone()), Some(notify));
            if let LeavePhase::Dead { request, step, .. } = self.leave_phase {
                self.leave_phase = LeavePhase::Dead {
                    request,
                    notify,
                    step,
                };
            }
        } else {
            let node = d.node.clone();
            self.ml_broadcast(&node, &Message::Dead(d.clone()), None);
        }
        let now = self.now;
        let n = &mut self.nodes[i];
        debug_assert!(
            d.incarnation >= n.incarnation,
            "a death lowers no incarnation"
        );
        n.incarnation = d.incarnation;
        n.state = if d.node == d.from {
            NodeStateKind::Left
        } else {
            NodeStateKind::Dead
        };
        n.state_change = now;
        debug_assert!(
            d.node != self.config.node_name || self.left,
            "the local node is declared dead only after it left"
        );
        debug_assert!(self.nodes[i].dead_or_left() && !self.suspicions.contains_key(&d.node));
        self.serf_node_leave(i);
    }
}
