//! Cluster sharding: which node runs which entity. An entity id maps to a shard
//! ([`extractor`]); a coordinator task allocates shards to nodes — every decision a committed
//! catalog command — and rebalances them when membership changes ([`coordinator`],
//! [`rebalance`]); one region per node routes messages to the shard's home, straight to a local
//! mailbox on the fast path and through its task on a miss, buffering (bounded) while a home is
//! resolved or moving ([`region`], [`handoff`]), and restarts remembered entities when it
//! acquires a shard. Regions and the coordinator speak only in serializable messages ([`link`])
//! so that a channel can become a network connection. Where each owner keeps its shards' state,
//! a shard moves with its state, and a node serves only while it holds a [`lease`] (checked by
//! the deterministic lease simulation of `tessera-sim`). The entity layer sits below, reached
//! through [`LocalEntities`].
//!
//! Uses `tessera-contract`, `tessera-state`, `tessera-metadata` (allocations are catalog
//! commands), `tessera-runtime`, `tessera-entity` and `tessera-logs` (per-message warnings
//! counted per kind). The node (`tessera-host`) uses it.

pub mod config;
pub mod coordinator;
pub mod extractor;
pub mod handoff;
pub mod lease;
pub mod link;
pub mod local;
pub mod membership;
pub mod placement;
pub mod rebalance;
pub mod region;

#[cfg(test)]
mod lease_tests;
#[cfg(test)]
mod tests;

pub use config::{
    ConfigError, PARTITIONS_CLUSTER_DEFAULT, PartitionConfig, RememberConfig, ShardMoves,
    ShardingConfig,
};
pub use coordinator::{Coordinator, CoordinatorError, CoordinatorHandle};
pub use extractor::{FnvExtractor, ShardExtractor, ShardId};
pub use link::{
    CoordinatorCommand, FORWARD_BATCH_BYTES_MAX, FORWARD_PAYLOAD_BYTES_MAX, LinkMessage,
    PRIMARY_REPORT_INTERVAL, PRIMARY_REPORT_SILENCE, RemoteLinks, Switchboard,
};
pub use local::{LocalCell, LocalEntities, StateRead};
pub use membership::{Member, MemberSet, MemberStatus, Membership};
pub use rebalance::{RebalanceReason, RebalanceRound, ShardMovement};
pub use region::PendingReply;
pub use region::{
    EntityRoute, Region, RegionCounters, RegionHandle, RegionParts, STATE_READ_BYTES_MAX,
    STATE_READ_ENTRIES_MAX, TRANSFER_STALL_ATTEMPTS, TRANSFERS_SENDING_MAX, TypeSettings,
};
