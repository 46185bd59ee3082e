//! The node's connections to the other nodes of its cluster: one [`Transport`] carrying every
//! kind of [`PeerMessage`] (`peer_message.rs`) — the metadata plane's, the regions' link messages and commands to
//! the shard coordinator. What peers send is judged and handed to its owner in `dispatch.rs`.
//! The mesh is the switchboard's way to other processes ([`RemoteLinks`]): a region or
//! coordinator never knows whether the one it talks to is in this process. Peers come from the
//! config's seeds and, as members commit, from the catalog; a removed member's process is
//! refused from then on (its transport incarnation is quarantined).

use super::authority::Kind;
use super::peer_message::PeerMessage;
use crate::node::metric_families::{Kind as MetricKind, Sample, Snapshot};
use crate::node::{ClusterConfig, NodeError};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};
use tessera_cluster::detector::{PROGRESS_EVERY, PhiDetector};
use tessera_cluster::handshake::ShardLayout;
use tessera_cluster::{
    Direction, Inbound, PeerAddress, SendError, Transport, TransportConfig, TransportStatsSnapshot,
    load_identity,
};
use tessera_consensus::group::{
    GROUP_INBOUND_MAX, GroupFrame, GroupInbound, GroupOutbox, GroupRouter,
};
use tessera_contract::NodeId;
use tessera_metadata::{MemberRecord, MemberState};
use tessera_sharding::link::{LOST_OWNER_GRACE, LinkError, Refused};
use tessera_sharding::{
    CoordinatorCommand, FORWARD_BATCH_BYTES_MAX, LinkMessage, Membership, RemoteLinks,
    STATE_READ_BYTES_MAX,
};
use tessera_state::SHARD_PART_BYTES_MAX;
use tokio::sync::mpsc;

/// How long sends to a peer that stays disconnected are queued before they fail at once
/// (and asks routed to it answer `unavailable` instead of waiting out their deadline).
const PEER_DOWN_FAIL_AFTER: Duration = Duration::from_secs(3);

/// Largest frame between nodes: room for the largest shard state read (twice over, asserted
/// below). Plugin bytes never cross in one frame: they travel in chunks of
/// [`BLOB_CHUNK_BYTES`](tessera_metadata::BLOB_CHUNK_BYTES) (`blob_transfer.rs`).
const MESH_FRAME_BYTES_MAX: usize = 80 << 20;

// A blob chunk (with its envelope) is far below the frame limit.
const _: () = assert!(4 * tessera_metadata::BLOB_CHUNK_BYTES <= MESH_FRAME_BYTES_MAX);

/// Bytes of frames queued for one peer: room for the largest frame with as much again queued
/// before it. Past it a send fails at once (`QueueFull`, counted as
/// `send_queue_full`), and what waits on it is answered `unavailable`.
const MESH_SEND_QUEUE_BYTES_MAX: usize = 2 * MESH_FRAME_BYTES_MAX;

// A forwarding batch, and the answer to a state read, cross in one frame each: bounded well
// below the frame limit, they always fit, whatever else a tenant sends.
const _: () = assert!(4 * FORWARD_BATCH_BYTES_MAX <= MESH_FRAME_BYTES_MAX);
const _: () = assert!(2 * STATE_READ_BYTES_MAX <= MESH_FRAME_BYTES_MAX);
// So does a part of a shard's state in transit (a handoff), whatever the shard's size.
const _: () = assert!(4 * SHARD_PART_BYTES_MAX <= MESH_FRAME_BYTES_MAX);

/// How often the coordinator's membership view is brought in step with reachability.
pub(crate) const REACHABILITY_EVERY: Duration = Duration::from_millis(500);

/// What the mesh dropped, by reason.
#[derive(Debug, Default)]
pub(crate) struct MeshCounters {
    /// Messages refused because their sender may not send them, or the committed catalog
    /// does not vouch for what they claim, by [`Kind`] (`Kind::index`).
    pub(crate) unauthorized: [AtomicU64; Kind::ALL.len()],
    /// Messages waiting for the catalog to vouch for them, dropped because too many waited.
    pub(crate) hold_full: AtomicU64,
    /// Region messages dropped because this node's region could not take them.
    pub(crate) region_dropped: AtomicU64,
    /// Coordinator commands that reached a node not running the coordinator (or whose
    /// coordinator could not take them).
    pub(crate) coordinator_misdirected: AtomicU64,
}

