//! The replica: a sans-IO Viewstamped Replication state machine. [`Replica::on_message`] and
//! [`Replica::tick`] return [`Action`]s for the host to carry out; the replica itself owns no
//! thread, clock or socket. Its journal and state machine are injected through traits and used
//! synchronously: every handler syncs what it wrote before returning, so no action leaves the
//! replica before the state it depends on is durable.
//!
//! This file holds the state, the handler dispatch and the durability barrier; what a host
//! reads of a replica is in `inspect.rs`, normal operation in `normal.rs`, the apply loop in
//! `apply.rs`, view changes in `view_change.rs`, recovery after a crash in `recovery.rs`, the
//! log's appends and the rule that installs a peer's suffix in `replica_log.rs`, checkpoints
//! in `replica_checkpoint.rs` and state transfer in `state_transfer.rs`.

use std::collections::VecDeque;

use thiserror::Error;

use super::checkpoint::{Checkpoint, CheckpointError};
use super::client_table::ClientTable;
use super::config::{Config, ConfigError, REQUEST_QUEUE_MAX};
use super::image_progress::{ImageSession, ImageTransfer};
use super::journal::{Journal, JournalError, Superblock};
use super::log::Log;
use super::message::{
    ClientId, Message, OpNumber, ReplicaIndex, Reply, Request, Status, ViewNumber,
};
use super::progress::{
    Answer, CheckpointIdentity, DoViewChangeVote, RecoveryState, StateTransferState,
    ViewChangeState,
};
use super::state_machine::StateMachine;

/// Something the host must do on the replica's behalf, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send `message` to replica `to`.
    Send {
        /// The destination replica.
        to: ReplicaIndex,
        /// The message.
        message: Message,
    },
    /// Send `reply` to its client.
    Reply(Reply),
    /// The replica applied the committed op `op` to its state machine (reported so the host,
    /// and the simulator's checkers, can observe the committed history).
    Applied {
        /// The op applied.
        op: OpNumber,
        /// Its entry's checksum.
        checksum: u64,
        /// The requests it carried, as (client, request number).
        requests: Vec<(ClientId, u64)>,
    },
    /// The replica's state at `op` (state machine and client table) has `state_checksum`: it
    /// took a checkpoint there, or replaced its state with one (from its journal at a restart,
    /// or from a peer by state transfer), skipping the ops up to `op`.
    Checkpoint {
        /// The checkpoint's op.
        op: OpNumber,
        /// The checksum of the replica's state at `op` (see [`Checkpoint`]).
        state_checksum: u64,
        /// Whether the state was replaced rather than taken from the replica's own applies.
        installed: bool,
    },
}

/// Why a replica could not be started.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReplicaError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The journal could not be read back.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The journal's checkpoint could not be restored.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
}

/// Counts of what a replica refused, for metrics. A malformed or stale message is never an
/// error to the sender, only a count here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Messages ignored as stale, malformed or from an unknown replica.
    pub messages_ignored: u64,
    /// Client requests dropped (not primary, queue full, log full, duplicate in flight).
    pub requests_dropped: u64,
    /// View changes started by this replica.
    pub view_changes_started: u64,
    /// Checkpoints taken.
    pub checkpoints_taken: u64,
    /// Checkpoints not taken because the state was larger than `CHECKPOINT_BYTES_MAX` (the
    /// log is not trimmed past the last checkpoint taken; see `replica_checkpoint.rs`).
    pub checkpoints_skipped_oversized: u64,
    /// Checkpoints installed from a peer by state transfer.
    pub states_installed: u64,
    /// Transferred checkpoints rejected because their checksum did not match.
    pub states_rejected: u64,
}

/// The primary's retransmission schedule for one backup: prepares go again after the resend
/// interval, doubled each time the backup acknowledged nothing since the last retransmission
/// (up to [`RETRANSMIT_DOUBLINGS_MAX`](super::config::RETRANSMIT_DOUBLINGS_MAX)), back to
/// once as soon as it does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Retransmit {
    /// The backup's acknowledgement at the last retransmission.
    pub(super) ack: OpNumber,
    /// Doublings of the resend interval now in force.
    pub(super) doublings: u32,
    /// No retransmission to it before this tick.
    pub(super) next_tick: u64,
}

