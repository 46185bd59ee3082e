//! The transport's bounds and timeouts. Every queue it holds is capped by a value here, each
//! with a named default, and [`TransportConfig::validate`] refuses a config that would leave
//! a queue unbounded or a timer at zero.

use std::net::SocketAddr;
use std::time::Duration;

use super::handshake::ShardLayout;

use thiserror::Error;

/// The largest frame a node sends or accepts, by default. A peer that announces a larger one
/// is disconnected before a byte of it is buffered, so a peer cannot exhaust host memory.
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// The smallest `max_frame_bytes` allowed; anything below a hello's limit is a mistake.
pub const MAX_FRAME_BYTES_FLOOR: usize = 1024;

/// The largest `max_frame_bytes` allowed: what the 4-byte length prefix can express.
pub const MAX_FRAME_BYTES_CEILING: usize = u32::MAX as usize;

/// Frames queued for one peer, by default. Beyond it `send` fails with `QueueFull` and the
/// drop is counted: a slow or absent peer costs bounded memory.
pub const SEND_QUEUE_MAX: usize = 4096;

/// Bytes of frames queued for one peer, by default. Beyond it `send` fails with `QueueFull` and
/// the drop is counted, like a queue full in frames: however large the frames, a slow or absent
/// peer costs bounded memory. At least `max_frame_bytes`, so the largest frame always fits in
/// an empty queue.
pub const SEND_QUEUE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Frames written before one flush. Bounds the time one writer spends before a syscall.
pub const WRITE_BATCH_FRAMES_MAX: usize = 256;

/// Received messages waiting for the application, by default. Beyond it an incoming message
/// is dropped and counted rather than stalling the connection (and the replies on it).
pub const INBOUND_QUEUE_MAX: usize = 8192;

/// Requests awaiting a reply across all peers, by default. Beyond it `request` fails at once.
pub const PENDING_REQUESTS_MAX: usize = 4096;

/// Incoming connections in TLS or the handshake at one time, by default. Beyond it a new
/// connection is closed at once, so a flood of half-open connections stays bounded.
pub const HANDSHAKES_IN_FLIGHT_MAX: usize = 64;

/// How long TCP connect, TLS and the hello exchange may take together, by default.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The first pause before redialing a peer, by default; it doubles per failure.
pub const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(50);

/// The longest pause between redials, by default.
pub const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// How long frames wait for a peer that is down, by default. Past it the queued frames are
/// dropped and counted, and `send` fails at once until the peer is back.
pub const PEER_DOWN_DROP_AFTER: Duration = Duration::from_secs(30);

/// The transport's settings. [`TransportConfig::new`] fills in every default.
///
/// ```
/// use tessera_cluster::TransportConfig;
///
/// let mut config = TransportConfig::new("prod-eu", "127.0.0.1:0".parse().unwrap());
/// config.send_queue_max = 128;
/// assert!(config.validate().is_ok());
/// config.send_queue_max = 0;
/// assert!(config.validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportConfig {
    /// The cluster this node belongs to; a peer from another cluster is refused.
    pub cluster_id: String,
    /// Where to accept connections; port 0 picks a free port.
    pub listen_addr: SocketAddr,
    /// The largest frame sent or accepted.
    pub max_frame_bytes: usize,
    /// Frames queued per peer.
    pub send_queue_max: usize,
    /// Bytes of frames queued per peer; at least `max_frame_bytes`.
    pub send_queue_bytes_max: usize,
    /// Frames written per flush.
    pub write_batch_frames_max: usize,
    /// Received messages waiting for the application.
    pub inbound_queue_max: usize,
    /// Requests awaiting a reply.
    pub pending_requests_max: usize,
    /// Incoming connections being set up at once.
    pub handshakes_in_flight_max: usize,
    /// How long connect, TLS and the hello exchange may take.
    pub handshake_timeout: Duration,
    /// The first redial pause.
    pub reconnect_backoff_min: Duration,
    /// The longest redial pause.
    pub reconnect_backoff_max: Duration,
    /// How long queued frames wait for a peer that is down.
    pub peer_down_drop_after: Duration,
    /// Whether a node that is not a peer yet, but presents a certificate of the cluster's CA
    /// naming it, is taken as a peer that dials this one (a member joining through this node
    /// as its seed). Off, such a connection is refused (`unknown_peer`). At most
    /// [`PEERS_MAX`](super::PEERS_MAX) peers are held either way.
    pub admit_unknown_peers: bool,
    /// How this node places entity state, named in its hello; a peer that places it another
    /// way is refused (`wrong_layout`).
    pub layout: ShardLayout,
}

