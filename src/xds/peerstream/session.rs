//! One open stream's loop, the same on both sides: messages in, heartbeats out, the
//! peering watched in the store (deleted here → `Terminated` out; what it exports changed
//! → resources out), imported resources written through Raft and acknowledged, leadership
//! checked; the decisions are [`super::machine::Session`]'s, this file only waits and
//! carries them out.

use super::machine::{self, Session, StatusUpdate, Step, Timing};
use super::messages::ReplicationMessage;
use super::{now_text, Shared, LEADERSHIP_CHECK_INTERVAL};
use crate::store::peering::{self, PeeringOp, PeeringState};
use crate::store::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tonic::Streaming;

/// How a session ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// The other side sent `Terminated`.
    PeerTerminated,
    /// This side's peering was deleted; `Terminated` was sent.
    LocallyDeleted,
    /// The stream broke (the peering becomes `FAILING`).
    Failed(String),
    /// A newer stream for the same peering took over.
    Replaced,
    /// This server no longer leads (or is stopping).
    LostLeadership,
}

/// Runs the session of peering `id` until it ends.
pub async fn run(
    shared: &Arc<Shared>,
    id: &str,
    inbound: &mut Streaming<ReplicationMessage>,
    outbound: &mpsc::Sender<ReplicationMessage>,
    mut replaced: oneshot::Receiver<()>,
) -> End {
    let base = Instant::now();
    let now_ms = || base.elapsed().as_millis() as u64;
    let mut session = Session::new(Timing::default(), now_ms());
    let mut store = shared.store.subscribe();
    let mut leadership = tokio::time::interval(LEADERSHIP_CHECK_INTERVAL);
    let mut last_status_write: Option<Instant> = None;
    for subscription in Session::subscriptions() {
        if outbound.send(subscription).await.is_err() {
            return End::Failed("the stream's sending half closed".to_string());
        }
    }
    // What the exports were last computed from: (the store's exports version, the
    // subscriptions); exports are computed again only when it moves.
    let mut exports_seen: Option<(u64, usize)> = None;
    loop {
        // What the exports changed to goes out first; the loop then comes back here and,
        // with nothing new to export, waits for the stream, a tick or the store.
        let tables = shared.store.current();
        let seen = (
            machine::exports_version(&tables),
            session.subscription_count(),
        );
        let exports = (session.subscription_count() > 0 && exports_seen != Some(seen)).then(|| {
            exports_seen = Some(seen);
            match peering::get_by_id(&tables, id) {
                Some(row) => session.on_exports(&machine::exports_for(&tables, &row.name)),
                None => Vec::new(),
            }
        });
        drop(tables);
        let steps = if let Some(steps) = exports {
            steps
        } else {
            let deadline = base + Duration::from_millis(session.next_deadline_ms());
            tokio::select! {
            message = inbound.message() => match message {
                Ok(Some(message)) => session.on_message(message, now_ms()),
                Ok(None) => return End::Failed("the peer closed the stream".to_string()),
                Err(status) => return End::Failed(format!("the stream broke: {}", status.message())),
            },
            _ = tokio::time::sleep_until(deadline.into()) => session.on_tick(now_ms()),
            changed = store.changed() => {
                if changed.is_err() {
                    return End::LostLeadership;
                }
                let wanted = machine::still_wanted(&store.borrow_and_update(), id);
                if wanted {
                    continue;
                }
                session.on_local_delete()
            }
            _ = &mut replaced => return End::Replaced,
            _ = leadership.tick() => {
                if !shared.agent.leads().await.unwrap_or(false) {
                    return End::LostLeadership;
                }
                continue;
            }
            }
        };
        if let Some(end) = carry_out(
            shared,
            id,
            &mut session,
            outbound,
            steps,
            now_ms(),
            &mut last_status_write,
        )
        .await
        {
            return end;
        }
    }
}

/// Carries out `steps` in order; `Some` when one ends the session.
async fn carry_out(
    shared: &Arc<Shared>,
    id: &str,
    session: &mut Session,
    outbound: &mpsc::Sender<ReplicationMessage>,
    steps: Vec<Step>,
    now_ms: u64,
    last_status_write: &mut Option<Instant>,
) -> Option<End> {
    for step in steps {
        let reply = match step {
            Step::Send(message) => Some(message),
            Step::HeartbeatReceived => {
                // The status is a Raft write: at most one per heartbeat interval.
                let due =
                    last_status_write.is_none_or(|at| at.elapsed() >= machine::HEARTBEAT_INTERVAL);
                if due {
                    *last_status_write = Some(Instant::now());
                    let now = now_text();
                    let update = StatusUpdate {
                        last_heartbeat: Some(now.clone()),
                        last_receive: Some(now),
                        ..Default::default()
                    };
                    shared.mark(id, PeeringState::Active, update).await;
                }
                None
            }
            Step::Import {
                url,
                nonce,
                service,
                instances,
            } => {
                let op = move |peer_name: String| PeeringOp::Import {
                    peer_name,
                    service,
                    instances,
                };
                Some(import(shared, id, &url, &nonce, op).await)
            }
            Step::ImportList {
                url,
                nonce,
                services,
            } => {
                let op = move |peer_name: String| PeeringOp::ImportList {
                    peer_name,
                    services,
                };
                Some(import(shared, id, &url, &nonce, op).await)
            }
            Step::Nacked { url, reason } => {
                log::warn!("peering: the peer refused a resource of {url}: {reason}");
                None
            }
            Step::PeerTerminated => return Some(End::PeerTerminated),
            Step::LocallyDeleted => return Some(End::LocallyDeleted),
            Step::Fail(reason) => return Some(End::Failed(reason)),
        };
        if let Some(message) = reply {
            if outbound.send(message).await.is_err() {
                return Some(End::Failed("the stream's sending half closed".to_string()));
            }
            session.sent(now_ms);
        }
    }
    None
}

/// Writes an imported resource of peering `id` through Raft (`op` given the peering's local
/// name) and answers it: an ACK, or a NACK with the reason the write was refused.
async fn import(
    shared: &Arc<Shared>,
    id: &str,
    url: &str,
    nonce: &str,
    op: impl FnOnce(String) -> PeeringOp,
) -> ReplicationMessage {
    let name = peering::get_by_id(&shared.store.current(), id).map(|row| row.name.clone());
    let Some(name) = name else {
        return machine::nack(url, nonce, "the peering is gone");
    };
    match shared
        .agent
        .propose(&Command::Peering(op(name.clone())))
        .await
    {
        Ok(()) => machine::ack(url, nonce),
        Err(reason) => {
            log::warn!("peering: could not import a resource from peering {name:?}: {reason}");
            machine::nack(url, nonce, &reason)
        }
    }
}

/// What a session's end does to the peering on either side.
pub async fn settle(shared: &Arc<Shared>, id: &str, name: &str, end: &End) {
    match end {
        End::PeerTerminated => {
            log::info!("peering: the peer deleted peering {name:?}; marking it TERMINATED");
            shared
                .mark(id, PeeringState::Terminated, StatusUpdate::default())
                .await;
        }
        End::Failed(reason) => {
            log::warn!("peering: the stream of peering {name:?} failed: {reason}");
            shared
                .mark(id, PeeringState::Failing, StatusUpdate::default())
                .await;
        }
        End::LocallyDeleted => {
            log::info!("peering: peering {name:?} was deleted; the peer was told")
        }
        End::Replaced => log::debug!("peering: a newer stream took over peering {name:?}"),
        End::LostLeadership => {
            log::info!("peering: this server stopped leading; the stream of {name:?} ends")
        }
    }
}
