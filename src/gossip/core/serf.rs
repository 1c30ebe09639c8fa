//! The serf layer above memberlist: member status from memberlist's node events, join and
//! leave intents ordered by Lamport time, user events with their buffer of recent times,
//! serf's push/pull state, and the periodic reap of failed and left members and reconnect
//! attempts.
//!
//! Invariant: the three Lamport clocks only move forward; a member's status changes only
//! for an intent newer than `status_ltime`.

use super::*;

impl Gossip {
    pub(super) fn has_alive_members(&self) -> bool {
        self.members
            .values()
            .any(|m| m.info.name != self.config.node_name && m.info.status == MemberStatus::Alive)
    }

    pub(super) fn member_info_from(&self, i: usize, status: MemberStatus) -> MemberInfo {
        let n = &self.nodes[i];
        let tags = sm::decode_tags(n.meta.as_deref().unwrap_or(&[])).unwrap_or_default();
        MemberInfo {
            name: n.name.clone(),
            addr: n.addr,
            port: n.port,
            tags,
            status,
            protocol_min: n.vsn[0],
            protocol_max: n.vsn[1],
            protocol_cur: n.vsn[2],
            delegate_min: n.vsn[3],
            delegate_max: n.vsn[4],
            delegate_cur: n.vsn[5],
        }
    }

    pub(super) fn emit(&mut self, e: GossipEvent) {
        self.members_version += 1;
        self.out.push(Output::Event(e));
    }

    /// serf `handleNodeJoin`.
    pub(super) fn serf_node_join(&mut self, i: usize) {
        let name = self.nodes[i].name.clone();
        let mut info = self.member_info_from(i, MemberStatus::Alive);
        match self.members.get_mut(&name) {
            None => {
                let mut status_ltime = 0;
                if let Some(intent) = self.intents.get(&name) {
                    status_ltime = intent.ltime;
                    if !intent.join {
                        info.status = MemberStatus::Leaving;
                    }
                }
                self.members.insert(
                    name.clone(),
                    SerfMember {
                        info: info.clone(),
                        status_ltime,
                        leave_time: Duration::ZERO,
                        rejoining: false,
                    },
                );
            }
            Some(m) => {
                let old = m.info.status;
                let keep_ltime = m.status_ltime;
                m.info = info.clone();
                m.status_ltime = keep_ltime;
                m.leave_time = Duration::ZERO;
                m.rejoining = false;
                if matches!(old, MemberStatus::Failed | MemberStatus::Left) {
                    self.failed_members.retain(|n| n != &name);
                    self.left_members.retain(|n| n != &name);
                }
            }
        }
        debug_assert!(
            !self.failed_members.contains(&name) && !self.left_members.contains(&name),
            "a joined member is in neither departure list"
        );
        self.emit(GossipEvent::MemberJoin(info));
    }

    /// serf `handleNodeLeave`, with one rule serf lacks: a member memberlist saw announce
    /// its own departure (a dead message from the node itself, state `Left`) has left,
    /// whether or not its serf leave intent got here first. serf decides from the intent
    /// alone, so a member that missed the intent (gossip reaches each member with high
    /// probability, not certainty), or dropped it because a push/pull had already carried
    /// the leaver's status time as a join, showed a graceful leave as `failed`.
    pub(super) fn serf_node_leave(&mut self, i: usize) {
        let name = self.nodes[i].name.clone();
        let announced_leave = self.nodes[i].state == NodeStateKind::Left;
        let now = self.now;
        let Some(m) = self.members.get_mut(&name) else {
            return;
        };
        m.rejoining = false;
        let event = match m.info.status {
            MemberStatus::Leaving => {
                m.info.status = MemberStatus::Left;
                m.leave_time = now;
                self.left_members.push(name);
                GossipEvent::MemberLeave(m.info.clone())
            }
            MemberStatus::Alive if announced_leave => {
                m.info.status = MemberStatus::Left;
                m.leave_time = now;
                self.left_members.push(name);
                GossipEvent::MemberLeave(m.info.clone())
            }
            MemberStatus::Alive => {
                m.info.status = MemberStatus::Failed;
                m.leave_time = now;
                self.failed_members.push(name);
                GossipEvent::MemberFailed(m.info.clone())
            }
            _ => return,
        };
        debug_assert!(
            matches!(
                &event,
                GossipEvent::MemberLeave(m) if self.left_members.contains(&m.name)
            ) || matches!(
                &event,
                GossipEvent::MemberFailed(m) if self.failed_members.contains(&m.name)
            )
        );
        self.emit(event);
    }

