//! The seam between the layers above and wherever entity state lives. [`EntityState`] is what
//! the entity layer and the runtime read and commit through; [`RememberStore`] is where
//! remembered entity ids go. Today both are implemented by [`LocalState`](super::LocalState)
//! (one redb database, one group-committing writer); a replicated partition can implement the
//! same traits without the layers above noticing.

use super::error::{CommitError, StoreError};
use super::messaging::{DueReminder, OutboxEntry, Receipt, Reminder, Sequences};
use super::remember::RememberOp;
use super::shard_transfer::{ShardPart, ShardScope};
use super::write_set::WriteSet;
use tessera_contract::{BoxFuture, EntityAddress, ShardId, TypeKey};

/// A pending commit; resolves once the writes are durable (or failed).
pub type CommitFuture = BoxFuture<'static, Result<(), CommitError>>;

/// What the store keeps about one entity beside its keys: the plugin version it last committed
/// under and the exact bytes (keys plus values) it holds, both updated by every commit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntityMeta {
    /// The plugin version of its last commit; `None` if it never committed (a first start).
    pub version: Option<u32>,
    /// Total bytes of its state keys plus values.
    pub state_bytes: u64,
    /// The stamp of its last write in a replicated partition (0: never written there, and
    /// always 0 in a node's local store; see [`WriteStamps`](crate::WriteStamps)).
    pub stamp: u64,
}

/// Durable per-entity state: reads, the entity's metadata, and atomic commits of a message's
/// writes. Reads may block briefly (they run on the caller's thread); commits are group
/// committed by the implementation.
pub trait EntityState: Send + Sync + 'static {
    /// The committed value of `key` for `entity`.
    fn get(&self, entity: &EntityAddress, key: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// The entity's version and state size.
    fn meta(&self, entity: &EntityAddress) -> Result<EntityMeta, StoreError>;

    /// Up to `limit` committed keys and values of `entity`, in key order (inspection).
    fn entries(
        &self,
        entity: &EntityAddress,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError>;

    /// Commits `writes` atomically; the future resolves once they are durable.
    fn commit(&self, writes: WriteSet) -> CommitFuture;

    /// Whether a message to `entity` that wrote nothing waits for [`EntityState::barrier`]
    /// before it answers: true where single activation rests on the order of commits (a
    /// replicated partition), false where it rests on the node's lease (a node's local store).
    fn orders_reads(&self, _entity: &EntityAddress) -> bool {
        false
    }

    /// Resolves once a point of `entity`'s history after the caller read it is ordered at
    /// which its stamp was still `read` (see [`WriteStamps`](crate::WriteStamps)): what the
    /// message read was current, so its reply may leave. Only called where
    /// [`EntityState::orders_reads`]; a store that does not order reads answers at once.
    fn barrier(&self, _entity: &EntityAddress, _read: u64) -> CommitFuture {
        Box::pin(std::future::ready(Ok(())))
    }

    /// The entity's messaging counters.
    fn sequences(&self, entity: &EntityAddress) -> Result<Sequences, StoreError>;

    /// Whether `receiver` already committed the message `receipt` names.
    fn is_duplicate(&self, receiver: &EntityAddress, receipt: &Receipt)
    -> Result<bool, StoreError>;

    /// Up to `limit` entries of `sender`'s outbox, in sequence order.
    fn outbox(&self, sender: &EntityAddress, limit: usize) -> Result<Vec<OutboxEntry>, StoreError>;

    /// Up to `limit` entities with a non-empty outbox after `after` (exclusive), in order.
    fn outbox_senders(
        &self,
        after: Option<&EntityAddress>,
        limit: usize,
    ) -> Result<Vec<EntityAddress>, StoreError>;

    /// Up to `limit` reminders due at or before `until_ms`, earliest first, after `after` (the
    /// reminder a previous page ended with) if given: a caller that skips some pages on.
    fn due_reminders(
        &self,
        until_ms: u64,
        after: Option<&DueReminder>,
        limit: usize,
    ) -> Result<Vec<DueReminder>, StoreError>;

    /// When the earliest reminder is due (ms since the epoch), if any.
    fn next_due(&self) -> Result<Option<u64>, StoreError>;

    /// Outbox entries and reminders held, node-wide (for metrics).
    fn pending_messages(&self) -> Result<(u64, u64), StoreError>;

    /// One reminder, if still held.
    fn reminder(&self, entity: &EntityAddress, timer: u64) -> Result<Option<Reminder>, StoreError>;
}

/// Durable storage of remembered entity ids, per `(type, shard)`.
pub trait RememberStore: Send + Sync + 'static {
    /// Applies `batch` in order as one atomic, durable write: on `Ok` every operation is
    /// durable, on `Err` none is.
    fn apply(&self, batch: Vec<RememberOp>) -> CommitFuture;

    /// Shards of `type_key` that hold at least one remembered id, ascending.
    fn list_shards(&self, type_key: &TypeKey) -> Result<Vec<ShardId>, StoreError>;

    /// Remembered ids of one shard, ascending.
    fn list_ids(&self, type_key: &TypeKey, shard: ShardId) -> Result<Vec<String>, StoreError>;
}

/// A shard's state as parts, read on demand from one consistent view ([`ShardStates::export`]).
pub type ShardParts = Box<dyn Iterator<Item = Result<ShardPart, StoreError>> + Send>;

/// A shard's durable state leaving this node or arriving on it, when the shard moves between
/// nodes (a handoff). This is the seam a replicated partition will implement: there a move
/// makes another replica the partition's primary instead of copying rows.
pub trait ShardStates: Send + Sync + 'static {
    /// Everything held for the shard (its entities' rows and remembered ids) as of now, as parts
    /// of at most [`SHARD_PART_BYTES_MAX`](crate::SHARD_PART_BYTES_MAX) read one at a time
    /// when asked for (each read may block briefly); the last part has `last` set. The caller
    /// has stopped the shard's entities; what is committed after this call is not exported.
    fn export(&self, scope: &ShardScope) -> Result<ShardParts, StoreError>;

    /// Makes one part of the move numbered `generation` durable; part 0 first discards what
    /// this node held for the shard. Once the last part of a move is installed, any part of
    /// that move or an older one is acknowledged without being applied again (a sender that
    /// restarted and found nothing left to send cannot wipe what arrived).
    fn install(&self, scope: ShardScope, generation: u64, part: ShardPart) -> CommitFuture;

    /// Removes everything held for the shard (after its new owner installed it).
    fn discard(&self, scope: ShardScope) -> CommitFuture;

    /// This node starts serving the shard at `generation` (an assignment, or a restart): rows
    /// it holds for an older generation are removed first, so the shard starts from exactly
    /// what its owner installed, or from empty; rows of this generation (a restart, a move
    /// installed) stay.
    fn begin_lineage(&self, scope: ShardScope, generation: u64) -> CommitFuture;
}
