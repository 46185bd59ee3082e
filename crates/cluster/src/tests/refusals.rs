//! What a bad peer gets: refused and counted, while the node and its good peers go on.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::handshake::PROTOCOL_VERSION;
use crate::{RefusalReason, SendError};

/// A good pair (`node-1` dials `node-2`) that still talks after whatever a test did.
struct GoodPair {
    first: Transport<Message>,
    second: Transport<Message>,
    second_inbound: Inbound<Message>,
}

impl GoodPair {
    async fn start(certs: &Certs) -> GoodPair {
        let (first, _) = start(certs, "node-1", config(CLUSTER)).await;
        let (second, second_inbound) = start(certs, "node-2", config(CLUSTER)).await;
        connect_all(&[&first, &second]);
        GoodPair {
            first,
            second,
            second_inbound,
        }
    }

    async fn still_talks(&mut self) {
        self.first.send("node-2", &"still here".to_owned()).unwrap();
        assert_eq!(
            receive(&mut self.second_inbound).await.message,
            "still here"
        );
    }
}

#[tokio::test]
async fn a_node_of_another_cluster_is_refused_and_counted() {
    let certs = Certs::new(&["node-0", "node-1", "node-2"]);
    let mut pair = GoodPair::start(&certs).await;
    let (stranger, _) = start(&certs, "node-0", config("another-cluster")).await;
    // node-0 < node-2: the stranger dials.
    stranger
        .add_peer("node-2", pair.second.local_addr())
        .unwrap();
    eventually("the stranger is refused", || {
        pair.second.stats().refusals.wrong_cluster >= 1 && stranger.stats().refused_by_peer >= 1
    })
    .await;
    pair.still_talks().await;
    assert_eq!(pair.second.stats().connections_established, 1);
}

#[tokio::test]
async fn a_node_that_places_entity_state_another_way_is_refused_and_counted() {
    let certs = Certs::new(&["node-0", "node-1", "node-2"]);
    let mut pair = GoodPair::start(&certs).await;
    let mut other = config(CLUSTER);
    other.layout = crate::handshake::ShardLayout {
        shards: 128,
        partitions: 64,
    };
    let (stranger, _) = start(&certs, "node-0", other).await;
    stranger
        .add_peer("node-2", pair.second.local_addr())
        .unwrap();
    eventually("the other layout is refused", || {
        pair.second.stats().refusals.wrong_layout >= 1 && stranger.stats().refused_by_peer >= 1
    })
    .await;
    pair.still_talks().await;
    assert_eq!(pair.second.stats().connections_established, 1);
}

#[tokio::test]
async fn another_protocol_version_or_a_bad_magic_is_refused() {
    let certs = Certs::new(&["node-0", "node-1", "node-2"]);
    let mut pair = GoodPair::start(&certs).await;
    let identity = certs.identity("node-0");
    let mut hello = Hello::new(CLUSTER, "node-0");
    hello.protocol_version = PROTOCOL_VERSION + 1;
    let refused = raw_dial(&identity, pair.second.local_addr(), "node-2", &hello).await;
    assert!(
        matches!(
            refused,
            Err(HandshakeError::RefusedByPeer(RefusalReason::WrongVersion))
        ),
        "{refused:?}"
    );
    let mut hello = Hello::new(CLUSTER, "node-0");
    hello.magic = u32::from_be_bytes(*b"HTTP");
    let refused = raw_dial(&identity, pair.second.local_addr(), "node-2", &hello).await;
    assert!(
        matches!(
            refused,
            Err(HandshakeError::RefusedByPeer(RefusalReason::BadMagic))
        ),
        "{refused:?}"
    );
    let refusals = pair.second.stats().refusals;
    assert_eq!((refusals.wrong_version, refusals.bad_magic), (1, 1));
    pair.still_talks().await;
}

#[tokio::test]
async fn a_certificate_from_another_ca_fails_tls_and_is_counted() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let foreign = Certs::new(&["node-0"]);
    let mut pair = GoodPair::start(&certs).await;
    let (intruder, _) = start(&foreign, "node-0", config(CLUSTER)).await;
    intruder
        .add_peer("node-2", pair.second.local_addr())
        .unwrap();
    eventually("both sides count a TLS failure", || {
        pair.second.stats().refusals.tls_failure >= 1 && intruder.stats().refusals.tls_failure >= 1
    })
    .await;
    pair.still_talks().await;
}

