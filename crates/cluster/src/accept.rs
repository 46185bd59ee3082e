//! The accept loop. Each incoming connection gets TLS as a server (a client certificate from
//! the cluster CA is required) and the acceptor's side of the hello, within the handshake
//! timeout and at most `handshakes_in_flight_max` at a time. The dialer must claim the node
//! id its certificate names, not be an incarnation of a removed peer (`quarantine`), be in the
//! peer table (or, with `admit_unknown_peers`, is added to it as a peer that dials), and be
//! the pair's dialer; then the connection goes to that peer's task. Every refusal is counted
//! by reason.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::codec::Framed;

use super::frame::{self, Connection};
use super::handshake::{self, HandshakeError, Hello};
use super::peer::insert_peer;
use super::peer::is_tls_error;
use super::shared::{PEERS_MAX, Role, Shared, lock};
use super::stats::{RefusalReason, bump};
use super::tls::certificate_names_node;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

/// The pause after `accept` itself fails (out of file descriptors, say), so the loop does
/// not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Accepts until the transport closes (the task is aborted, and with it every handshake in
/// flight).
pub(crate) async fn accept_loop<M>(shared: Arc<Shared<M>>, listener: TcpListener)
where
    M: Serialize + DeserializeOwned + Send + 'static,
{
    let mut handshakes = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) if handshakes.len() >= shared.config.handshakes_in_flight_max => {
                    bump(&shared.stats.accepts_dropped_busy);
                    drop(tcp);
                }
                Ok((tcp, _)) => {
                    handshakes.spawn(accept_one(Arc::clone(&shared), tcp));
                }
                Err(error) => {
                    tracing::warn!(%error, "cluster accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            },
            Some(_) = handshakes.join_next(), if !handshakes.is_empty() => {}
        }
    }
}

/// TLS, the hello, and the hand-over of one incoming connection.
async fn accept_one<M>(shared: Arc<Shared<M>>, tcp: TcpStream)
where
    M: Serialize + DeserializeOwned + Send + 'static,
{
    let remote = tcp.peer_addr().ok();
    let attempt = tokio::time::timeout(
        shared.config.handshake_timeout,
        handshake_incoming(&shared, tcp),
    )
    .await;
    let (hello, connection) = match attempt {
        Ok(Ok(accepted)) => accepted,
        Ok(Err(reason)) => {
            shared.stats.refusals.count(reason);
            tracing::debug!(?reason, "cluster connection refused");
            return;
        }
        Err(_) => {
            shared.stats.refusals.count(RefusalReason::BadHello);
            return;
        }
    };
    let node_id = hello.node_id;
    let handed = {
        let mut peers = lock(&shared.peers);
        if !peers.contains_key(&node_id)
            && shared.config.admit_unknown_peers
            && peers.len() < PEERS_MAX
            && !shared.closed.load(Ordering::Acquire)
        {
            // Admitted by its certificate: a member joining through this node. It dials; the
            // address is where it dialed from, never dialed (its committed cluster address
            // replaces it).
            let address = remote.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
            insert_peer(
                &shared,
                &mut peers,
                &node_id,
                address.into(),
                Role::Acceptor,
            );
        }
        peers.get(&node_id).map(|entry| {
            entry
                .link
                .incarnation
                .store(hello.incarnation, Ordering::Release);
            entry.accepted.try_send(connection).is_ok()
        })
    };
    if handed != Some(true) {
        tracing::debug!(peer = %node_id, "cluster connection dropped: its peer is busy or gone");
    }
}

async fn handshake_incoming<M>(
    shared: &Shared<M>,
    tcp: TcpStream,
) -> Result<(Hello, Connection), RefusalReason> {
    let _ = tcp.set_nodelay(true);
    let acceptor = TlsAcceptor::from(shared.identity.server_config());
    let tls = acceptor
        .accept(tcp)
        .await
        .map_err(|_| RefusalReason::TlsFailure)?;
    let certificate = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .cloned()
        .ok_or(RefusalReason::TlsFailure)?;
    let mut framed = Framed::new(
        tokio_rustls::TlsStream::Server(tls),
        frame::codec(shared.config.max_frame_bytes),
    );
    let check_peer = |hello: &Hello| {
        if !certificate_names_node(&certificate, &hello.node_id) {
            return Err(RefusalReason::NodeIdMismatch);
        }
        if lock(&shared.quarantine).refuses(&hello.node_id, hello.incarnation) {
            return Err(RefusalReason::Removed);
        }
        match lock(&shared.peers).get(&hello.node_id) {
            None if shared.config.admit_unknown_peers => Ok(()),
            None => Err(RefusalReason::UnknownPeer),
            Some(entry) if entry.link.role != Role::Acceptor => Err(RefusalReason::WrongDirection),
            Some(_) => Ok(()),
        }
    };
    let hello = handshake::accept(&mut framed, &shared.hello, check_peer)
        .await
        .map_err(|error| match error {
            HandshakeError::Refused(reason) | HandshakeError::RefusedByPeer(reason) => reason,
            HandshakeError::Io(error) if is_tls_error(&error) => RefusalReason::TlsFailure,
            HandshakeError::Io(_) | HandshakeError::TimedOut => RefusalReason::BadHello,
        })?;
    framed
        .codec_mut()
        .set_max_frame_length(shared.config.max_frame_bytes);
    Ok((hello, framed))
}
