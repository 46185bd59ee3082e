//! The task that runs one voter of the metadata plane: it ticks the replica, carries its
//! messages over the transport, takes commands submitted on this node to the primary (again
//! after [`RESEND_TICKS`] until answered), routes the primary's replies back to the node that
//! submitted, and hands every applied command to the node's observer in order. One command of
//! this node is in flight at a time (a VSR client session has one outstanding request).

use super::wire::PlaneMessage;
use super::{PlaneConfig, PlaneError, PlaneOutbox};
use crate::consensus::config::Config;
use crate::consensus::durable::FileJournal;
use crate::consensus::message::{ClientId, Message, Reply, ReplyError, Request, Status};
use crate::consensus::replica::{Action, Replica};
use crate::metadata::{
    Applied, CatalogMachine, CatalogObserver, Command, MetadataError, MetadataStore, PlaneStatus,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};

/// Ticks before an unanswered command is sent to the voters again (a view change may have
/// moved the primary).
pub(super) const RESEND_TICKS: u64 = 20;

/// Ticks a command answered by the primary waits for this node's own catalog to apply it
/// before it is answered anyway (this voter is catching up by state transfer).
const APPLIED_HERE_WAIT_TICKS: u64 = 100;

/// Client sessions of other nodes whose replies this voter routes (their origin node).
const ORIGINS_MAX: usize = 1024;

type PlaneReplica = Replica<FileJournal, CatalogMachine>;

/// A command submitted on this node and where its answer goes.
pub(super) struct Submission {
    pub(super) command: Command,
    pub(super) answer: oneshot::Sender<Result<Applied, MetadataError>>,
}

struct InFlight {
    request: Request,
    answer: oneshot::Sender<Result<Applied, MetadataError>>,
    sent_tick: u64,
    /// The primary's answer, once it came, and the tick it came at.
    reply: Option<(Result<Vec<u8>, ReplyError>, u64)>,
    applied_here: bool,
}

/// Opens the voter's journal (creating it on the first start) and rebuilds the catalog from it.
pub(super) fn open_replica(
    config: Config,
    journal: &Path,
    store: MetadataStore,
) -> Result<PlaneReplica, PlaneError> {
    let fresh = !journal.exists();
    let file =
        FileJournal::open(journal).map_err(|error| PlaneError::Journal(error.to_string()))?;
    let mut catalog = CatalogMachine::new(store);
    catalog
        .reset()
        .map_err(|error| PlaneError::Journal(error.to_string()))?;
    let replica = if fresh {
        Replica::format(config, file, catalog)
    } else {
        Replica::open(config, file, catalog, rand::random::<u64>())
    };
    replica.map_err(|error| PlaneError::Journal(error.to_string()))
}

pub(super) struct Driver {
    config: PlaneConfig,
    replica: PlaneReplica,
    observer: Arc<dyn CatalogObserver>,
    outbox: Arc<dyn PlaneOutbox>,
    inbound: mpsc::Receiver<(String, PlaneMessage)>,
    submitted: mpsc::Receiver<Submission>,
    status: watch::Sender<PlaneStatus>,
    /// This node's client session: new each start, so request numbers start at 1 again.
    client: ClientId,
    next_request: u64,
    in_flight: Option<InFlight>,
    origins: BTreeMap<ClientId, String>,
    tick: u64,
}

impl Driver {
    pub(super) fn new(
        config: PlaneConfig,
        replica: PlaneReplica,
        observer: Arc<dyn CatalogObserver>,
        outbox: Arc<dyn PlaneOutbox>,
        inbound: mpsc::Receiver<(String, PlaneMessage)>,
        submitted: mpsc::Receiver<Submission>,
        status: watch::Sender<PlaneStatus>,
    ) -> Driver {
        Driver {
            config,
            replica,
            observer,
            outbox,
            inbound,
            submitted,
            status,
            client: rand::random::<u64>(),
            next_request: 1,
            in_flight: None,
            origins: BTreeMap::new(),
            tick: 0,
        }
    }