#[tokio::test]
async fn a_peer_claiming_a_node_id_not_in_its_certificate_is_refused() {
    let certs = Certs::new(&["node-0", "node-1", "node-2", "node-3"]);
    let mut pair = GoodPair::start(&certs).await;
    pair.second.add_peer("node-0", loopback(1)).unwrap();
    // node-3's certificate, claiming to be node-0 (a peer node-2 expects to dial it).
    let hello = Hello::new(CLUSTER, "node-0");
    let refused = raw_dial(
        &certs.identity("node-3"),
        pair.second.local_addr(),
        "node-2",
        &hello,
    )
    .await;
    assert!(
        matches!(
            refused,
            Err(HandshakeError::RefusedByPeer(RefusalReason::NodeIdMismatch))
        ),
        "{refused:?}"
    );
    assert_eq!(pair.second.stats().refusals.node_id_mismatch, 1);
    pair.still_talks().await;
}

#[tokio::test]
async fn an_unknown_peer_or_one_dialing_the_wrong_way_is_refused() {
    let certs = Certs::new(&["node-1", "node-2", "node-3"]);
    let mut pair = GoodPair::start(&certs).await;
    let unknown = raw_dial(
        &certs.identity("node-3"),
        pair.first.local_addr(),
        "node-1",
        &Hello::new(CLUSTER, "node-3"),
    )
    .await;
    assert!(
        matches!(
            unknown,
            Err(HandshakeError::RefusedByPeer(RefusalReason::UnknownPeer))
        ),
        "{unknown:?}"
    );
    // node-2 is node-1's peer, but node-1 is the one that dials.
    let backwards = raw_dial(
        &certs.identity("node-2"),
        pair.first.local_addr(),
        "node-1",
        &Hello::new(CLUSTER, "node-2"),
    )
    .await;
    assert!(
        matches!(
            backwards,
            Err(HandshakeError::RefusedByPeer(RefusalReason::WrongDirection))
        ),
        "{backwards:?}"
    );
    let refusals = pair.first.stats().refusals;
    assert_eq!((refusals.unknown_peer, refusals.wrong_direction), (1, 1));
    pair.still_talks().await;
}

#[tokio::test]
async fn garbage_bytes_are_counted_and_the_listener_keeps_accepting() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let (second, mut second_inbound) = start(&certs, "node-2", config(CLUSTER)).await;
    for garbage in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        &[0xff; 4096],
        b"\x16\x03\x01\x00",
    ] {
        let mut tcp = TcpStream::connect(second.local_addr()).await.unwrap();
        // The node may close before all of it is written: a failed write is fine here.
        let _ = tcp.write_all(garbage).await;
        let _ = tcp.shutdown().await;
        let mut rest = Vec::new();
        // The node answers with at most a TLS alert, then closes.
        let read = tokio::time::timeout(DEADLINE, tcp.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "the node closes the connection");
    }
    eventually("each garbage connection is counted", || {
        let refusals = second.stats().refusals;
        refusals.tls_failure + refusals.bad_hello == 3
    })
    .await;
    let (first, _) = start(&certs, "node-1", config(CLUSTER)).await;
    connect_all(&[&first, &second]);
    first
        .send("node-2", &"after the garbage".to_owned())
        .unwrap();
    assert_eq!(
        receive(&mut second_inbound).await.message,
        "after the garbage"
    );
}

#[tokio::test]
async fn an_oversized_or_malformed_frame_disconnects_and_is_counted() {
    let certs = Certs::new(&["node-0", "node-1", "node-2"]);
    let mut pair = GoodPair::start(&certs).await;
    pair.second.add_peer("node-0", loopback(1)).unwrap();
    let identity = certs.identity("node-0");
    let hello = Hello::new(CLUSTER, "node-0");

    let mut connection = raw_dial(&identity, pair.second.local_addr(), "node-2", &hello)
        .await
        .unwrap();
    let length = u32::try_from(crate::MAX_FRAME_BYTES + 1).unwrap();
    connection
        .get_mut()
        .write_all(&length.to_be_bytes())
        .await
        .unwrap();
    connection.get_mut().flush().await.unwrap();
    expect_closed(connection).await;
    eventually("the oversized frame is counted", || {
        let stats = pair.second.stats();
        stats.oversized_frames == 1 && stats.peers_disconnected_bad_input == 1
    })
    .await;

    let mut connection = raw_dial(&identity, pair.second.local_addr(), "node-2", &hello)
        .await
        .unwrap();
    let garbage = b"\x00\x00\x00\x03\xc1\xc1\xc1";
    connection.get_mut().write_all(garbage).await.unwrap();
    connection.get_mut().flush().await.unwrap();
    expect_closed(connection).await;
    eventually("the malformed frame is counted", || {
        let stats = pair.second.stats();
        stats.malformed_frames == 1 && stats.peers_disconnected_bad_input == 2
    })
    .await;
    pair.still_talks().await;
}