    /// serf `handleNodeUpdate`.
    pub(super) fn serf_node_update(&mut self, i: usize) {
        let name = self.nodes[i].name.clone();
        let Some(status) = self.members.get(&name).map(|m| m.info.status) else {
            return;
        };
        let info = self.member_info_from(i, status);
        if let Some(m) = self.members.get_mut(&name) {
            m.info = info.clone();
        }
        self.emit(GossipEvent::MemberUpdate(info));
    }

    pub(super) fn broadcast_join(&mut self, ltime: u64) {
        let msg = JoinIntent {
            ltime,
            node: self.config.node_name.clone(),
        };
        self.witness_clock(ltime);
        self.handle_join_intent(&msg);
        self.serf_broadcast(SerfQueue::Intents, SerfMessage::Join(msg).encode(), None);
    }

    /// Lamport's rule. A remote time of `u64::MAX` saturates instead of wrapping the clock
    /// back to zero (a hostile packet must not reorder every later intent).
    pub(super) fn witness_clock(&mut self, t: u64) {
        let before = self.clock;
        if t >= self.clock {
            self.clock = t.saturating_add(1);
        }
        debug_assert!(self.clock > t || t == u64::MAX);
        debug_assert!(self.clock >= before, "the Lamport clock went back");
    }

    pub(super) fn upsert_intent(&mut self, node: &str, join: bool, ltime: u64) -> bool {
        // Intents are kept for nodes not (yet) members: a member's intents go to its status.
        debug_assert!(!self.members.contains_key(node));
        match self.intents.get(node) {
            Some(i) if ltime <= i.ltime => false,
            _ => {
                self.intents.insert(
                    node.to_owned(),
                    Intent {
                        join,
                        wall: self.now,
                        ltime,
                    },
                );
                debug_assert!(self.intents.get(node).is_some_and(|i| i.ltime == ltime));
                true
            }
        }
    }

    /// serf `handleNodeLeaveIntent`. Returns whether to rebroadcast.
    pub(super) fn handle_leave_intent(&mut self, msg: &LeaveIntent) -> bool {
        self.witness_clock(msg.ltime);
        let Some(m) = self.members.get_mut(&msg.node) else {
            return self.upsert_intent(&msg.node.clone(), false, msg.ltime);
        };
        if msg.ltime <= m.status_ltime {
            return false;
        }
        if msg.node == self.config.node_name && self.serf_state == SerfState::Alive {
            // Someone says we left; we did not. Re-assert with a join intent.
            let t = self.clock;
            self.broadcast_join(t);
            return false;
        }
        debug_assert!(
            msg.ltime > m.status_ltime,
            "a member's status time went back"
        );
        m.status_ltime = msg.ltime;
        m.rejoining = false;
        match m.info.status {
            MemberStatus::Alive => {
                m.info.status = MemberStatus::Leaving;
                self.members_version += 1;
                if msg.prune {
                    self.prune_member(&msg.node.clone());
                }
                true
            }
            MemberStatus::Failed => {
                m.info.status = MemberStatus::Left;
                let info = m.info.clone();
                self.failed_members.retain(|n| n != &msg.node);
                self.left_members.push(msg.node.clone());
                self.emit(GossipEvent::MemberLeave(info));
                if msg.prune {
                    self.prune_member(&msg.node.clone());
                }
                true
            }
            MemberStatus::Leaving | MemberStatus::Left => {
                if msg.prune {
                    self.prune_member(&msg.node.clone());
                }
                true
            }
        }
    }

    /// serf `handlePrune` (without its sleep: the member is erased at once).
    pub(super) fn prune_member(&mut self, name: &str) {
        debug_assert_ne!(
            name, self.config.node_name,
            "the local member is never pruned"
        );
        self.left_members.retain(|n| n != name);
        self.failed_members.retain(|n| n != name);
        self.erase_member(name);
        debug_assert!(!self.members.contains_key(name));
    }

    pub(super) fn erase_member(&mut self, name: &str) {
        if let Some(m) = self.members.remove(name) {
            self.vivaldi.forget(name);
            self.coordinates.remove(name);
            self.emit(GossipEvent::MemberReap(m.info));
        }
    }

    /// serf `handleNodeJoinIntent`.
    pub(super) fn handle_join_intent(&mut self, msg: &JoinIntent) -> bool {
        self.witness_clock(msg.ltime);
        let Some(m) = self.members.get_mut(&msg.node) else {
            return self.upsert_intent(&msg.node.clone(), true, msg.ltime);
        };
        if msg.ltime <= m.status_ltime {
            return false;
        }
        debug_assert!(
            msg.ltime > m.status_ltime,
            "a member's status time went back"
        );
        m.status_ltime = msg.ltime;
        match m.info.status {
            MemberStatus::Leaving => {
                m.info.status = MemberStatus::Alive;
                self.members_version += 1;
            }
            // It stays left until memberlist hears it alive, but its status time is now a
            // join's: see `serf_local_state`.
            MemberStatus::Left => m.rejoining = true,
            MemberStatus::Alive | MemberStatus::Failed => {}
        }
        true
    }