impl Retransmit {
    /// Whether to retransmit now to a backup that acknowledged up to `ack`, with prepares
    /// `pending` above it; if so, the next is scheduled (an interval later, doubled if the
    /// backup acknowledged nothing since the last time).
    pub(super) fn due(&mut self, ack: OpNumber, pending: bool, now: u64, interval: u64) -> bool {
        if !pending || ack > self.ack {
            // Nothing to resend, or the backup is keeping up: resend at once, as ever.
            *self = Retransmit {
                ack,
                doublings: 0,
                next_tick: 0,
            };
        }
        if !pending || now < self.next_tick {
            return false;
        }
        self.next_tick = now + (interval << self.doublings);
        self.doublings = (self.doublings + 1).min(super::config::RETRANSMIT_DOUBLINGS_MAX);
        true
    }
}

/// One replica of a VSR cluster.
pub struct Replica<J: Journal, S: StateMachine> {
    pub(super) config: Config,
    pub(super) journal: J,
    pub(super) state_machine: S,
    pub(super) status: Status,
    pub(super) view: ViewNumber,
    pub(super) log_view: ViewNumber,
    pub(super) log: Log,
    /// The latest checkpoint, at or below `applied`; the log's base is at or below it.
    pub(super) checkpoint: Checkpoint,
    /// A checkpoint being fetched from a peer, chunk by chunk.
    pub(super) state_transfer: Option<StateTransferState>,
    /// A checkpoint being fetched from a peer as a stream, part by part (a machine that
    /// transfers its state in parts).
    pub(super) image_transfer: Option<ImageTransfer>,
    /// Peers fetching this replica's checkpoint as a stream: one session each, at most.
    pub(super) image_sessions: Vec<ImageSession>,
    /// The latest checkpoint with the machine's transfer image in it, while peers fetch it,
    /// and the tick it was last asked for (see `Replica::transferable_checkpoint`).
    pub(super) transfer_cache: Option<(Checkpoint, u64)>,
    /// The highest op known committed (may exceed the log while a backup repairs).
    pub(super) commit: OpNumber,
    /// The highest op applied to the state machine.
    pub(super) applied: OpNumber,
    pub(super) clients: ClientTable,
    /// Primary only: per replica, the highest op it has acknowledged in this view.
    pub(super) acks: Vec<OpNumber>,
    /// Primary only: per replica, the last tick it heard a prepare-ok from it.
    pub(super) peer_heard_tick: Vec<u64>,
    /// Primary only: per replica, when prepares may be retransmitted to it next.
    pub(super) retransmits: Vec<Retransmit>,
    /// Primary only: it has not heard from a quorum lately, so it stops heartbeats and
    /// prepares and lets the backups elect a primary they can reach.
    pub(super) abdicating: bool,
    pub(super) request_queue: VecDeque<Request>,
    pub(super) view_change: ViewChangeState,
    pub(super) recovery: Option<RecoveryState>,
    pub(super) now_ticks: u64,
    pub(super) primary_heard_tick: u64,
    /// Started on an empty journal and not yet holding a view's log (see
    /// [`Superblock::forgetful`]): its do-view-change votes say so.
    pub(super) forgetful: bool,
    pub(super) resend_tick: u64,
    pub(super) heartbeat_tick: u64,
    /// The earliest tick at which a backup may send its next repair request.
    pub(super) repair_allowed_tick: u64,
    /// The highest op a backup knows exists in its view (from prepares and commits).
    pub(super) repair_target: OpNumber,
    pub(super) durable_dirty: bool,
    /// Operation bytes of the ops applied since the last checkpoint (see
    /// [`CHECKPOINT_LOG_BYTES`](super::config::CHECKPOINT_LOG_BYTES)).
    pub(super) applied_bytes: u64,
    pub(super) outbox: Vec<Action>,
    pub(super) counters: Counters,
}

