//! The transport's handle: [`Transport::start`] binds the listener and returns the handle
//! and the application's [`Inbound`] queue; peers are added and removed by node id. One task
//! per peer owns that peer's connection (`peer`), the accept loop hands it connections the
//! peer dialed (`accept`), and `connection` reads and writes frames. Between two nodes the
//! one with the smaller node id (byte order) dials and the other accepts, so each pair
//! shares exactly one connection and both send over it. What the tasks share is in
//! `shared`, below all of them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::accept::accept_loop;
use super::config::TransportConfig;
use super::error::{RequestError, SendError, TransportError};
use super::frame::{self, Envelope};
use super::handshake::Hello;
use super::node_name::validate_node_id;
use super::peer::insert_peer;
use super::peer_address::PeerAddress;
use super::quarantine::REMOVED_PEER_LINGER;
use super::request::{Inbound, PendingRequests, enqueue};
use super::shared::{AbortOnDrop, PEERS_MAX, Role, Shared, lock};
use super::stats::{TransportStatsSnapshot, bump};
use super::tls::TlsIdentity;
use tessera_contract::NodeId;

/// The node-to-node transport, generic over the application's message type. Dropping it
/// (or [`close`](Transport::close)) stops every task and connection. Share it in an `Arc`.
///
/// ```no_run
/// use std::time::Duration;
/// use tessera_cluster::{PeerAddress, Transport, TransportConfig, create_dev_cluster, load_identity};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let certs = tempfile::tempdir()?;
/// create_dev_cluster(certs.path(), &["node-1", "node-2"])?;
/// let config = TransportConfig::new("dev", "127.0.0.1:7100".parse()?);
/// let (transport, mut inbound) =
///     Transport::<String>::start(config, load_identity(certs.path(), "node-1")?).await?;
/// // A socket address, or a DNS name resolved again at every dial.
/// transport.add_peer("node-2", "node-2.tessera.internal:7100".parse::<PeerAddress>()?)?;
/// transport.send("node-2", &"hello".to_owned())?;
/// let answer = transport.request("node-2", &"ping".to_owned(), Duration::from_secs(1)).await?;
/// while let Some(incoming) = inbound.recv().await {
///     println!("{} says {}", incoming.from, incoming.message);
/// }
/// # Ok(()) }
/// ```
pub struct Transport<M> {
    shared: Arc<Shared<M>>,
    local_addr: SocketAddr,
    accept_task: AbortOnDrop,
}

/// Which end of a pair dials (see [`Transport::add_peer_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The end with the smaller node id dials.
    ByNodeId,
    /// This end dials.
    Dial,
    /// The peer dials this end.
    Accept,
}

