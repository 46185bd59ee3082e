//! Durable per-entity state, remembered entity ids and the commit path, on one redb database
//! per node.
//!
//! The layers above see two traits: [`EntityState`] (reads, per-entity [`EntityMeta`] and
//! atomic commits of a message's [`WriteSet`]) and [`RememberStore`] (remembered ids per shard).
//! [`LocalState`] implements both over [`StateStore`]'s tables, writing only through the
//! [`GroupCommitter`]'s thread, which folds many messages (and remembered-id batches) into one
//! durable transaction; a replicated partition can later implement the same traits.
//! [`remember`] holds the remember-entities vocabulary and its write-behind queue;
//! [`messaging`] the durable outbox, receipts and reminders committed with each message;
//! [`shard_transfer`] a shard's rows as parts that move to another node ([`ShardStates`]);
//! [`partition`] the state machine a partition's VSR group replicates (write sets as ops);
//! `listing` the ids of a type's entities a node knows, a page at a time
//! ([`StateStore::entity_ids`]).
//!
//! Uses `tessera-contract`, and `tessera-consensus` for the state machine seam. The runtime, the
//! entity layer, sharding and the node use it.

mod backend;
mod commit;
mod error;
mod listing;
mod local;
pub mod messaging;
pub mod partition;
pub mod remember;
pub mod shard_transfer;
mod tables;
mod write_set;

pub use backend::{CommitFuture, EntityMeta, EntityState, RememberStore, ShardParts, ShardStates};
pub use commit::{GroupCommitConfig, GroupCommitStats, GroupCommitter};
pub use error::{CommitError, StoreError};
pub use listing::{entity_count_across, entity_ids_across};
pub use local::{LocalState, export_shard};
pub use messaging::{DueReminder, MessagingWrites, OutboxEntry, Receipt, Reminder, Sequences};
pub use shard_transfer::{
    SHARD_PART_BYTES_MAX, ShardExport, ShardFilter, ShardPart, ShardScope,
    TRANSFER_BYTES_IN_FLIGHT_MAX,
};
pub use tables::StateStore;
pub use write_set::{StateChange, WriteSet, WriteStamps};