/// The node's side of the cluster transport.
pub(crate) struct Mesh {
    pub(super) node: NodeId,
    /// The metadata plane's voters: a non-voting member dials them (they cannot know its
    /// address before it joins); among voters, or among the others, the smaller id dials.
    pub(super) voters: Vec<NodeId>,
    transport: Transport<PeerMessage>,
    /// The metadata primary as this node last saw it: where coordinator commands go.
    primary: RwLock<Option<NodeId>>,
    /// Each peer's metadata commit number, as it last told this node (peers only: bounded by
    /// the transport's peer table).
    progress: RwLock<HashMap<NodeId, u64>>,
    /// Judges each peer by the rhythm of its progress reports.
    detector: RwLock<PhiDetector>,
    pub(crate) counters: MeshCounters,
    /// Where group frames go: the metadata plane's queue, and parking for partitions' groups
    /// not running here yet.
    pub(crate) groups: GroupRouter,
}

impl Mesh {
    /// Loads this node's certificate, binds the cluster listener and adds every seed as a
    /// peer; peers that place entity state another way than `layout` are refused. Returns
    /// the mesh and what it received, for [`Mesh::dispatch`].
    pub(crate) async fn start(
        node: &str,
        config: &ClusterConfig,
        layout: ShardLayout,
    ) -> Result<(Arc<Mesh>, Inbound<PeerMessage>), NodeError> {
        let identity = load_identity(&config.certs_dir, node).map_err(|error| {
            NodeError::Config(format!(
                "cluster certificate of {node} in {}: {error} (create it with `tessera certs create`)",
                config.certs_dir.display()
            ))
        })?;
        let mut transport_config = TransportConfig::new(config.id.clone(), config.listen);
        transport_config.peer_down_drop_after = PEER_DOWN_FAIL_AFTER;
        // Voters take joining members that dial them before the catalog names them.
        transport_config.admit_unknown_peers = config.voters.iter().any(|voter| voter == node);
        transport_config.max_frame_bytes = MESH_FRAME_BYTES_MAX;
        transport_config.send_queue_bytes_max = MESH_SEND_QUEUE_BYTES_MAX;
        transport_config.layout = layout;
        let (transport, inbound) = Transport::start(transport_config, identity)
            .await
            .map_err(|error| NodeError::Config(format!("cluster transport: {error}")))?;
        let mesh = Arc::new(Mesh {
            node: node.to_string(),
            voters: config.voters.clone(),
            transport,
            primary: RwLock::new(None),
            progress: RwLock::default(),
            detector: RwLock::default(),
            counters: MeshCounters::default(),
            groups: GroupRouter::default(),
        });
        for (peer, address) in &config.seeds {
            mesh.add_peer(peer, address.clone());
        }
        Ok((mesh, inbound))
    }

