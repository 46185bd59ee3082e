//! What nodes say to each other: [`PeerMessage`], the one message type of a node's cluster
//! transport (the mesh). Who may send each kind is `authority.rs`'s to judge.

use super::query_data::{PeerAnswer, PeerQuery};
use serde::{Deserialize, Serialize};
use tessera_consensus::group::GroupFrame;
use tessera_sharding::{CoordinatorCommand, LinkMessage};

/// One frame between two nodes: what the cluster transport of a node carries. Each kind is
/// accepted only from the node the committed catalog says may send it (see `docs/cluster.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerMessage {
    /// A frame of a VSR group: today the metadata plane's
    /// ([`METADATA_GROUP`](tessera_metadata::METADATA_GROUP)), the only group a node runs.
    Group(GroupFrame),
    /// To the receiver's region.
    Region(LinkMessage),
    /// To the shard coordinator, which runs on the metadata primary.
    Coordinator(CoordinatorCommand),
    /// The sender's metadata commit number, sent to every peer each
    /// [`PROGRESS_EVERY`](tessera_cluster::detector::PROGRESS_EVERY), so
    /// the cluster view can show how far each member trails.
    Progress {
        /// Catalog commands the sender has applied.
        commit: u64,
    },
    /// A request, from the node that took a deploy, to hold the plugin blob `sha256` before
    /// its version is committed: the receiver fetches it from the sender ([`PeerMessage::BlobRead`])
    /// unless it holds it, and answers [`PeerMessage::BlobHeld`] or [`PeerMessage::BlobMissing`].
    BlobHold {
        /// The blob's hex SHA-256.
        sha256: String,
        /// Its size.
        size_bytes: u64,
    },
    /// A request for one chunk of a blob (see `blob_transfer.rs`); answered
    /// [`PeerMessage::BlobChunk`] or [`PeerMessage::BlobMissing`].
    BlobRead {
        /// The blob's hex SHA-256.
        sha256: String,
        /// The chunk's index (chunks of [`BLOB_CHUNK_BYTES`](tessera_metadata::BLOB_CHUNK_BYTES)).
        chunk: u32,
    },
    /// The answer to a [`PeerMessage::BlobRead`]: one chunk, checked by the reader's hash of
    /// the whole blob.
    BlobChunk {
        /// The blob's hex SHA-256.
        sha256: String,
        /// The chunk's index.
        chunk: u32,
        /// The whole blob's size.
        size_bytes: u64,
        /// At most `BLOB_CHUNK_BYTES` bytes.
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
    /// The answer to a [`PeerMessage::BlobHold`]: the sender holds the blob now.
    BlobHeld {
        /// The blob's hex SHA-256.
        sha256: String,
    },
    /// The answer to a blob request the sender could not serve.
    BlobMissing {
        /// The blob's hex SHA-256.
        sha256: String,
        /// Why.
        why: String,
    },
    /// A question about the receiver's own part of the cluster (see `queries.rs`), sent as a
    /// request and answered [`PeerMessage::Answer`].
    Query(PeerQuery),
    /// The answer to a [`PeerMessage::Query`].
    Answer(PeerAnswer),
}
