//! The limits on what peers can make a node hold: the inbound queue, connections that never
//! finish their handshake, and too many of them at once.

use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::*;
use crate::RequestError;

#[tokio::test]
async fn a_full_inbound_queue_drops_and_counts() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let (first, _first_inbound) = start(&certs, "node-1", config(CLUSTER)).await;
    let mut small = config(CLUSTER);
    small.inbound_queue_max = 2;
    let (second, mut second_inbound) = start(&certs, "node-2", small).await;
    connect_all(&[&first, &second]);
    for index in 0..5 {
        first.send("node-2", &format!("{index}")).unwrap();
    }
    eventually("every frame has arrived", || {
        second.stats().frames_received == 5
    })
    .await;
    assert_eq!(second.stats().inbound_dropped_full, 3);
    assert_eq!(receive(&mut second_inbound).await.message, "0");
    assert_eq!(receive(&mut second_inbound).await.message, "1");
    assert!(second_inbound.try_recv().is_none());
}

#[tokio::test]
async fn pending_requests_are_bounded() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let mut one_pending = config(CLUSTER);
    one_pending.pending_requests_max = 1;
    let (first, _inbound) = start(&certs, "node-1", one_pending).await;
    first.add_peer("node-2", loopback(1)).unwrap();
    let (first_message, second_message) = ("first".to_owned(), "second".to_owned());
    let waiting = first.request("node-2", &first_message, DEADLINE);
    let refused = first.request("node-2", &second_message, DEADLINE);
    let (waiting, refused) = tokio::join!(
        tokio::time::timeout(Duration::from_millis(100), waiting),
        refused
    );
    assert!(waiting.is_err(), "the first request is still waiting");
    assert!(
        matches!(refused, Err(RequestError::TooManyPending)),
        "{refused:?}"
    );
    assert_eq!(first.stats().requests_refused_pending_full, 1);
    assert_eq!(first.pending_requests(), 0);
}

#[tokio::test]
async fn silent_connections_time_out_and_too_many_are_shed() {
    let certs = Certs::new(&["node-1"]);
    let mut config = config(CLUSTER);
    config.handshakes_in_flight_max = 1;
    // Long enough that the second connection is surely accepted while the first holds the
    // only handshake slot; short enough to watch the first one time out.
    config.handshake_timeout = Duration::from_secs(2);
    let (node, _inbound) = start(&certs, "node-1", config).await;
    // Connects and says nothing: it holds the slot until it times out.
    let silent = TcpStream::connect(node.local_addr()).await.unwrap();
    let mut shed = TcpStream::connect(node.local_addr()).await.unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(DEADLINE, shed.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the second connection is closed at once");
    assert_eq!(node.stats().accepts_dropped_busy, 1);
    eventually("the silent connection times out", || {
        node.stats().refusals.bad_hello == 1
    })
    .await;
    drop(silent);
}
