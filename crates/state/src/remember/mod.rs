//! Remember-entities: the ids of started entities are recorded per shard so that they are
//! started again when their shard comes up after a restart or a move; passivation forgets them.
//! The entity layer records starts and passivations, the sharding layer restarts remembered ids
//! when it acquires a shard; both go through the [`RememberWriter`] here, which keeps writes off
//! the message path and commits them in batches through a [`RememberStore`](super::RememberStore)
//! ([`memory`] for tests, [`LocalState`](super::LocalState) for a node).

pub mod memory;
mod write_behind;

pub use write_behind::{Listing, RememberStats, RememberWriter, WRITE_BATCH_RECORDS_MAX};

use serde::{Deserialize, Serialize};

use tessera_contract::{EntityAddress, ShardId, TypeKey};

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

/// Remember-entities settings. The store itself is handed to the writer, not configured here.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RememberConfig {
    /// Records waiting to be written; a record that finds it full is a store failure
    /// (reported, and under fail-closed it fails the shard).
    pub queue_capacity: usize,
    /// What a store failure does to the shard.
    pub failure_policy: FailurePolicy,
    /// Capacity of the remember event feed; slow subscribers miss the oldest events.
    pub event_buffer: usize,
}

impl Default for RememberConfig {
    fn default() -> Self {
        RememberConfig {
            queue_capacity: 4096,
            failure_policy: FailurePolicy::FailOpen,
            event_buffer: 1024,
        }
    }
}
