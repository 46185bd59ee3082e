//! What a node operation can fail with: the node's own refusals, and each lower layer's error
//! kept whole (`From` each), so the edge can answer with the right status and code.

use tessera_contract::MessageError;
use tessera_metadata::MetadataError;
use tessera_runtime::LoadError;
use tessera_sharding::{ConfigError, CoordinatorError};
use tessera_state::StoreError;

/// Why a node operation failed. Nothing changed when one is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// No or an unknown token.
    #[error("missing or unknown token")]
    Unauthorized,
    /// The token is valid but may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// The named thing does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// The request conflicts with what the node holds (a restore into a type that has
    /// versions already).
    #[error("{0}")]
    Conflict(String),
    /// A body or upload is over its limit.
    #[error("{0}")]
    TooLarge(String),
    /// A tenant quota refused the request.
    #[error("{0}")]
    Quota(String),
    /// The node's configuration is unusable.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The data directory could not be prepared.
    #[error("cannot use the data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The wasm engine could not start.
    #[error("the wasm engine could not start: {0}")]
    Engine(String),
    /// The uploaded plugin is unusable.
    #[error(transparent)]
    BadPlugin(#[from] LoadError),
    /// The catalog refused or failed a command or read.
    #[error(transparent)]
    Catalog(#[from] MetadataError),
    /// A graceful leave could not hand every shard off, or move every partition replica
    /// away, in time; the member stays `leaving`.
    #[error(
        "the leave did not finish within {waited_ms} ms: the catalog still gives this node \
         {owned} shard(s) and {replicas} partition replica(s) (placed or still moving away), \
         and it serves {held} shard(s); it stays leaving (restart it to go on leaving, or \
         `tessera cluster up` it)"
    )]
    LeaveIncomplete {
        /// Shards the committed table still gives this node.
        owned: usize,
        /// Shards its region still serves or hands off.
        held: usize,
        /// Partitions whose placement still names this node: a replica, or a move away from
        /// it that has not settled.
        replicas: usize,
        /// How long the leave waited.
        waited_ms: u64,
    },
    /// Entity state storage failed.
    #[error(transparent)]
    Storage(#[from] StoreError),
    /// The sharding configuration was refused.
    #[error(transparent)]
    Sharding(#[from] ConfigError),
    /// The shard coordinator failed.
    #[error(transparent)]
    Coordinator(#[from] CoordinatorError),
    /// A message to an entity failed.
    #[error(transparent)]
    Message(#[from] MessageError),
}
