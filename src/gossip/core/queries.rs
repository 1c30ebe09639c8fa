//! serf queries: starting one (a broadcast with a timeout scaled by the pool's size),
//! answering incoming ones (filters, acks, internal `_serf_` queries such as the keyring
//! operations and conflict resolution), and collecting responses until the timeout.

use super::*;

impl Gossip {
    pub(super) fn default_query_timeout(&self) -> Duration {
        let n = self.nodes.len();
        let scale = ((n + 1) as f64).log10().ceil().max(1.0) as u32;
        self.config.gossip_interval * self.config.query_timeout_mult * scale
    }

    /// Starts a query; `relay_factor` members relay each answer too (serf's
    /// `RelayFactor`, which Consul's keyring operations pass on).
    pub(super) fn start_query(
        &mut self,
        name: &str,
        payload: Vec<u8>,
        request: u64,
        key_op: bool,
        relay_factor: u8,
    ) {
        let timeout = self.default_query_timeout();
        let q = QueryMsg {
            ltime: self.query_clock,
            id: self.rng.random::<u32>() & 0x7fff_ffff,
            addr: ip_to_wire(self.config.advertise_addr),
            port: self.config.advertise_port,
            source_node: self.config.node_name.clone(),
            filters: Vec::new(),
            flags: 0,
            relay_factor,
            timeout_ns: timeout.as_nanos() as i64,
            name: name.to_owned(),
            payload,
        };
        let raw = SerfMessage::Query(q.clone()).encode();
        // memberlist NumMembers: nodes that are neither dead nor left.
        let expected = self.nodes.iter().filter(|n| !n.dead_or_left()).count();
        let earlier = self.pending_queries.insert(
            q.ltime,
            PendingQuery {
                id: q.id,
                request,
                key_op,
                expected,
                responses: BTreeMap::new(),
            },
        );
        // Each query moves the query clock past its own time: no two share one.
        debug_assert!(earlier.is_none(), "two queries at Lamport time {}", q.ltime);
        self.schedule(self.now + timeout, Timer::Query(q.ltime));
        self.handle_query(&q);
        self.serf_broadcast(SerfQueue::Queries, raw, None);
    }

    /// Lamport's rule for the query clock, saturating as [`Gossip::witness_clock`] does.
    pub(super) fn witness_query_clock(&mut self, t: u64) {
        let before = self.query_clock;
        if t >= self.query_clock {
            self.query_clock = t.saturating_add(1);
        }
        debug_assert!(self.query_clock > t || t == u64::MAX);
        debug_assert!(self.query_clock >= before, "the query clock went back");
    }

    /// serf `handleQuery`.
    pub(super) fn handle_query(&mut self, q: &QueryMsg) -> bool {
        self.witness_query_clock(q.ltime);
        if q.ltime < self.query_min_time {
            return false;
        }
        let len = self.query_buffer.len() as u64;
        debug_assert!(len > 0, "the recent-query buffer has at least one slot");
        let cur = self.query_clock;
        if cur > len && q.ltime < cur - len {
            return false;
        }
        let idx = (q.ltime % len) as usize;
        match &mut self.query_buffer[idx] {
            Some((ltime, ids)) if *ltime == q.ltime => {
                if ids.contains(&q.id) {
                    return false;
                }
                ids.push(q.id);
            }
            slot => *slot = Some((q.ltime, vec![q.id])),
        }
        let rebroadcast = q.flags & sm::QUERY_FLAG_NO_BROADCAST == 0;
        if !self.should_process_query(&q.filters) {
            return rebroadcast;
        }
        if q.flags & sm::QUERY_FLAG_ACK != 0 {
            let ack = QueryResponseMsg {
                ltime: q.ltime,
                id: q.id,
                from: self.config.node_name.clone(),
                flags: sm::QUERY_FLAG_ACK,
                payload: Vec::new(),
            };
            self.send_query_response(q, ack);
        }
        if let Some(op) = q.name.strip_prefix(INTERNAL_QUERY_PREFIX) {
            self.handle_internal_query(op, q);
        } else {
            self.out.push(Output::Event(GossipEvent::Query(QueryEvent {
                ltime: q.ltime,
                id: q.id,
                name: q.name.clone(),
                payload: q.payload.clone(),
                source_node: q.source_node.clone(),
            })));
        }
        rebroadcast
    }

    pub(super) fn should_process_query(&self, filters: &[Vec<u8>]) -> bool {
        for f in filters {
            match sm::decode_filter(f) {
                Ok(QueryFilter::Nodes(nodes)) => {
                    if !nodes.iter().any(|n| n == &self.config.node_name) {
                        return false;
                    }
                }
                Ok(QueryFilter::Tag(t)) => {
                    // serf matches a Go regexp; we support the common exact/".*" forms
                    // and treat anything else as a literal match on the whole value.
                    let value = self
                        .config
                        .tags
                        .get(&t.tag)
                        .map(String::as_str)
                        .unwrap_or("");
                    let ok = match t.expr.as_str() {
                        ".*" | "" => true,
                        e => {
                            let e = e.trim_start_matches('^').trim_end_matches('$');
                            value == e
                        }
                    };
                    if !ok {
                        return false;
                    }
                }
                Err(_) => return false,
            }
        }
        true
    }

