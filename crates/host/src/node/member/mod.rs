//! This node as a member of a cluster: its connections to the other nodes (`mesh`, one
//! transport for the metadata plane, the regions and the coordinator, carrying `peer_message`),
//! where what peers send enters (`dispatch`), who may send what (`authority`) and what waits
//! for the catalog to vouch for it (`held`), how plugin bytes move between nodes beside the
//! plane (`blob_transfer`), how it joins and leaves (`joining`), the partition count its data was
//! written with (`layout`), the lease that lets it serve its
//! shards (`lease`), whether it is ready for traffic (`readiness`), where the shard coordinator
//! runs (`seat`: on the metadata primary), the partition plane's groups it runs (`partitions`) and which partition an entity lives in
//! (`partition_map`), the operators' view of the cluster from here (`view`),
//! and what nodes ask each other about their own part of it (`queries`: pages of entity ids,
//! overviews).

mod authority;
pub(super) mod blob_transfer;
mod dispatch;
mod held;
pub(super) mod joining;
pub(super) mod layout;
pub(super) mod lease;
pub(super) mod mesh;
pub(super) mod partition_map;
pub(super) mod partitions;
pub(super) mod peer_message;
pub(super) mod queries;
pub(super) mod query_data;
pub(super) mod readiness;
pub(super) mod seat;
pub(super) mod view;
