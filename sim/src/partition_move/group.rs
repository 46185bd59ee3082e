//! One epoch's group in the move simulator: real VSR replicas
//! ([`tessera_consensus::replica::Replica`]) running the real partition machine, over a network
//! of their own that drops, duplicates and reorders messages and cuts a replica off from the
//! others now and then; a restarted replica reopens on its journal, as a node's group driver
//! reopens it. What the move protocol submits is a client
//! request (one session per submitter in each group, resent until its reply comes), and its
//! answer is the reply, heard on a node once that node's own replica applied the op.

use crate::rng::SimRng;
use std::collections::{BTreeMap, HashMap};
use tessera_consensus::config::{Canaries, Config};
use tessera_consensus::journal::InMemoryJournal;
use tessera_consensus::message::{ClientId, Message, OpNumber, ReplicaIndex, Request, Status};
use tessera_consensus::replica::{Action, Replica};
use tessera_state::partition::{PartitionMachine, PartitionResult};

type VsrReplica = Replica<InMemoryJournal, PartitionMachine>;

/// Per thousand deliveries: the message is lost.
const DROP_PER_MILLE: u64 = 20;
/// Per thousand deliveries: the message arrives, and again later.
const DUPLICATE_PER_MILLE: u64 = 20;
/// Per thousand group steps: every replica of the group ticks.
const TICK_PER_MILLE: u64 = 300;
/// Ticks after which an unanswered request is sent again to every replica.
const RESEND_TICKS: u64 = 20;
/// A checkpoint every this many ops: small, so restarts restore savepoints and lagging
/// replicas install streamed images.
const CHECKPOINT_INTERVAL_OPS: u64 = 16;
/// The parts of a streamed image: small, so an image takes many.
const STATE_CHUNK_BYTES: usize = 4 * 1024;
/// Messages in flight in one group, at most: past it a new one is lost (VSR resends).
const IN_FLIGHT_MAX: usize = 4_096;
/// Per thousand group steps: one replica is cut off from the others (none is yet).
const CUT_PER_MILLE: u64 = 5;
/// How long a cut lasts, in ticks: from 10 to this.
const CUT_TICKS_MAX: u64 = 120;

/// One submission: its request, and the reply's answer once it came.
struct Submission {
    request: Request,
    answer: Option<PartitionResult>,
    sent_tick: u64,
}

/// One epoch's group.
pub(super) struct Group {
    /// The node of each replica, in replica-index order.
    nodes: Vec<usize>,
    /// Whether its machines started filling (a move's new epoch).
    filling: bool,
    /// The consensus canaries its replicas run with (none, unless a test breaks the protocol).
    canaries: Canaries,
    /// Each replica (`None` only while it restarts).
    replicas: Vec<Option<VsrReplica>>,
    /// Messages on their way: `(from, to, message)`, `from` none for a client's request.
    in_flight: Vec<(Option<ReplicaIndex>, ReplicaIndex, Message)>,
    /// The replica cut off from the others, and the tick its cut ends.
    cut: Option<(ReplicaIndex, u64)>,
    /// Cuts so far.
    cuts: u64,
    submissions: Vec<Submission>,
    /// Each submitter's last request number in this group.
    request_numbers: BTreeMap<ClientId, u64>,
    /// Where each request committed: `(client, request number)` → op.
    committed: HashMap<(ClientId, u64), OpNumber>,
    ticks: u64,
}

/// A replica on an empty journal with an empty machine (filling, for a move's new epoch): a
/// new group's, or one whose disk was lost.
fn empty_replica(
    (replica_count, replica): (usize, usize),
    filling: bool,
    canaries: Canaries,
    rng: &mut SimRng,
) -> Result<VsrReplica, String> {
    let mut machine = PartitionMachine::in_memory().map_err(|error| error.to_string())?;
    if filling {
        machine = machine.filling().map_err(|error| error.to_string())?;
    }
    Replica::start_empty(
        config(replica_count, replica, canaries),
        InMemoryJournal::new(),
        machine,
        rng.next_u64(),
    )
    .map_err(|error| error.to_string())
}

fn config(replica_count: usize, replica: usize, canaries: Canaries) -> Config {
    let mut config = Config::new(replica_count as u8, replica as ReplicaIndex);
    config.checkpoint_interval_ops = CHECKPOINT_INTERVAL_OPS;
    config.state_chunk_bytes = STATE_CHUNK_BYTES;
    config.canaries = canaries;
    config
}

impl Group {
    /// A new group on `nodes`, every replica on an empty journal, its machine filling (a move's
    /// new epoch) or empty (the first).
    pub(super) fn start(
        nodes: Vec<usize>,
        filling: bool,
        canaries: Canaries,
        rng: &mut SimRng,
    ) -> Result<Group, String> {
        let mut replicas = Vec::new();
        for replica in 0..nodes.len() {
            let started = empty_replica((nodes.len(), replica), filling, canaries, rng)?;
            replicas.push(Some(started));
        }
        Ok(Group {
            nodes,
            filling,
            canaries,
            replicas,
            in_flight: Vec::new(),
            cut: None,
            cuts: 0,
            submissions: Vec::new(),
            request_numbers: BTreeMap::new(),
            committed: HashMap::new(),
            ticks: 0,
        })
    }

