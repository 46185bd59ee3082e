//! The transport's counters: atomics bumped where things happen, read as one
//! [`TransportStatsSnapshot`]. Every drop, refusal and bad frame is counted here; the metrics
//! layer reads snapshots.

use std::sync::atomic::{AtomicU64, Ordering};

/// Why a handshake was refused (by this node, or by the peer when it told us).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum RefusalReason {
    /// The hello did not start with the Tessera magic: not a Tessera node.
    BadMagic,
    /// The peer speaks another protocol version.
    WrongVersion,
    /// The peer belongs to another cluster.
    WrongCluster,
    /// The peer places entity state another way: another shard count or partition count
    /// (`ShardLayout`).
    WrongLayout,
    /// The node id the peer claims is not the one its certificate names.
    NodeIdMismatch,
    /// The TLS handshake failed: no certificate, one from another CA, or not TLS at all.
    TlsFailure,
    /// The peer is not in this node's peer table.
    UnknownPeer,
    /// The peer dialed, but between these two nodes the other one dials.
    WrongDirection,
    /// The hello could not be decoded, or did not come in time.
    BadHello,
    /// The peer is the incarnation of a node its cluster removed (see
    /// `Transport::quarantine_peer`): a restarted process of it may connect, this one not.
    Removed,
}

/// The counters. Shared by every task of one transport.
#[derive(Debug, Default)]
pub(crate) struct TransportStats {
    pub frames_sent: AtomicU64,
    pub frames_received: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    pub send_dropped_queue_full: AtomicU64,
    pub send_dropped_peer_down: AtomicU64,
    pub inbound_dropped_full: AtomicU64,
    pub connections_established: AtomicU64,
    pub connections_ended: AtomicU64,
    pub reconnects: AtomicU64,
    pub dial_failures: AtomicU64,
    pub refusals: RefusalCounters,
    pub refused_by_peer: AtomicU64,
    pub accepts_dropped_busy: AtomicU64,
    pub malformed_frames: AtomicU64,
    pub oversized_frames: AtomicU64,
    pub peers_disconnected_bad_input: AtomicU64,
    pub requests_timed_out: AtomicU64,
    pub requests_refused_pending_full: AtomicU64,
    pub replies_unmatched: AtomicU64,
}

#[derive(Debug, Default)]
pub(crate) struct RefusalCounters {
    bad_magic: AtomicU64,
    wrong_version: AtomicU64,
    wrong_cluster: AtomicU64,
    wrong_layout: AtomicU64,
    node_id_mismatch: AtomicU64,
    tls_failure: AtomicU64,
    unknown_peer: AtomicU64,
    wrong_direction: AtomicU64,
    bad_hello: AtomicU64,
    removed: AtomicU64,
}

impl RefusalCounters {
    pub fn count(&self, reason: RefusalReason) {
        let counter = match reason {
            RefusalReason::BadMagic => &self.bad_magic,
            RefusalReason::WrongVersion => &self.wrong_version,
            RefusalReason::WrongCluster => &self.wrong_cluster,
            RefusalReason::WrongLayout => &self.wrong_layout,
            RefusalReason::NodeIdMismatch => &self.node_id_mismatch,
            RefusalReason::TlsFailure => &self.tls_failure,
            RefusalReason::UnknownPeer => &self.unknown_peer,
            RefusalReason::WrongDirection => &self.wrong_direction,
            RefusalReason::BadHello => &self.bad_hello,
            RefusalReason::Removed => &self.removed,
        };
        bump(counter);
    }

    fn snapshot(&self) -> RefusalCounts {
        RefusalCounts {
            bad_magic: read(&self.bad_magic),
            wrong_version: read(&self.wrong_version),
            wrong_cluster: read(&self.wrong_cluster),
            wrong_layout: read(&self.wrong_layout),
            node_id_mismatch: read(&self.node_id_mismatch),
            tls_failure: read(&self.tls_failure),
            unknown_peer: read(&self.unknown_peer),
            wrong_direction: read(&self.wrong_direction),
            bad_hello: read(&self.bad_hello),
            removed: read(&self.removed),
        }
    }
}