    /// The address the cluster listener is bound to.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.transport.local_addr()
    }

    fn add_peer(&self, peer: &str, address: PeerAddress) {
        if peer == self.node {
            return;
        }
        let voter = |node: &str| self.voters.iter().any(|voter| voter == node);
        let direction = match (voter(&self.node), voter(peer)) {
            (true, false) => Direction::Accept,
            (false, true) => Direction::Dial,
            _ => Direction::ByNodeId,
        };
        if let Err(error) = self
            .transport
            .add_peer_with(peer, address.clone(), direction)
        {
            tracing::warn!(%peer, %address, %error, "peer not added");
        }
    }

    /// Follows a committed member: dials it at its cluster address, or, once it is removed,
    /// forgets it and refuses the process that was it (a restart of the node may join again).
    pub(crate) fn show_member(&self, member: &MemberRecord) {
        if member.node == self.node {
            return;
        }
        if member.state == MemberState::Removed {
            // A voter stays a peer: the voters are configuration, and the plane needs it.
            if !self.voters.contains(&member.node) {
                self.transport.quarantine_peer(&member.node);
            }
            return;
        }
        match member.cluster_address.parse::<PeerAddress>() {
            Ok(address) => self.add_peer(&member.node, address),
            Err(_) if member.cluster_address.is_empty() => {}
            Err(error) => {
                tracing::warn!(node = %member.node, address = %member.cluster_address, %error, "member has no usable cluster address");
            }
        }
    }

    /// Peers this node cannot reach now: suspected by the failure detector (silent for longer
    /// than their rhythm of progress reports explains), or disconnected longer than the
    /// peer-down grace. Sorted.
    pub(crate) fn unreachable(&self) -> Vec<NodeId> {
        let peers = self.transport.peers();
        let now = Instant::now();
        let mut unreachable = self.transport.unreachable_peers();
        {
            let mut detector = write(&self.detector);
            detector.retain(&peers);
            unreachable.extend(
                peers
                    .iter()
                    .filter(|peer| detector.suspects(peer, now))
                    .cloned(),
            );
        }
        unreachable.sort();
        unreachable.dedup();
        unreachable
    }

    /// Notes the metadata primary (coordinator commands go there).
    pub(crate) fn set_primary(&self, primary: Option<NodeId>) {
        *self.primary.write().unwrap_or_else(|p| p.into_inner()) = primary;
    }

    fn primary(&self) -> Option<NodeId> {
        self.primary
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Notes `from`'s commit number, and its report as a heartbeat for the failure detector
    /// (peers only: bounded by the transport's peer table).
    pub(super) fn note_progress(&self, from: NodeId, commit: u64, now: Instant) {
        if self.transport.peers().contains(&from) {
            write(&self.detector).report(&from, now);
            write(&self.progress).insert(from, commit);
        }
    }

    /// Tells every peer this node's commit number each [`PROGRESS_EVERY`], until the mesh or
    /// the plane is gone.
    pub(crate) async fn send_progress(
        self: Arc<Mesh>,
        mut status: tokio::sync::watch::Receiver<tessera_metadata::PlaneStatus>,
    ) {
        let weak = Arc::downgrade(&self);
        drop(self);
        let mut every = tokio::time::interval(PROGRESS_EVERY);
        loop {
            every.tick().await;
            let Some(mesh) = weak.upgrade() else { return };
            if status.has_changed().is_err() {
                return; // the plane stopped
            }
            let commit = status.borrow_and_update().commit;
            for peer in mesh.transport.peers() {
                let _ = mesh
                    .transport
                    .send(&peer, &PeerMessage::Progress { commit });
            }
        }
    }

    /// Keeps the coordinator's membership view in step with reachability every
    /// [`REACHABILITY_EVERY`]: an unreachable member owns no new shards (and a shard it owns is
    /// answered `unavailable` at once) until it is trusted again. Ends with the mesh or the view.
    pub(crate) async fn show_reachability(self: Arc<Mesh>, membership: Weak<Membership>) {
        let weak = Arc::downgrade(&self);
        drop(self);
        let mut every = tokio::time::interval(REACHABILITY_EVERY);
        loop {
            every.tick().await;
            let (Some(mesh), Some(membership)) = (weak.upgrade(), membership.upgrade()) else {
                return;
            };
            let unreachable = mesh.unreachable();
            for member in membership.snapshot().members() {
                let suspected = unreachable.contains(&member.node);
                if suspected == member.reachable {
                    tracing::info!(node = %member.node, unreachable = suspected, "member reachability changed");
                    membership.set_unreachable(&member.node, suspected);
                }
            }
        }
    }

    /// Each peer's commit number as it last said, by node (forgotten peers dropped).
    pub(crate) fn progress(&self) -> HashMap<NodeId, u64> {
        let peers = self.transport.peers();
        let mut progress = write(&self.progress);
        progress.retain(|node, _| peers.contains(node));
        progress.clone()
    }

    /// Sends `message` to `peer` as a request and waits up to `timeout` for its answer.
    pub(crate) async fn request(
        &self,
        peer: &str,
        message: &PeerMessage,
        timeout: Duration,
    ) -> Result<PeerMessage, tessera_cluster::RequestError> {
        self.transport.request(peer, message, timeout).await
    }

    /// Closes every connection (the node is stopping).
    pub(crate) fn close(&self) {
        self.transport.close();
    }
}

