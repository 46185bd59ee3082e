//! State transfer: how a replica that needs ops its peers no longer hold in their logs (they
//! checkpointed past them and discarded them) catches up.
//!
//! It asks a peer for its latest checkpoint with `RequestState`, or a primary that cannot
//! serve a repair request from its log sends the first chunk unasked. Chunks of at most
//! `state_chunk_bytes` are pulled one at a time, by offset, from one source; a chunk 0 of a
//! newer checkpoint restarts the transfer. Once all bytes are in, the replica verifies the
//! checkpoint's checksum (over op, entry checksum and state), installs it and journals it, and
//! the handler's sync makes it durable before anything that depends on it is sent. The ops
//! above the checkpoint then come from the log as usual: repair, start-view or recovery.

use super::checkpoint::Checkpoint;
use super::config::{CHECKPOINT_BYTES_MAX, STATE_CHUNK_BYTES_MAX};
use super::journal::Journal;
use super::message::{Message, OpNumber, ReplicaIndex, Status};
use super::progress::{CheckpointIdentity, StateTransferState};
use super::replica::Replica;
use super::state_machine::StateMachine;

impl<J: Journal, S: StateMachine> Replica<J, S> {
    /// Starts fetching a checkpoint from `source`, unless a transfer is already under way.
    pub(super) fn request_state(&mut self, source: ReplicaIndex) {
        if self.state_machine.transfers_in_parts() {
            return self.request_image(source);
        }
        if !self.is_peer(source) || self.fetching_state() {
            return;
        }
        self.state_transfer = Some(StateTransferState::new(source, self.now_ticks));
        self.send_state_request();
    }

    fn send_state_request(&mut self) {
        let now_ticks = self.now_ticks;
        let Some(transfer) = self.state_transfer.as_mut() else {
            return;
        };
        transfer.requested_tick = now_ticks;
        let (op, state_checksum) = transfer
            .identity
            .map_or((0, 0), |identity| (identity.op, identity.state_checksum));
        let message = Message::RequestState {
            replica: self.config.replica,
            applied: self.applied,
            op,
            state_checksum,
            offset: transfer.bytes.len() as u64,
        };
        let source = transfer.source;
        self.send(source, message);
    }

    /// Resends the outstanding chunk request; abandons a transfer that made no progress for a
    /// view-change timeout (its source is gone), so the next trigger can pick another source.
    pub(super) fn tick_state_transfer(&mut self) {
        let Some(transfer) = self.state_transfer.as_ref() else {
            return;
        };
        let timeouts = self.config.timeouts;
        if self.now_ticks - transfer.progress_tick >= timeouts.view_change_timeout_ticks {
            self.state_transfer = None;
        } else if self.now_ticks >= transfer.requested_tick + timeouts.resend_interval_ticks {
            self.send_state_request();
        }
    }

    pub(super) fn on_request_state(
        &mut self,
        replica: ReplicaIndex,
        applied: OpNumber,
        wanted: (OpNumber, u64),
        offset: u64,
    ) {
        if !self.is_peer(replica) || self.checkpoint.op <= applied {
            return self.ignore();
        }
        let sent = self.transferable_checkpoint();
        let current = (sent.op, sent.state_checksum);
        let held = wanted == current && offset < sent.state.len() as u64;
        self.send_state_chunk(replica, if held { offset } else { 0 });
    }

    /// Sends the chunk of the latest checkpoint (as a peer is sent it,
    /// [`Replica::transferable_checkpoint`]) starting at `offset`.
    pub(super) fn send_state_chunk(&mut self, to: ReplicaIndex, offset: u64) {
        let (replica, chunk_bytes) = (self.config.replica, self.config.state_chunk_bytes);
        let checkpoint = self.transferable_checkpoint();
        let state = &checkpoint.state;
        let start = usize::try_from(offset).map_or(state.len(), |start| start.min(state.len()));
        let end = start.saturating_add(chunk_bytes).min(state.len());
        let message = Message::StateChunk {
            replica,
            op: checkpoint.op,
            entry_checksum: checkpoint.entry_checksum,
            state_checksum: checkpoint.state_checksum,
            state_bytes: state.len() as u64,
            offset: start as u64,
            bytes: state[start..end].to_vec(),
        };
        self.send(to, message);
    }

    pub(super) fn on_state_chunk(
        &mut self,
        replica: ReplicaIndex,
        identity: CheckpointIdentity,
        offset: u64,
        bytes: Vec<u8>,
    ) {
        let ends_within = offset
            .checked_add(bytes.len() as u64)
            .is_some_and(|end| end <= identity.state_bytes);
        let well_formed = self.is_peer(replica)
            && identity.op > 0
            && identity.state_bytes <= CHECKPOINT_BYTES_MAX
            && bytes.len() <= STATE_CHUNK_BYTES_MAX
            && (!bytes.is_empty() || identity.state_bytes == 0)
            && ends_within;
        if !well_formed || identity.op <= self.applied {
            return self.ignore();
        }
        let now_ticks = self.now_ticks;
        let transfer = self
            .state_transfer
            .get_or_insert_with(|| StateTransferState::new(replica, now_ticks));
        let continues = transfer.source == replica
            && transfer.identity == Some(identity)
            && offset == transfer.bytes.len() as u64;
        let restarts = offset == 0
            && transfer
                .identity
                .is_none_or(|current| identity.op > current.op);
        if continues {
            transfer.bytes.extend_from_slice(&bytes);
        } else if restarts {
            transfer.source = replica;
            transfer.identity = Some(identity);
            transfer.bytes = bytes;
        } else {
            return self.ignore();
        }
        transfer.progress_tick = now_ticks;
        if (transfer.bytes.len() as u64) < identity.state_bytes {
            return self.send_state_request();
        }
        let Some(transfer) = self.state_transfer.take() else {
            return;
        };
        self.finish_state_transfer(transfer.source, identity, transfer.bytes);
    }

    fn finish_state_transfer(
        &mut self,
        source: ReplicaIndex,
        identity: CheckpointIdentity,
        state: Vec<u8>,
    ) {
        if self.journal.has_failed() {
            return;
        }
        let checkpoint = Checkpoint {
            op: identity.op,
            entry_checksum: identity.entry_checksum,
            state,
            state_checksum: identity.state_checksum,
        };
        let verified = checkpoint.is_intact() || self.config.canaries.install_unverified_state;
        if !verified || self.install_checkpoint(checkpoint).is_err() {
            self.counters.states_rejected += 1;
            return self.request_state(source);
        }
        self.after_state_installed();
    }

    /// Whether this replica is fetching a checkpoint from a peer (whole or streamed).
    pub(super) fn fetching_state(&self) -> bool {
        self.state_transfer.is_some() || self.image_transfer.is_some()
    }

    /// Offers `to` the latest checkpoint unasked (it needs ops this replica discarded): its
    /// first chunk, or its stream's part 0.
    pub(super) fn offer_state(&mut self, to: ReplicaIndex) {
        if self.state_machine.transfers_in_parts() {
            self.send_image_part(to, 0, 0);
        } else {
            self.send_state_chunk(to, 0);
        }
    }

    /// Goes on with what waited for the state just installed: a recovery, or the view change
    /// this replica leads.
    pub(super) fn after_state_installed(&mut self) {
        match self.status {
            Status::Recovering => self.conclude_recovery(),
            Status::ViewChange if self.primary_of(self.view) == self.config.replica => {
                self.check_do_view_change_quorum()
            }
            Status::Normal | Status::ViewChange => {}
        }
    }
}
