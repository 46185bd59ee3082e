//! Backups: what a backup file holds and how it is framed (`format`), and the plan a node
//! answers a backup with ([`BackupPlan`]). The node's side — the catalog cut, a shard's
//! snapshot streamed as records, restoring each record — is in `node/backup.rs`; the `tessera
//! backup` and `tessera restore` commands that put them together are in `cli/backup.rs`; the
//! endpoints in `api/routes/backup.rs`. `docs/backup.md` describes the file and its guarantees.

mod format;
#[cfg(test)]
mod tests;

pub use format::{
    BackupError, FORMAT_VERSION, FrameReader, Header, MAGIC, RECORD_BYTES_MAX, Reader, Record,
    ShardRecord, Summary, Writer, encode_frame,
};

use serde::{Deserialize, Serialize};
use tessera_metadata::{Tenant, TypeRecord};

/// What a node answers `GET /v1/backup` with: the catalog at one commit (only the caller's
/// tenant's part for a tenant token) and where to fetch each shard from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupPlan {
    /// The node that answered.
    pub node: String,
    /// The catalog commit the plan was read at.
    pub commit: u64,
    /// Shards per entity type in this cluster.
    pub num_shards: u32,
    /// The tenant the plan is limited to (a tenant token), or `None` (the admin token).
    pub tenant: Option<String>,
    /// Tenants with their token hashes and quotas (empty for a tenant token).
    pub tenants: Vec<Tenant>,
    /// Types with every version.
    pub types: Vec<TypeRecord>,
    /// Every allocated shard of those types and its owner at the plan's commit.
    pub shards: Vec<PlannedShard>,
    /// Members that own shards, and where their API is.
    pub nodes: Vec<PlannedNode>,
}

/// One allocated shard in a [`BackupPlan`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedShard {
    /// The tenant.
    pub tenant: String,
    /// The entity type.
    pub entity_type: String,
    /// The shard.
    pub shard: u32,
    /// Its owner.
    pub node: String,
    /// Its allocation generation.
    pub generation: u64,
}

/// A member in a [`BackupPlan`]: its id and the `host:port` of its API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedNode {
    /// The node's id.
    pub node: String,
    /// Where its HTTP API listens.
    pub api_address: String,
}

/// What `POST /v1/restore/shards` answers: the part was installed here, or the shard is
/// owned by another node, where the client sends it instead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRestored {
    /// Whether this node installed the part.
    pub installed: bool,
    /// The shard's owner.
    pub owner: String,
    /// Where the owner's API is (when it is not this node).
    pub api_address: Option<String>,
}
