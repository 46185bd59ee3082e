//! Remember-entities: the ids of started entities are recorded per shard so that they are
//! started again when their shard comes up after a restart or a move; passivation forgets them.
//! [`RememberStore`] is the storage seam ([`memory`] for tests, [`redb`] for a node);
//! [`write_behind`] keeps writes off the message path and group-commits them.

pub mod memory;
pub mod redb;
pub mod write_behind;

use serde::{Deserialize, Serialize};

use crate::envelope::{EntityAddress, TypeKey};
use crate::sharding::extractor::ShardId;

/// One remembered entity: its type, shard and id.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RememberedId {
    /// The entity type.
    pub type_key: TypeKey,
    /// The entity's shard.
    pub shard: ShardId,
    /// The entity id.
    pub id: String,
}

impl RememberedId {
    /// The remembered id of entity `address` in `shard`.
    pub fn new(address: &EntityAddress, shard: ShardId) -> Self {
        RememberedId {
            type_key: address.type_key(),
            shard,
            id: address.id.clone(),
        }
    }
}

/// One change to the remembered set, applied in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RememberOp {
    /// The entity started: remember it.
    Started(RememberedId),
    /// The entity was passivated: forget it.
    Forgotten(RememberedId),
}

impl RememberOp {
    /// The id the operation is about.
    pub fn id(&self) -> &RememberedId {
        match self {
            RememberOp::Started(id) | RememberOp::Forgotten(id) => id,
        }
    }
}

/// A remember store failed; the message says why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("remember store: {message}")]
pub struct StoreError {
    /// What went wrong.
    pub message: String,
}

impl StoreError {
    /// Builds an error.
    pub fn new(message: impl Into<String>) -> Self {
        StoreError {
            message: message.into(),
        }
    }
}

/// Durable storage of remembered ids. Methods block (they are called from blocking tasks) and
/// must be safe to call from several threads.
///
/// ```
/// use tessera_host::envelope::TypeKey;
/// use tessera_host::sharding::remember::{RememberOp, RememberStore, RememberedId};
/// use tessera_host::sharding::remember::memory::MemoryStore;
/// let store = MemoryStore::default();
/// let id = RememberedId { type_key: TypeKey::new("t", "counter"), shard: 3, id: "c-1".into() };
/// store.apply(&[RememberOp::Started(id.clone())]).unwrap();
/// assert_eq!(store.list_shards(&id.type_key).unwrap(), vec![3]);
/// assert_eq!(store.list_ids(&id.type_key, 3).unwrap(), vec!["c-1".to_string()]);
/// ```
pub trait RememberStore: Send + Sync + 'static {
    /// Applies `batch` in order as one atomic, durable write (a group commit): on `Ok` every
    /// operation is durable, on `Err` none is.
    fn apply(&self, batch: &[RememberOp]) -> Result<(), StoreError>;
    /// Shards of `type_key` that hold at least one remembered id, ascending.
    fn list_shards(&self, type_key: &TypeKey) -> Result<Vec<ShardId>, StoreError>;
    /// Remembered ids of one shard, ascending.
    fn list_ids(&self, type_key: &TypeKey, shard: ShardId) -> Result<Vec<String>, StoreError>;
    /// Makes everything applied so far durable, for stores whose `apply` is not.
    fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// What a store failure does to the shard it concerns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailurePolicy {
    /// Keep routing; publish [`RememberEvent::StoreFailed`]. Availability over remembering.
    #[default]
    FailOpen,
    /// Publish the event and fail the shard: its messages get `Unavailable` until the region
    /// restarts.
    FailClosed,
}

/// Which remember operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RememberOperation {
    /// Recording a started id.
    RecordStarted,
    /// Forgetting a passivated id.
    Forget,
    /// The write-behind queue was full.
    Enqueue,
    /// Listing shards or ids for recovery.
    Recover,
    /// Flushing the store.
    Flush,
}

/// An event on the remember feed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RememberEvent {
    /// A store operation failed.
    StoreFailed {
        /// The entity type concerned.
        type_key: Option<TypeKey>,
        /// The shard concerned, if the operation was shard-scoped.
        shard: Option<ShardId>,
        /// The entity id concerned, if any.
        id: Option<String>,
        /// What was being done.
        operation: RememberOperation,
        /// The policy in force.
        policy: FailurePolicy,
        /// Why it failed.
        message: String,
    },
}
