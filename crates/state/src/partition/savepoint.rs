//! A partition machine's checkpoints as redb savepoints: a checkpoint carries no state.
//!
//! The partition's database is the state a replica restarts from. At each checkpoint the
//! machine commits a durable transaction that creates a persistent savepoint — the database as
//! it stands after the checkpoint's op — and records it under the machine's *apply count* (the
//! requests it has applied, the same on every replica at the same op). The snapshot the
//! replica journals is only that count ([`Snapshot::Reference`], ten bytes), so a checkpoint
//! costs one sync of the database however large the partition, where it used to encode,
//! journal and copy the whole state. At a restart the savepoint named by the journal's
//! checkpoint is restored, which undoes whatever the machine applied after it (those ops are
//! applied again from the journal's log, as before).
//!
//! The replica journals each checkpoint durably before it takes the next
//! (`StateMachine::snapshot`), so a machine keeps two savepoints: the last and the one before
//! (a crash between a savepoint and its journal record restarts from the one before). Pages a
//! savepoint still references are not reused, so a partition's file holds at most about two
//! checkpoint intervals of overwritten rows besides its state.
//!
//! A peer that needs the state (state transfer) is streamed its rows in parts
//! (`image_stream`), read from the checkpoint's state — which the replica takes first if it
//! applied anything since — through a read transaction that lives only while the peer
//! fetches. (Holding one open from each checkpoint to the next made every apply three times
//! as slow: redb keeps what it pins.) A follower is sent a whole image ([`Snapshot::Image`],
//! the apply count first). A snapshot that is neither (an image journaled before this
//! existed) is a whole image whose apply count is 0.

use crate::error::StoreError;
use crate::tables::StateStore;
use redb::{ReadableDatabase, TableDefinition};

/// Apply count → persistent savepoint id of the machine's checkpoints (at most two rows).
const CHECKPOINT_SAVEPOINTS: TableDefinition<u64, u64> =
    TableDefinition::new("partition_checkpoint_savepoints");

/// The byte a snapshot of this module's starts with: MessagePack never uses it, so a whole
/// image from before (a MessagePack array) is never taken for one.
const TAG: u8 = 0xc1;
/// The second byte of a reference.
const REFERENCE: u8 = 1;
/// The second byte of an image.
const IMAGE: u8 = 2;
/// Tag, kind and apply count.
const HEADER_BYTES: usize = 10;

/// What a partition machine's snapshot bytes are.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Snapshot<'a> {
    /// The machine's own checkpoint after `applied` requests, kept in its database.
    Reference { applied: u64 },
    /// Every row (a `checkpoint` image) after `applied` requests, as a peer is sent it.
    Image { applied: u64, rows: &'a [u8] },
    /// A whole image journaled before references existed.
    Legacy { rows: &'a [u8] },
}

impl<'a> Snapshot<'a> {
    /// Reads snapshot bytes.
    pub(super) fn parse(bytes: &'a [u8]) -> Result<Snapshot<'a>, String> {
        match bytes {
            [TAG, kind, ..] => {
                let count = bytes
                    .get(2..HEADER_BYTES)
                    .and_then(|count| <[u8; 8]>::try_from(count).ok())
                    .ok_or("a partition snapshot shorter than its header")?;
                let applied = u64::from_le_bytes(count);
                let rest = &bytes[HEADER_BYTES..];
                match *kind {
                    REFERENCE if rest.is_empty() => Ok(Snapshot::Reference { applied }),
                    IMAGE => Ok(Snapshot::Image {
                        applied,
                        rows: rest,
                    }),
                    kind => Err(format!("a partition snapshot of unknown kind {kind}")),
                }
            }
            rows => Ok(Snapshot::Legacy { rows }),
        }
    }

    /// The bytes of a reference to the checkpoint after `applied` requests.
    pub(super) fn reference(applied: u64) -> Vec<u8> {
        let mut bytes = vec![TAG, REFERENCE];
        bytes.extend(applied.to_le_bytes());
        bytes
    }

    /// The bytes of an image of `rows` after `applied` requests.
    pub(super) fn image(applied: u64, rows: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(HEADER_BYTES + rows.len());
        bytes.extend([TAG, IMAGE]);
        bytes.extend(applied.to_le_bytes());
        bytes.extend_from_slice(rows);
        bytes
    }
}

fn io(error: impl std::fmt::Display) -> StoreError {
    StoreError::io(error)
}

/// Makes the database durable as it stands, as the checkpoint after `applied` requests, and
/// forgets every savepoint but this one and `previous`. The new savepoint's id.
pub(super) fn take(
    store: &StateStore,
    applied: u64,
    previous: Option<u64>,
) -> Result<u64, StoreError> {
    let transaction = store.database().begin_write().map_err(io)?;
    let savepoint = transaction.persistent_savepoint().map_err(io)?;
    forget_others(&transaction, |id| id == savepoint || Some(id) == previous)?;
    record_and_commit(transaction, applied, savepoint)
}

/// Rolls the database back to the checkpoint after `applied` requests, forgetting every other
/// savepoint. An error (no such checkpoint: the database is not the one the journal's
/// checkpoint was taken in) changes nothing.
pub(super) fn restore(store: &StateStore, applied: u64) -> Result<u64, StoreError> {
    let savepoint = {
        let read = store.database().begin_read().map_err(io)?;
        let table = read.open_table(CHECKPOINT_SAVEPOINTS).map_err(io)?;
        let found = table.get(applied).map_err(io)?;
        found.map(|id| id.value()).ok_or_else(|| {
            StoreError::io(format!(
                "the partition's database holds no checkpoint after {applied} requests, which its journal names: the file is not the one the journal was written with"
            ))
        })?
    };
    let mut transaction = store.database().begin_write().map_err(io)?;
    let handle = transaction
        .get_persistent_savepoint(savepoint)
        .map_err(io)?;
    transaction.restore_savepoint(&handle).map_err(io)?;
    drop(handle);
    forget_others(&transaction, |id| id == savepoint)?;
    record_and_commit(transaction, applied, savepoint)
}

/// Records `savepoint` as the checkpoint after `applied` requests and commits `transaction`
/// durably. The savepoint's id.
fn record_and_commit(
    transaction: redb::WriteTransaction,
    applied: u64,
    savepoint: u64,
) -> Result<u64, StoreError> {
    transaction
        .open_table(CHECKPOINT_SAVEPOINTS)
        .map_err(io)?
        .insert(applied, savepoint)
        .map_err(io)?;
    transaction.commit().map_err(io)?;
    Ok(savepoint)
}

/// Deletes the savepoints `keep` refuses, and their rows.
fn forget_others(
    transaction: &redb::WriteTransaction,
    keep: impl Fn(u64) -> bool,
) -> Result<(), StoreError> {
    let ids: Vec<u64> = transaction
        .list_persistent_savepoints()
        .map_err(io)?
        .collect();
    for id in ids.into_iter().filter(|id| !keep(*id)) {
        transaction.delete_persistent_savepoint(id).map_err(io)?;
    }
    transaction
        .open_table(CHECKPOINT_SAVEPOINTS)
        .map_err(io)?
        .retain(|_, id| keep(id))
        .map_err(io)?;
    Ok(())
}
