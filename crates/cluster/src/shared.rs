//! What every task of one transport shares: the config and identity, the pending requests,
//! the application's inbound queue and the peer table, with each peer's link (what `send`
//! and the peer's task share). The tasks (`accept`, `peer`, `connection`) and the handle
//! (`transport`) all sit above this file; it imports none of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::config::TransportConfig;
use super::frame::Connection;
use super::handshake::Hello;
use super::peer_address::PeerAddress;
use super::quarantine::Quarantine;
use super::request::{Incoming, PendingRequests};
use super::send_queue::FrameSender;
use super::stats::TransportStats;
use super::tls::TlsIdentity;
use tessera_contract::NodeId;

/// What every task of one transport shares.
pub(crate) struct Shared<M> {
    pub config: TransportConfig,
    pub identity: TlsIdentity,
    pub hello: Hello,
    pub stats: Arc<TransportStats>,
    pub pending: PendingRequests<M>,
    /// Taken on close, so `Inbound::recv` ends once the tasks are gone.
    pub inbound: Mutex<Option<mpsc::Sender<Incoming<M>>>>,
    pub peers: Mutex<HashMap<NodeId, PeerEntry>>,
    /// Incarnations of removed peers, refused at the handshake.
    pub quarantine: Mutex<Quarantine>,
    pub closed: AtomicBool,
}

/// One peer in the table: its link, the way to hand it an accepted connection, its task.
pub(crate) struct PeerEntry {
    pub link: Arc<PeerLink>,
    pub accepted: mpsc::Sender<Connection>,
    _task: AbortOnDrop,
}

impl PeerEntry {
    /// The entry of a peer whose task is `task` (aborted when the entry drops).
    pub fn new(link: Arc<PeerLink>, accepted: mpsc::Sender<Connection>, task: AbortOnDrop) -> Self {
        PeerEntry {
            link,
            accepted,
            _task: task,
        }
    }
}

/// The most peers one transport holds.
pub const PEERS_MAX: usize = 256;

/// Which end of the pair's one connection this node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// This node's id is the smaller: it dials.
    Dialer,
    /// The peer's id is the smaller: it dials us.
    Acceptor,
}

/// What `send` and the peer's task share about one peer.
pub(crate) struct PeerLink {
    pub node_id: NodeId,
    pub role: Role,
    pub address: Mutex<PeerAddress>,
    pub queue: FrameSender,
    /// Set once the peer has been down longer than `peer_down_drop_after`.
    pub unreachable: AtomicBool,
    /// The incarnation of the peer's latest connection (0 before the first).
    pub incarnation: AtomicU64,
    /// When the peer's last connection was lost, while it is not back (`None` while connected
    /// and before the first connection).
    pub lost_at: Mutex<Option<tokio::time::Instant>>,
}

/// Aborts the task when dropped, so removing a peer or dropping the transport stops it.
pub(crate) struct AbortOnDrop(pub JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Locks a mutex whose data stays consistent even if a holder panicked (every critical
/// section here is a single map or value update).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
