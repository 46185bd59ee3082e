//! This node as a member of a cluster: its connections to the other nodes (`mesh`, one
//! transport for the metadata plane, the regions and the coordinator), how it joins and leaves
//! (`joining`), the lease that lets it serve its shards (`lease`), where the shard coordinator
//! runs (`seat`: on the metadata primary) and the operators' view of the cluster from here
//! (`view`).

pub(super) mod joining;
pub(super) mod lease;
pub(super) mod mesh;
pub(super) mod seat;
pub(super) mod view;
