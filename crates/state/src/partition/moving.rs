//! Moving a partition to another replica set. A group's voters are fixed, so a move starts a
//! new group — the partition's next *epoch*, with the new replicas — and carries the state
//! over through it, with the catalog as the authority on which epoch is current:
//!
//! 1. the old group commits [`PartitionOp::Seal`]: from then on its machine refuses every
//!    entity op ([`PartitionResult::Sealed`]), so the state a sealed replica holds is final;
//! 2. the new group starts *filling* ([`Phase::Filling`]): it refuses every entity op
//!    ([`PartitionResult::Filling`]) and takes [`PartitionOp::Fill`], the pieces of a sealed
//!    replica's checkpoint image, each at most [`FILL_BYTES_MAX`], staged under the image's
//!    checksum (two fillers at once stage apart, and neither mixes into the other's image);
//! 3. [`PartitionOp::Open`] assembles the staged image, checks it against its checksum,
//!    installs it — every row, stamps included, so an instance built from the old group's
//!    copy still commits if nothing changed since — and the group serves. An open group takes
//!    no more fills ([`PartitionResult::Opened`]).
//!
//! The phase and the staged pieces are part of the machine's state: a checkpoint carries them
//! (after the image, only when there are any, so an open machine's image is as before) and a
//! replica restarted mid-move rebuilds them from its journal.
//!
//! [`PartitionOp::Seal`]: super::PartitionOp::Seal
//! [`PartitionOp::Fill`]: super::PartitionOp::Fill
//! [`PartitionOp::Open`]: super::PartitionOp::Open
//! [`PartitionResult::Sealed`]: super::PartitionResult::Sealed
//! [`PartitionResult::Filling`]: super::PartitionResult::Filling
//! [`PartitionResult::Opened`]: super::PartitionResult::Opened

use crate::error::StoreError;
use crate::tables::StateStore;
use redb::{ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

/// The largest piece of an image one fill carries: a journal entry and a prepare of about
/// this size, as a restored part's installs are.
pub const FILL_BYTES_MAX: usize = 256 * 1024;

/// Where a partition's group is in a move.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// It serves its entities (every group that is no move's target, and one opened).
    #[default]
    Serving,
    /// A move's new group, taking the old group's image: it serves nothing yet.
    Filling,
    /// A move's old group after its seal: its state is final and it serves nothing.
    Sealed,
}

impl Phase {
    fn code(self) -> u64 {
        match self {
            Phase::Serving => 0,
            Phase::Filling => 1,
            Phase::Sealed => 2,
        }
    }

    fn from_code(code: u64) -> Phase {
        match code {
            1 => Phase::Filling,
            2 => Phase::Sealed,
            _ => Phase::Serving,
        }
    }
}

/// The phase: `"phase" -> Phase` as its code (no row: serving).
pub(super) const MOVE_PHASE: TableDefinition<&str, u64> = TableDefinition::new("partition_phase");

/// Staged pieces of an incoming image: `(image checksum, piece index) -> bytes`.
pub(super) const MOVE_PIECES: TableDefinition<(u64, u32), &[u8]> =
    TableDefinition::new("partition_fill_pieces");

const PHASE_KEY: &str = "phase";

fn io(error: impl std::fmt::Display) -> StoreError {
    StoreError::io(error)
}

/// Creates the tables (empty) inside `transaction`.
pub(super) fn create_tables(transaction: &WriteTransaction) -> Result<(), StoreError> {
    transaction.open_table(MOVE_PHASE).map_err(io)?;
    transaction.open_table(MOVE_PIECES).map_err(io)?;
    Ok(())
}

/// Empties the tables inside `transaction` and sets the phase to `phase`.
pub(super) fn reset(transaction: &WriteTransaction, phase: Phase) -> Result<(), StoreError> {
    transaction.delete_table(MOVE_PIECES).map_err(io)?;
    transaction.open_table(MOVE_PIECES).map_err(io)?;
    set_phase(transaction, phase)
}