    pub(super) fn send_query_response(&mut self, q: &QueryMsg, resp: QueryResponseMsg) {
        if q.source_node == self.config.node_name {
            self.handle_query_response(&resp);
            return;
        }
        let raw = SerfMessage::QueryResponse(resp).encode();
        if raw.len() > self.config.query_response_size_limit {
            return;
        }
        let Ok(ip) = ip_from_wire(&q.addr) else {
            return;
        };
        let to = SocketAddr::new(ip, q.port);
        self.send_to_address(to, raw.clone());
        if q.relay_factor > 0 {
            let relay = SerfMessage::Relay {
                dest_ip: q.addr.clone(),
                dest_port: q.port,
                dest_name: q.source_node.clone(),
                inner: raw,
            }
            .encode();
            let local = self.config.node_name.clone();
            let peers = self.k_random_nodes(q.relay_factor as usize, |n| {
                n.state != NodeStateKind::Alive || n.vsn[1] < 5 || n.name == local
            });
            for p in peers {
                let to = self.nodes[p].socket();
                self.send_to_address(to, relay.clone());
            }
        }
    }

    pub(super) fn handle_internal_query(&mut self, op: &str, q: &QueryMsg) {
        let respond = |g: &mut Gossip, payload: Vec<u8>| {
            let resp = QueryResponseMsg {
                ltime: q.ltime,
                id: q.id,
                from: g.config.node_name.clone(),
                flags: 0,
                payload,
            };
            g.send_query_response(q, resp);
        };
        let b64 = base64::engine::general_purpose::STANDARD;
        match op {
            "ping" => {}
            "conflict" => {
                let node = String::from_utf8_lossy(&q.payload).into_owned();
                if node == self.config.node_name {
                    return;
                }
                if let Some(m) = self.members.get(&node) {
                    let i = &m.info;
                    let payload = ConflictMember {
                        name: i.name.clone(),
                        addr: i.addr,
                        port: i.port,
                        tags: i.tags.clone(),
                        status: i.status as i64,
                        vsn: [
                            i.protocol_min,
                            i.protocol_max,
                            i.protocol_cur,
                            i.delegate_min,
                            i.delegate_max,
                            i.delegate_cur,
                        ],
                    }
                    .encode();
                    respond(self, payload);
                }
            }
            "install-key" | "use-key" | "remove-key" => {
                let mut resp = KeyResponse::default();
                match KeyRequest::decode(&q.payload) {
                    Err(e) => resp.message = e.to_string(),
                    Ok(_) if !self.encryption_enabled() => {
                        resp.message = "No keyring to modify (encryption not enabled)".to_owned();
                    }
                    Ok(req) => {
                        let r = match op {
                            "install-key" => self.install_key(&req.key),
                            "use-key" => self.use_key(&req.key),
                            _ => self.remove_key(&req.key),
                        };
                        match r {
                            Ok(()) => resp.result = true,
                            Err(e) => resp.message = e,
                        }
                    }
                }
                respond(self, resp.encode());
            }
            "list-keys" => {
                let mut resp = KeyResponse::default();
                if !self.encryption_enabled() {
                    resp.message = "Keyring is empty (encryption not enabled)".to_owned();
                } else {
                    resp.keys = self.keys.iter().map(|k| b64.encode(k)).collect();
                    resp.primary_key = self.keys.first().map(|k| b64.encode(k)).unwrap_or_default();
                    resp.result = true;
                }
                // serf trims the key list until the response fits the size limit.
                let max_keys = self.config.query_response_size_limit / MIN_ENCODED_KEY_LENGTH;
                let actual = resp.keys.len();
                let mut i = max_keys.min(actual);
                loop {
                    let payload = resp.encode();
                    let probe = QueryResponseMsg {
                        ltime: q.ltime,
                        id: q.id,
                        from: self.config.node_name.clone(),
                        flags: 0,
                        payload: payload.clone(),
                    };
                    if SerfMessage::QueryResponse(probe).encode().len()
                        <= self.config.query_response_size_limit
                        || i == 0
                    {
                        respond(self, payload);
                        break;
                    }
                    i -= 1;
                    resp.keys.truncate(i);
                    resp.message =
                        format!("truncated key list response, showing first {i} of {actual} keys");
                }
            }
            _ => {}
        }
    }

    /// serf `handleQueryResponse`.
    pub(super) fn handle_query_response(&mut self, r: &QueryResponseMsg) {
        let Some(pq) = self.pending_queries.get_mut(&r.ltime) else {
            return;
        };
        if pq.id != r.id || r.flags & sm::QUERY_FLAG_ACK != 0 {
            return;
        }
        if pq.responses.contains_key(&r.from) {
            return;
        }
        pq.responses.insert(r.from.clone(), r.payload.clone());
        if pq.key_op && pq.responses.len() >= pq.expected {
            let ltime = r.ltime;
            self.query_finished(ltime);
        }
    }

    pub(super) fn query_finished(&mut self, ltime: u64) {
        let Some(pq) = self.pending_queries.remove(&ltime) else {
            return;
        };
        if !pq.key_op {
            return;
        }
        let mut result = KeyOpResult {
            num_nodes: pq.expected,
            ..Default::default()
        };
        for (from, payload) in pq.responses {
            result.num_resp += 1;
            match KeyResponse::decode(&payload) {
                Err(_) => {
                    result
                        .messages
                        .insert(from, "Failed to decode key query response".to_owned());
                    result.num_err += 1;
                }
                Ok(kr) => {
                    if !kr.result {
                        result.messages.insert(from.clone(), kr.message.clone());
                        result.num_err += 1;
                    } else if !kr.message.is_empty() {
                        result.messages.insert(from.clone(), kr.message.clone());
                    }
                    for k in kr.keys {
                        *result.keys.entry(k).or_default() += 1;
                    }
                    *result.primary_keys.entry(kr.primary_key).or_default() += 1;
                }
            }
        }
        self.out.push(Output::KeyOpDone {
            request: pq.request,
            result,
        });
    }
}
