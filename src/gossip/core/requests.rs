//! What the driver asks of the pool on a user's behalf: join, leave (serf's leave intent,
//! then memberlist's dead-self broadcast, then the propagate delay), force-leave, user
//! events, tags, and the keyring (install, use, remove, list as serf internal queries).

use super::*;

impl Gossip {
    /// memberlist `Join` + serf `Join`: push/pull with every address; reports
    /// [`Output::JoinDone`] under `request`.
    ///
    /// `ignore_old` is serf's `ignoreOld` (Consul always joins with it, `serf join`
    /// unless `-replay`): user events the pool fired before we joined are not replayed.
    pub fn join(&mut self, now: Duration, request: u64, addrs: &[SocketAddr], ignore_old: bool) {
        self.now = self.now.max(now);
        if self.serf_state != SerfState::Alive || self.left {
            self.out.push(Output::JoinDone {
                request,
                joined: 0,
                errors: vec!["serf can't join after leave or shutdown".to_owned()],
            });
            return;
        }
        if addrs.is_empty() {
            self.out.push(Output::JoinDone {
                request,
                joined: 0,
                errors: Vec::new(),
            });
            return;
        }
        self.joins.insert(
            request,
            JoinState {
                pending: addrs.len(),
                ignore_old,
                ..Default::default()
            },
        );
        for &a in addrs {
            self.push_pull(a, Some(request));
        }
    }

    pub(super) fn join_progress(&mut self, request: u64, result: Result<(), String>) {
        let Some(j) = self.joins.get_mut(&request) else {
            return;
        };
        debug_assert!(j.pending > 0, "more join replies than addresses asked");
        j.pending -= 1;
        match result {
            Ok(()) => j.joined += 1,
            Err(e) => j.errors.push(e),
        }
        if j.pending > 0 {
            return;
        }
        let Some(j) = self.joins.remove(&request) else {
            return;
        };
        if j.joined > 0 {
            let ltime = self.clock;
            self.broadcast_join(ltime);
            if let Some(&i) = self.index.get(&self.config.node_name) {
                let me = &self.nodes[i];
                let alive = Message::Alive(Alive {
                    incarnation: me.incarnation,
                    node: me.name.clone(),
                    addr: ip_to_wire(me.addr),
                    port: me.port,
                    meta: me.meta.clone(),
                    vsn: me.vsn.to_vec(),
                });
                let intent = SerfMessage::Join(JoinIntent {
                    ltime,
                    node: self.config.node_name.clone(),
                });
                self.announce(&[alive.encode(), user_message(&intent.encode())]);
            }
        }
        debug_assert!(
            !self.joins.contains_key(&request),
            "a join is reported once"
        );
        let errors = if j.joined > 0 { Vec::new() } else { j.errors };
        self.out.push(Output::JoinDone {
            request,
            joined: j.joined,
            errors,
        });
    }

    /// serf `Leave` then memberlist `Leave`: reports [`Output::LeaveDone`].
    ///
    /// serf broadcasts its leave intent and waits until the intent has been sent enough
    /// times (or `broadcast_timeout`) before memberlist announces our death as "left",
    /// so that members see us leaving before they see us gone. Here the intent also goes
    /// straight to every member ([`Gossip::announce`]) in the same packet as the "left"
    /// message and ahead of it, which gives that order without the wait; the wait made
    /// a member that had just (re)joined take the whole broadcast timeout to leave, its
    /// queue holding an alive message for every member, all sent before any serf
    /// message.
    pub fn leave(&mut self, now: Duration, request: u64) {
        self.now = self.now.max(now);
        if self.serf_state != SerfState::Alive || self.left {
            self.out.push(Output::LeaveDone { request });
            return;
        }
        self.serf_state = SerfState::Leaving;
        let msg = LeaveIntent {
            ltime: self.clock,
            node: self.config.node_name.clone(),
            prune: false,
        };
        self.clock += 1;
        self.handle_leave_intent(&msg);
        let intent = SerfMessage::Leave(msg).encode();
        if self.has_alive_members() {
            self.serf_broadcast(SerfQueue::Intents, intent.clone(), None);
        }
        // memberlist Leave: broadcast our own death as "left".
        self.left = true;
        self.leave_step += 1;
        let step = self.leave_step;
        self.leave_phase = LeavePhase::Dead {
            request,
            notify: 0,
            step,
        };
        if let Some(&i) = self.index.get(&self.config.node_name) {
            let d = Suspect {
                incarnation: self.nodes[i].incarnation,
                node: self.config.node_name.clone(),
                from: self.config.node_name.clone(),
            };
            let dead = Message::Dead(d.clone()).encode();
            self.dead_node(d);
            self.announce(&[user_message(&intent), dead]);
        }
        let anyone = self
            .nodes
            .iter()
            .any(|n| n.name != self.config.node_name && n.state == NodeStateKind::Alive);
        let wait = if anyone {
            self.config.broadcast_timeout
        } else {
            Duration::ZERO
        };
        debug_assert!(self.left && self.serf_state == SerfState::Leaving);
        debug_assert!(
            matches!(self.leave_phase, LeavePhase::Dead { step: s, .. } if s == step),
            "the leave waits for its own step"
        );
        self.schedule(self.now + wait, Timer::Leave(step));
    }

    pub(super) fn leave_advance(&mut self, step: u64) {
        match self.leave_phase {
            LeavePhase::Dead {
                request, step: s, ..
            } if s == step => {
                self.leave_step += 1;
                let step = self.leave_step;
                self.leave_phase = LeavePhase::Propagate { request, step };
                self.schedule(
                    self.now + self.config.leave_propagate_delay,
                    Timer::Leave(step),
                );
            }
            LeavePhase::Propagate { request, step: s } if s == step => {
                debug_assert!(self.left, "memberlist left before serf finishes leaving");
                self.serf_state = SerfState::Left;
                self.leave_phase = LeavePhase::Done;
                self.out.push(Output::LeaveDone { request });
            }
            _ => {}
        }
    }

