//! Checkpoints: every `checkpoint_interval_ops` applied ops a replica encodes its whole state
//! (the state machine's snapshot and the client table) into a [`Checkpoint`], appends it to its
//! journal and discards log entries it no longer needs, keeping one interval below the
//! checkpoint so a slightly lagging backup can still repair from the log. A restart starts
//! from the latest durable checkpoint plus the journal's log above it; a replica that needs
//! ops its peers no longer hold installs a peer's checkpoint (`state_transfer.rs`). The replica
//! takes, restores and installs them in `replica_checkpoint.rs`.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::client_table::{ClientTable, ClientTableImage};
use super::message::{CHECKSUM_ROOT, OpNumber, checksum_words_and_bytes};
use super::state_machine::RestoreError;

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

/// A checkpoint's state bytes: the client table and the state machine's snapshot `machine`.
pub(super) fn encode_state(clients: &ClientTable, machine: Vec<u8>) -> Vec<u8> {
    let state = CheckpointState {
        clients: clients.image(),
        machine,
    };
    rmp_serde::to_vec(&state)
        .unwrap_or_else(|error| panic!("a client table and bytes always encode: {error}"))
}

/// The client table and state machine snapshot a checkpoint's state bytes hold.
pub(super) fn decode_state(state: &[u8]) -> Result<(ClientTable, Vec<u8>), CheckpointError> {
    let decoded: CheckpointState =
        rmp_serde::from_slice(state).map_err(|_| CheckpointError::Malformed)?;
    let clients = ClientTable::from_image(decoded.clients).ok_or(CheckpointError::Malformed)?;
    Ok((clients, decoded.machine))
}
