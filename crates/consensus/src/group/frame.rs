//! What the members of a VSR group send each other over the cluster transport: a
//! [`GroupFrame`] names its group, so one connection between two nodes carries the frames of
//! every group they share (the metadata plane's and, later, each partition's).

use crate::checkpoint::Checkpoint;
use crate::message::{Entry, Message, Reply, Request};
use serde::{Deserialize, Serialize};

/// Which VSR group a frame belongs to. Each plane names its own (the metadata plane's is
/// `tessera_metadata::METADATA_GROUP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GroupId(pub u64);

impl std::fmt::Display for GroupId {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "group {}", self.0)
    }
}

/// One frame of a group, as it crosses the network.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupFrame {
    /// The group it belongs to.
    pub group: GroupId,
    /// What it says.
    pub message: GroupMessage,
}

/// What one member of a group says to another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupMessage {
    /// A VSR protocol message between voters.
    Replica(Message),
    /// An operation submitted on `origin`, sent to every voter (only the primary acts on it;
    /// the others drop it).
    Submit {
        /// The node to send the reply to.
        origin: String,
        /// The request, with the submitting node's session and number.
        request: Request,
    },
    /// The primary's answer to a submitted request.
    Reply(Reply),
    /// A non-voting member asks a voter for the committed entries after op `after`.
    Follow {
        /// The last op the member applied.
        after: u64,
    },
    /// A voter's answer to [`GroupMessage::Follow`]: committed entries in op order (none if
    /// the member is up to date), and the voter's view, so the member knows the primary.
    Entries {
        /// The voter's view.
        view: u64,
        /// The voter's commit number.
        commit: u64,
        /// Committed entries following the member's op.
        entries: Vec<Entry>,
    },
    /// A voter's answer to [`GroupMessage::Follow`] when the entries the member needs were
    /// trimmed: its latest checkpoint, from which the member goes on.
    Checkpoint {
        /// The voter's view.
        view: u64,
        /// The checkpoint.
        checkpoint: Checkpoint,
    },
}
