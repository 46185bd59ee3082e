//! The catalog: tenants and their token hashes, entity types and their versions (each naming its
//! plugin by hash and size), cluster members, and the shard allocation table — changed only by
//! [`Command`]s applied by a deterministic state machine over redb ([`MetadataStore::apply`]).
//! Plugin bytes live beside the catalog, never in it: each node's [`BlobStore`].
//!
//! [`CatalogMachine`] is the catalog as the state machine of the metadata plane's VSR group
//! (the simulators of `tessera-sim` run it as a workload of the VSR simulator), and
//! [`replicated`] runs that group among a cluster's voters.
//!
//! Commands reach the catalog through a [`MetadataPlane`]: on one node the [`LocalPlane`]
//! applies them in order; in a cluster the same commands are ordered by consensus and applied
//! on every node. Either way the node's [`CatalogObserver`] hears of each applied command and
//! updates what the layers below run. Commands carry every input (times, hashes, sizes) so
//! applying the same sequence anywhere gives the same catalog.
//!
//! Uses `tessera-contract` and `tessera-consensus` (it never sees the transport its plane's
//! frames cross: the node hands it an outbox). Sharding and the node use it; the entity layer,
//! the runtime and the state layer never do.

mod apply;
mod blobs;
mod catalog_machine;
mod command;
mod committed;
mod cut;
mod error;
mod limits;
mod member_state;
mod members;
mod partitions;
mod plane;
mod records;
pub mod replicated;
mod replication;
mod shards;
mod store;

pub use blobs::{BLOB_CHUNK_BYTES, BLOB_CHUNKS_MAX, BlobAssembly, BlobError, BlobStore, blob_name};
pub use catalog_machine::{CatalogMachine, CatalogResult, UNOBSERVED_APPLIED_MAX};
pub use command::{Applied, Command, PartitionPlacement, ShardAssignment, ShardMove};
pub use committed::CommittedRead;
pub use cut::CatalogCut;
pub use error::MetadataError;
pub use limits::{NAME_BYTES_MAX, VERSIONS_PER_TYPE_MAX, quota_ceilings};
pub use member_state::MemberState;
pub use members::{MEMBER_ADDRESS_BYTES_MAX, MEMBER_ROLES_MAX, MemberRecord};
pub use partitions::{
    PARTITION_REPLICAS_MAX, PARTITIONS_MAX, group_partition, group_voters, partition_group,
    same_replica_set,
};
pub use plane::{CatalogObserver, LocalPlane, MetadataPlane, PlaneStatus};
pub use records::{
    PartitionReplicas, Quotas, Tenant, TypeOptions, TypeRecord, VersionRecord, validate_name,
};
pub use replicated::{METADATA_GROUP, ReplicatedPlane};
pub use replication::{PARTITION_COUNT_MAX, Replication, deployed_replication};
pub use store::MetadataStore;
