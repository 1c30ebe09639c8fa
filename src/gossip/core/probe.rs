//! Probing, memberlist's `probe`/`probeNode`: each probe interval one node in a shuffled
//! round-robin is pinged directly, then through `indirect_checks` others, then over TCP; a
//! probe that no one answers suspects the node. Lifeguard's awareness scales the timeouts and
//! nacks from relays count against our own health. Coordinates are sampled from acks.
//!
//! Invariant: at most one probe is outstanding (`Gossip::probe`), and every ack handler is
//! removed by its expiry timer if no ack arrives.

use super::*;

impl Gossip {
    pub(super) fn probe_next(&mut self) {
        let mut checked = 0;
        loop {
            if checked >= self.nodes.len() {
                self.schedule(self.now + self.config.probe_interval, Timer::Probe);
                return;
            }
            if self.probe_index >= self.nodes.len() {
                self.reset_nodes();
                self.probe_index = 0;
                checked += 1;
                continue;
            }
            let node = &self.nodes[self.probe_index];
            let skip = node.name == self.config.node_name || node.dead_or_left();
            self.probe_index += 1;
            if skip {
                checked += 1;
                continue;
            }
            let name = node.name.clone();
            debug_assert!(self.probe_index <= self.nodes.len());
            self.probe_node(&name);
            return;
        }
    }

    /// memberlist `resetNodes`: drop nodes dead longer than GossipToTheDeadTime and
    /// shuffle the probe order.
    pub(super) fn reset_nodes(&mut self) {
        let now = self.now;
        let keep_for = self.config.gossip_to_the_dead_time;
        let local = self.config.node_name.clone();
        self.nodes.retain(|n| {
            !(n.dead_or_left() && now.saturating_sub(n.state_change) > keep_for && n.name != local)
        });
        for i in (1..self.nodes.len()).rev() {
            let j = self.rng.random_range(0..=i);
            self.nodes.swap(i, j);
        }
        self.reindex();
        debug_assert!(
            self.index.contains_key(&local),
            "the local node survives every reset"
        );
    }

    pub(super) fn reindex(&mut self) {
        self.index.clear();
        for (i, n) in self.nodes.iter().enumerate() {
            self.index.insert(n.name.clone(), i);
        }
        // Names are unique: one node per name, one index entry per node.
        debug_assert_eq!(self.index.len(), self.nodes.len());
    }

    pub(super) fn self_ping(&mut self, target: &str) -> Ping {
        Ping {
            seq_no: self.next_seq(),
            node: target.to_owned(),
            source_addr: ip_to_wire(self.config.advertise_addr),
            source_port: self.config.advertise_port,
            source_node: self.config.node_name.clone(),
        }
    }

    pub(super) fn probe_node(&mut self, name: &str) {
        debug_assert_ne!(name, self.config.node_name, "a node never probes itself");
        debug_assert!(self.probe.is_none(), "at most one probe is outstanding");
        let Some(&i) = self.index.get(name) else {
            return;
        };
        let node = self.nodes[i].clone();
        let ping = self.self_ping(name);
        let seq = ping.seq_no;
        let interval = self.scale_timeout(self.config.probe_interval);
        self.stats.probes += 1;
        let earlier = self.ack_handlers.insert(seq, AckHandler::Probe);
        debug_assert!(
            earlier.is_none(),
            "sequence number {seq} still awaited an ack"
        );
        self.probe = Some(Probe {
            seq,
            node: name.to_owned(),
            sent: self.now,
            acked: false,
            expected_nacks: 0,
            nacks: 0,
            tcp_stream: None,
            awareness_delta: -1,
        });
        let ping_bytes = Message::Ping(ping).encode();
        if node.state == NodeStateKind::Alive {
            self.send_msg(node.socket(), ping_bytes);
        } else {
            // Buddy system: tell a suspect node it is suspected so it can refute.
            let s = Message::Suspect(Suspect {
                incarnation: node.incarnation,
                node: node.name.clone(),
                from: self.config.node_name.clone(),
            })
            .encode();
            let compound = ml::make_compound(&[&ping_bytes, &s]);
            self.send_raw(node.socket(), node.vsn[1] >= 5, compound);
        }
        self.schedule(
            self.now + self.config.probe_timeout,
            Timer::ProbeTimeout(seq),
        );
        self.schedule(self.now + interval, Timer::ProbeDeadline(seq));
    }

