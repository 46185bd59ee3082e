//! One task per peer owns the pair's connection. As the dialer it connects (TCP, TLS,
//! hello) and redials after a loss with exponential backoff and jitter; as the acceptor it
//! waits for the accept loop to hand it the connection the peer dialed, a newer one
//! replacing an older. Frames queued meanwhile wait; once the peer has been down longer than
//! `peer_down_drop_after` they are dropped and counted, and `send` fails fast until the peer
//! is back. [`insert_peer`] adds a peer's entry to the table and starts its task.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_util::codec::Framed;

use super::connection::{AfterServing, serve};
use super::frame::{self, Connection};
use super::handshake::{self, HandshakeError};
use super::peer_address::PeerAddress;
use super::send_queue::{FrameReceiver, send_queue};
use super::shared::{AbortOnDrop, PeerEntry, PeerLink, Role, Shared, lock};
use super::stats::{RefusalReason, add, bump};
use super::tls::server_name_of;
use tessera_contract::NodeId;

/// The longest backoff exponent: `reconnect_backoff_min * 2^16` is past any sensible
/// maximum, and the cap keeps the shift from overflowing.
const BACKOFF_DOUBLINGS_MAX: u32 = 16;

/// Accepted connections waiting for their peer's task to take them. One suffices: the task
/// takes each at once, and a connection that finds the slot taken is closed (the dialer
/// retries).
const ACCEPTED_CONNECTIONS_WAITING_MAX: usize = 1;

/// Adds (or replaces) `node_id`'s entry and starts its task. The caller holds the peers lock.
pub(crate) fn insert_peer<M>(
    shared: &Arc<Shared<M>>,
    peers: &mut HashMap<NodeId, PeerEntry>,
    node_id: &str,
    address: PeerAddress,
    role: Role,
) where
    M: Serialize + DeserializeOwned + Send + 'static,
{
    let (queue, queued) = send_queue(
        shared.config.send_queue_max,
        shared.config.send_queue_bytes_max,
    );
    let (accepted, accepted_connections) = mpsc::channel(ACCEPTED_CONNECTIONS_WAITING_MAX);
    let link = Arc::new(PeerLink {
        node_id: node_id.to_owned(),
        role,
        address: Mutex::new(address),
        queue,
        unreachable: AtomicBool::new(false),
        incarnation: AtomicU64::new(0),
        lost_at: Mutex::new(None),
    });
    let task = tokio::spawn(run_peer(
        Arc::clone(shared),
        Arc::clone(&link),
        queued,
        accepted_connections,
    ));
    peers.insert(
        node_id.to_owned(),
        PeerEntry::new(link, accepted, AbortOnDrop(task)),
    );
}

/// Runs until the peer is removed (the task is aborted) or the transport closes.
pub(crate) async fn run_peer<M>(
    shared: Arc<Shared<M>>,
    link: Arc<PeerLink>,
    mut queued: FrameReceiver,
    mut accepted: mpsc::Receiver<Connection>,
) where
    M: Serialize + DeserializeOwned + Send + 'static,
{
    let mut connected_before = false;
    let mut next = None;
    loop {
        let down_since = Instant::now();
        let connection = match next.take() {
            Some(connection) => connection,
            None if link.role == Role::Dialer => {
                dial_until_up(&shared, &link, &mut queued, down_since).await
            }
            None => {
                let waited =
                    wait_for_dialer(&shared, &link, &mut queued, &mut accepted, down_since).await;
                let Some(connection) = waited else {
                    return;
                };
                connection
            }
        };
        bump(&shared.stats.connections_established);
        if connected_before {
            bump(&shared.stats.reconnects);
        }
        connected_before = true;
        link.unreachable.store(false, Ordering::Release);
        *lock(&link.lost_at) = None;
        tracing::debug!(peer = %link.node_id, "cluster connection up");
        match serve(&shared, &link, connection, &mut queued, &mut accepted).await {
            AfterServing::Replaced(newer) => next = Some(*newer),
            AfterServing::Reconnect => *lock(&link.lost_at) = Some(Instant::now()),
            AfterServing::Stop => return,
        }
        tracing::debug!(peer = %link.node_id, "cluster connection down");
    }
}

/// Dials until a connection is up (the task is aborted if the peer is removed meanwhile).
async fn dial_until_up<M>(
    shared: &Shared<M>,
    link: &PeerLink,
    queued: &mut FrameReceiver,
    down_since: Instant,
) -> Connection {
    let mut failures: u32 = 0;
    loop {
        match dial_once(shared, link).await {
            Ok(connection) => return connection,
            Err(error) => {
                bump(&shared.stats.dial_failures);
                count_dial_failure(shared, &error);
                match mismatch(&error) {
                    // Logged at the first failure and then at the 2nd, 4th, 8th, …: a
                    // mismatch lasts until an operator mends a config.
                    Some(reason) if failures.is_power_of_two() || failures == 0 => {
                        tracing::warn!(
                            peer = %link.node_id,
                            ?reason,
                            attempts = failures + 1,
                            "the peer and this node do not agree on the cluster id, the \
                             protocol version or the shard layout (num_shards, \
                             sharding.partitions.count): check both nodes' configs"
                        );
                    }
                    _ => tracing::debug!(peer = %link.node_id, %error, "cluster dial failed"),
                }
            }
        }
        let pause = backoff(
            shared.config.reconnect_backoff_min,
            shared.config.reconnect_backoff_max,
            failures,
        );
        failures = failures.saturating_add(1);
        tokio::time::sleep(pause).await;
        drop_if_down_too_long(shared, link, queued, down_since);
    }
}

