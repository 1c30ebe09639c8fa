//! Gossip and state exchange: the periodic gossip of queued broadcasts to random nodes,
//! push/pull of the whole node table over a stream (periodic and at join), and the decoding
//! and dispatch of every incoming packet and stream (memberlist `handleCommand`, ping,
//! indirect ping and ack handling).

use super::*;

impl Gossip {
    pub(super) fn gossip(&mut self) {
        let local = self.config.node_name.clone();
        let now = self.now;
        let dead_time = self.config.gossip_to_the_dead_time;
        let targets = self.k_random_nodes(self.config.gossip_nodes, |n| {
            if n.name == local {
                return true;
            }
            match n.state {
                NodeStateKind::Alive | NodeStateKind::Suspect => false,
                NodeStateKind::Dead => now.saturating_sub(n.state_change) > dead_time,
                NodeStateKind::Left => true,
            }
        });
        let mut avail = self
            .config
            .udp_buffer_size
            .saturating_sub(COMPOUND_HEADER_OVERHEAD + self.label_overhead());
        if self.encryption_enabled() {
            avail = avail.saturating_sub(security::encrypt_overhead(1));
        }
        for t in targets {
            // The filter above never picks ourselves, nor a node gone past its time.
            debug_assert!(self.nodes[t].name != local);
            let msgs = self.get_broadcasts(COMPOUND_PART_OVERHEAD, avail);
            if msgs.is_empty() {
                return;
            }
            let (to, crc) = (self.nodes[t].socket(), self.nodes[t].vsn[1] >= 5);
            if msgs.len() == 1 {
                let m = msgs.into_iter().next().unwrap_or_default();
                self.send_raw(to, crc, m);
            } else {
                let parts: Vec<&[u8]> = msgs.iter().map(|m| m.as_slice()).collect();
                let c = ml::make_compound(&parts);
                self.send_raw(to, crc, c);
            }
        }
    }

    pub(super) fn periodic_push_pull(&mut self) {
        let local = self.config.node_name.clone();
        let picked = self.k_random_nodes(1, |n| n.name == local || n.state != NodeStateKind::Alive);
        if let Some(&i) = picked.first() {
            debug_assert!(
                self.nodes[i].name != local && self.nodes[i].state == NodeStateKind::Alive
            );
            let to = self.nodes[i].socket();
            self.push_pull(to, None);
        }
    }

    pub(super) fn open_stream(
        &mut self,
        to: SocketAddr,
        payload: Vec<u8>,
        kind: StreamKind,
    ) -> u64 {
        self.next_stream += 1;
        let id = self.next_stream;
        let bytes = self.seal_stream(payload, true);
        self.stats.streams_opened += 1;
        self.stats.stream_bytes_sent += bytes.len() as u64;
        let earlier = self.streams.insert(id, kind);
        debug_assert!(earlier.is_none(), "stream id {id} reused");
        self.out.push(Output::Stream { id, to, bytes });
        id
    }

    pub(super) fn seal_stream(&mut self, payload: Vec<u8>, dialing: bool) -> Vec<u8> {
        let nonce = self.nonce();
        let key = if self.encryption_enabled() && self.config.gossip_verify_outgoing {
            self.keys.first().cloned()
        } else {
            None
        };
        let seal = StreamSeal {
            compress: self.config.enable_compression,
            key: key.as_deref(),
            encryption_version: 1,
            label: &self.config.label,
            write_label_header: dialing,
        };
        ml::seal_stream(payload, &seal, nonce)
    }

    pub(super) fn push_pull(&mut self, to: SocketAddr, join_request: Option<u64>) {
        let state = self.local_state(join_request.is_some());
        self.open_stream(to, state, StreamKind::PushPull { join_request });
    }

