//! The transport over real loopback TCP and real TLS: `exchange` for what peers do together
//! (messages both ways, requests, three nodes, full queues, restarts), `refusals` for what a
//! bad peer gets (wrong cluster, version, CA or node id, garbage, oversized frames), `bounds`
//! for the limits on what peers can make a node hold. Tests wait on messages and counters
//! with a bounded deadline, never on a fixed sleep.

mod bounds;
mod exchange;
mod refusals;

use std::net::SocketAddr;
use std::time::Duration;

use tempfile::TempDir;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_util::codec::Framed;

use super::frame::Connection;
use super::handshake::{self, HandshakeError, Hello};
use super::tls::server_name_of;
use super::{
    Inbound, Incoming, TlsIdentity, Transport, TransportConfig, create_dev_cluster, frame,
    load_identity,
};

/// The message type the tests send.
type Message = String;

/// How long any awaited event may take before the test fails. Generous: the machine is
/// shared and the build is a debug one.
const DEADLINE: Duration = Duration::from_secs(20);

/// How often a deadline loop looks again.
const POLL_INTERVAL: Duration = Duration::from_millis(5);

const CLUSTER: &str = "test-cluster";

/// A certificate directory with one CA and the named nodes.
struct Certs {
    directory: TempDir,
}

impl Certs {
    fn new(node_ids: &[&str]) -> Certs {
        let directory = tempfile::tempdir().expect("a temporary directory");
        create_dev_cluster(directory.path(), node_ids).expect("a dev cluster");
        Certs { directory }
    }

    fn identity(&self, node_id: &str) -> TlsIdentity {
        load_identity(self.directory.path(), node_id).expect("a node identity")
    }
}

/// Defaults, except quick redials so restarts are noticed fast.
fn config(cluster_id: &str) -> TransportConfig {
    let mut config = TransportConfig::new(cluster_id, loopback(0));
    config.reconnect_backoff_min = Duration::from_millis(10);
    config.reconnect_backoff_max = Duration::from_millis(200);
    config
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

async fn start(
    certs: &Certs,
    node_id: &str,
    config: TransportConfig,
) -> (Transport<Message>, Inbound<Message>) {
    Transport::start(config, certs.identity(node_id))
        .await
        .expect("the transport starts")
}

/// Makes each node a peer of every other.
fn connect_all(nodes: &[&Transport<Message>]) {
    for node in nodes {
        for other in nodes {
            if node.node_id() != other.node_id() {
                node.add_peer(other.node_id(), other.local_addr())
                    .expect("a valid peer");
            }
        }
    }
}

/// Polls `condition` until it holds; fails the test past the deadline.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The next incoming message, within the deadline.
async fn receive(inbound: &mut Inbound<Message>) -> Incoming<Message> {
    tokio::time::timeout(DEADLINE, inbound.recv())
        .await
        .expect("a message within the deadline")
        .expect("the transport is open")
}

/// Dials `address` as `identity` expecting `peer_node_id`, and runs the dialer's side of the
/// handshake with `hello`, which a test may have bent.
async fn raw_dial(
    identity: &TlsIdentity,
    address: SocketAddr,
    peer_node_id: &str,
    hello: &Hello,
) -> Result<Connection, HandshakeError> {
    let tcp = TcpStream::connect(address).await?;
    let connector = TlsConnector::from(identity.client_config());
    let server_name = server_name_of(peer_node_id).expect("a valid node id");
    let tls = connector.connect(server_name, tcp).await?;
    let mut framed = Framed::new(
        tokio_rustls::TlsStream::Client(tls),
        frame::codec(super::MAX_FRAME_BYTES),
    );
    let attempt = handshake::dial(&mut framed, hello, peer_node_id);
    tokio::time::timeout(DEADLINE, attempt)
        .await
        .map_err(|_| HandshakeError::TimedOut)??;
    Ok(framed)
}