/// Handshakes this node refused, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RefusalCounts {
    /// See [`RefusalReason::BadMagic`].
    pub bad_magic: u64,
    /// See [`RefusalReason::WrongVersion`].
    pub wrong_version: u64,
    /// See [`RefusalReason::WrongCluster`].
    pub wrong_cluster: u64,
    /// See [`RefusalReason::WrongLayout`].
    pub wrong_layout: u64,
    /// See [`RefusalReason::NodeIdMismatch`].
    pub node_id_mismatch: u64,
    /// See [`RefusalReason::TlsFailure`].
    pub tls_failure: u64,
    /// See [`RefusalReason::UnknownPeer`].
    pub unknown_peer: u64,
    /// See [`RefusalReason::WrongDirection`].
    pub wrong_direction: u64,
    /// See [`RefusalReason::BadHello`].
    pub bad_hello: u64,
    /// See [`RefusalReason::Removed`].
    pub removed: u64,
}

/// The transport's counters at one moment.
///
/// ```
/// use tessera_cluster::TransportStatsSnapshot;
///
/// let stats = TransportStatsSnapshot::default();
/// assert_eq!(stats.frames_sent, 0);
/// assert_eq!(stats.refusals.wrong_cluster, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransportStatsSnapshot {
    /// Frames written after the handshake.
    pub frames_sent: u64,
    /// Frames read after the handshake.
    pub frames_received: u64,
    /// Bytes written after the handshake, length prefixes included.
    pub bytes_sent: u64,
    /// Bytes read after the handshake, length prefixes included.
    pub bytes_received: u64,
    /// Sends refused because the peer's queue was full.
    pub send_dropped_queue_full: u64,
    /// Frames dropped (queued or refused) because the peer stayed down too long.
    pub send_dropped_peer_down: u64,
    /// Received messages dropped because the application's inbound queue was full.
    pub inbound_dropped_full: u64,
    /// Connections that completed the handshake, both directions.
    pub connections_established: u64,
    /// Established connections that ended: lost, closed for bad input, or replaced by a
    /// newer one from the same peer (not counted when the transport closes).
    pub connections_ended: u64,
    /// Connections to a peer established after an earlier one to it was lost.
    pub reconnects: u64,
    /// Dial attempts that failed (connect, TLS or handshake).
    pub dial_failures: u64,
    /// Handshakes this node refused, by reason.
    pub refusals: RefusalCounts,
    /// Handshakes a peer refused and said so.
    pub refused_by_peer: u64,
    /// Incoming connections closed at once because too many were being set up.
    pub accepts_dropped_busy: u64,
    /// Frames after the handshake that did not decode.
    pub malformed_frames: u64,
    /// Frames longer than `max_frame_bytes`.
    pub oversized_frames: u64,
    /// Connections closed because the peer sent a malformed or oversized frame.
    pub peers_disconnected_bad_input: u64,
    /// Requests that got no reply in time.
    pub requests_timed_out: u64,
    /// Requests refused because too many were pending.
    pub requests_refused_pending_full: u64,
    /// Replies that matched no pending request (late, or from the wrong peer).
    pub replies_unmatched: u64,
}

impl TransportStats {
    pub fn snapshot(&self) -> TransportStatsSnapshot {
        TransportStatsSnapshot {
            frames_sent: read(&self.frames_sent),
            frames_received: read(&self.frames_received),
            bytes_sent: read(&self.bytes_sent),
            bytes_received: read(&self.bytes_received),
            send_dropped_queue_full: read(&self.send_dropped_queue_full),
            send_dropped_peer_down: read(&self.send_dropped_peer_down),
            inbound_dropped_full: read(&self.inbound_dropped_full),
            connections_established: read(&self.connections_established),
            connections_ended: read(&self.connections_ended),
            reconnects: read(&self.reconnects),
            dial_failures: read(&self.dial_failures),
            refusals: self.refusals.snapshot(),
            refused_by_peer: read(&self.refused_by_peer),
            accepts_dropped_busy: read(&self.accepts_dropped_busy),
            malformed_frames: read(&self.malformed_frames),
            oversized_frames: read(&self.oversized_frames),
            peers_disconnected_bad_input: read(&self.peers_disconnected_bad_input),
            requests_timed_out: read(&self.requests_timed_out),
            requests_refused_pending_full: read(&self.requests_refused_pending_full),
            replies_unmatched: read(&self.replies_unmatched),
        }
    }
}

/// Adds one to a counter.
pub(crate) fn bump(counter: &AtomicU64) {
    add(counter, 1);
}

/// Adds `amount` to a counter.
pub(crate) fn add(counter: &AtomicU64, amount: u64) {
    counter.fetch_add(amount, Ordering::Relaxed);
}

fn read(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}
