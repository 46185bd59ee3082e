//! Checkpoints: every `checkpoint_interval_ops` applied ops a replica encodes its whole state
//! (the state machine's snapshot and the client table) into a [`Checkpoint`], appends it to its
//! journal and discards log entries it no longer needs, keeping one interval below the
//! checkpoint so a slightly lagging backup can still repair from the log. A restart starts
//! from the latest durable checkpoint plus the journal's log above it; a replica that needs
//! ops its peers no longer hold installs a peer's checkpoint (`state_transfer.rs`).

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::client_table::{ClientTable, ClientTableImage};
use super::config::CHECKPOINT_BYTES_MAX;
use super::journal::Journal;
use super::log::Log;
use super::message::{CHECKSUM_ROOT, OpNumber, checksum_words_and_bytes};
use super::replica::{Action, Replica};
use super::state_machine::{RestoreError, StateMachine};

/// A replica's state after applying `op`, sealed with a checksum over the op, the checksum of
/// the op's entry and the state bytes, so a torn, corrupt or mislabelled checkpoint is
/// recognised.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The last op applied to the state.
    pub op: OpNumber,
    /// The checksum of the entry at `op` ([`CHECKSUM_ROOT`] for op 0): the log above grows
    /// from it.
    pub entry_checksum: u64,
    /// The encoded state: client table and state machine snapshot.
    #[serde(with = "serde_bytes")]
    pub state: Vec<u8>,
    /// See [`Checkpoint::compute_state_checksum`].
    pub state_checksum: u64,
}

impl Checkpoint {
    /// Builds a checkpoint and seals it.
    pub fn new(op: OpNumber, entry_checksum: u64, state: Vec<u8>) -> Checkpoint {
        let state_checksum = Checkpoint::compute_state_checksum(op, entry_checksum, &state);
        Checkpoint {
            op,
            entry_checksum,
            state,
            state_checksum,
        }
    }

    /// The empty state of a new cluster, before op 1 (never sent: every replica has it).
    pub fn genesis() -> Checkpoint {
        Checkpoint {
            op: 0,
            entry_checksum: CHECKSUM_ROOT,
            state: Vec::new(),
            state_checksum: 0,
        }
    }

    /// FNV-1a (64 bit) over the op, the entry checksum and the state bytes.
    pub fn compute_state_checksum(op: OpNumber, entry_checksum: u64, state: &[u8]) -> u64 {
        checksum_words_and_bytes(&[op, entry_checksum, state.len() as u64], state)
    }

    /// Whether the stored checksum matches the contents.
    pub fn is_intact(&self) -> bool {
        self.state_checksum
            == Checkpoint::compute_state_checksum(self.op, self.entry_checksum, &self.state)
    }
}

/// Why a checkpoint's state could not be installed.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The state bytes are not an encoded state, or break the client table's bounds.
    #[error("checkpoint state does not decode")]
    Malformed,
    /// The state machine refused its snapshot.
    #[error(transparent)]
    Restore(#[from] RestoreError),
}

/// What a checkpoint's state bytes hold.
#[derive(Serialize, Deserialize)]
struct CheckpointState {
    clients: ClientTableImage,
    #[serde(with = "serde_bytes")]
    machine: Vec<u8>,
}

/// The client table and state machine snapshot a checkpoint's state bytes hold.
pub(super) fn decode_state(state: &[u8]) -> Result<(ClientTable, Vec<u8>), CheckpointError> {
    let decoded: CheckpointState =
        rmp_serde::from_slice(state).map_err(|_| CheckpointError::Malformed)?;
    let clients = ClientTable::from_image(decoded.clients).ok_or(CheckpointError::Malformed)?;
    Ok((clients, decoded.machine))
}

impl<J: Journal, S: StateMachine> Replica<J, S> {
    /// Checkpoints the state just after applying `self.applied` and trims the log.
    pub(super) fn take_checkpoint(&mut self) {
        let op = self.applied;
        let Some(entry_checksum) = self.log.checksum_at(op) else {
            panic!("the op just applied is in the log");
        };
        let checkpoint = Checkpoint::new(op, entry_checksum, self.encode_state());
        assert!(
            checkpoint.state.len() as u64 <= CHECKPOINT_BYTES_MAX,
            "a checkpoint fits in CHECKPOINT_BYTES_MAX, or no replica could transfer it"
        );
        self.journal.append_checkpoint(&checkpoint);
        self.outbox.push(Action::Checkpoint {
            op,
            state_checksum: checkpoint.state_checksum,
            installed: false,
        });
        self.checkpoint = checkpoint;
        self.counters.checkpoints_taken += 1;
        self.durable_dirty = true;
        self.trim_log();
    }

    fn encode_state(&self) -> Vec<u8> {
        let state = CheckpointState {
            clients: self.clients.image(),
            machine: self.state_machine.snapshot(),
        };
        rmp_serde::to_vec(&state)
            .unwrap_or_else(|error| panic!("a client table and bytes always encode: {error}"))
    }

    /// Replaces the state machine and client table with the checkpoint's state, which becomes
    /// the applied state. The log is the caller's to adjust.
    pub(super) fn restore_checkpoint(
        &mut self,
        checkpoint: Checkpoint,
    ) -> Result<(), CheckpointError> {
        let (clients, machine) = decode_state(&checkpoint.state)?;
        self.state_machine.restore(&machine)?;
        self.clients = clients;
        self.applied = checkpoint.op;
        self.commit = self.commit.max(checkpoint.op);
        // Recomputed from the state as restored, so a checker compares what the replica holds.
        let state_checksum = Checkpoint::compute_state_checksum(
            checkpoint.op,
            checkpoint.entry_checksum,
            &self.encode_state(),
        );
        self.outbox.push(Action::Checkpoint {
            op: checkpoint.op,
            state_checksum,
            installed: true,
        });
        self.checkpoint = checkpoint;
        Ok(())
    }

    /// Installs a checkpoint received from a peer (already verified): the state is replaced,
    /// the log keeps the entries above it if they chain to it and starts afresh from it
    /// otherwise, and the checkpoint is journaled before anything that depends on it is sent.
    pub(super) fn install_checkpoint(
        &mut self,
        checkpoint: Checkpoint,
    ) -> Result<(), CheckpointError> {
        assert!(
            checkpoint.op > self.applied,
            "only a newer checkpoint is installed"
        );
        let (op, entry_checksum) = (checkpoint.op, checkpoint.entry_checksum);
        self.restore_checkpoint(checkpoint)?;
        self.journal.append_checkpoint(&self.checkpoint);
        if self.log.checksum_at(op) == Some(entry_checksum) {
            self.log.discard_through(op);
        } else {
            self.log = Log::from_checkpoint(op, entry_checksum, Vec::new());
        }
        self.repair_target = self.repair_target.max(op);
        self.counters.states_installed += 1;
        self.durable_dirty = true;
        self.trim_log();
        Ok(())
    }

    /// Discards entries more than one interval below the checkpoint, and more below it if the
    /// log would otherwise hold more than `log_entries_max` entries.
    pub(super) fn trim_log(&mut self) {
        let interval = self.config.checkpoint_interval_ops;
        self.log
            .discard_through(self.checkpoint.op.saturating_sub(interval));
        let excess = self.op().saturating_sub(self.config.log_entries_max());
        self.log.discard_through(excess.min(self.checkpoint.op));
    }
}