    pub(super) fn probe_timeout(&mut self, seq: u32) {
        let Some(probe) = self.probe.as_ref() else {
            return;
        };
        if probe.seq != seq || probe.acked {
            return;
        }
        let target = probe.node.clone();
        let Some(&ti) = self.index.get(&target) else {
            return;
        };
        let target_node = self.nodes[ti].clone();
        // Indirect probes through up to IndirectChecks other alive nodes.
        let local = self.config.node_name.clone();
        let peers = self.k_random_nodes(self.config.indirect_checks, |n| {
            n.name == local || n.name == target || n.state != NodeStateKind::Alive
        });
        let mut expected_nacks = 0;
        for peer in peers {
            let nack = self.nodes[peer].vsn[1] >= 4;
            if nack {
                expected_nacks += 1;
            }
            let ind = IndirectPingReq {
                seq_no: seq,
                target: ip_to_wire(target_node.addr),
                port: target_node.port,
                node: target_node.name.clone(),
                nack,
                source_addr: ip_to_wire(self.config.advertise_addr),
                source_port: self.config.advertise_port,
                source_node: local.clone(),
            };
            let to = self.nodes[peer].socket();
            self.send_msg(to, Message::IndirectPing(ind).encode());
        }
        // TCP fallback ping for peers that understand it.
        let mut tcp_stream = None;
        if !self.config.disable_tcp_pings && target_node.vsn[1] >= 3 {
            let ping = Ping {
                seq_no: seq,
                node: target.clone(),
                source_addr: ip_to_wire(self.config.advertise_addr),
                source_port: self.config.advertise_port,
                source_node: local.clone(),
            };
            let id = self.open_stream(
                target_node.socket(),
                Message::Ping(ping).encode(),
                StreamKind::TcpPing { seq },
            );
            tcp_stream = Some(id);
        }
        debug_assert!(expected_nacks as usize <= self.config.indirect_checks);
        if let Some(p) = self.probe.as_mut() {
            p.expected_nacks = expected_nacks;
            p.tcp_stream = tcp_stream;
        }
    }

    pub(super) fn probe_deadline(&mut self, seq: u32) {
        let Some(probe) = self.probe.take() else {
            return;
        };
        if probe.seq != seq {
            self.probe = Some(probe);
            return;
        }
        self.ack_handlers.remove(&seq);
        if let Some(id) = probe.tcp_stream {
            self.streams.remove(&id);
        }
        self.finish_probe(probe, false);
    }

    pub(super) fn finish_probe(&mut self, probe: Probe, ok: bool) {
        debug_assert!(
            self.probe.is_none(),
            "a finished probe is no longer outstanding"
        );
        debug_assert!(
            !self.ack_handlers.contains_key(&probe.seq) || ok,
            "a probe that timed out no longer awaits its ack"
        );
        if ok {
            self.apply_awareness(probe.awareness_delta);
        } else {
            self.stats.probe_failures += 1;
            let delta = if probe.expected_nacks > 0 {
                probe.expected_nacks.saturating_sub(probe.nacks) as i32
            } else {
                1
            };
            self.apply_awareness(delta);
            if let Some(&i) = self.index.get(&probe.node) {
                let s = Suspect {
                    incarnation: self.nodes[i].incarnation,
                    node: probe.node.clone(),
                    from: self.config.node_name.clone(),
                };
                self.suspect_node(s);
            }
        }
        // The next probe starts one interval after this one started (memberlist's
        // ticker), or right away if the probe ran longer than that.
        let next = (probe.sent + self.config.probe_interval).max(self.now);
        self.schedule(next, Timer::Probe);
    }