    /// Lamport's rule for the event clock, saturating as [`Gossip::witness_clock`] does.
    pub(super) fn witness_event_clock(&mut self, t: u64) {
        let before = self.event_clock;
        if t >= self.event_clock {
            self.event_clock = t.saturating_add(1);
        }
        debug_assert!(self.event_clock > t || t == u64::MAX);
        debug_assert!(self.event_clock >= before, "the event clock went back");
    }

    /// serf `handleUserEvent`.
    pub(super) fn handle_user_event(&mut self, msg: &UserEventMsg) -> bool {
        self.witness_event_clock(msg.ltime);
        if msg.ltime < self.event_min_time {
            return false;
        }
        let len = self.event_buffer.len() as u64;
        debug_assert!(len > 0, "the event buffer has at least one slot");
        let cur = self.event_clock;
        if cur > len && msg.ltime < cur - len {
            return false;
        }
        let idx = (msg.ltime % len) as usize;
        let item = UserEventItem {
            name: msg.name.clone(),
            payload: msg.payload.clone(),
        };
        match &mut self.event_buffer[idx] {
            Some(seen) if seen.ltime == msg.ltime => {
                if seen.events.contains(&item) {
                    return false;
                }
                seen.events.push(item);
            }
            slot => {
                *slot = Some(UserEventsAt {
                    ltime: msg.ltime,
                    events: vec![item],
                });
            }
        }
        self.out.push(Output::Event(GossipEvent::User(UserEvent {
            ltime: msg.ltime,
            name: msg.name.clone(),
            payload: msg.payload.clone(),
            coalesce: msg.cc,
        })));
        true
    }

    /// serf `delegate.NotifyMsg`.
    pub(super) fn serf_notify_msg(&mut self, buf: &[u8]) {
        if buf.is_empty() {
            return;
        }
        let msg = match SerfMessage::decode(buf) {
            Ok(m) => m,
            Err(_) => {
                self.stats.decode_errors += 1;
                return;
            }
        };
        let (rebroadcast, queue) = match &msg {
            SerfMessage::Leave(l) => (self.handle_leave_intent(l), SerfQueue::Intents),
            SerfMessage::Join(j) => (self.handle_join_intent(j), SerfQueue::Intents),
            SerfMessage::UserEvent(e) => (self.handle_user_event(e), SerfQueue::Events),
            SerfMessage::Query(q) => (self.handle_query(q), SerfQueue::Queries),
            SerfMessage::QueryResponse(r) => {
                self.handle_query_response(r);
                (false, SerfQueue::Intents)
            }
            SerfMessage::Relay {
                dest_ip,
                dest_port,
                inner,
                ..
            } => {
                if let Ok(ip) = ip_from_wire(dest_ip) {
                    self.send_to_address(SocketAddr::new(ip, *dest_port), inner.clone());
                }
                (false, SerfQueue::Intents)
            }
        };
        if rebroadcast {
            self.serf_broadcast(queue, buf.to_vec(), None);
        }
    }

    /// memberlist `SendToAddress`: a user message straight to an address.
    pub(super) fn send_to_address(&mut self, to: SocketAddr, msg: Vec<u8>) {
        let mut b = Vec::with_capacity(msg.len() + 1);
        b.push(msg_type::USER);
        b.extend_from_slice(&msg);
        self.send_raw(to, false, b);
    }

    /// serf `delegate.LocalState`, except that a left member known to be rejoining is
    /// not listed as left. The receiver of a push/pull turns every listed left member
    /// into a leave intent one tick after its status time; when that time is the
    /// member's newer join, the made-up leave would outrank the join and mark a member
    /// that is back `leaving` in every view it reaches, for good (the member refutes only
    /// leave intents that reach it). Its status time still goes out, as a join.
    pub(super) fn serf_local_state(&self) -> Vec<u8> {
        let mut status_ltimes: Vec<(String, u64)> = self
            .members
            .iter()
            .map(|(k, m)| (k.clone(), m.status_ltime))
            .collect();
        status_ltimes.sort();
        SerfPushPull {
            ltime: self.clock,
            status_ltimes,
            left_members: self
                .left_members
                .iter()
                .filter(|name| self.members.get(*name).is_some_and(|m| !m.rejoining))
                .cloned()
                .collect(),
            event_ltime: self.event_clock,
            events: self.event_buffer.clone(),
            query_ltime: self.query_clock,
        }
        .encode()
    }

