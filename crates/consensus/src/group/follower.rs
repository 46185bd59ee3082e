//! The driver of a non-voting member: a [`Learner`] of the group's state machine. It votes on
//! nothing and keeps no journal; every few ticks it asks a voter (the primary it last heard
//! of, or the next voter when one stays silent) for the committed entries after the last op
//! it applied, applies them in order through the same state machine the voters run, and hands
//! what it applied to the observer — so every member applies the same operations in the same
//! order. When the entries it needs were trimmed, the voter sends its checkpoint instead. Its
//! operations go to the voters as a client session, like a voter's, and are answered once its
//! own state machine has applied them.
//!
//! It starts from the state machine it is given (its owner empties it first: a follower's
//! state is a copy of the voters', rebuilt from them), so it trails the voters by one round
//! trip plus up to [`FOLLOW_TICKS`] ticks.

use super::frame::{GroupFrame, GroupMessage};
use super::session::{ClientSessions, Submission};
use super::{Contact, GroupConfig, GroupMachine, GroupObserver, GroupOutbox, GroupStatus};
use crate::checkpoint::Checkpoint;
use crate::learner::Learner;
use crate::message::Entry;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Ticks between two requests for entries while nothing new came.
pub const FOLLOW_TICKS: u64 = 5;

pub(super) struct FollowerDriver<M: GroupMachine> {
    pub(super) config: GroupConfig,
    pub(super) learner: Learner<M>,
    pub(super) observer: Arc<dyn GroupObserver<M::Applied>>,
    pub(super) outbox: Arc<dyn GroupOutbox>,
    pub(super) inbound: mpsc::Receiver<(String, GroupFrame)>,
    pub(super) submitted: mpsc::Receiver<Submission>,
    pub(super) status: watch::Sender<GroupStatus>,
    pub(super) contact: Arc<Contact>,
    pub(super) session: ClientSessions,
    pub(super) tick: u64,
    /// Checkpoints installed since start.
    pub(super) installed: u64,
    /// The latest view a voter reported.
    pub(super) view: Option<u64>,
    pub(super) asked_tick: u64,
    /// Whether the last request for entries was answered.
    pub(super) answered: bool,
    /// The voter asked last.
    pub(super) target: usize,
}

impl<M: GroupMachine> FollowerDriver<M> {
    pub(super) async fn run(mut self) {
        let mut ticker = super::ticker::aligned_ticker(self.config.tick);
        self.ask();
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    self.tick += 1;
                    if self.tick >= self.asked_tick + FOLLOW_TICKS {
                        self.ask();
                    }
                    for request in self.session.due(self.tick) {
                        self.session.send_to_voters(self.outbox.as_ref(), &self.config.voters, &request);
                    }
                }
                incoming = self.inbound.recv() => match incoming {
                    Some((from, frame)) => self.receive(from, frame).await,
                    None => return,
                },
                submission = self.submitted.recv(), if self.session.has_idle() => match submission {
                    Some(submission) => {
                        if let Some(request) = self.session.begin(submission, self.tick) {
                            self.session.send_to_voters(self.outbox.as_ref(), &self.config.voters, &request);
                        }
                    }
                    None => return,
                },
            }
            if let Some(fault) = self.learner.state_machine().fault() {
                tracing::error!(%fault, group = %self.config.group, "the group stops on this node");
                return;
            }
            self.publish_status();
        }
    }

    /// Asks a voter for the entries after the last applied op: the primary, unless the last
    /// ask went unanswered, then the next voter.
    fn ask(&mut self) {
        let voters = self.config.voters.len();
        self.target = match (self.answered, self.view) {
            (true, Some(view)) => (view % voters as u64) as usize,
            _ => (self.target + 1) % voters,
        };
        self.answered = false;
        self.asked_tick = self.tick;
        let after = self.learner.applied();
        let frame = GroupFrame {
            group: self.config.group,
            message: GroupMessage::Follow { after },
        };
        self.outbox.send(&self.config.voters[self.target], frame);
    }

    async fn receive(&mut self, from: String, frame: GroupFrame) {
        if frame.group != self.config.group || !self.config.voters.contains(&from) {
            return; // only the group's voters speak for it
        }
        self.contact.record(Some(Duration::ZERO));
        match frame.message {
            GroupMessage::Entries {
                view,
                commit,
                entries,
            } => {
                self.note_view(view);
                self.answered = true;
                self.apply(&entries).await;
                if self.learner.applied() < commit && !entries.is_empty() {
                    self.ask(); // more are waiting
                }
            }
            GroupMessage::Checkpoint { view, checkpoint } => {
                self.note_view(view);
                self.answered = true;
                self.install(&checkpoint).await;
                self.ask();
            }
            GroupMessage::Reply(reply) => {
                self.note_view(reply.view);
                self.session.on_reply(reply, self.tick);
            }
            // Voters' business.
            GroupMessage::Replica(_)
            | GroupMessage::Submit { .. }
            | GroupMessage::Follow { .. } => {}
        }
    }

    fn note_view(&mut self, view: u64) {
        self.view = Some(self.view.map_or(view, |known| known.max(view)));
    }

    async fn apply(&mut self, entries: &[Entry]) {
        let mut applied_requests = Vec::new();
        for entry in entries {
            if entry.op <= self.learner.applied() {
                continue; // an answer to an earlier ask
            }
            match self.learner.apply(entry) {
                Ok(requests) => applied_requests.extend(requests),
                Err(error) => {
                    // The next ask starts again from the last op applied.
                    tracing::warn!(%error, "entries from a voter refused");
                    break;
                }
            }
        }
        self.observe_applied().await;
        self.session.applied(&applied_requests);
    }

    async fn install(&mut self, checkpoint: &Checkpoint) {
        if checkpoint.op <= self.learner.applied() {
            return;
        }
        if let Err(error) = self.learner.install(checkpoint) {
            tracing::warn!(%error, "a voter's checkpoint refused");
            return;
        }
        self.installed += 1;
        self.observe_applied().await;
    }

    /// Hands what the state machine applied to the observer, in order.
    async fn observe_applied(&mut self) {
        for applied in self.learner.state_machine_mut().take_applied() {
            self.observer.applied(&applied).await;
        }
    }

    fn publish_status(&self) {
        let primary = self.view.map(|view| {
            let index = view % self.config.voters.len() as u64;
            self.config.voters[index as usize].clone()
        });
        let status = GroupStatus {
            view: self.view.unwrap_or(0),
            commit: self.learner.applied(),
            primary,
            voters: self.config.voters.clone(),
            lag: Vec::new(),
            checkpoints_taken: 0,
            states_installed: self.installed,
            fetching_state: false,
            contact_age_ms: None,
        };
        self.status.send_if_modified(|current| {
            let changed = *current != status;
            *current = status;
            changed
        });
    }
}
