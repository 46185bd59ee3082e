//! The commands that change the catalog and what applying one produced. Commands are
//! deterministic: everything they need (times, hashes, sizes) is inside them, so every replica
//! that applies the same sequence ends in the same state. Plugin bytes never are: a deploy
//! orders the plugin's hash and size, and the bytes travel beside the log (`blobs.rs`).

use super::member_state::MemberState;
use super::members::MemberRecord;
use super::records::{PartitionReplicas, Quotas, Tenant, TypeOptions, TypeRecord};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use tessera_contract::{Allocation, NodeId, ShardKey};

/// A change to the catalog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Command {
    /// Creates a tenant.
    CreateTenant {
        /// Name.
        name: String,
        /// Hex SHA-256 of its token.
        token_sha256: String,
        /// Limits.
        quotas: Quotas,
        /// Creation time.
        created_ms: u64,
    },
    /// Replaces a tenant's quotas.
    UpdateQuotas {
        /// Tenant.
        name: String,
        /// New limits.
        quotas: Quotas,
    },
    /// Adds a version to a type (creating the type) and makes it active. Only the plugin's hash
    /// and size are ordered: the node that took the upload made sure a quorum of voters holds
    /// the bytes before it submitted this. Refused (changing nothing) with
    /// [`MetadataError::QuotaExceeded`](crate::MetadataError::QuotaExceeded) when the plugin is
    /// over the tenant's `plugin_bytes_max`, would take the tenant's versions past
    /// `plugin_bytes_total_max`, or the type has [`VERSIONS_PER_TYPE_MAX`](crate::VERSIONS_PER_TYPE_MAX)
    /// versions.
    DeployVersion {
        /// Tenant.
        tenant: String,
        /// Type name.
        entity_type: String,
        /// Hex SHA-256 of the plugin.
        sha256: String,
        /// Plugin size.
        size_bytes: u64,
        /// Type options.
        options: TypeOptions,
        /// Deploy time.
        deployed_ms: u64,
    },
    /// Makes an existing version active (rollback or roll forward).
    SetActiveVersion {
        /// Tenant.
        tenant: String,
        /// Type name.
        entity_type: String,
        /// The version to run.
        version: u32,
    },
    /// Deletes a type and its versions; plugin bytes no version uses any more go with it.
    /// Entity state and shard allocations stay (see `docs/api.md`).
    DeleteType {
        /// Tenant.
        tenant: String,
        /// Type name.
        entity_type: String,
    },
    /// Makes the coordinator of `epoch` (the view of the metadata primary it runs on) the one
    /// whose shard decisions the catalog takes. Refused when a coordinator of a later epoch is
    /// seated already. A new coordinator submits it before it reads the shard table, so it reads
    /// everything committed before it took the seat.
    SeatCoordinator {
        /// The seated coordinator's epoch.
        epoch: u64,
    },
    /// Assigns shards to nodes (first allocation, or a move from an owner gone for good); each
    /// assignment gets the next generation of the catalog. Fenced: refused, changing nothing,
    /// unless `epoch` is the seated coordinator's and every shard is still at the generation the
    /// coordinator read.
    AssignShards {
        /// The epoch of the coordinator that decided.
        epoch: u64,
        /// Applied in order.
        assignments: Vec<ShardAssignment>,
    },
    /// Moves shards by handoff: each gets the next generation on its new owner, like
    /// [`Command::AssignShards`] (and fenced the same way), and is recorded as a handoff in
    /// flight from the losing node until [`Command::CompleteHandoff`].
    MoveShards {
        /// The epoch of the coordinator that decided.
        epoch: u64,
        /// Applied in order.
        moves: Vec<ShardMove>,
    },
    /// Places partitions' replicas (the partition plane): each named partition gets its
    /// ordered replica set (the first is the preferred primary) at the catalog's next
    /// generation. Fenced like [`Command::AssignShards`]: refused, changing nothing, unless
    /// `epoch` is the seated coordinator's and every partition is still at the generation the
    /// coordinator read; refused too if a replica set is empty, names a node twice or a node
    /// that is not a member.
    PlacePartitions {
        /// The epoch of the coordinator that decided.
        epoch: u64,
        /// Applied in order.
        placements: Vec<PartitionPlacement>,
    },
    /// Ends the handoff of `key` if its allocation is still `generation` (the new owner holds
    /// the state); a stale completion changes nothing.
    CompleteHandoff {
        /// The shard.
        key: ShardKey,
        /// The generation of the move that completed.
        generation: u64,
    },
    /// Adds a node as a joining member, or refreshes the addresses and roles of a member that
    /// is joining, up or leaving already (a restart; it keeps its state). Refused for a member
    /// exiting or down.
    JoinMember {
        /// The node's id.
        node: NodeId,
        /// Where peers reach it.
        cluster_address: String,
        /// Where clients reach its HTTP API.
        api_address: String,
        /// The roles it advertises.
        roles: BTreeSet<String>,
        /// Join time.
        joined_ms: u64,
    },
    /// Moves a member along its life cycle (see [`MemberState::may_become`]); refused, changing
    /// nothing, for any other step.
    SetMemberState {
        /// The node's id.
        node: NodeId,
        /// Its next state.
        state: MemberState,
        /// Time of the change.
        updated_ms: u64,
    },
    /// Changes nothing. A node that has applied it has applied every command committed
    /// before it was submitted: a linearizable read submits one and then reads locally.
    Barrier,
    /// Renews `node`'s lease on its shards: committed (so a majority was reached) and granted
    /// while the member is up, leaving or exiting; refused otherwise. Changes nothing.
    RenewLease {
        /// The member renewing.
        node: NodeId,
    },
}