/// Sets the phase inside `transaction`.
pub(super) fn set_phase(transaction: &WriteTransaction, phase: Phase) -> Result<(), StoreError> {
    let mut table = transaction.open_table(MOVE_PHASE).map_err(io)?;
    table.insert(PHASE_KEY, phase.code()).map_err(io)?;
    Ok(())
}

/// The phase of the machine whose tables `store` holds.
pub fn phase(store: &StateStore) -> Result<Phase, StoreError> {
    let transaction = store.database().begin_read().map_err(io)?;
    let table = match transaction.open_table(MOVE_PHASE) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Phase::Serving),
        Err(error) => return Err(io(error)),
    };
    let code = table.get(PHASE_KEY).map_err(io)?;
    Ok(code.map_or(Phase::Serving, |guard| Phase::from_code(guard.value())))
}

/// Stages one piece of the image `checksum`, inside `transaction`.
pub(super) fn stage(
    transaction: &WriteTransaction,
    checksum: u64,
    index: u32,
    bytes: &[u8],
) -> Result<(), StoreError> {
    let mut pieces = transaction.open_table(MOVE_PIECES).map_err(io)?;
    pieces.insert((checksum, index), bytes).map_err(io)?;
    Ok(())
}

/// Piece `index` of the image `checksum`, if staged.
pub(super) fn piece(
    store: &StateStore,
    checksum: u64,
    index: u32,
) -> Result<Option<Vec<u8>>, StoreError> {
    let transaction = store.database().begin_read().map_err(io)?;
    let table = transaction.open_table(MOVE_PIECES).map_err(io)?;
    let piece = table.get((checksum, index)).map_err(io)?;
    Ok(piece.map(|piece| piece.value().to_vec()))
}

/// The image `checksum` put together from its `pieces` staged pieces, inside `transaction`;
/// `None` when one is missing or the whole does not match the checksum.
pub(super) fn assemble(
    transaction: &WriteTransaction,
    checksum: u64,
    pieces: u32,
) -> Result<Option<Vec<u8>>, StoreError> {
    let table = transaction.open_table(MOVE_PIECES).map_err(io)?;
    let mut image = Vec::new();
    for index in 0..pieces {
        match table.get((checksum, index)).map_err(io)? {
            Some(piece) => image.extend_from_slice(piece.value()),
            None => return Ok(None),
        }
    }
    let whole = tessera_consensus::message::checksum_bytes(&image) == checksum;
    Ok(whole.then_some(image))
}

/// What a checkpoint carries of a move, after the image (see the module doc).
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct MoveImage {
    phase: Phase,
    /// `(checksum, index, bytes)` of each staged piece, in key order.
    pieces: Vec<(u64, u32, ByteBuf)>,
}

impl MoveImage {
    /// What the tables of `transaction` hold of a move; `None` for a serving machine with
    /// nothing staged (an image with no trailer).
    pub(super) fn read(
        transaction: &redb::ReadTransaction,
    ) -> Result<Option<MoveImage>, StoreError> {
        let phase = match transaction.open_table(MOVE_PHASE) {
            Ok(table) => table
                .get(PHASE_KEY)
                .map_err(io)?
                .map_or(Phase::Serving, |guard| Phase::from_code(guard.value())),
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(error) => return Err(io(error)),
        };
        let mut pieces = Vec::new();
        for row in transaction
            .open_table(MOVE_PIECES)
            .map_err(io)?
            .iter()
            .map_err(io)?
        {
            let (key, value) = row.map_err(io)?;
            let (checksum, index) = key.value();
            pieces.push((checksum, index, ByteBuf::from(value.value().to_vec())));
        }
        if phase == Phase::Serving && pieces.is_empty() {
            return Ok(None);
        }
        Ok(Some(MoveImage { phase, pieces }))
    }

    /// The phase it carries.
    pub(super) fn phase(&self) -> Phase {
        self.phase
    }

    /// Writes this into the (emptied) tables of `transaction`.
    pub(super) fn install(&self, transaction: &WriteTransaction) -> Result<(), StoreError> {
        set_phase(transaction, self.phase)?;
        for (checksum, index, bytes) in &self.pieces {
            stage(transaction, *checksum, *index, bytes)?;
        }
        Ok(())
    }
}