impl<J: Journal, S: StateMachine> Replica<J, S> {
    /// Starts a replica of a new cluster on an empty journal, in view 0 with an empty log.
    ///
    /// ```
    /// use tessera_consensus::config::Config;
    /// use tessera_consensus::journal::InMemoryJournal;
    /// use tessera_consensus::message::{Message, Request};
    /// use tessera_consensus::replica::{Action, Replica};
    /// use tessera_consensus::state_machine::{KeyValue, KeyValueOperation};
    ///
    /// // A cluster of one commits alone.
    /// let mut replica =
    ///     Replica::format(Config::new(1, 0), InMemoryJournal::new(), KeyValue::default())?;
    /// let operation = KeyValueOperation::Put { key: 1, value: 2 }.encode();
    /// let actions = replica.on_message(Message::Request(Request {
    ///     client: 7,
    ///     request_number: 1,
    ///     operation,
    /// }));
    /// assert!(actions.iter().any(|action| matches!(action, Action::Reply(reply) if reply.client == 7)));
    /// assert_eq!(replica.commit(), 1);
    /// # Ok::<(), tessera_consensus::replica::ReplicaError>(())
    /// ```
    pub fn format(config: Config, journal: J, state_machine: S) -> Result<Self, ReplicaError> {
        config.validate()?;
        let mut replica = Replica::empty(config, journal, state_machine);
        replica.durable_dirty = true;
        replica.flush();
        Ok(replica)
    }

    /// Restarts a replica from its journal after a crash. With other replicas it comes back
    /// [`Status::Recovering`] and votes in nothing until it has learned the current view from
    /// a quorum; `nonce` must be fresh for each restart. A cluster of one recovers alone and
    /// commits everything its journal holds.
    pub fn open(
        config: Config,
        mut journal: J,
        state_machine: S,
        nonce: u64,
    ) -> Result<Self, ReplicaError> {
        config.validate()?;
        let recovered = journal.recover()?;
        let mut replica = Replica::empty(config, journal, state_machine);
        let superblock = recovered.superblock;
        replica.view = superblock.view;
        replica.log_view = superblock.log_view;
        replica.forgetful = superblock.forgetful;
        if let Some(checkpoint) = recovered.checkpoint {
            replica.restore_checkpoint(checkpoint)?;
        }
        let (base, base_checksum) = (replica.checkpoint.op, replica.checkpoint.entry_checksum);
        replica.log = Log::from_checkpoint(base, base_checksum, recovered.log);
        replica.commit = superblock.commit.max(base).min(replica.op());
        if config.replica_count == 1 {
            replica.log_view = replica.view;
            replica.commit = replica.op();
            replica.become_primary_of_own_view();
        } else {
            replica.status = Status::Recovering;
            replica.forgetful |= replica.holds_no_promise();
            replica.recovery = Some(RecoveryState::new(nonce, config.replica_count));
        }
        replica.apply_committed();
        Ok(replica)
    }

    /// Starts a replica on an empty journal without knowing whether its group is new or it
    /// lost its disk: the two look the same from inside. With other replicas it comes back
    /// [`Status::Recovering`], votes in nothing and acknowledges nothing until its peers have
    /// answered: if every one of them holds nothing either, the group is new and it starts in
    /// view 0 (as [`Replica::format`]); otherwise it learns the newest view from enough peers
    /// that every quorum includes one, and takes its state from that view's primary. A group
    /// that starts for the first time therefore waits until every replica has answered once.
    ///
    /// ```
    /// use tessera_consensus::config::Config;
    /// use tessera_consensus::journal::InMemoryJournal;
    /// use tessera_consensus::message::Status;
    /// use tessera_consensus::replica::Replica;
    /// use tessera_consensus::state_machine::KeyValue;
    ///
    /// let replica =
    ///     Replica::start_empty(Config::new(3, 1), InMemoryJournal::new(), KeyValue::default(), 7)?;
    /// assert_eq!(replica.status(), Status::Recovering);
    /// # Ok::<(), tessera_consensus::replica::ReplicaError>(())
    /// ```
    pub fn start_empty(
        config: Config,
        journal: J,
        state_machine: S,
        nonce: u64,
    ) -> Result<Self, ReplicaError> {
        let mut replica = Replica::format(config, journal, state_machine)?;
        if replica.config.replica_count > 1 {
            replica.status = Status::Recovering;
            replica.forgetful = true;
            replica.durable_dirty = true;
            replica.flush();
            replica.recovery = Some(RecoveryState::new(nonce, replica.config.replica_count));
        }
        Ok(replica)
    }

