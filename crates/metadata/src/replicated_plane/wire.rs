//! What metadata-plane nodes send each other over the cluster transport.

use serde::{Deserialize, Serialize};
use tessera_consensus::checkpoint::Checkpoint;
use tessera_consensus::message::{Entry, Message, Reply, Request};

/// One frame of the metadata plane.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlaneMessage {
    /// A VSR protocol message between voters.
    Replica(Message),
    /// A catalog command submitted on `origin`, sent to every voter (only the primary acts
    /// on it; the others drop it).
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
    /// A voter's answer to [`PlaneMessage::Follow`]: committed entries in op order (none if
    /// the member is up to date), and the voter's view, so the member knows the primary.
    Entries {
        /// The voter's view.
        view: u64,
        /// The voter's commit number.
        commit: u64,
        /// Committed entries following the member's op.
        entries: Vec<Entry>,
    },
    /// A voter's answer to [`PlaneMessage::Follow`] when the entries the member needs were
    /// trimmed: its latest checkpoint, from which the member goes on.
    Checkpoint {
        /// The voter's view.
        view: u64,
        /// The checkpoint.
        checkpoint: Checkpoint,
    },
}
