//! A shard's durable state as data that can leave one node and be installed on another: every
//! row the state layer keeps for the shard's entities (state keys, version and size, messaging
//! counters, outbox, receipts, client idempotency keys, reminders) and the shard's remembered
//! ids. `export` streams them out of one read transaction (a snapshot) as [`ShardPart`]s of
//! at most [`SHARD_PART_BYTES_MAX`], cut on demand, so an export holds one part at a time
//! whatever the shard's size; an entity spans as many parts as its rows need, and a state
//! value larger than a part travels in [`ValueChunk`]s that the receiver stages and assembles
//! (`chunks`). Installing the first part clears whatever the receiving node still held for
//! the shard (an older copy), so a retried transfer converges; only the last part makes the
//! move's rows the shard's lineage, so a partly installed shard is never served; discarding
//! removes the shard from the node that gave it away.
//!
//! The state layer does not know the shard function: the caller names the shard's entities with
//! a [`ShardScope`] predicate over ids.

use super::error::StoreError;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tessera_contract::{ShardId, TypeKey};

mod chunks;
mod export;
mod install;
mod split;
#[cfg(test)]
mod tests;

pub(crate) use chunks::{SHARD_TRANSFER_CHUNKS, unstage};
pub use export::ShardExport;
pub(crate) use install::{begin_lineage, discard, install, install_rows};

/// The most bytes one [`ShardPart`] may hold, as [`ShardPart::bytes`] counts them (an upper
/// bound on its MessagePack): small against the mesh's frame limit, so a part always crosses
/// in one frame, and what one export holds in memory at once. An entity with more rows spans
/// parts; a state value larger than a part is sent in chunks. Only an outbox or reminder
/// payload is never cut: one larger than a part travels alone in its part, and those are
/// bounded by the guest's effect payload limit (1 MiB), far below.
pub const SHARD_PART_BYTES_MAX: usize = 4 << 20;

/// The most bytes of shard state one outgoing transfer holds in memory: the one part waiting
/// for its acknowledgement (parts go one at a time and are read from the snapshot on demand).
pub const TRANSFER_BYTES_IN_FLIGHT_MAX: usize = SHARD_PART_BYTES_MAX;

/// The least room worth starting a chunk of a large value in; with less left, the part is
/// closed and the value starts the next one.
const CHUNK_BYTES_MIN: usize = 64 << 10;

/// What a row costs in a part beyond its strings and bytes: its field names, length prefixes
/// and integers in MessagePack (at most 61 bytes for the widest row, a receipt).
const ROW_OVERHEAD_BYTES: usize = 64;

/// What an [`EntityRecord`] costs beyond its id and rows: its field names, meta, counters and
/// list headers in MessagePack (about 160 bytes).
const RECORD_OVERHEAD_BYTES: usize = 256;

/// What a [`ShardPart`] costs beyond its records and remembered ids.
const PART_OVERHEAD_BYTES: usize = 64;

/// What one remembered id costs beyond its bytes (a string's length prefix).
const REMEMBERED_OVERHEAD_BYTES: usize = 8;

/// Which entities of a type belong to a shard: a predicate over entity ids.
pub type ShardFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// One shard of one entity type, and how to recognise its entities.
#[derive(Clone)]
pub struct ShardScope {
    /// The tenant and entity type.
    pub type_key: TypeKey,
    /// The shard.
    pub shard: ShardId,
    /// Whether an entity id of `type_key` belongs to `shard`.
    pub contains: ShardFilter,
}

impl std::fmt::Debug for ShardScope {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{}#{}", self.type_key, self.shard)
    }
}

/// A state key and its value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRow {
    /// The key.
    pub key: String,
    /// The value.
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
}

/// A piece of a state value too large for one part: bytes `offset..offset + bytes.len()` of a
/// value of `total` bytes. The receiver stages the pieces and writes the value once it holds
/// every byte of it, contiguous from 0.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueChunk {
    /// The state key.
    pub key: String,
    /// Where this piece starts in the value.
    pub offset: u64,
    /// The whole value's length.
    pub total: u64,
    /// The piece.
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
}

/// A committed tell waiting in the entity's outbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxRow {
    /// Its sequence number.
    pub seq: u64,
    /// The receiver's type.
    pub to_type: String,
    /// The receiver's id.
    pub to_id: String,
    /// The payload.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
}

/// The highest sequence number the entity committed from one sender.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptRow {
    /// The sender's type.
    pub sender_type: String,
    /// The sender's id.
    pub sender_id: String,
    /// The highest sequence committed.
    pub seq: u64,
    /// When, in ms since the epoch.
    pub at_ms: u64,
}