    /// memberlist `sendLocalState` payload with serf's user state.
    pub(super) fn local_state(&mut self, join: bool) -> Vec<u8> {
        let nodes: Vec<PushNodeState> = self
            .nodes
            .iter()
            .map(|n| PushNodeState {
                name: n.name.clone(),
                addr: ip_to_wire(n.addr),
                port: n.port,
                meta: n.meta.clone(),
                incarnation: n.incarnation,
                state: n.state,
                vsn: n.vsn.to_vec(),
            })
            .collect();
        let user = self.serf_local_state();
        ml::encode_push_pull(join, &nodes, &user)
    }

    /// The number of bytes of stream framing a driver should read for a reply: see
    /// [`ml::stream_frame_len`]. Exposed so drivers need not know the format.
    pub fn stream_frame_len(buf: &[u8], accepting: bool) -> Result<Option<usize>, WireError> {
        ml::stream_frame_len(buf, accepting)
    }

    /// A stream another node opened to us delivered one message; returns the bytes to
    /// write back (if any). memberlist `handleConn`.
    pub fn handle_stream(
        &mut self,
        now: Duration,
        from: SocketAddr,
        bytes: &[u8],
    ) -> Option<Vec<u8>> {
        self.now = self.now.max(now);
        if self.silent() {
            return None;
        }
        let msg = match ml::open_stream(bytes, &self.unseal(), true) {
            Ok(m) => m,
            Err(e) => {
                self.stats.decode_errors += 1;
                let err = ml::encode_err(&e.to_string());
                return Some(self.seal_stream(err, false));
            }
        };
        let _ = from;
        match msg {
            StreamMessage::PushPull {
                join,
                nodes,
                user_state,
            } => {
                let reply = self.local_state(join);
                let sealed = self.seal_stream(reply, false);
                self.merge_remote_state(join, false, nodes, &user_state);
                Some(sealed)
            }
            StreamMessage::Ping(p) => {
                if !p.node.is_empty() && p.node != self.config.node_name {
                    return None;
                }
                let ack = Message::Ack(AckResp {
                    seq_no: p.seq_no,
                    payload: None,
                })
                .encode();
                Some(self.seal_stream(ack, false))
            }
            StreamMessage::User(payload) => {
                self.serf_notify_msg(&payload);
                None
            }
            StreamMessage::Ack(_) | StreamMessage::Err(_) => None,
        }
    }

    /// The reply (or failure) of a stream we opened with [`Output::Stream`].
    pub fn handle_stream_reply(&mut self, now: Duration, id: u64, reply: Result<&[u8], String>) {
        self.now = self.now.max(now);
        let Some(kind) = self.streams.remove(&id) else {
            return;
        };
        match kind {
            StreamKind::PushPull { join_request } => {
                let result = reply.and_then(|b| {
                    ml::open_stream(b, &self.unseal(), false).map_err(|e| e.to_string())
                });
                let ok = match result {
                    Ok(StreamMessage::PushPull {
                        nodes, user_state, ..
                    }) => {
                        let ignore_old = join_request
                            .and_then(|r| self.joins.get(&r))
                            .is_some_and(|j| j.ignore_old);
                        self.merge_remote_state(
                            join_request.is_some(),
                            ignore_old,
                            nodes,
                            &user_state,
                        );
                        Ok(())
                    }
                    Ok(StreamMessage::Err(e)) => Err(format!("remote error: {}", e.error)),
                    Ok(_) => Err("received invalid message type, expected push/pull".to_owned()),
                    Err(e) => Err(e),
                };
                if let Some(req) = join_request {
                    self.join_progress(req, ok);
                }
            }
            StreamKind::TcpPing { seq } => {
                let acked = matches!(
                    reply.map(|b| ml::open_stream(b, &self.unseal(), false)),
                    Ok(Ok(StreamMessage::Ack(AckResp { seq_no, .. }))) if seq_no == seq
                );
                if acked && self.probe.as_ref().is_some_and(|p| p.seq == seq) {
                    self.ack_handlers.remove(&seq);
                    self.probe_acked(None);
                    debug_assert!(self.probe.is_none(), "an acked probe is finished");
                }
            }
        }
    }