    /// serf `RemoveFailedNode` / `RemoveFailedNodePrune` (Consul force-leave).
    pub fn force_leave(&mut self, now: Duration, node: &str, prune: bool) {
        self.now = self.now.max(now);
        // serf stamps this with the current clock; peers that merged a push/pull hold
        // the target's status at (its leave time + 1), which can equal our clock and
        // make them drop the force-leave. Stamping one tick later avoids that.
        self.clock += 1;
        let msg = LeaveIntent {
            ltime: self.clock,
            node: node.to_owned(),
            prune,
        };
        self.clock += 1;
        self.handle_leave_intent(&msg);
        debug_assert!(
            self.clock > msg.ltime,
            "the force-leave is stamped in the past"
        );
        if self.has_alive_members() {
            self.serf_broadcast(SerfQueue::Intents, SerfMessage::Leave(msg).encode(), None);
        }
    }

    /// serf `UserEvent`.
    pub fn user_event(
        &mut self,
        now: Duration,
        name: &str,
        payload: &[u8],
        coalesce: bool,
    ) -> Result<(), String> {
        self.now = self.now.max(now);
        let size = name.len() + payload.len();
        if size > self.config.user_event_size_limit {
            return Err(format!(
                "user event exceeds configured limit of {} bytes before encoding",
                self.config.user_event_size_limit
            ));
        }
        if size > sm::USER_EVENT_BYTES_MAX {
            return Err(format!(
                "user event exceeds sane limit of {} bytes before encoding",
                sm::USER_EVENT_BYTES_MAX
            ));
        }
        let msg = UserEventMsg {
            ltime: self.event_clock,
            name: name.to_owned(),
            payload: payload.to_vec(),
            cc: coalesce,
        };
        let raw = SerfMessage::UserEvent(msg.clone()).encode();
        if raw.len() > self.config.user_event_size_limit {
            return Err(format!(
                "encoded user event exceeds configured limit of {} bytes after encoding",
                self.config.user_event_size_limit
            ));
        }
        self.event_clock += 1;
        self.handle_user_event(&msg);
        debug_assert!(
            self.event_clock > msg.ltime,
            "an event is stamped in the past"
        );
        self.serf_broadcast(SerfQueue::Events, raw, None);
        Ok(())
    }

    /// serf `SetTags`: new metadata, announced with a fresh incarnation.
    pub fn set_tags(
        &mut self,
        now: Duration,
        tags: BTreeMap<String, String>,
    ) -> Result<(), String> {
        self.now = self.now.max(now);
        let meta = sm::encode_tags(&tags);
        if meta.len() > META_BYTES_MAX {
            return Err(format!(
                "encoded length of tags exceeds limit of {META_BYTES_MAX} bytes"
            ));
        }
        self.config.tags = tags;
        self.meta = meta.clone();
        let inc = self.next_incarnation();
        let a = Alive {
            incarnation: inc,
            node: self.config.node_name.clone(),
            addr: ip_to_wire(self.config.advertise_addr),
            port: self.config.advertise_port,
            meta: Some(meta),
            vsn: self.config.vsn().to_vec(),
        };
        self.alive_node(a, None, true);
        Ok(())
    }

    // -----------------------------------------------------------------------------------
    // Keyring

    /// memberlist `Keyring.AddKey`.
    pub fn install_key(&mut self, key: &[u8]) -> Result<(), String> {
        security::validate_key(key).map_err(|e| e.to_string())?;
        if !self.keys.iter().any(|k| k == key) {
            self.keys.push(key.to_vec());
        }
        Ok(())
    }

    /// memberlist `Keyring.UseKey`.
    pub fn use_key(&mut self, key: &[u8]) -> Result<(), String> {
        let Some(pos) = self.keys.iter().position(|k| k == key) else {
            return Err("Requested key is not in the keyring".to_owned());
        };
        let k = self.keys.remove(pos);
        self.keys.insert(0, k);
        debug_assert!(self.keys.first().is_some_and(|k| k == key));
        Ok(())
    }

    /// memberlist `Keyring.RemoveKey`.
    pub fn remove_key(&mut self, key: &[u8]) -> Result<(), String> {
        if self.keys.first().is_some_and(|k| k == key) {
            return Err("Removing the primary key is not allowed".to_owned());
        }
        let was_empty = self.keys.is_empty();
        self.keys.retain(|k| k != key);
        debug_assert!(
            self.keys.is_empty() == was_empty,
            "removing a key never empties a keyring"
        );
        Ok(())
    }

    /// serf `KeyManager` operations: a query to every member, aggregated into
    /// [`Output::KeyOpDone`].
    pub fn key_op(&mut self, now: Duration, request: u64, op: KeyOp) {
        self.key_op_relayed(now, request, op, 0);
    }

    /// [`Gossip::key_op`] whose answers `relay_factor` other members relay as well (serf's
    /// `KeyRequestOptions.RelayFactor`, 0 to 5).
    pub fn key_op_relayed(&mut self, now: Duration, request: u64, op: KeyOp, relay_factor: u8) {
        self.now = self.now.max(now);
        let key = match &op {
            KeyOp::Install(k) | KeyOp::Use(k) | KeyOp::Remove(k) => k.clone(),
            KeyOp::List => Vec::new(),
        };
        let payload = KeyRequest { key }.encode();
        self.start_query(op.query_name(), payload, request, true, relay_factor);
    }
}