impl<M> Transport<M>
where
    M: Serialize + DeserializeOwned + Send + 'static,
{
    /// Checks the config, binds `config.listen_addr` and starts accepting. The node id is
    /// the identity's.
    pub async fn start(
        config: TransportConfig,
        identity: TlsIdentity,
    ) -> Result<(Transport<M>, Inbound<M>), TransportError> {
        config.validate()?;
        validate_node_id(identity.node_id())?;
        let listener = TcpListener::bind(config.listen_addr)
            .await
            .map_err(|source| TransportError::Bind {
                address: config.listen_addr,
                source,
            })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| TransportError::Bind {
                address: config.listen_addr,
                source,
            })?;
        let (inbound_sender, receiver) = mpsc::channel(config.inbound_queue_max);
        let shared = Arc::new(Shared {
            hello: Hello::new(&config.cluster_id, identity.node_id()).with_layout(config.layout),
            pending: PendingRequests::new(config.pending_requests_max),
            stats: Arc::default(),
            inbound: Mutex::new(Some(inbound_sender)),
            peers: Mutex::new(HashMap::new()),
            quarantine: Mutex::default(),
            closed: AtomicBool::new(false),
            config,
            identity,
        });
        let accept_task = AbortOnDrop(tokio::spawn(accept_loop(Arc::clone(&shared), listener)));
        Ok((
            Transport {
                shared,
                local_addr,
                accept_task,
            },
            Inbound { receiver },
        ))
    }

    /// The address the listener is bound to (the real port when the config said 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.shared.hello.node_id
    }

    /// Adds `node_id` at `address` (a socket address, or a [`PeerAddress`] whose DNS name is
    /// resolved again at every dial), or, if known, moves it there (from its next dial on; a
    /// live connection is kept). When this node's id is the smaller of the two it dials the
    /// peer, retrying with backoff; otherwise it waits for the peer to dial. Either way
    /// `send` queues at once.
    pub fn add_peer(
        &self,
        node_id: &str,
        address: impl Into<PeerAddress>,
    ) -> Result<(), TransportError> {
        self.add_peer_with(node_id, address, Direction::ByNodeId)
    }

    /// [`add_peer`](Self::add_peer), with which end dials said: by node id (both ends
    /// agree without talking), or this end always dials (`Dial`) or always waits (`Accept`),
    /// for pairs where one end cannot know the other's address in advance (a member joining
    /// through seeds dials them). Changing the direction of a known peer restarts its link.
    pub fn add_peer_with(
        &self,
        node_id: &str,
        address: impl Into<PeerAddress>,
        direction: Direction,
    ) -> Result<(), TransportError> {
        let address = address.into();
        validate_node_id(node_id)?;
        if node_id == self.node_id() {
            return Err(TransportError::SelfPeer(node_id.to_owned()));
        }
        let role = match direction {
            Direction::Dial => Role::Dialer,
            Direction::Accept => Role::Acceptor,
            Direction::ByNodeId if self.node_id() < node_id => Role::Dialer,
            Direction::ByNodeId => Role::Acceptor,
        };
        let mut peers = lock(&self.shared.peers);
        // Checked under the lock that `shut_down` takes after setting it: no peer is added
        // to a closed transport.
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(TransportError::Closed);
        }
        if let Some(entry) = peers.get(node_id)
            && entry.link.role == role
        {
            *lock(&entry.link.address) = address;
            return Ok(());
        }
        if !peers.contains_key(node_id) && peers.len() >= PEERS_MAX {
            return Err(TransportError::TooManyPeers(PEERS_MAX));
        }
        insert_peer(&self.shared, &mut peers, node_id, address, role);
        Ok(())
    }

    /// Removes `node_id`: its connection closes, its queued frames are dropped, it is no
    /// longer dialed, and its connections are refused. False if it was not a peer.
    pub fn remove_peer(&self, node_id: &str) -> bool {
        lock(&self.shared.peers).remove(node_id).is_some()
    }

    /// Removes `node_id` for good, as [`remove_peer`](Self::remove_peer) does, and refuses
    /// from now on the incarnation of it this transport last connected with (its cluster
    /// removed the member): that process's handshakes are refused with
    /// [`RefusalReason::Removed`](crate::RefusalReason::Removed), however the transport
    /// admits peers. A restarted process of the node is a new incarnation and is not refused.
    /// Its connection stays open for [`REMOVED_PEER_LINGER`], so what was queued for it is
    /// still written; nothing new is. False if it was not a peer.
    pub fn quarantine_peer(&self, node_id: &str) -> bool {
        let Some(entry) = lock(&self.shared.peers).remove(node_id) else {
            return false;
        };
        let incarnation = entry.link.incarnation.load(Ordering::Acquire);
        if incarnation != 0 {
            lock(&self.shared.quarantine).refuse(node_id, incarnation);
        }
        // Dropped after the linger (dropping an entry aborts its task), or now outside a
        // runtime.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(REMOVED_PEER_LINGER).await;
                drop(entry);
            });
        }
        true
    }

    /// The peers in the table.
    pub fn peers(&self) -> Vec<NodeId> {
        let mut peers: Vec<NodeId> = lock(&self.shared.peers).keys().cloned().collect();
        peers.sort();
        peers
    }

    /// Peers whose connection was lost at least `at_least` ago and is not back, sorted (a peer
    /// never connected yet is not among them). Whatever such a peer was sent and has not
    /// answered may never be answered.
    pub fn peers_lost_for(&self, at_least: Duration) -> Vec<NodeId> {
        let now = tokio::time::Instant::now();
        let mut peers: Vec<NodeId> = lock(&self.shared.peers)
            .iter()
            .filter(|(_, entry)| {
                lock(&entry.link.lost_at)
                    .is_some_and(|lost_at| now.saturating_duration_since(lost_at) >= at_least)
            })
            .map(|(node, _)| node.clone())
            .collect();
        peers.sort();
        peers
    }

    /// How long `peer`'s connection has been lost, if it was connected once and is not now.
    pub fn lost_for(&self, peer: &str) -> Option<Duration> {
        let now = tokio::time::Instant::now();
        let peers = lock(&self.shared.peers);
        let lost_at = (*lock(&peers.get(peer)?.link.lost_at))?;
        Some(now.saturating_duration_since(lost_at))
    }

    /// Peers that have stayed disconnected longer than `peer_down_drop_after` (sends to them
    /// fail at once until they are connected again), sorted.
    pub fn unreachable_peers(&self) -> Vec<NodeId> {
        let mut peers: Vec<NodeId> = lock(&self.shared.peers)
            .iter()
            .filter(|(_, entry)| entry.link.unreachable.load(Ordering::Acquire))
            .map(|(node, _)| node.clone())
            .collect();
        peers.sort();
        peers
    }

    /// Queues `message` for `peer` without waiting. Delivery is at most once: a frame queued
    /// or being written when a connection fails is lost.
    pub fn send(&self, peer: &str, message: &M) -> Result<(), SendError> {
        let body = frame::encode(
            &Envelope::Tell { message },
            self.shared.config.max_frame_bytes,
        )?;
        self.enqueue(peer, body)
    }

    /// Sends `message` to `peer` as a request and waits up to `timeout` for the reply. On
    /// timeout (or if the caller stops waiting) the request is forgotten; a late reply is
    /// counted and dropped.
    pub async fn request(
        &self,
        peer: &str,
        message: &M,
        timeout: Duration,
    ) -> Result<M, RequestError> {
        let Some((guard, reply)) = self.shared.pending.register(peer) else {
            bump(&self.shared.stats.requests_refused_pending_full);
            return Err(RequestError::TooManyPending);
        };
        let body = frame::encode(
            &Envelope::Request {
                id: guard.id,
                message,
            },
            self.shared.config.max_frame_bytes,
        )
        .map_err(SendError::from)?;
        self.enqueue(peer, body)?;
        match tokio::time::timeout(timeout, reply).await {
            Ok(Ok(message)) => Ok(message),
            Ok(Err(_)) => Err(RequestError::Closed),
            Err(_) => {
                bump(&self.shared.stats.requests_timed_out);
                Err(RequestError::TimedOut)
            }
        }
    }

    /// The counters now.
    pub fn stats(&self) -> TransportStatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// Stops accepting, closes every connection, drops every queued frame, fails every
    /// pending request, and ends `Inbound`. Also done on drop.
    pub fn close(&self) {
        self.shared.shut_down(&self.accept_task);
    }

    /// Requests awaiting replies.
    #[cfg(test)]
    pub(crate) fn pending_requests(&self) -> usize {
        self.shared.pending.len()
    }

    fn enqueue(&self, peer: &str, body: Bytes) -> Result<(), SendError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(SendError::Closed);
        }
        let link = lock(&self.shared.peers)
            .get(peer)
            .map(|entry| Arc::clone(&entry.link))
            .ok_or_else(|| SendError::UnknownPeer(peer.to_owned()))?;
        if link.unreachable.load(Ordering::Acquire) {
            bump(&self.shared.stats.send_dropped_peer_down);
            return Err(SendError::PeerDown(peer.to_owned()));
        }
        enqueue(&link.queue, peer, body, &self.shared.stats)
    }
}

impl<M> Drop for Transport<M> {
    fn drop(&mut self) {
        self.shared.shut_down(&self.accept_task);
    }
}

impl<M> Shared<M> {
    fn shut_down(&self, accept_task: &AbortOnDrop) {
        self.closed.store(true, Ordering::Release);
        accept_task.0.abort();
        // Dropped outside the lock: dropping an entry aborts its task.
        let peers = std::mem::take(&mut *lock(&self.peers));
        drop(peers);
        lock(&self.inbound).take();
        self.pending.clear();
    }
}
