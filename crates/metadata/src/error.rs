//! Why a catalog command or read failed. A refused command changes nothing.

use super::limits::{NAME_BYTES_MAX, VERSIONS_PER_TYPE_MAX};
use super::member_state::MemberState;

/// Why a command or query failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum MetadataError {
    /// A name is empty, too long or has characters outside `[A-Za-z0-9_.-]`.
    #[error("invalid name {0:?}: use 1 to {NAME_BYTES_MAX} characters from A-Z a-z 0-9 _ . -")]
    InvalidName(String),
    /// The tenant exists already.
    #[error("tenant {0} already exists")]
    TenantExists(String),
    /// No such tenant.
    #[error("no tenant {0}")]
    NoTenant(String),
    /// No such type.
    #[error("no entity type {1} in tenant {0}")]
    NoType(String, String),
    /// No such version.
    #[error("entity type {0} has no version {1}")]
    NoVersion(String, u32),
    /// A tenant quota refuses the command (the plugin's size, the tenant's plugin bytes in
    /// all); it changed nothing.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// A type has too many versions.
    #[error("entity type {0} already has {VERSIONS_PER_TYPE_MAX} versions")]
    TooManyVersions(String),
    /// Quotas are unusable.
    #[error("invalid quotas: {0}")]
    InvalidQuotas(String),
    /// A type's options are unusable (a replication factor out of bounds, or not the one the
    /// type keeps); nothing was deployed.
    #[error("invalid type options: {0}")]
    InvalidOptions(String),
    /// No such member.
    #[error("no member {0} in the cluster")]
    NoMember(String),
    /// A member's life cycle does not allow the step.
    #[error("member {node} cannot go from {} to {}", from.as_str(), to.as_str())]
    MemberTransition {
        /// The member.
        node: String,
        /// Its state.
        from: MemberState,
        /// The state asked for.
        to: MemberState,
    },
    /// A member that may not serve shards asked to renew its lease.
    #[error("member {node} is {} and holds no lease", state.as_str())]
    LeaseRefused {
        /// The member.
        node: String,
        /// Its state.
        state: MemberState,
    },
    /// A member's record is unusable (too many roles, an address too long).
    #[error("invalid member: {0}")]
    InvalidMember(String),
    /// A shard decision from a coordinator that is not the seated one (a deposed coordinator
    /// still acting, or one that never took the seat), or a seat a later coordinator holds.
    #[error(
        "coordinator of epoch {epoch} is not seated (the seated coordinator has epoch {seated})"
    )]
    StaleCoordinator {
        /// The epoch the command carried.
        epoch: u64,
        /// The seated coordinator's epoch.
        seated: u64,
    },
    /// A shard decision read a generation the shard no longer has.
    #[error(
        "shard {key} moved: the decision expected generation {expected:?}, the catalog has {current:?}"
    )]
    ShardMoved {
        /// The shard.
        key: String,
        /// The generation the decision expected (`None`: unallocated).
        expected: Option<u64>,
        /// The committed generation (`None`: unallocated).
        current: Option<u64>,
    },
    /// A partition decision read a generation the partition no longer has.
    #[error(
        "partition {partition} was placed again: the decision expected generation {expected:?}, the catalog has {current:?}"
    )]
    PartitionMoved {
        /// The partition.
        partition: u32,
        /// The generation the decision expected (`None`: never placed).
        expected: Option<u64>,
        /// The committed generation (`None`: never placed).
        current: Option<u64>,
    },
    /// A partition placement that cannot be taken (no replica, a replica twice, a node that is
    /// not a member, a partition or a replica set beyond its bound).
    #[error("invalid partition placement: {0}")]
    InvalidPlacement(String),
    /// A replicated operation is not a catalog command.
    #[error("malformed catalog command: {0}")]
    Malformed(String),
    /// The storage engine failed.
    #[error("metadata storage failed: {0}")]
    Storage(String),
    /// The metadata plane cannot take commands (shutting down, no quorum).
    #[error("the metadata plane is unavailable: {0}")]
    Unavailable(String),
}

pub(crate) fn storage(error: impl std::fmt::Display) -> MetadataError {
    MetadataError::Storage(error.to_string())
}
