//! One open stream's loop, the same on both sides: messages in, heartbeats out, the
//! peering watched in the store (deleted here → `Terminated` out), leadership checked; the
//! decisions are [`super::machine::Session`]'s, this file only waits and carries them out.

use super::machine::{self, Session, StatusUpdate, Step, Timing};
use super::messages::ReplicationMessage;
use super::{now_text, Shared, LEADERSHIP_CHECK_INTERVAL};
use crate::store::peering::PeeringState;
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
    loop {
        let deadline = base + Duration::from_millis(session.next_deadline_ms());
        let steps = tokio::select! {
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
        };
        for step in steps {
            match step {
                Step::Send(message) => {
                    if outbound.send(message).await.is_err() {
                        return End::Failed("the stream's sending half closed".to_string());
                    }
                    session.sent(now_ms());
                }
                Step::HeartbeatReceived => {
                    // The status is a Raft write: at most one per heartbeat interval.
                    let due = last_status_write
                        .is_none_or(|at| at.elapsed() >= machine::HEARTBEAT_INTERVAL);
                    if due {
                        last_status_write = Some(Instant::now());
                        let now = now_text();
                        let update = StatusUpdate {
                            last_heartbeat: Some(now.clone()),
                            last_receive: Some(now),
                            ..Default::default()
                        };
                        shared.mark(id, PeeringState::Active, update).await;
                    }
                }
                Step::PeerTerminated => return End::PeerTerminated,
                Step::LocallyDeleted => return End::LocallyDeleted,
                Step::Fail(reason) => return End::Failed(reason),
            }
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