/// The plane's inbound queue, to hand to [`Mesh::dispatch`] and the plane.
pub(crate) fn plane_queue() -> (mpsc::Sender<(String, GroupFrame)>, GroupInbound) {
    mpsc::channel(GROUP_INBOUND_MAX)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn link_error(peer: &str, error: &SendError) -> LinkError {
    match error {
        SendError::QueueFull(_) => LinkError::Full(peer.to_string()),
        _ => LinkError::Unreachable(format!("{peer} ({error})")),
    }
}

impl GroupOutbox for Mesh {
    fn send(&self, to: &str, frame: GroupFrame) {
        let _ = self.transport.send(to, &PeerMessage::Group(frame));
    }
}

impl RemoteLinks for Mesh {
    fn send_to_region(&self, node: &str, message: LinkMessage) -> Result<(), Box<Refused>> {
        // A peer the failure detector suspects, or whose connection has been lost for
        // LOST_OWNER_GRACE, is not sent to: what waits on it would only time out (or, queued,
        // reach it much later), where the sender can answer now.
        let lost = self
            .transport
            .lost_for(node)
            .is_some_and(|lost_for| lost_for >= LOST_OWNER_GRACE);
        if lost || write(&self.detector).suspects(node, Instant::now()) {
            return Err(Box::new((
                LinkError::Unreachable(node.to_string()),
                message,
            )));
        }
        let frame = PeerMessage::Region(message);
        match self.transport.send(node, &frame) {
            Ok(()) => Ok(()),
            Err(error) => {
                let PeerMessage::Region(message) = frame else {
                    unreachable!("the frame was built as a region message above");
                };
                Err(Box::new((link_error(node, &error), message)))
            }
        }
    }

    fn send_to_coordinator(&self, command: CoordinatorCommand) -> Result<(), LinkError> {
        let Some(primary) = self.primary() else {
            return Err(LinkError::Unreachable(
                "the coordinator (the metadata plane has no primary now)".into(),
            ));
        };
        if primary == self.node {
            // This node is the primary but its coordinator has not started yet.
            return Err(LinkError::Unreachable(
                "the coordinator (starting on this node)".into(),
            ));
        }
        self.transport
            .send(&primary, &PeerMessage::Coordinator(command))
            .map_err(|error| link_error(&primary, &error))
    }

    fn regions(&self) -> Vec<NodeId> {
        self.transport.peers()
    }

    fn regions_lost_for(&self, at_least: Duration) -> Vec<NodeId> {
        self.transport.peers_lost_for(at_least)
    }
}

/// A counter family of one label: name, help, label name, and a value per label value.
type CounterFamily = (
    &'static str,
    &'static str,
    &'static str,
    Vec<(&'static str, u64)>,
);

impl Mesh {
    /// `tessera_peer_dropped`'s values by reason.
    fn dropped(&self, stats: &TransportStatsSnapshot) -> Vec<(&'static str, u64)> {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let groups = self.groups.stats();
        let mut dropped = vec![
            ("send_queue_full", stats.send_dropped_queue_full),
            ("peer_down", stats.send_dropped_peer_down),
            ("inbound_full", stats.inbound_dropped_full),
            ("group_queue_full", groups.queue_full),
            ("group_parking_full", groups.parked_dropped),
            ("group_parked_discarded", groups.parked_discarded),
            ("region_refused", load(&self.counters.region_dropped)),
            (
                "coordinator_misdirected",
                load(&self.counters.coordinator_misdirected),
            ),
            ("hold_full", load(&self.counters.hold_full)),
        ];
        for kind in Kind::ALL {
            let refused = load(&self.counters.unauthorized[kind.index()]);
            dropped.push((kind.refusal_label(), refused));
        }
        dropped
    }

    /// The transport's and the mesh's counters, for `/metrics` (every label listed, zeros
    /// included).
    pub(in crate::node) fn snapshot(&self, snapshot: &mut Snapshot) {
        let stats = self.transport.stats();
        let families: [CounterFamily; 5] = [
            (
                "tessera_peer_frames",
                "Frames exchanged with other nodes.",
                "direction",
                vec![
                    ("sent", stats.frames_sent),
                    ("received", stats.frames_received),
                ],
            ),
            (
                "tessera_peer_bytes",
                "Bytes of frames exchanged with other nodes.",
                "direction",
                vec![
                    ("sent", stats.bytes_sent),
                    ("received", stats.bytes_received),
                ],
            ),
            (
                "tessera_peer_dropped",
                "Messages between nodes dropped, by reason; unauthorized_<kind>: the sender may \
                 not send it, or the committed catalog does not vouch for what it claims.",
                "reason",
                self.dropped(&stats),
            ),
            (
                "tessera_peer_connection_events",
                "Connection events with other nodes.",
                "event",
                vec![
                    ("established", stats.connections_established),
                    ("ended", stats.connections_ended),
                    ("reconnect", stats.reconnects),
                    ("dial_failure", stats.dial_failures),
                    ("accept_busy", stats.accepts_dropped_busy),
                ],
            ),
            (
                "tessera_peer_refused",
                "Connections and frames refused from peers, by reason; a peer that sent bad \
                 input is disconnected.",
                "reason",
                vec![
                    ("bad_magic", stats.refusals.bad_magic),
                    ("wrong_version", stats.refusals.wrong_version),
                    ("wrong_cluster", stats.refusals.wrong_cluster),
                    ("wrong_layout", stats.refusals.wrong_layout),
                    ("node_id_mismatch", stats.refusals.node_id_mismatch),
                    ("tls_failure", stats.refusals.tls_failure),
                    ("unknown_peer", stats.refusals.unknown_peer),
                    ("wrong_direction", stats.refusals.wrong_direction),
                    ("bad_hello", stats.refusals.bad_hello),
                    ("removed", stats.refusals.removed),
                    ("malformed_frame", stats.malformed_frames),
                    ("oversized_frame", stats.oversized_frames),
                    ("refused_by_peer", stats.refused_by_peer),
                ],
            ),
        ];
        for (name, help, label, values) in families {
            let family = snapshot.family(name, help, MetricKind::Counter);
            for (value_label, value) in values {
                family.push(Sample::counter(
                    vec![(label, value_label.to_string())],
                    value,
                ));
            }
        }
        snapshot
            .family(
                "tessera_peers_disconnected_bad_input",
                "Peers disconnected for a malformed or oversized frame.",
                MetricKind::Counter,
            )
            .push(Sample::counter(
                Vec::new(),
                stats.peers_disconnected_bad_input,
            ));
    }
}
