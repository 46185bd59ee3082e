//! The task that runs one voter of a group: it ticks the replica, carries its messages through
//! the outbox, takes operations submitted on this node to the primary (again after
//! `session::RESEND_TICKS` until answered), routes the primary's replies back to the node that
//! submitted, answers non-voting members' requests for entries, and hands everything the state
//! machine applied to the observer, in order. As many operations of this node are in flight
//! as it has client sessions (a VSR client session has one outstanding request).

use super::frame::{GroupFrame, GroupMessage};
use super::session::{ClientSessions, Submission};
use super::{
    Contact, FOLLOW_BATCH_BYTES, GroupConfig, GroupError, GroupMachine, GroupObserver, GroupOutbox,
    GroupStatus,
};
use crate::config::Config;
use crate::durable::FileJournal;
use crate::message::{ClientId, Message, Request, Status};
use crate::replica::{Action, Replica};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{mpsc, watch};

/// Client sessions of other nodes whose replies this voter routes (their origin node).
const ORIGINS_MAX: usize = 1024;

/// Opens the voter's journal (creating it on the first start), empties `machine` and rebuilds
/// it from the journal.
pub(super) fn open_replica<M: GroupMachine>(
    config: Config,
    journal: &Path,
    machine: M,
) -> Result<Replica<FileJournal, M>, GroupError> {
    // A journal created but never written (a crash right after its file was made) is fresh too.
    let fresh =
        FileJournal::is_blank(journal).map_err(|error| GroupError::Journal(error.to_string()))?;
    let file =
        FileJournal::open(journal).map_err(|error| GroupError::Journal(error.to_string()))?;
    let mut machine = machine;
    machine
        .restarting()
        .map_err(|error| GroupError::Journal(error.to_string()))?;
    // An empty journal may be a new group's or a lost disk's: the replica finds out from its
    // peers before it votes (see `Replica::start_empty`).
    let replica = if fresh {
        Replica::start_empty(config, file, machine, rand::random::<u64>())
    } else {
        Replica::open(config, file, machine, rand::random::<u64>())
    };
    let mut replica = replica.map_err(|error| GroupError::Journal(error.to_string()))?;
    replica
        .state_machine_mut()
        .restarted()
        .map_err(|error| GroupError::Journal(error.to_string()))?;
    Ok(replica)
}

pub(super) struct VoterDriver<M: GroupMachine> {
    pub(super) config: GroupConfig,
    pub(super) replica: Replica<FileJournal, M>,
    pub(super) observer: Arc<dyn GroupObserver<M::Applied>>,
    pub(super) outbox: Arc<dyn GroupOutbox>,
    pub(super) inbound: mpsc::Receiver<(String, GroupFrame)>,
    pub(super) submitted: mpsc::Receiver<Submission>,
    pub(super) status: watch::Sender<GroupStatus>,
    pub(super) contact: Arc<Contact>,
    /// Set when this node asked for the primary's role ([`super::Group::take_primary`]).
    pub(super) take_primary: Arc<AtomicBool>,
    /// This node's client sessions.
    pub(super) session: ClientSessions,
    pub(super) origins: BTreeMap<ClientId, String>,
    pub(super) tick: u64,
}