    pub(super) async fn run(mut self) {
        // Whatever the replica applied while opening (its journal's committed suffix).
        self.observe_applied().await;
        let mut ticker = tokio::time::interval(self.config.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    self.tick += 1;
                    let actions = self.replica.tick();
                    self.carry_out(actions).await;
                    self.resend_if_due().await;
                }
                incoming = self.inbound.recv() => match incoming {
                    Some((from, message)) => self.receive(from, message).await,
                    None => return,
                },
                submission = self.submitted.recv(), if self.in_flight.is_none() => match submission {
                    Some(submission) => self.begin(submission).await,
                    None => return,
                },
            }
            if let Some(fault) = self.replica.state_machine().fault() {
                tracing::error!(%fault, "the metadata plane stops on this node");
                return;
            }
            self.publish_status();
        }
    }

    async fn begin(&mut self, submission: Submission) {
        let request = Request {
            client: self.client,
            request_number: self.next_request,
            operation: CatalogMachine::encode_command(&submission.command),
        };
        self.next_request += 1;
        self.in_flight = Some(InFlight {
            request,
            answer: submission.answer,
            sent_tick: self.tick,
            reply: None,
            applied_here: false,
        });
        self.send_request().await;
    }

    /// Sends the command in flight to every voter; only the primary acts on it.
    async fn send_request(&mut self) {
        let Some(in_flight) = &mut self.in_flight else {
            return;
        };
        in_flight.sent_tick = self.tick;
        let request = in_flight.request.clone();
        for voter in self.config.voters.clone() {
            if voter != self.config.node {
                let submit = PlaneMessage::Submit {
                    origin: self.config.node.clone(),
                    request: request.clone(),
                };
                self.outbox.send(&voter, submit);
            }
        }
        let actions = self.replica.on_message(Message::Request(request));
        self.carry_out(actions).await;
    }

    async fn resend_if_due(&mut self) {
        let Some(in_flight) = &self.in_flight else {
            return;
        };
        if let Some((_, replied_tick)) = &in_flight.reply {
            if self.tick >= replied_tick + APPLIED_HERE_WAIT_TICKS {
                self.answer();
            }
            return;
        }
        if self.tick >= in_flight.sent_tick + RESEND_TICKS {
            self.send_request().await;
        }
    }

    async fn receive(&mut self, from: String, message: PlaneMessage) {
        match message {
            PlaneMessage::Replica(message) => {
                if self.config.voters.contains(&from) {
                    let actions = self.replica.on_message(message);
                    self.carry_out(actions).await;
                }
            }
            PlaneMessage::Submit { origin, request } => {
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
            PlaneMessage::Reply(reply) => self.on_reply(reply),
        }
    }

    async fn carry_out(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Send { to, message } => {
                    if let Some(voter) = self.config.voters.get(usize::from(to)) {
                        self.outbox.send(voter, PlaneMessage::Replica(message));
                    }
                }
                Action::Reply(reply) if reply.client == self.client => self.on_reply(reply),
                Action::Reply(reply) => {
                    if let Some(origin) = self.origins.get(&reply.client) {
                        self.outbox.send(origin, PlaneMessage::Reply(reply));
                    }
                }
                // A restored state reaches the observer as `Applied::Restored`; a command of
                // ours it covered is answered after `APPLIED_HERE_WAIT_TICKS`.
                Action::Checkpoint { .. } => {}
                Action::Applied { requests, .. } => {
                    if let Some(in_flight) = &mut self.in_flight {
                        let mine = (in_flight.request.client, in_flight.request.request_number);
                        if requests.contains(&mine) {
                            in_flight.applied_here = true;
                        }
                    }
                }
            }
        }
        self.observe_applied().await;
        let done = self
            .in_flight
            .as_ref()
            .is_some_and(|in_flight| in_flight.reply.is_some() && in_flight.applied_here);
        if done {
            self.answer();
        }
    }

    /// Hands what the catalog applied to the node's observer, in order.
    async fn observe_applied(&mut self) {
        for applied in self.replica.state_machine_mut().take_applied() {
            self.observer.applied(&applied).await;
        }
    }

    fn on_reply(&mut self, reply: Reply) {
        let Some(in_flight) = &mut self.in_flight else {
            return;
        };
        let mine = reply.client == in_flight.request.client
            && reply.request_number == in_flight.request.request_number;
        if mine && in_flight.reply.is_none() {
            in_flight.reply = Some((reply.result, self.tick));
            if in_flight.applied_here {
                self.answer();
            }
        }
    }

    /// Answers the command in flight with the primary's reply.
    fn answer(&mut self) {
        let Some(in_flight) = self.in_flight.take() else {
            return;
        };
        let result = match in_flight.reply {
            Some((Ok(bytes), _)) => CatalogMachine::decode_result(&bytes),
            Some((Err(ReplyError::SessionEvicted), _)) => Err(MetadataError::Unavailable(
                "this node's catalog session was evicted; the command may or may not have \
                 applied: read the catalog before retrying"
                    .into(),
            )),
            None => Err(MetadataError::Unavailable(
                "no answer from the primary".into(),
            )),
        };
        let _ = in_flight.answer.send(result);
    }

    fn publish_status(&self) {
        let view = self.replica.view();
        let primary = (self.replica.status() == Status::Normal).then(|| {
            let index = view % self.config.voters.len() as u64;
            self.config.voters[index as usize].clone()
        });
        let status = PlaneStatus {
            view,
            commit: self.replica.commit(),
            primary,
            voters: self.config.voters.clone(),
        };
        self.status.send_if_modified(|current| {
            let changed = *current != status;
            *current = status;
            changed
        });
    }
}