    /// The group's nodes.
    pub(super) fn nodes(&self) -> &[usize] {
        &self.nodes
    }

    /// Whether `node` holds a replica of the group.
    pub(super) fn has(&self, node: usize) -> bool {
        self.nodes.contains(&node)
    }

    fn index_of(&self, node: usize) -> Option<usize> {
        self.nodes.iter().position(|member| *member == node)
    }

    fn replica(&self, node: usize) -> Option<&VsrReplica> {
        self.replicas.get(self.index_of(node)?)?.as_ref()
    }

    /// `node`'s replica's machine.
    pub(super) fn machine(&self, node: usize) -> Option<&PartitionMachine> {
        self.replica(node).map(|replica| replica.state_machine())
    }

    /// Submits `operation` as `client`'s next request; its ticket.
    pub(super) fn submit(&mut self, client: ClientId, operation: Vec<u8>) -> usize {
        let number = self.request_numbers.entry(client).or_insert(0);
        *number += 1;
        let request = Request {
            client,
            request_number: *number,
            operation,
        };
        self.send_to_all(&request);
        self.submissions.push(Submission {
            request,
            answer: None,
            sent_tick: self.ticks,
        });
        self.submissions.len() - 1
    }

    /// The operation submitted under `ticket`.
    pub(super) fn operation(&self, ticket: usize) -> Vec<u8> {
        self.submissions[ticket].request.operation.clone()
    }

    /// The answer to `ticket` as `node` hears it — its reply came, and `node`'s replica applied
    /// the op it committed at — with that op.
    pub(super) fn answer(&self, node: usize, ticket: usize) -> Option<(OpNumber, PartitionResult)> {
        let submission = &self.submissions[ticket];
        let answer = submission.answer.clone()?;
        let request = &submission.request;
        let op = *self
            .committed
            .get(&(request.client, request.request_number))?;
        (self.replica(node)?.applied() >= op).then_some((op, answer))
    }

    fn send_to_all(&mut self, request: &Request) {
        for replica in 0..self.nodes.len() {
            self.push(
                None,
                replica as ReplicaIndex,
                Message::Request(request.clone()),
            );
        }
    }

    fn push(&mut self, from: Option<ReplicaIndex>, to: ReplicaIndex, message: Message) {
        if self.in_flight.len() < IN_FLIGHT_MAX {
            self.in_flight.push((from, to, message));
        }
    }

    /// Whether a message from `from` to `to` is lost to the cut under way.
    fn is_cut(&self, from: Option<ReplicaIndex>, to: ReplicaIndex) -> bool {
        self.cut.is_some_and(|(cut, until)| {
            self.ticks < until && from.is_some() && (from == Some(cut) || to == cut)
        })
    }

    /// A few messages delivered, in any order (with `faults`, some lost or duplicated), and
    /// now and then a tick of every replica.
    pub(super) fn step(&mut self, rng: &mut SimRng, faults: bool) -> Result<(), String> {
        if !faults {
            self.cut = None;
        } else if self.cut.is_none_or(|(_, until)| self.ticks >= until)
            && rng.per_mille(CUT_PER_MILLE)
        {
            let replica = rng.index(self.nodes.len()) as ReplicaIndex;
            self.cut = Some((replica, self.ticks + rng.between(10, CUT_TICKS_MAX)));
            self.cuts += 1;
        }
        for _ in 0..rng.between(1, 4) {
            if self.in_flight.is_empty() {
                break;
            }
            let (from, to, message) = self.in_flight.swap_remove(rng.index(self.in_flight.len()));
            if faults && (rng.per_mille(DROP_PER_MILLE) || self.is_cut(from, to)) {
                continue;
            }
            if faults && rng.per_mille(DUPLICATE_PER_MILLE) {
                self.push(from, to, message.clone());
            }
            self.deliver(to, message)?;
        }
        if rng.per_mille(TICK_PER_MILLE) || self.in_flight.is_empty() {
            self.tick()?;
        }
        Ok(())
    }

    fn deliver(&mut self, to: ReplicaIndex, message: Message) -> Result<(), String> {
        let Some(Some(replica)) = self.replicas.get_mut(usize::from(to)) else {
            return Ok(());
        };
        let actions = replica.on_message(message);
        self.take(to, actions)
    }