    /// Whether the replica has promised nothing a peer may rely on: it never voted in a view
    /// change (its durable view is 0) nor acknowledged or checkpointed an op.
    pub(super) fn holds_no_promise(&self) -> bool {
        self.view == 0 && self.log_view == 0 && self.op() == 0 && self.checkpoint.op == 0
    }

    fn empty(config: Config, journal: J, state_machine: S) -> Self {
        let replica_count = usize::from(config.replica_count);
        Replica {
            config,
            journal,
            state_machine,
            status: Status::Normal,
            view: 0,
            log_view: 0,
            log: Log::root(),
            checkpoint: Checkpoint::genesis(),
            state_transfer: None,
            image_transfer: None,
            image_sessions: Vec::new(),
            transfer_cache: None,
            commit: 0,
            applied: 0,
            clients: ClientTable::default(),
            acks: vec![0; replica_count],
            peer_heard_tick: vec![0; replica_count],
            retransmits: vec![Retransmit::default(); replica_count],
            abdicating: false,
            request_queue: VecDeque::new(),
            view_change: ViewChangeState::new(replica_count),
            recovery: None,
            now_ticks: 0,
            primary_heard_tick: 0,
            forgetful: false,
            resend_tick: 0,
            heartbeat_tick: 0,
            repair_allowed_tick: 0,
            repair_target: 0,
            durable_dirty: false,
            applied_bytes: 0,
            outbox: Vec::new(),
            counters: Counters::default(),
        }
    }

    /// Handles one message from a client or another replica.
    pub fn on_message(&mut self, message: Message) -> Vec<Action> {
        match message {
            Message::Request(request) => self.on_request(request),
            Message::Prepare {
                view,
                entry,
                commit,
            } => self.on_prepare(view, entry, commit),
            Message::PrepareOk { view, op, replica } => self.on_prepare_ok(view, op, replica),
            Message::Commit { view, commit } => self.on_commit(view, commit),
            Message::RequestPrepares {
                view,
                replica,
                op_first,
                count,
            } => self.on_request_prepares(view, replica, op_first, count),
            Message::StartViewChange { view, replica } => self.on_start_view_change(view, replica),
            Message::DoViewChange {
                view,
                replica,
                log_view,
                log,
                commit,
                forgetful,
            } => {
                let vote = DoViewChangeVote {
                    replica,
                    log_view,
                    log,
                    commit,
                    forgetful,
                };
                self.on_do_view_change(view, vote)
            }
            Message::StartView { view, log, commit } => self.on_start_view(view, log, commit),
            Message::RequestStartView { view, replica } => {
                self.on_request_start_view(view, replica)
            }
            Message::Recovery { replica, nonce } => self.on_recovery(replica, nonce),
            Message::RecoveryResponse {
                view,
                replica,
                nonce,
                status,
                log,
                commit,
                empty,
            } => {
                let answer = Answer {
                    view,
                    status,
                    log,
                    commit,
                    empty,
                };
                self.on_recovery_response(replica, nonce, answer)
            }
            Message::RequestState {
                replica,
                applied,
                op,
                state_checksum,
                offset,
            } => self.on_request_state(replica, applied, (op, state_checksum), offset),
            Message::StateChunk {
                replica,
                op,
                entry_checksum,
                state_checksum,
                state_bytes,
                offset,
                bytes,
            } => {
                let identity = CheckpointIdentity {
                    op,
                    entry_checksum,
                    state_checksum,
                    state_bytes,
                };
                self.on_state_chunk(replica, identity, offset, bytes)
            }
            message @ (Message::RequestImage { .. } | Message::ImagePart { .. }) => {
                self.on_image_message(message)
            }
        }
        self.flush()
    }

    /// Advances the replica's clock by one tick: heartbeats, retransmissions, repair requests
    /// and the timeouts that start view changes.
    pub fn tick(&mut self) -> Vec<Action> {
        self.now_ticks += 1;
        match self.status {
            Status::Normal if self.is_primary() => self.tick_primary(),
            Status::Normal => self.tick_backup(),
            Status::ViewChange => self.tick_view_change(),
            Status::Recovering => self.tick_recovering(),
        }
        self.tick_state_transfer();
        self.tick_image_transfer();
        self.tick_transfer_cache();
        self.flush()
    }

    /// Syncs whatever this handler wrote, then hands over the actions that depend on it.
    pub(super) fn flush(&mut self) -> Vec<Action> {
        self.make_durable();
        self.check_invariants();
        std::mem::take(&mut self.outbox)
    }

