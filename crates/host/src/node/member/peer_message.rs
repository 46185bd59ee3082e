//! What nodes say to each other: [`PeerMessage`], the one message type of a node's cluster
//! transport (the mesh). Who may send each kind is `authority.rs`'s to judge.

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
}