#[tokio::test]
async fn a_message_over_the_frame_limit_is_refused_before_sending() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let mut config = config(CLUSTER);
    config.max_frame_bytes = 1024;
    let (first, _) = start(&certs, "node-1", config).await;
    first.add_peer("node-2", loopback(1)).unwrap();
    let refused = first.send("node-2", &"x".repeat(2048));
    assert!(matches!(refused, Err(SendError::Frame(_))), "{refused:?}");
}

/// A transport that admits peers it does not know yet (a voter, for members joining).
async fn admitting(certs: &Certs, node_id: &str) -> (Transport<Message>, Inbound<Message>) {
    let mut admitting = config(CLUSTER);
    admitting.admit_unknown_peers = true;
    start(certs, node_id, admitting).await
}

#[tokio::test]
async fn a_quarantined_peer_is_refused_when_it_dials_again_and_its_restart_is_not() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let (voter, mut voter_inbound) = admitting(&certs, "node-2").await;
    // node-1 < node-2: the member dials, and the voter admits it by its certificate.
    let (member, _member_inbound) = start(&certs, "node-1", config(CLUSTER)).await;
    member.add_peer("node-2", voter.local_addr()).unwrap();
    member.send("node-2", &"joining".to_owned()).unwrap();
    assert_eq!(receive(&mut voter_inbound).await.from, "node-1");

    assert!(voter.quarantine_peer("node-1"));
    assert!(!voter.peers().contains(&"node-1".to_owned()));
    // Once the linger is over the connection closes; the same process dials again at once
    // (its backoff is milliseconds) and is refused, however the voter admits peers.
    eventually(
        "the removed incarnation is refused when it dials again",
        || voter.stats().refusals.removed >= 1 && member.stats().refused_by_peer >= 1,
    )
    .await;
    assert!(!voter.peers().contains(&"node-1".to_owned()));

    // A restarted process of the node is a new incarnation: admitted.
    drop(member);
    let (restarted, _restarted_inbound) = start(&certs, "node-1", config(CLUSTER)).await;
    restarted.add_peer("node-2", voter.local_addr()).unwrap();
    restarted.send("node-2", &"back".to_owned()).unwrap();
    let incoming = receive(&mut voter_inbound).await;
    assert_eq!(
        (incoming.from.as_str(), incoming.message.as_str()),
        ("node-1", "back")
    );
    assert!(voter.peers().contains(&"node-1".to_owned()));
}

#[tokio::test]
async fn what_was_queued_for_a_quarantined_peer_is_still_written() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let (voter, mut voter_inbound) = admitting(&certs, "node-2").await;
    let (member, mut member_inbound) = start(&certs, "node-1", config(CLUSTER)).await;
    member.add_peer("node-2", voter.local_addr()).unwrap();
    member.send("node-2", &"joining".to_owned()).unwrap();
    receive(&mut voter_inbound).await;
    // The answer to the command that removed it, say: queued just before the removal.
    voter.send("node-1", &"you are removed".to_owned()).unwrap();
    assert!(voter.quarantine_peer("node-1"));
    assert_eq!(
        receive(&mut member_inbound).await.message,
        "you are removed"
    );
    assert!(
        matches!(
            voter.send("node-1", &"more".to_owned()),
            Err(SendError::UnknownPeer(_))
        ),
        "nothing new is queued for it"
    );
}

/// Reads until the node closes the connection (or resets it).
async fn expect_closed(connection: Connection) {
    let mut stream = connection.into_inner();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(DEADLINE, stream.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the node closes the connection");
}