    /// Writes and syncs the superblock, if anything durable changed, after the records it
    /// covers.
    pub(super) fn make_durable(&mut self) {
        if self.durable_dirty && !self.canary_skips_sync() {
            let superblock = Superblock {
                view: self.view,
                log_view: self.log_view,
                commit: self.commit.min(self.op()),
                op_head: self.op(),
                head_checksum: self.head_checksum(),
                checkpoint_op: self.checkpoint.op,
                checkpoint_state_checksum: self.checkpoint.state_checksum,
                forgetful: self.forgetful,
            };
            self.journal.write_superblock(&superblock);
            self.journal.sync();
            self.durable_dirty = false;
        }
    }

    /// The acknowledge-before-durable canary: a backup that is about to acknowledge leaves its
    /// writes for a later handler to sync.
    fn canary_skips_sync(&self) -> bool {
        self.config.canaries.acknowledge_before_durable
            && self.outbox.iter().any(|action| {
                matches!(
                    action,
                    Action::Send {
                        message: Message::PrepareOk { .. },
                        ..
                    }
                )
            })
    }

    fn check_invariants(&self) {
        assert!(
            self.applied <= self.commit,
            "a replica applies only committed ops"
        );
        assert!(
            self.applied <= self.op(),
            "a replica applies only ops it holds"
        );
        // A replica whose journal failed takes no more checkpoints, so its log is not trimmed;
        // it goes down at the end of this handler (see `Journal::has_failed`).
        assert!(
            self.log.entries().len() as u64 <= self.config.log_entries_max()
                || self.journal.has_failed(),
            "the log never holds more than log_entries_max entries"
        );
        assert!(
            self.log.base() <= self.checkpoint.op
                && self.checkpoint.op <= self.applied
                && self.log.checksum_at(self.checkpoint.op) == Some(self.checkpoint.entry_checksum),
            "the log grows from the checkpoint, which is applied state"
        );
        assert!(
            self.request_queue.len() <= REQUEST_QUEUE_MAX,
            "the request queue is bounded"
        );
        assert!(
            self.status != Status::Normal || self.log_view == self.view,
            "a replica in normal status holds the log of its own view"
        );
        assert!(
            self.log_view <= self.view,
            "the log view never passes the view"
        );
        let entries = self.log.entries();
        let tail = &entries[entries.len().saturating_sub(2)..];
        assert!(
            tail.last().is_none_or(|entry| entry.op == self.op())
                && (tail.len() < 2 || tail[1].parent == tail[0].checksum),
            "the log stays chained at its head"
        );
    }

    /// Whether this replica is the primary of its current view.
    pub fn is_primary(&self) -> bool {
        self.primary_of(self.view) == self.config.replica
    }

    pub(super) fn primary_of(&self, view: ViewNumber) -> ReplicaIndex {
        (view % u64::from(self.config.replica_count)) as ReplicaIndex
    }

    pub(super) fn is_peer(&self, replica: ReplicaIndex) -> bool {
        replica < self.config.replica_count && replica != self.config.replica
    }

    pub(super) fn head_checksum(&self) -> u64 {
        self.log.head_checksum()
    }

    pub(super) fn send(&mut self, to: ReplicaIndex, message: Message) {
        debug_assert!(self.is_peer(to), "a replica sends only to its peers");
        self.outbox.push(Action::Send { to, message });
    }

    pub(super) fn broadcast(&mut self, message: &Message) {
        for to in 0..self.config.replica_count {
            if to != self.config.replica {
                self.send(to, message.clone());
            }
        }
    }

    pub(super) fn ignore(&mut self) {
        self.counters.messages_ignored += 1;
    }

    pub(super) fn drop_request(&mut self) {
        self.counters.requests_dropped += 1;
    }

    /// A timeout spread by replica and view so that replicas rarely time out together.
    pub(super) fn timeout_with_jitter(&self, timeout_ticks: u64) -> u64 {
        let words = [u64::from(self.config.replica), self.view];
        timeout_ticks + super::message::checksum_words(&words) % timeout_ticks.max(1)
    }

    pub(super) fn clear_primary_state(&mut self) {
        self.request_queue.clear();
    }
}