    pub(super) fn probe_acked(&mut self, payload: Option<Vec<u8>>) {
        let Some(probe) = self.probe.take() else {
            return;
        };
        let rtt = self.now.saturating_sub(probe.sent);
        if let Some(id) = probe.tcp_stream {
            self.streams.remove(&id);
        }
        if let Some(payload) = payload {
            self.coordinate_sample(&probe.node, &payload, rtt);
        }
        self.finish_probe(probe, true);
    }

    /// serf `pingDelegate.NotifyPingComplete`.
    pub(super) fn coordinate_sample(&mut self, node: &str, payload: &[u8], rtt: Duration) {
        if self.config.disable_coordinates || payload.is_empty() {
            return;
        }
        let Ok(coord) = Coordinate::decode_ack_payload(payload) else {
            self.stats.decode_errors += 1;
            return;
        };
        if self
            .vivaldi
            .update(node, &coord, rtt, &mut self.rng)
            .is_ok()
        {
            self.coordinates.insert(node.to_owned(), coord);
            let own = self.vivaldi.coordinate().clone();
            self.coordinates.insert(self.config.node_name.clone(), own);
        }
    }

    pub(super) fn relay_expire(&mut self, seq: u32) {
        if let Some(AckHandler::Relay {
            orig_seq,
            reply_to,
            nack,
            acked,
        }) = self.ack_handlers.remove(&seq)
        {
            if nack && !acked {
                self.send_msg(
                    reply_to,
                    Message::Nack(NackResp { seq_no: orig_seq }).encode(),
                );
            }
        }
    }

    /// Sends `messages` as one packet straight to every member we can reach (up to
    /// [`ANNOUNCE_FANOUT_MEMBERS_MAX`], a random sample beyond), besides gossiping them.
    /// Used for our own leave and (re)join only. Gossip reaches each member with high
    /// probability but not certainty (a broadcast is sent `retransmit_mult * log10(n)`
    /// times by each member that relays it, so a given member misses it with probability
    /// about e^-8 at Consul's settings): over many leaves and restarts some view
    /// went on showing a member that left as leaving, or a restarted member as left,
    /// until the next push/pull up to a minute later. One packet per member per leave or
    /// join makes that wait a lost packet's, and peers see nothing but ordinary messages.
    pub(super) fn announce(&mut self, messages: &[Vec<u8>]) {
        let local = &self.config.node_name;
        let mut targets: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].name != *local && !self.nodes[i].dead_or_left())
            .collect();
        if targets.len() > ANNOUNCE_FANOUT_MEMBERS_MAX {
            for k in 0..ANNOUNCE_FANOUT_MEMBERS_MAX {
                let j = self.rng.random_range(k..targets.len());
                targets.swap(k, j);
            }
            targets.truncate(ANNOUNCE_FANOUT_MEMBERS_MAX);
        }
        let parts: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
        let packet = ml::make_compound(&parts);
        debug_assert!(targets.len() <= ANNOUNCE_FANOUT_MEMBERS_MAX);
        for i in targets {
            let (to, crc) = (self.nodes[i].socket(), self.nodes[i].vsn[1] >= 5);
            self.send_raw(to, crc, packet.clone());
        }
    }

    /// memberlist `kRandomNodes`: up to `k` distinct random nodes not excluded.
    pub(super) fn k_random_nodes(
        &mut self,
        k: usize,
        exclude: impl Fn(&Node) -> bool,
    ) -> Vec<usize> {
        let n = self.nodes.len();
        let mut picked: Vec<usize> = Vec::with_capacity(k);
        let mut tries = 0;
        while tries < 3 * n && picked.len() < k {
            tries += 1;
            let i = self.random_index(n);
            if exclude(&self.nodes[i]) || picked.contains(&i) {
                continue;
            }
            picked.push(i);
        }
        debug_assert!(picked.len() <= k);
        debug_assert!(picked.iter().all(|&i| !exclude(&self.nodes[i])));
        picked
    }
}