    pub(super) fn merge_remote_state(
        &mut self,
        join: bool,
        ignore_old: bool,
        nodes: Vec<PushNodeState>,
        user_state: &[u8],
    ) {
        for r in nodes {
            let Ok(addr) = ip_from_wire(&r.addr) else {
                self.stats.decode_errors += 1;
                continue;
            };
            match r.state {
                NodeStateKind::Alive => {
                    let a = Alive {
                        incarnation: r.incarnation,
                        node: r.name,
                        addr: ip_to_wire(addr),
                        port: r.port,
                        meta: r.meta,
                        vsn: r.vsn,
                    };
                    self.alive_node(a, None, false);
                }
                NodeStateKind::Left if !self.index.contains_key(&r.name) => {
                    // memberlist ignores news of the death of a node it has never heard
                    // of. We record it: a member that joins while another leaves would
                    // otherwise take an older alive message for the leaver, still being
                    // relayed, as news of a new node, and then refuse the leaver's real
                    // return from another address as a name conflict (for
                    // `dead_node_reclaim_time`, or for good where that is zero).
                    let mut vsn = [0u8; 6];
                    if r.vsn.len() >= 6 {
                        vsn.copy_from_slice(&r.vsn[..6]);
                    }
                    let name = r.name.clone();
                    self.insert_node(Node {
                        name: r.name,
                        addr,
                        port: r.port,
                        meta: r.meta,
                        incarnation: r.incarnation,
                        state: NodeStateKind::Left,
                        state_change: self.now,
                        vsn,
                    });
                    debug_assert!(self.index.contains_key(&name));
                }
                NodeStateKind::Left => {
                    let d = Suspect {
                        incarnation: r.incarnation,
                        node: r.name.clone(),
                        from: r.name,
                    };
                    self.dead_node(d);
                }
                NodeStateKind::Dead | NodeStateKind::Suspect => {
                    let s = Suspect {
                        incarnation: r.incarnation,
                        node: r.name,
                        from: self.config.node_name.clone(),
                    };
                    self.suspect_node(s);
                }
            }
        }
        if !user_state.is_empty() {
            self.serf_merge_remote_state(user_state, join, ignore_old);
        }
        // No remote state removes the local node from either table: news of our own
        // death is refuted, not applied.
        debug_assert!(self.index.contains_key(&self.config.node_name));
        debug_assert!(self.members.contains_key(&self.config.node_name));
    }

    // -----------------------------------------------------------------------------------
    // Packets

    /// One UDP datagram arrived from `from` at `now`.
    pub fn handle_packet(&mut self, now: Duration, from: SocketAddr, bytes: &[u8]) {
        self.now = self.now.max(now);
        self.stats.packets_received += 1;
        self.stats.packet_bytes_received += bytes.len() as u64;
        if self.silent() {
            return;
        }
        let contents = match ml::open_packet(bytes, &self.unseal()) {
            Ok(c) => c,
            Err(_) => {
                self.stats.decode_errors += 1;
                return;
            }
        };
        self.stats.decode_errors += contents.errors.len() as u64;
        // memberlist handles alive messages at high priority; order otherwise kept.
        for m in contents.messages {
            self.handle_message(from, m);
        }
    }

    pub(super) fn handle_message(&mut self, from: SocketAddr, m: Message) {
        match m {
            Message::Ping(p) => self.handle_ping(from, p),
            Message::IndirectPing(ind) => self.handle_indirect_ping(from, ind),
            Message::Ack(a) => self.handle_ack(a),
            Message::Nack(n) => {
                if let Some(p) = self.probe.as_mut() {
                    if p.seq == n.seq_no {
                        p.nacks += 1;
                    }
                }
            }
            Message::Suspect(s) => self.suspect_node(s),
            Message::Alive(mut a) => {
                if a.port == 0 {
                    a.port = self.config.advertise_port;
                }
                self.alive_node(a, None, false);
            }
            Message::Dead(d) => self.dead_node(d),
            Message::User(payload) => self.serf_notify_msg(&payload),
        }
    }