    /// serf `delegate.MergeRemoteState`.
    pub(super) fn serf_merge_remote_state(&mut self, buf: &[u8], is_join: bool, ignore_old: bool) {
        let pp = match SerfPushPull::decode(buf) {
            Ok(pp) => pp,
            Err(_) => {
                self.stats.decode_errors += 1;
                return;
            }
        };
        if pp.ltime > 0 {
            self.witness_clock(pp.ltime - 1);
        }
        if pp.event_ltime > 0 {
            self.witness_event_clock(pp.event_ltime - 1);
        }
        if pp.query_ltime > self.query_clock {
            self.query_clock = pp.query_ltime;
        }
        debug_assert!(self.query_clock >= pp.query_ltime);
        let status: HashMap<&str, u64> = pp
            .status_ltimes
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect();
        let left: HashSet<&str> = pp.left_members.iter().map(String::as_str).collect();
        for name in &pp.left_members {
            let status_ltime = status.get(name.as_str()).copied().unwrap_or(0);
            // serf applies every listed left member as a leave intent one tick after its
            // status time. For a member we already know to be leaving or left that tick is
            // all it brings, and two members that both hold it left add one tick per
            // push/pull between them: its status time climbed past the clock of a member
            // that later force-left it, whose intent everyone then dropped as old.
            let known_gone = self.members.get(name).is_some_and(|m| {
                matches!(m.info.status, MemberStatus::Leaving | MemberStatus::Left)
            });
            if known_gone {
                self.witness_clock(status_ltime);
                continue;
            }
            let ltime = status_ltime + 1;
            self.handle_leave_intent(&LeaveIntent {
                ltime,
                node: name.clone(),
                prune: false,
            });
        }
        for (name, ltime) in &pp.status_ltimes {
            if left.contains(name.as_str()) {
                continue;
            }
            self.handle_join_intent(&JoinIntent {
                ltime: *ltime,
                node: name.clone(),
            });
        }
        // serf `eventJoinIgnore`: events the pool fired before we joined stay unplayed.
        if is_join && ignore_old && pp.event_ltime > self.event_min_time {
            self.event_min_time = pp.event_ltime;
        }
        for e in pp.events.iter().flatten() {
            for item in &e.events {
                let m = UserEventMsg {
                    ltime: e.ltime,
                    name: item.name.clone(),
                    payload: item.payload.clone(),
                    cc: false,
                };
                self.handle_user_event(&m);
            }
        }
    }

    pub(super) fn reap(&mut self) {
        let now = self.now;
        let reconnect = self.config.reconnect_timeout;
        let tombstone = self.config.tombstone_timeout;
        let expired = |list: &Vec<String>,
                       members: &HashMap<String, SerfMember>,
                       timeout: Duration|
         -> Vec<String> {
            list.iter()
                .filter(|n| {
                    members
                        .get(*n)
                        .is_some_and(|m| now.saturating_sub(m.leave_time) > timeout)
                })
                .cloned()
                .collect()
        };
        let failed = expired(&self.failed_members, &self.members, reconnect);
        let left = expired(&self.left_members, &self.members, tombstone);
        for n in failed.iter().chain(&left) {
            debug_assert_ne!(
                *n, self.config.node_name,
                "the local member is never reaped"
            );
            self.failed_members.retain(|x| x != n);
            self.left_members.retain(|x| x != n);
            self.erase_member(n);
        }
        let intent_timeout = self.config.recent_intent_timeout;
        self.intents
            .retain(|_, i| now.saturating_sub(i.wall) <= intent_timeout);
    }

    pub(super) fn reconnect(&mut self) {
        let n = self.failed_members.len();
        if n == 0 {
            return;
        }
        // The departure lists hold members only, each once: this cannot underflow.
        debug_assert!(n + self.left_members.len() <= self.members.len());
        let alive = (self.members.len() - n - self.left_members.len()).max(1);
        let prob = n as f32 / alive as f32;
        if self.rng.random::<f32>() > prob {
            return;
        }
        let i = self.random_index(n);
        let name = self.failed_members[i].clone();
        if let Some(m) = self.members.get(&name) {
            let to = SocketAddr::new(m.info.addr, m.info.port);
            self.push_pull(to, None);
        }
    }

    pub(super) fn check_queue_depth(&mut self) {
        let max = if self.config.min_queue_depth > 0 {
            (2 * self.members.len()).max(self.config.min_queue_depth)
        } else {
            self.config.max_queue_depth
        };
        let mut finished = std::mem::take(&mut self.finished_broadcasts);
        self.intent_queue.prune(max, &mut finished);
        self.event_queue.prune(max, &mut finished);
        self.query_queue.prune(max, &mut finished);
        self.finished_broadcasts = finished;
        self.process_finished_broadcasts();
    }
}
