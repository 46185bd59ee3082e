//! The cluster layer's transport between nodes: one long-lived, mutually authenticated TLS
//! connection per node pair, carrying length-delimited MessagePack frames. [`certs`] makes
//! the cluster CA and node certificates and `cert_files` keeps them in a directory; [`tls`]
//! turns them into rustls configs; [`frame`] and [`handshake`] are the wire format;
//! [`Transport`] sends, requests and receives (`peer`, `accept` and `connection` are its
//! tasks, `shared` what they share, [`PeerAddress`] where a peer is dialed, `quarantine` the removed peers it refuses);
//! [`TransportStats`](TransportStatsSnapshot) counts every drop and refusal; [`detector`] is
//! the phi accrual failure detector that reads peers' progress reports. The protocol and its
//! bounds are described in `docs/cluster.md`.
//!
//! Uses `tessera-contract` only; it knows nothing of what its frames carry. The metadata plane
//! and the node (`tessera-metadata`, `tessera-host`) use it.

mod accept;
mod cert_files;
pub mod certs;
mod config;
mod connection;
pub mod detector;
mod error;
pub mod frame;
pub mod handshake;
mod node_name;
mod peer;
mod peer_address;
mod quarantine;
mod request;
mod send_queue;
mod shared;
mod stats;
pub mod tls;
mod transport;

#[cfg(test)]
mod tests;

pub use cert_files::{
    CA_CERT_FILE, CA_KEY_FILE, create_ca, create_dev_cluster, issue_node_cert, load_ca,
    load_identity, node_cert_paths,
};
pub use certs::{CertError, ClusterCa, NodeCertificate};
pub use config::{
    ConfigError, HANDSHAKE_TIMEOUT, HANDSHAKES_IN_FLIGHT_MAX, INBOUND_QUEUE_MAX, MAX_FRAME_BYTES,
    MAX_FRAME_BYTES_CEILING, MAX_FRAME_BYTES_FLOOR, PEER_DOWN_DROP_AFTER, PENDING_REQUESTS_MAX,
    RECONNECT_BACKOFF_MAX, RECONNECT_BACKOFF_MIN, SEND_QUEUE_BYTES_MAX, SEND_QUEUE_MAX,
    TransportConfig, WRITE_BATCH_FRAMES_MAX,
};
pub use error::{RequestError, SendError, TransportError};
pub use node_name::{NODE_DNS_ZONE, NodeIdError, node_dns_name, validate_node_id};
pub use peer_address::{PEER_HOST_BYTES_MAX, PeerAddress, PeerAddressError};
pub use quarantine::{QUARANTINED_PEERS_MAX, REMOVED_PEER_LINGER};
pub use request::{Inbound, Incoming, Responder};
pub use shared::PEERS_MAX;
pub use stats::{RefusalCounts, RefusalReason, TransportStatsSnapshot};
pub use tls::TlsIdentity;
pub use transport::{Direction, Transport};