impl<M: GroupMachine> VoterDriver<M> {
    pub(super) async fn run(mut self) {
        // Whatever the replica applied while opening (its journal's committed suffix).
        self.observe_applied().await;
        let mut ticker = super::ticker::aligned_ticker(self.config.tick);
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    self.tick += super::session::session_ticks_per_tick(self.config.tick);
                    let actions = self.replica.tick();
                    self.carry_out(actions).await;
                    if self.take_primary.swap(false, Ordering::Relaxed) {
                        let actions = self.replica.take_primary();
                        self.carry_out(actions).await;
                    }
                    self.resend_if_due().await;
                }
                incoming = self.inbound.recv() => match incoming {
                    Some((from, frame)) => self.receive(from, frame).await,
                    None => return,
                },
                submission = self.submitted.recv(), if self.session.has_idle() => match submission {
                    Some(submission) => self.begin(submission).await,
                    None => return,
                },
            }
            if let Some(fault) = self.replica.state_machine().fault() {
                tracing::error!(%fault, group = %self.config.group, "the group stops on this node");
                return;
            }
            self.publish_status();
        }
    }

    fn send(&self, to: &str, message: GroupMessage) {
        let frame = GroupFrame {
            group: self.config.group,
            message,
        };
        self.outbox.send(to, frame);
    }

    async fn begin(&mut self, submission: Submission) {
        if let Some(request) = self.session.begin(submission, self.tick) {
            self.send_request(request).await;
        }
    }

    /// Sends the operation in flight to every voter; only the primary acts on it.
    async fn send_request(&mut self, request: Request) {
        self.session
            .send_to_voters(self.outbox.as_ref(), &self.config.voters, &request);
        let actions = self.replica.on_message(Message::Request(request));
        self.carry_out(actions).await;
    }

    async fn resend_if_due(&mut self) {
        for request in self.session.due(self.tick) {
            self.send_request(request).await;
        }
    }

    async fn receive(&mut self, from: String, frame: GroupFrame) {
        if frame.group != self.config.group {
            tracing::debug!(%from, group = %frame.group, "a frame of another group; dropped");
            return;
        }
        match frame.message {
            GroupMessage::Replica(message) => {
                if self.config.voters.contains(&from) {
                    let actions = self.replica.on_message(message);
                    self.carry_out(actions).await;
                }
            }
            GroupMessage::Submit { origin, request } => {
                if origin != from {
                    tracing::warn!(%from, %origin, "a peer submitted for another node; dropped");
                    return;
                }
                if self.origins.len() >= ORIGINS_MAX && !self.origins.contains_key(&request.client)
                {
                    self.origins.pop_first();
                }
                self.origins.insert(request.client, origin);
                let actions = self.replica.on_message(Message::Request(request));
                self.carry_out(actions).await;
            }
            GroupMessage::Reply(reply) => self.session.on_reply(reply, self.tick),
            GroupMessage::Follow { after } => self.answer_follower(&from, after),
            // A voter follows the log itself.
            GroupMessage::Entries { .. } | GroupMessage::Checkpoint { .. } => {}
        }
    }

    /// Sends a non-voting member what it lacks: the committed entries after `after` (at most
    /// [`FOLLOW_BATCH_BYTES`], at least one), or this voter's checkpoint if they were trimmed.
    fn answer_follower(&mut self, from: &str, after: u64) {
        if self.config.voters.iter().any(|voter| voter == from) {
            return;
        }
        let view = self.replica.view();
        let applied = self.replica.applied();
        let base = self.replica.log_base();
        if after < base {
            let checkpoint = self.replica.transferable_checkpoint().clone();
            self.send(from, GroupMessage::Checkpoint { view, checkpoint });
            return;
        }
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        for entry in self.replica.log() {
            if entry.op <= after || entry.op > applied {
                continue;
            }
            let size: usize = entry
                .requests
                .iter()
                .map(|request| request.operation.len() + 64)
                .sum();
            if !entries.is_empty() && bytes + size > FOLLOW_BATCH_BYTES {
                break;
            }
            bytes += size;
            entries.push(entry.clone());
        }
        let commit = self.replica.commit();
        self.send(
            from,
            GroupMessage::Entries {
                view,
                commit,
                entries,
            },
        );
    }

    async fn carry_out(&mut self, actions: Vec<Action>) {
        let mut applied_requests = Vec::new();
        for action in actions {
            match action {
                Action::Send { to, message } => {
                    if let Some(voter) = self.config.voters.get(usize::from(to)) {
                        self.send(voter, GroupMessage::Replica(message));
                    }
                }
                Action::Reply(reply) if self.session.owns(reply.client) => {
                    self.session.on_reply(reply, self.tick)
                }
                Action::Reply(reply) => {
                    if let Some(origin) = self.origins.get(&reply.client) {
                        self.send(origin, GroupMessage::Reply(reply));
                    }
                }
                // A restored state reaches the observer through the state machine's applied
                // effects; an operation of ours it covered is answered after
                // `APPLIED_HERE_WAIT_TICKS`.
                Action::Checkpoint { .. } => {}
                Action::Applied { requests, .. } => applied_requests.extend(requests),
            }
        }
        // The observer first: a caller answered next reads its own write here.
        self.observe_applied().await;
        self.session.applied(&applied_requests);
    }

    /// Hands what the state machine applied to the observer, in order.
    async fn observe_applied(&mut self) {
        for applied in self.replica.state_machine_mut().take_applied() {
            self.observer.applied(&applied).await;
        }
    }

    fn publish_status(&self) {
        match self.replica.quorum_contact_ticks_ago() {
            Some(ticks) => self.contact.record(Some(self.config.tick * ticks as u32)),
            None => self.contact.lose(),
        }
        let view = self.replica.view();
        let primary = (self.replica.status() == Status::Normal).then(|| {
            let index = view % self.config.voters.len() as u64;
            self.config.voters[index as usize].clone()
        });
        let op = self.replica.op();
        let lag = self
            .replica
            .acknowledged()
            .map_or_else(Vec::new, |acknowledged| {
                acknowledged
                    .iter()
                    .map(|acked| (*acked > 0 || op == 0).then(|| op.saturating_sub(*acked)))
                    .collect()
            });
        let status = GroupStatus {
            view,
            commit: self.replica.commit(),
            primary,
            voters: self.config.voters.clone(),
            lag,
            checkpoints_taken: self.replica.counters().checkpoints_taken,
            states_installed: self.replica.counters().states_installed,
            fetching_state: self.replica.is_fetching_state(),
            contact_age_ms: None,
        };
        self.status.send_if_modified(|current| {
            let changed = *current != status;
            *current = status;
            changed
        });
    }
}