/// Waits for the peer to dial us. `None` when the peer was removed.
async fn wait_for_dialer<M>(
    shared: &Shared<M>,
    link: &PeerLink,
    queued: &mut FrameReceiver,
    accepted: &mut mpsc::Receiver<Connection>,
    down_since: Instant,
) -> Option<Connection> {
    let deadline = down_since + shared.config.peer_down_drop_after;
    tokio::select! {
        connection = accepted.recv() => return connection,
        () = tokio::time::sleep_until(deadline) => {}
    }
    drop_if_down_too_long(shared, link, queued, down_since);
    // From here on `send` fails fast, so the queue stays empty until the peer is back.
    accepted.recv().await
}

/// Past `peer_down_drop_after`, marks the peer unreachable and drops what was queued.
fn drop_if_down_too_long<M>(
    shared: &Shared<M>,
    link: &PeerLink,
    queued: &mut FrameReceiver,
    down_since: Instant,
) {
    if down_since.elapsed() < shared.config.peer_down_drop_after {
        return;
    }
    link.unreachable.store(true, Ordering::Release);
    let mut dropped = 0;
    while queued.try_recv().is_some() {
        dropped += 1;
    }
    add(&shared.stats.send_dropped_peer_down, dropped);
}

/// Why a dial failed.
#[derive(Debug, thiserror::Error)]
enum DialError {
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    #[error("the peer's node id is not a valid server name")]
    BadPeerName,
}

/// The configuration mismatch a failed dial was refused for, by either side, if it was.
fn mismatch(error: &DialError) -> Option<RefusalReason> {
    match error {
        DialError::Handshake(
            HandshakeError::Refused(reason) | HandshakeError::RefusedByPeer(reason),
        ) if matches!(
            reason,
            RefusalReason::WrongCluster | RefusalReason::WrongVersion | RefusalReason::WrongLayout
        ) =>
        {
            Some(*reason)
        }
        _ => None,
    }
}

fn count_dial_failure<M>(shared: &Shared<M>, error: &DialError) {
    match error {
        DialError::Connect(_) | DialError::BadPeerName => {}
        DialError::Tls(_) => shared.stats.refusals.count(RefusalReason::TlsFailure),
        DialError::Handshake(HandshakeError::Refused(reason)) => {
            shared.stats.refusals.count(*reason);
        }
        DialError::Handshake(HandshakeError::RefusedByPeer(_)) => {
            bump(&shared.stats.refused_by_peer);
        }
        DialError::Handshake(HandshakeError::Io(error)) if is_tls_error(error) => {
            shared.stats.refusals.count(RefusalReason::TlsFailure);
        }
        DialError::Handshake(_) => {}
    }
}

/// Whether an I/O error is rustls failing (a bad certificate or an alert from the peer),
/// rather than the connection dropping.
pub(crate) fn is_tls_error(error: &std::io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.is::<rustls::Error>())
}

/// TCP connect, TLS as a client expecting the peer's certificate, and the hello exchange,
/// all within the handshake timeout.
async fn dial_once<M>(shared: &Shared<M>, link: &PeerLink) -> Result<Connection, DialError> {
    // Read at every dial, and a name resolved again each time: the peer may have moved.
    let address = lock(&link.address).clone();
    let server_name = server_name_of(&link.node_id).ok_or(DialError::BadPeerName)?;
    let connector = TlsConnector::from(shared.identity.client_config());
    let attempt = async {
        let tcp = TcpStream::connect(address.as_str())
            .await
            .map_err(DialError::Connect)?;
        // Frames are batched and flushed on purpose; Nagle would only add latency.
        tcp.set_nodelay(true).map_err(DialError::Connect)?;
        let tls = connector
            .connect(server_name, tcp)
            .await
            .map_err(DialError::Tls)?;
        let mut framed = Framed::new(
            tokio_rustls::TlsStream::Client(tls),
            frame::codec(shared.config.max_frame_bytes),
        );
        let peer = handshake::dial(&mut framed, &shared.hello, &link.node_id).await?;
        if lock(&shared.quarantine).refuses(&peer.node_id, peer.incarnation) {
            return Err(HandshakeError::Refused(RefusalReason::Removed).into());
        }
        link.incarnation.store(peer.incarnation, Ordering::Release);
        framed
            .codec_mut()
            .set_max_frame_length(shared.config.max_frame_bytes);
        Ok(framed)
    };
    tokio::time::timeout(shared.config.handshake_timeout, attempt)
        .await
        .map_err(|_| DialError::Handshake(HandshakeError::TimedOut))?
}

/// The pause after `failures` failed dials: `min * 2^failures` capped at `max`, then a
/// random point in its upper half, so peers that lost a node together do not redial in step.
fn backoff(min: Duration, max: Duration, failures: u32) -> Duration {
    let doublings = failures.min(BACKOFF_DOUBLINGS_MAX);
    let ceiling = min.saturating_mul(1 << doublings).min(max);
    let half = ceiling / 2;
    let jitter_nanos =
        rand::rng().random_range(0..=half.as_nanos().min(u128::from(u64::MAX)) as u64);
    half + Duration::from_nanos(jitter_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_its_cap_with_jitter() {
        let min = Duration::from_millis(10);
        let max = Duration::from_millis(1000);
        for failures in [0, 1, 3, 6, 7, 20, u32::MAX] {
            let ceiling = (min * 2u32.pow(failures.min(BACKOFF_DOUBLINGS_MAX))).min(max);
            for _ in 0..50 {
                let pause = backoff(min, max, failures);
                assert!(
                    pause >= ceiling / 2 && pause <= ceiling,
                    "{failures}: {pause:?}"
                );
            }
        }
    }
}
