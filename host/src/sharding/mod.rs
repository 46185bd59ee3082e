//! Cluster sharding: which node runs which entity. An entity id maps to a shard
//! ([`extractor`]); a coordinator task allocates shards to nodes with generations and rebalances
//! them when membership changes ([`coordinator`], [`allocation`], [`rebalance`]); one region per
//! node routes messages to the shard's home, buffers them while that home is resolved or moving
//! ([`region`], [`handoff`]), and remembers started entities so they come back after a restart
//! ([`remember`]). Regions and the coordinator speak only in serializable messages ([`link`]) so
//! that a channel can later become a network connection. The entity layer sits below and is
//! reached only through [`LocalEntities`].

pub mod allocation;
pub mod config;
pub mod coordinator;
pub mod extractor;
pub mod handoff;
pub mod link;
pub mod local;
pub mod membership;
pub mod rebalance;
pub mod region;
pub mod remember;

#[cfg(test)]
mod tests;

pub use allocation::{Allocation, AllocationTable, ShardKey};
pub use config::{ConfigError, RememberConfig, ShardingConfig};
pub use coordinator::{Coordinator, CoordinatorHandle};
pub use extractor::{FnvExtractor, ShardExtractor, ShardId};
pub use link::{NodeId, Switchboard};
pub use local::LocalEntities;
pub use membership::{Member, MemberSet, MemberStatus, Membership};
pub use rebalance::{RebalanceReason, RebalanceRound, ShardMovement};
pub use region::{Region, RegionCounters, RegionHandle, TypeSettings};
pub use remember::{FailurePolicy, RememberEvent, RememberStore, StoreError};