    fn tick(&mut self) -> Result<(), String> {
        self.ticks += 1;
        for index in 0..self.replicas.len() {
            let Some(replica) = self.replicas[index].as_mut() else {
                continue;
            };
            let actions = replica.tick();
            self.take(index as ReplicaIndex, actions)?;
        }
        let due: Vec<Request> = self
            .submissions
            .iter_mut()
            .filter(|submission| submission.answer.is_none())
            .filter(|submission| self.ticks >= submission.sent_tick + RESEND_TICKS)
            .map(|submission| {
                submission.sent_tick = self.ticks;
                submission.request.clone()
            })
            .collect();
        for request in due {
            self.send_to_all(&request);
        }
        Ok(())
    }

    fn take(&mut self, from: ReplicaIndex, actions: Vec<Action>) -> Result<(), String> {
        for action in actions {
            match action {
                Action::Send { to, message } => self.push(Some(from), to, message),
                Action::Reply(reply) => {
                    let result = reply.result.map_err(|error| {
                        format!(
                            "request {} of client {}: {error:?}",
                            reply.request_number, reply.client
                        )
                    })?;
                    let answer = PartitionResult::decode(&result);
                    let submission = self.submissions.iter_mut().find(|submission| {
                        submission.request.client == reply.client
                            && submission.request.request_number == reply.request_number
                    });
                    if let Some(submission) = submission {
                        match &submission.answer {
                            Some(earlier) if *earlier != answer => {
                                return Err(format!(
                                    "client {} request {} answered {answer:?} after {earlier:?}",
                                    reply.client, reply.request_number
                                ));
                            }
                            _ => submission.answer = Some(answer),
                        }
                    }
                }
                Action::Applied { op, requests, .. } => {
                    for request in requests {
                        if let Some(earlier) = self.committed.insert(request, op)
                            && earlier != op
                        {
                            return Err(format!(
                                "client {} request {} committed at op {op} and at op {earlier}",
                                request.0, request.1
                            ));
                        }
                    }
                }
                Action::Checkpoint { .. } => {}
            }
        }
        Ok(())
    }

    /// `node`'s replica restarts: its machine forgets what it held in memory, and the replica
    /// reopens on its journal (restoring its last checkpoint's savepoint, replaying the rest).
    pub(super) fn restart(&mut self, node: usize, rng: &mut SimRng) -> Result<(), String> {
        let Some(index) = self.index_of(node) else {
            return Ok(());
        };
        let Some(replica) = self.replicas[index].take() else {
            return Ok(());
        };
        let (journal, mut machine) = replica.into_parts();
        machine.forget();
        let mut reopened = Replica::open(
            config(self.nodes.len(), index, self.canaries),
            journal,
            machine,
            rng.next_u64(),
        )
        .map_err(|error| format!("node {node}'s replica does not reopen: {error}"))?;
        reopened
            .state_machine_mut()
            .settle()
            .map_err(|error| error.to_string())?;
        self.replicas[index] = Some(reopened);
        Ok(())
    }

    /// `node`'s replica loses its disk — journal and machine — and starts empty, to recover
    /// from its peers before it votes; only while every replica is in normal status and has
    /// applied all the group committed (so the others hold everything: losing a second disk
    /// before the first recovered could lose acknowledged ops, as it may in a real cluster).
    /// Whether it did.
    pub(super) fn lose_disk(&mut self, node: usize, rng: &mut SimRng) -> Result<bool, String> {
        let Some(index) = self.index_of(node) else {
            return Ok(false);
        };
        let replicas: Vec<&VsrReplica> = self.replicas.iter().flatten().collect();
        let commit = self.commit_max();
        let quiet = replicas.len() == self.nodes.len()
            && replicas
                .iter()
                .all(|replica| replica.status() == Status::Normal && replica.applied() >= commit);
        if !quiet {
            return Ok(false);
        }
        let empty = empty_replica((self.nodes.len(), index), self.filling, self.canaries, rng)?;
        self.replicas[index] = Some(empty);
        Ok(true)
    }

    /// What the group counted: replicas cut off, and what its replicas counted since they
    /// last (re)opened — view changes started, checkpoints taken, states installed from a peer.
    pub(super) fn counted(&self) -> (u64, u64, u64, u64) {
        let start = (self.cuts, 0, 0, 0);
        self.replicas.iter().flatten().fold(start, |sum, replica| {
            let counters = replica.counters();
            (
                sum.0,
                sum.1 + counters.view_changes_started,
                sum.2 + counters.checkpoints_taken,
                sum.3 + counters.states_installed,
            )
        })
    }

    /// The highest op any replica knows committed.
    fn commit_max(&self) -> OpNumber {
        self.replicas
            .iter()
            .flatten()
            .map(|replica| replica.commit())
            .max()
            .unwrap_or(0)
    }

    /// Whether every replica applied every op any of them committed, and every submission
    /// is answered.
    pub(super) fn settled(&self) -> bool {
        let commit = self.commit_max();
        self.replicas
            .iter()
            .flatten()
            .all(|replica| replica.applied() >= commit)
            && self
                .submissions
                .iter()
                .all(|submission| submission.answer.is_some())
    }
}
