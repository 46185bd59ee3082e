//! A shard's durable state as data that can leave one node and be installed on another: every
//! row the state layer keeps for the shard's entities (state keys, version and size, messaging
//! counters, outbox, receipts, client idempotency keys, reminders) and the shard's remembered
//! ids, read in one snapshot and cut into [`ShardPart`]s of bounded size. Installing the first
//! part clears whatever the receiving node still held for the shard (an older copy), so a
//! retried transfer converges; discarding removes the shard from the node that gave it away.
//!
//! The state layer does not know the shard function: the caller names the shard's entities with
//! a [`ShardScope`] predicate over ids.

use super::error::StoreError;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tessera_contract::{ShardId, TypeKey};

mod export;
mod install;
#[cfg(test)]
mod tests;

pub(crate) use export::export;
pub(crate) use install::{begin_lineage, discard, install};

/// The most bytes of entity data one [`ShardPart`] carries; an entity larger than this travels
/// alone in its part (its size is bounded by the tenant's state quota).
pub const SHARD_PART_BYTES_MAX: usize = 4 << 20;

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

/// Everything the state layer keeps about one entity.
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
}

impl EntityRecord {
    fn bytes(&self) -> usize {
        let state: usize = self.state.iter().map(|r| r.key.len() + r.value.len()).sum();
        let outbox: usize = self.outbox.iter().map(|r| r.payload.len() + 48).sum();
        let reminders: usize = self.reminders.iter().map(|r| r.payload.len() + 16).sum();
        self.id.len() + state + outbox + reminders + 64 * (self.receipts.len() + 1)
    }
}

/// One piece of a shard's state in transit. Parts are numbered from 0; part 0 also carries the
/// shard's remembered ids and, when installed, first clears what the receiver held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardPart {
    /// Which part, from 0.
    pub index: u32,
    /// Whether it is the last part.
    pub last: bool,
    /// Entities of the shard, whole.
    pub entities: Vec<EntityRecord>,
    /// The shard's remembered ids (part 0 only).
    pub remembered: Vec<String>,
}

impl ShardPart {
    /// Refuses a part naming an entity or remembered id outside `scope`'s shard (a peer's bad
    /// input), before it reaches the writer and could fail other commits of its batch.
    pub fn check(&self, scope: &ShardScope) -> Result<(), StoreError> {
        let ids = self.entities.iter().map(|record| &record.id);
        match ids.chain(&self.remembered).find(|id| !(scope.contains)(id)) {
            Some(id) => Err(StoreError::Io(format!(
                "a transferred entity {id} is not in shard {scope:?}"
            ))),
            None => Ok(()),
        }
    }

    /// Bytes of entity data carried (an estimate for batching and logs).
    pub fn bytes(&self) -> usize {
        self.entities.iter().map(EntityRecord::bytes).sum::<usize>()
            + self.remembered.iter().map(String::len).sum::<usize>()
    }
}

fn io(error: impl std::fmt::Display) -> StoreError {
    StoreError::io(error)
}