    pub(super) fn reply_addr(from: SocketAddr, addr: &[u8], port: u16) -> SocketAddr {
        if !addr.is_empty() && port > 0 {
            if let Ok(ip) = ip_from_wire(addr) {
                return SocketAddr::new(ip, port);
            }
        }
        from
    }

    /// Remembers that the answer to `address` goes to node `name` (memberlist's ping names
    /// its sender), so that a driver routing by name (WAN gossip through mesh gateways) can
    /// answer a sender that is not a member yet, as memberlist addresses its ack by the
    /// ping's `SourceNode`. Bounded by [`SENDER_NAMES_MAX`]: a full map forgets its first.
    fn remember_sender(&mut self, address: SocketAddr, name: &str) {
        if name.is_empty() {
            return;
        }
        if self.sender_names.len() >= SENDER_NAMES_MAX && !self.sender_names.contains_key(&address)
        {
            self.sender_names.pop_first();
        }
        self.sender_names.insert(address, name.to_string());
        debug_assert!(self.sender_names.len() <= SENDER_NAMES_MAX);
    }

    pub(super) fn handle_ping(&mut self, from: SocketAddr, p: Ping) {
        if !p.node.is_empty() && p.node != self.config.node_name {
            return;
        }
        let payload = if self.config.disable_coordinates {
            None
        } else {
            Some(self.vivaldi.coordinate().encode_ack_payload())
        };
        let to = Self::reply_addr(from, &p.source_addr, p.source_port);
        self.remember_sender(to, &p.source_node);
        self.send_msg(
            to,
            Message::Ack(AckResp {
                seq_no: p.seq_no,
                payload,
            })
            .encode(),
        );
    }

    pub(super) fn handle_indirect_ping(&mut self, from: SocketAddr, ind: IndirectPingReq) {
        let port = if ind.port == 0 {
            self.config.advertise_port
        } else {
            ind.port
        };
        let Ok(target_ip) = ip_from_wire(&ind.target) else {
            self.stats.decode_errors += 1;
            return;
        };
        let ping = self.self_ping(&ind.node);
        let local_seq = ping.seq_no;
        let reply_to = Self::reply_addr(from, &ind.source_addr, ind.source_port);
        self.remember_sender(reply_to, &ind.source_node);
        let earlier = self.ack_handlers.insert(
            local_seq,
            AckHandler::Relay {
                orig_seq: ind.seq_no,
                reply_to,
                nack: ind.nack,
                acked: false,
            },
        );
        debug_assert!(
            earlier.is_none(),
            "sequence number {local_seq} still awaited an ack"
        );
        self.schedule(
            self.now + self.config.probe_timeout,
            Timer::RelayExpire(local_seq),
        );
        self.send_msg(
            SocketAddr::new(target_ip, port),
            Message::Ping(ping).encode(),
        );
    }

    pub(super) fn handle_ack(&mut self, a: AckResp) {
        match self.ack_handlers.get_mut(&a.seq_no) {
            Some(AckHandler::Probe) => {
                self.ack_handlers.remove(&a.seq_no);
                if self.probe.as_ref().is_some_and(|p| p.seq == a.seq_no) {
                    self.probe_acked(a.payload);
                    debug_assert!(self.probe.is_none(), "an acked probe is finished");
                }
            }
            Some(AckHandler::Relay {
                orig_seq,
                reply_to,
                acked,
                ..
            }) if !*acked => {
                *acked = true;
                let (orig, to) = (*orig_seq, *reply_to);
                self.send_msg(
                    to,
                    Message::Ack(AckResp {
                        seq_no: orig,
                        payload: None,
                    })
                    .encode(),
                );
            }
            Some(AckHandler::Relay { .. }) | None => {}
        }
    }
}
