//! Counters of the HTTP edge: connections accepted, refused over a cap and shed to make room,
//! and clients cut off by the header and body read timeouts. The node owns them so `/metrics` can read them
//! (a node never imports the api); the api's accept loop and body reader bump them.

use std::sync::atomic::{AtomicU64, Ordering};

/// What the HTTP edge counted since the node started; every field only grows.
#[derive(Debug, Default)]
pub struct EdgeCounters {
    /// Connections accepted and served.
    pub connections: AtomicU64,
    /// Connections accepted and closed at once because `api.connections_max` were open and
    /// none could be shed.
    pub connections_refused: AtomicU64,
    /// Connections accepted and closed at once because their client address held
    /// `api.connections_per_address_max`.
    pub connections_refused_per_address: AtomicU64,
    /// Connections on the admin reserve (`api.admin_connections_reserved`) closed after
    /// answering `503` to a request without the admin token.
    pub connections_refused_admin_reserve: AtomicU64,
    /// Connections closed without an answer to make room for a newcomer: idle, or never
    /// authenticated.
    pub connections_shed: AtomicU64,
    /// Connections closed because a request head did not arrive within
    /// `api.header_read_timeout_ms`.
    pub header_timeouts: AtomicU64,
    /// Requests answered `408` because their body did not arrive within
    /// `api.body_read_timeout_ms`.
    pub body_timeouts: AtomicU64,
}

impl EdgeCounters {
    /// Adds one to `counter` (one of this struct's fields).
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A copy of the counters as plain numbers.
    pub fn snapshot(&self) -> EdgeSnapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        EdgeSnapshot {
            connections: load(&self.connections),
            connections_refused: load(&self.connections_refused),
            connections_refused_per_address: load(&self.connections_refused_per_address),
            connections_refused_admin_reserve: load(&self.connections_refused_admin_reserve),
            connections_shed: load(&self.connections_shed),
            header_timeouts: load(&self.header_timeouts),
            body_timeouts: load(&self.body_timeouts),
        }
    }
}

/// The [`EdgeCounters`] at one moment.
///
/// ```
/// use tessera_host::node::EdgeCounters;
/// let counters = EdgeCounters::default();
/// EdgeCounters::bump(&counters.header_timeouts);
/// assert_eq!(counters.snapshot().header_timeouts, 1);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EdgeSnapshot {
    /// Connections accepted and served.
    pub connections: u64,
    /// Connections refused over the cap.
    pub connections_refused: u64,
    /// Connections refused over their address's cap.
    pub connections_refused_per_address: u64,
    /// Connections on the admin reserve closed after a request without the admin token.
    pub connections_refused_admin_reserve: u64,
    /// Connections shed to make room for a newcomer.
    pub connections_shed: u64,
    /// Connections closed by the header read timeout.
    pub header_timeouts: u64,
    /// Requests answered `408` by the body read timeout.
    pub body_timeouts: u64,
}
