//! The metadata plane of a non-voting member: a [`Learner`] of the catalog. It votes on
//! nothing and keeps no journal; every few ticks it asks a voter (the primary it last heard
//! of, or the next voter when one stays silent) for the committed entries after the last op
//! it applied, applies them in order to its catalog through the same [`CatalogMachine`] the
//! voters run, and hands each applied command to the node's observer — so every node applies
//! the same commands in the same order. When the entries it needs were trimmed, the voter
//! sends its checkpoint instead. Its commands go to the voters as a client session, like a
//! voter's, and are answered once its own catalog has applied them.
//!
//! It starts empty on every start (its catalog is a copy of the voters', rebuilt from them),
//! so it trails the voters by one round trip plus up to [`FOLLOW_TICKS`] ticks.

use super::session::{ClientSession, Due, Submission};
use super::{
    PlaneConfig, PlaneError, PlaneInbound, PlaneMessage, PlaneOutbox, ReplicatedPlane,
    SUBMISSIONS_MAX,
};
use crate::{CatalogMachine, CatalogObserver, MetadataStore, PlaneStatus};
use std::sync::Arc;
use tessera_consensus::checkpoint::Checkpoint;
use tessera_consensus::learner::Learner;
use tessera_consensus::message::Entry;
use tokio::sync::{mpsc, watch};

/// Ticks between two requests for entries while nothing new came.
pub const FOLLOW_TICKS: u64 = 5;

/// Starts following the voters of `config` (which must not name this node a voter): empties
/// this node's catalog, then rebuilds it from them.
pub(super) fn start_follower(
    config: PlaneConfig,
    store: MetadataStore,
    observer: Arc<dyn CatalogObserver>,
    outbox: Arc<dyn PlaneOutbox>,
    inbound: PlaneInbound,
) -> Result<ReplicatedPlane, PlaneError> {
    if config.voters.contains(&config.node) {
        return Err(PlaneError::Config(format!(
            "{} is a voter, not a follower",
            config.node
        )));
    }
    if config.voters.is_empty() {
        return Err(PlaneError::Config("a follower needs voters".into()));
    }
    let mut catalog = CatalogMachine::new(store.clone());
    catalog
        .reset()
        .map_err(|error| PlaneError::Journal(error.to_string()))?;
    let (submissions, submitted) = mpsc::channel(SUBMISSIONS_MAX);
    let (status_sender, status) = watch::channel(PlaneStatus {
        voters: config.voters.clone(),
        ..PlaneStatus::default()
    });
    let driver = FollowerDriver {
        session: ClientSession::new(config.node.clone()),
        config,
        learner: Learner::new(catalog),
        observer,
        outbox,
        inbound,
        submitted,
        status: status_sender,
        tick: 0,
        installed: 0,
        view: None,
        asked_tick: 0,
        answered: true,
        target: 0,
    };
    Ok(ReplicatedPlane {
        store,
        submissions,
        status,
        driver: tokio::spawn(driver.run()),
    })
}

struct FollowerDriver {
    config: PlaneConfig,
    learner: Learner<CatalogMachine>,
    observer: Arc<dyn CatalogObserver>,
    outbox: Arc<dyn PlaneOutbox>,
    inbound: PlaneInbound,
    submitted: mpsc::Receiver<Submission>,
    status: watch::Sender<PlaneStatus>,
    session: ClientSession,
    tick: u64,
    /// Checkpoints installed since start.
    installed: u64,
    /// The latest view a voter reported.
    view: Option<u64>,
    asked_tick: u64,
    /// Whether the last request for entries was answered.
    answered: bool,
    /// The voter asked last.
    target: usize,
}

impl FollowerDriver {
    async fn run(mut self) {
        let mut ticker = tokio::time::interval(self.config.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.ask();
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    self.tick += 1;
                    if self.tick >= self.asked_tick + FOLLOW_TICKS {
                        self.ask();
                    }
                    if let Due::Resend(request) = self.session.due(self.tick) {
                        self.session.send_to_voters(self.outbox.as_ref(), &self.config.voters, &request);
                    }
                }
                incoming = self.inbound.recv() => match incoming {
                    Some((from, message)) => self.receive(from, message).await,
                    None => return,
                },
                submission = self.submitted.recv(), if self.session.is_idle() => match submission {
                    Some(submission) => {
                        let request = self.session.begin(submission, self.tick);
                        self.session.send_to_voters(self.outbox.as_ref(), &self.config.voters, &request);
                    }
                    None => return,
                },
            }
            if let Some(fault) = self.learner.state_machine().fault() {
                tracing::error!(%fault, "the metadata plane stops on this node");
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
        self.outbox.send(
            &self.config.voters[self.target],
            PlaneMessage::Follow { after },
        );
    }

    async fn receive(&mut self, from: String, message: PlaneMessage) {
        if !self.config.voters.contains(&from) {
            return; // only voters speak for the plane
        }
        match message {
            PlaneMessage::Entries {
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
            PlaneMessage::Checkpoint { view, checkpoint } => {
                self.note_view(view);
                self.answered = true;
                self.install(&checkpoint).await;
                self.ask();
            }
            PlaneMessage::Reply(reply) => {
                self.note_view(reply.view);
                self.session.on_reply(reply, self.tick);
            }
            // Voters' business.
            PlaneMessage::Replica(_)
            | PlaneMessage::Submit { .. }
            | PlaneMessage::Follow { .. } => {}
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

    /// Hands what the catalog applied to the node's observer, in order.
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
        let status = PlaneStatus {
            view: self.view.unwrap_or(0),
            commit: self.learner.applied(),
            primary,
            voters: self.config.voters.clone(),
            checkpoints_taken: 0,
            states_installed: self.installed,
        };
        self.status.send_if_modified(|current| {
            let changed = *current != status;
            *current = status;
            changed
        });
    }
}