/// A config the transport cannot run with.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The cluster id is empty.
    #[error("cluster_id must not be empty")]
    EmptyClusterId,
    /// A bound is zero or too small.
    #[error("{field} must be at least {least}")]
    TooSmall {
        /// The setting.
        field: &'static str,
        /// The least value allowed.
        least: u64,
    },
    /// A bound is larger than the protocol allows.
    #[error("{field} must be at most {most}")]
    TooLarge {
        /// The setting.
        field: &'static str,
        /// The largest value allowed.
        most: u64,
    },
    /// The backoff range is upside down.
    #[error("reconnect_backoff_min must not exceed reconnect_backoff_max")]
    BackoffRange,
}

impl TransportConfig {
    /// A config for `cluster_id` listening on `listen_addr`, every bound at its default.
    pub fn new(cluster_id: impl Into<String>, listen_addr: SocketAddr) -> TransportConfig {
        TransportConfig {
            cluster_id: cluster_id.into(),
            listen_addr,
            max_frame_bytes: MAX_FRAME_BYTES,
            send_queue_max: SEND_QUEUE_MAX,
            send_queue_bytes_max: SEND_QUEUE_BYTES_MAX,
            write_batch_frames_max: WRITE_BATCH_FRAMES_MAX,
            inbound_queue_max: INBOUND_QUEUE_MAX,
            pending_requests_max: PENDING_REQUESTS_MAX,
            handshakes_in_flight_max: HANDSHAKES_IN_FLIGHT_MAX,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            reconnect_backoff_min: RECONNECT_BACKOFF_MIN,
            reconnect_backoff_max: RECONNECT_BACKOFF_MAX,
            peer_down_drop_after: PEER_DOWN_DROP_AFTER,
            admit_unknown_peers: false,
            layout: ShardLayout::default(),
        }
    }

    /// Checks every bound.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.cluster_id.is_empty() {
            return Err(ConfigError::EmptyClusterId);
        }
        if self.max_frame_bytes > MAX_FRAME_BYTES_CEILING {
            return Err(ConfigError::TooLarge {
                field: "max_frame_bytes",
                most: MAX_FRAME_BYTES_CEILING as u64,
            });
        }
        let counts = [
            (
                "max_frame_bytes",
                self.max_frame_bytes,
                MAX_FRAME_BYTES_FLOOR,
            ),
            ("send_queue_max", self.send_queue_max, 1),
            // The largest frame must fit in an empty queue.
            (
                "send_queue_bytes_max",
                self.send_queue_bytes_max,
                self.max_frame_bytes,
            ),
            ("write_batch_frames_max", self.write_batch_frames_max, 1),
            ("inbound_queue_max", self.inbound_queue_max, 1),
            ("pending_requests_max", self.pending_requests_max, 1),
            ("handshakes_in_flight_max", self.handshakes_in_flight_max, 1),
        ];
        for (field, value, least) in counts {
            if value < least {
                return Err(ConfigError::TooSmall {
                    field,
                    least: least as u64,
                });
            }
        }
        let durations = [
            ("handshake_timeout", self.handshake_timeout),
            ("reconnect_backoff_min", self.reconnect_backoff_min),
            ("peer_down_drop_after", self.peer_down_drop_after),
        ];
        for (field, value) in durations {
            if value.is_zero() {
                return Err(ConfigError::TooSmall { field, least: 1 });
            }
        }
        if self.reconnect_backoff_min > self.reconnect_backoff_max {
            return Err(ConfigError::BackoffRange);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bound_is_checked() {
        let good = TransportConfig::new("c", "127.0.0.1:0".parse().unwrap());
        assert_eq!(good.validate(), Ok(()));
        let mut config = good.clone();
        config.max_frame_bytes = MAX_FRAME_BYTES_FLOOR - 1;
        assert!(matches!(
            config.validate(),
            Err(ConfigError::TooSmall { .. })
        ));
        config.max_frame_bytes = MAX_FRAME_BYTES_CEILING + 1;
        assert!(matches!(
            config.validate(),
            Err(ConfigError::TooLarge { .. })
        ));
        let mut config = good.clone();
        config.send_queue_bytes_max = config.max_frame_bytes - 1;
        assert_eq!(
            config.validate(),
            Err(ConfigError::TooSmall {
                field: "send_queue_bytes_max",
                least: config.max_frame_bytes as u64,
            })
        );
        let mut config = good.clone();
        config.inbound_queue_max = 0;
        assert!(config.validate().is_err());
        let mut config = good.clone();
        config.peer_down_drop_after = Duration::ZERO;
        assert!(config.validate().is_err());
        let mut config = good.clone();
        config.reconnect_backoff_max = Duration::from_millis(1);
        assert_eq!(config.validate(), Err(ConfigError::BackoffRange));
        let mut config = good;
        config.cluster_id.clear();
        assert_eq!(config.validate(), Err(ConfigError::EmptyClusterId));
    }
}
