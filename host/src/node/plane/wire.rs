//! What metadata-plane nodes send each other over the cluster transport.

use crate::consensus::message::{Message, Reply, Request};
use serde::{Deserialize, Serialize};

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
}