/// One shard given to a node by [`Command::AssignShards`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardAssignment {
    /// The shard.
    pub key: ShardKey,
    /// The generation the coordinator read: `None` for a shard never allocated.
    pub expected: Option<u64>,
    /// The new owner.
    pub to: NodeId,
}

/// One partition's new replica set, in [`Command::PlacePartitions`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionPlacement {
    /// The partition.
    pub partition: u32,
    /// The generation the coordinator read: `None` for a partition never placed.
    pub expected: Option<u64>,
    /// Its replicas, the preferred primary first.
    pub replicas: Vec<NodeId>,
    /// The move to the current epoch finished (its group serves): the replicas before are
    /// forgotten ([`PartitionReplicas::previous`] emptied), which lets their nodes drop the
    /// old group and the partition move again. Only with the same replica set.
    #[serde(default)]
    pub settled: bool,
}

/// One shard handed from `from` to `to` by [`Command::MoveShards`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMove {
    /// The shard.
    pub key: ShardKey,
    /// The owner handing it off.
    pub from: NodeId,
    /// The generation the coordinator read (the losing owner's).
    pub expected: u64,
    /// The new owner.
    pub to: NodeId,
}

/// What applying a command produced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Applied {
    /// A tenant was created or changed.
    Tenant(Tenant),
    /// A type changed (deploy, rollback).
    Type(TypeRecord),
    /// A type was deleted.
    TypeDeleted {
        /// Tenant.
        tenant: String,
        /// Type name.
        entity_type: String,
    },
    /// Shards were assigned ([`Command::AssignShards`]), with their new allocations: an owner
    /// they were taken from stops serving them.
    ShardsAssigned(Vec<(ShardKey, Allocation)>),
    /// Shards were moved by handoff ([`Command::MoveShards`]), with their new allocations: the
    /// losing owner serves them until it hands them off.
    ShardsMoved(Vec<(ShardKey, Allocation)>),
    /// Partitions were placed ([`Command::PlacePartitions`]), with their new replica sets.
    PartitionsPlaced(Vec<(u32, PartitionReplicas)>),
    /// A [`Command::SeatCoordinator`] was applied.
    CoordinatorSeated {
        /// The seated coordinator's epoch.
        epoch: u64,
    },
    /// A member joined or changed state (`Removed`: its record is gone).
    Member(MemberRecord),
    /// The whole catalog was replaced by a snapshot (state transfer): reload everything.
    Restored,
    /// A [`Command::Barrier`] passed.
    Barrier,
    /// A [`Command::RenewLease`] was granted.
    LeaseRenewed,
    /// A [`Command::CompleteHandoff`] was applied: `ended` unless it was stale.
    HandoffCompleted {
        /// Whether a handoff record was removed.
        ended: bool,
    },
}
