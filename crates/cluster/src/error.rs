//! What the transport's operations fail with: [`TransportError`] for starting it and changing
//! its peers, [`SendError`] for a one-way send or a reply, [`RequestError`] for a request.

use thiserror::Error;

use super::config::ConfigError;
use super::frame::FrameError;
use super::node_name::NodeIdError;

/// Starting the transport, or changing its peer table, failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The config has a bound the transport cannot run with.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The listen address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: std::net::SocketAddr,
        /// The failure.
        source: std::io::Error,
    },
    /// A node id is not a valid one.
    #[error(transparent)]
    NodeId(#[from] NodeIdError),
    /// A node cannot be its own peer.
    #[error("node {0:?} cannot be its own peer")]
    SelfPeer(String),
    /// The transport is closed.
    #[error("the transport is closed")]
    Closed,
    /// The peer table is full.
    #[error("the transport holds {0} peers already")]
    TooManyPeers(usize),
}

/// A message was not queued for sending. Nothing was sent; the caller decides whether to
/// retry.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SendError {
    /// The node is not in the peer table.
    #[error("unknown peer {0:?}")]
    UnknownPeer(String),
    /// The peer's send queue is full; the drop is counted.
    #[error("the send queue to {0:?} is full")]
    QueueFull(String),
    /// The peer has been unreachable longer than `peer_down_drop_after`; the drop is counted.
    #[error("peer {0:?} is down")]
    PeerDown(String),
    /// The message could not be encoded, or is larger than `max_frame_bytes`.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The transport is closed, or the peer was removed.
    #[error("the transport is closed")]
    Closed,
}

/// A request got no reply.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The request could not be sent.
    #[error(transparent)]
    Send(#[from] SendError),
    /// Too many requests are awaiting replies; the refusal is counted.
    #[error("too many pending requests")]
    TooManyPending,
    /// No reply came within the timeout; counted.
    #[error("no reply within the timeout")]
    TimedOut,
    /// The transport closed before the reply came.
    #[error("the transport closed before the reply came")]
    Closed,
}