/// A durable reminder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReminderRow {
    /// Its timer id.
    pub timer: u64,
    /// When it is due, in ms since the epoch.
    pub due_ms: u64,
    /// The payload.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
}

/// Rows the state layer keeps about one entity: all of them, or (an entity larger than a part)
/// some, the rest in later parts under the same id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityRecord {
    /// The entity id.
    pub id: String,
    /// `(plugin version of its last commit, exact state bytes)`.
    pub meta: Option<(u32, u64)>,
    /// Its state keys.
    pub state: Vec<StateRow>,
    /// `(next outbox seq, last timer id, reminders held, outbox held)`.
    pub sequences: Option<(u64, u64, u64, u64)>,
    /// Its unacknowledged tells.
    pub outbox: Vec<OutboxRow>,
    /// Its receipts, one per sender.
    pub receipts: Vec<ReceiptRow>,
    /// Client idempotency keys and when each was committed.
    pub client_keys: Vec<(String, u64)>,
    /// Its reminders.
    pub reminders: Vec<ReminderRow>,
    /// Pieces of state values too large for one part.
    #[serde(default)]
    pub chunks: Vec<ValueChunk>,
}

impl EntityRecord {
    /// A record of `id` with no rows yet.
    fn new(id: &str) -> Self {
        EntityRecord {
            id: id.to_string(),
            ..EntityRecord::default()
        }
    }

    /// What the record costs in a part ([`ShardPart::bytes`]).
    fn bytes(&self) -> usize {
        let row = |bytes: usize| bytes + ROW_OVERHEAD_BYTES;
        let state = self.state.iter().map(|r| row(r.key.len() + r.value.len()));
        let outbox = self.outbox.iter().map(|r| row(outbox_bytes(r)));
        let receipts = self.receipts.iter().map(|r| row(receipt_bytes(r)));
        let client_keys = self.client_keys.iter().map(|(key, _)| row(key.len()));
        let reminders = self.reminders.iter().map(|r| row(r.payload.len()));
        let chunks = self.chunks.iter().map(|c| row(c.key.len() + c.bytes.len()));
        self.id.len()
            + RECORD_OVERHEAD_BYTES
            + state
                .chain(outbox)
                .chain(receipts)
                .chain(client_keys)
                .chain(reminders)
                .chain(chunks)
                .sum::<usize>()
    }
}

fn outbox_bytes(row: &OutboxRow) -> usize {
    row.to_type.len() + row.to_id.len() + row.payload.len()
}

fn receipt_bytes(row: &ReceiptRow) -> usize {
    row.sender_type.len() + row.sender_id.len()
}

/// One piece of a shard's state in transit. Parts are numbered from 0 and installed in order;
/// part 0, when installed, first clears what the receiver held, and the last part completes the
/// move.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardPart {
    /// Which part, from 0.
    pub index: u32,
    /// Whether it is the last part.
    pub last: bool,
    /// Rows of the shard's entities; an entity's rows may span parts.
    pub entities: Vec<EntityRecord>,
    /// Remembered ids of the shard.
    pub remembered: Vec<String>,
}

impl ShardPart {
    /// Refuses a part naming an entity or remembered id outside `scope`'s shard, or carrying a
    /// chunk that does not lie within its value (a peer's bad input), before it reaches the
    /// writer and could fail other commits of its batch.
    pub fn check(&self, scope: &ShardScope) -> Result<(), StoreError> {
        let ids = self.entities.iter().map(|record| &record.id);
        if let Some(id) = ids.chain(&self.remembered).find(|id| !(scope.contains)(id)) {
            return Err(StoreError::Io(format!(
                "a transferred entity {id} is not in shard {scope:?}"
            )));
        }
        let mut pieces = self.entities.iter().flat_map(|record| &record.chunks);
        match pieces.find(|chunk| !chunks::is_within(chunk)) {
            Some(chunk) => Err(StoreError::Io(format!(
                "a transferred chunk of {} ({} bytes at {} of {}) is not within its value",
                chunk.key,
                chunk.bytes.len(),
                chunk.offset,
                chunk.total
            ))),
            None => Ok(()),
        }
    }

    /// What the part costs: an upper bound on its MessagePack, the measure of
    /// [`SHARD_PART_BYTES_MAX`].
    pub fn bytes(&self) -> usize {
        PART_OVERHEAD_BYTES
            + self.entities.iter().map(EntityRecord::bytes).sum::<usize>()
            + self
                .remembered
                .iter()
                .map(|id| id.len() + REMEMBERED_OVERHEAD_BYTES)
                .sum::<usize>()
    }
}

fn io(error: impl std::fmt::Display) -> StoreError {
    StoreError::io(error)
}
