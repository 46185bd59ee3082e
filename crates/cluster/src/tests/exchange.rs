//! Peers working together: messages both ways over one connection, requests and their
//! timeouts, three nodes all-pairs, a send queue full in frames or in bytes, a peer down too
//! long, restarts, and a peer known by its DNS name.

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;
use crate::{RequestError, SendError};

#[tokio::test]
async fn two_nodes_exchange_messages_both_ways_over_one_connection() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let (first, mut first_inbound) = start(&certs, "node-1", config(CLUSTER)).await;
    let (second, mut second_inbound) = start(&certs, "node-2", config(CLUSTER)).await;
    connect_all(&[&first, &second]);

    first.send("node-2", &"from one".to_owned()).unwrap();
    second.send("node-1", &"from two".to_owned()).unwrap();
    let at_second = receive(&mut second_inbound).await;
    let at_first = receive(&mut first_inbound).await;
    assert_eq!(
        (at_second.from.as_str(), at_second.message.as_str()),
        ("node-1", "from one")
    );
    assert_eq!(
        (at_first.from.as_str(), at_first.message.as_str()),
        ("node-2", "from two")
    );
    assert!(at_first.reply.is_none());

    for index in 0..100 {
        second.send("node-1", &format!("burst {index}")).unwrap();
    }
    for index in 0..100 {
        assert_eq!(
            receive(&mut first_inbound).await.message,
            format!("burst {index}")
        );
    }
    for transport in [&first, &second] {
        let stats = transport.stats();
        assert_eq!(stats.connections_established, 1, "{stats:?}");
        assert_eq!(stats.reconnects, 0);
    }
    eventually("every frame is counted on both sides", || {
        first.stats().frames_received == 101 && second.stats().frames_sent == 101
    })
    .await;
}

#[tokio::test]
async fn a_request_gets_its_reply_and_a_silent_peer_times_out() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let (first, _first_inbound) = start(&certs, "node-1", config(CLUSTER)).await;
    let (second, mut second_inbound) = start(&certs, "node-2", config(CLUSTER)).await;
    connect_all(&[&first, &second]);

    let echo = tokio::spawn(async move {
        let incoming = receive(&mut second_inbound).await;
        let responder = incoming.reply.expect("a request carries a responder");
        responder
            .reply(&format!("echo {}", incoming.message))
            .unwrap();
        // Stay silent from here on.
        let ignored = receive(&mut second_inbound).await;
        (second_inbound, ignored)
    });
    let answer = first
        .request("node-2", &"ping".to_owned(), DEADLINE)
        .await
        .unwrap();
    assert_eq!(answer, "echo ping");

    let silence = first
        .request("node-2", &"anyone?".to_owned(), Duration::from_millis(200))
        .await;
    assert!(
        matches!(silence, Err(RequestError::TimedOut)),
        "{silence:?}"
    );
    assert_eq!(first.stats().requests_timed_out, 1);
    assert_eq!(first.pending_requests(), 0);
    let (_inbound, ignored) = echo.await.unwrap();
    assert_eq!(ignored.message, "anyone?");

    // A late reply matches nothing and is counted, not delivered.
    ignored
        .reply
        .unwrap()
        .reply(&"too late".to_owned())
        .unwrap();
    eventually("the late reply is counted", || {
        first.stats().replies_unmatched == 1
    })
    .await;
}

// On worker threads, so the tasks of the three nodes really run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_talk_all_pairs() {
    let ids = ["node-a", "node-b", "node-c"];
    let certs = Certs::new(&ids);
    let mut nodes = Vec::new();
    for id in ids {
        nodes.push(start(&certs, id, config(CLUSTER)).await);
    }
    let transports: Vec<&Transport<Message>> =
        nodes.iter().map(|(transport, _)| transport).collect();
    connect_all(&transports);
    for from in &transports {
        for to in ids {
            if to != from.node_id() {
                from.send(to, &format!("{} to {to}", from.node_id()))
                    .unwrap();
            }
        }
    }
    for (transport, inbound) in &mut nodes {
        let mut senders = BTreeSet::new();
        for _ in 0..2 {
            let incoming = receive(inbound).await;
            assert_eq!(
                incoming.message,
                format!("{} to {}", incoming.from, transport.node_id())
            );
            senders.insert(incoming.from);
        }
        assert_eq!(senders.len(), 2);
        assert_eq!(transport.stats().connections_established, 2);
    }
}

#[tokio::test]
async fn a_full_send_queue_refuses_and_counts() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let mut config = config(CLUSTER);
    config.send_queue_max = 4;
    let (first, _inbound) = start(&certs, "node-1", config).await;
    // Nobody listens there: the frames stay queued.
    let closed_port = std::net::TcpListener::bind(loopback(0))
        .unwrap()
        .local_addr()
        .unwrap();
    first.add_peer("node-2", closed_port).unwrap();
    for index in 0..4 {
        first.send("node-2", &format!("{index}")).unwrap();
    }
    let refused = first.send("node-2", &"one too many".to_owned());
    assert!(
        matches!(refused, Err(SendError::QueueFull(_))),
        "{refused:?}"
    );
    assert_eq!(first.stats().send_dropped_queue_full, 1);
    assert!(matches!(
        first.send("node-9", &"x".to_owned()),
        Err(SendError::UnknownPeer(_))
    ));
}

#[tokio::test]
async fn a_send_queue_full_in_bytes_refuses_and_counts() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let mut config = config(CLUSTER);
    config.max_frame_bytes = 4096;
    config.send_queue_bytes_max = 8192;
    let (first, _inbound) = start(&certs, "node-1", config).await;
    // Nobody listens there: the frames stay queued.
    let closed_port = std::net::TcpListener::bind(loopback(0))
        .unwrap()
        .local_addr()
        .unwrap();
    first.add_peer("node-2", closed_port).unwrap();
    let large = "x".repeat(3000);
    first.send("node-2", &large).unwrap();
    first.send("node-2", &large).unwrap();
    let refused = first.send("node-2", &large);
    assert!(
        matches!(refused, Err(SendError::QueueFull(_))),
        "two frames of about 3,000 bytes queued: a third would pass 8,192 bytes: {refused:?}"
    );
    assert_eq!(first.stats().send_dropped_queue_full, 1);
    first
        .send("node-2", &"small".to_owned())
        .expect("a small frame still fits");
}

#[tokio::test]
async fn frames_for_a_peer_down_too_long_are_dropped_and_counted() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let mut config = config(CLUSTER);
    config.peer_down_drop_after = Duration::from_millis(100);
    let (first, _inbound) = start(&certs, "node-1", config).await;
    let closed_port = std::net::TcpListener::bind(loopback(0))
        .unwrap()
        .local_addr()
        .unwrap();
    first.add_peer("node-2", closed_port).unwrap();
    for index in 0..3 {
        first.send("node-2", &format!("{index}")).unwrap();
    }
    eventually("the queued frames are dropped", || {
        first.stats().send_dropped_peer_down == 3
    })
    .await;
    let refused = first.send("node-2", &"still down".to_owned());
    assert!(
        matches!(refused, Err(SendError::PeerDown(_))),
        "{refused:?}"
    );
    assert_eq!(first.stats().send_dropped_peer_down, 4);
}

/// Restarts `node_id` on `address` (its old listener may take a moment to close).
async fn restart(
    certs: &Certs,
    node_id: &str,
    address: std::net::SocketAddr,
) -> (Transport<Message>, Inbound<Message>) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let mut config = config(CLUSTER);
        config.listen_addr = address;
        match Transport::start(config, certs.identity(node_id)).await {
            Ok(started) => return started,
            Err(error) => assert!(
                tokio::time::Instant::now() < deadline,
                "cannot restart {node_id}: {error}"
            ),
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[tokio::test]
async fn a_restarted_peer_is_reconnected_to_either_way() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let (first, mut first_inbound) = start(&certs, "node-1", config(CLUSTER)).await;
    let (second, second_inbound) = start(&certs, "node-2", config(CLUSTER)).await;
    connect_all(&[&first, &second]);
    second.send("node-1", &"before".to_owned()).unwrap();
    assert_eq!(receive(&mut first_inbound).await.message, "before");

    // The acceptor (node-2) restarts: the dialer redials it.
    let second_address = second.local_addr();
    drop((second, second_inbound));
    let (second, mut second_inbound) = restart(&certs, "node-2", second_address).await;
    second.add_peer("node-1", first.local_addr()).unwrap();
    eventually("node-1 has reconnected", || first.stats().reconnects >= 1).await;
    first
        .send("node-2", &"after acceptor restart".to_owned())
        .unwrap();
    let incoming = receive(&mut second_inbound).await;
    assert_eq!(
        (incoming.from.as_str(), incoming.message.as_str()),
        ("node-1", "after acceptor restart")
    );

    // The dialer (node-1) restarts: the acceptor takes its new connection.
    let first_address = first.local_addr();
    drop((first, first_inbound));
    let (first, mut first_inbound) = restart(&certs, "node-1", first_address).await;
    first.add_peer("node-2", second.local_addr()).unwrap();
    eventually("node-2 has the new connection", || {
        second.stats().reconnects >= 1
    })
    .await;
    second
        .send("node-1", &"after dialer restart".to_owned())
        .unwrap();
    assert_eq!(
        receive(&mut first_inbound).await.message,
        "after dialer restart"
    );
}

/// A peer whose connection was lost is reported (for as long as it stays lost) until it is
/// back; a peer never connected is not.
#[tokio::test]
async fn a_lost_connection_is_reported_until_the_peer_is_back() {
    let certs = Certs::new(&["node-1", "node-2", "node-3"]);
    let (first, mut first_inbound) = start(&certs, "node-1", config(CLUSTER)).await;
    let (second, second_inbound) = start(&certs, "node-2", config(CLUSTER)).await;
    connect_all(&[&first, &second]);
    let closed_port = std::net::TcpListener::bind(loopback(0))
        .unwrap()
        .local_addr()
        .unwrap();
    first.add_peer("node-3", closed_port).unwrap();
    second.send("node-1", &"up".to_owned()).unwrap();
    assert_eq!(receive(&mut first_inbound).await.message, "up");
    assert!(first.peers_lost_for(Duration::ZERO).is_empty());

    let second_address = second.local_addr();
    drop((second, second_inbound));
    eventually("node-1 sees node-2's connection lost", || {
        first.peers_lost_for(Duration::ZERO) == ["node-2"]
    })
    .await;
    assert!(
        first.peers_lost_for(Duration::from_secs(3600)).is_empty(),
        "lost for less than an hour"
    );

    let (second, _second_inbound) = restart(&certs, "node-2", second_address).await;
    second.add_peer("node-1", first.local_addr()).unwrap();
    eventually("node-2 is back", || {
        first.peers_lost_for(Duration::ZERO).is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_removed_peer_is_disconnected_and_can_be_added_again() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let (first, _first_inbound) = start(&certs, "node-1", config(CLUSTER)).await;
    let (second, mut second_inbound) = start(&certs, "node-2", config(CLUSTER)).await;
    connect_all(&[&first, &second]);
    first.send("node-2", &"one".to_owned()).unwrap();
    assert_eq!(receive(&mut second_inbound).await.message, "one");

    assert!(first.remove_peer("node-2"));
    assert!(!first.remove_peer("node-2"));
    assert!(first.peers().is_empty());
    assert!(matches!(
        first.send("node-2", &"gone".to_owned()),
        Err(SendError::UnknownPeer(_))
    ));
    eventually("node-2 sees the connection end", || {
        second.stats().connections_ended == 1
    })
    .await;

    first.add_peer("node-2", second.local_addr()).unwrap();
    first.send("node-2", &"two".to_owned()).unwrap();
    assert_eq!(receive(&mut second_inbound).await.message, "two");
    assert_eq!(second.stats().reconnects, 1);
}

#[tokio::test]
async fn closing_ends_inbound_and_fails_sends() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let (first, mut inbound) = start(&certs, "node-1", config(CLUSTER)).await;
    first.add_peer("node-2", loopback(1)).unwrap();
    first.close();
    assert!(
        tokio::time::timeout(DEADLINE, inbound.recv())
            .await
            .unwrap()
            .is_none()
    );
    assert!(matches!(
        first.send("node-2", &"x".to_owned()),
        Err(SendError::Closed)
    ));
}

#[tokio::test]
async fn a_peer_named_by_dns_is_dialed_at_what_the_name_resolves_to() {
    let certs = Certs::new(&["node-1", "node-2"]);
    let (first, _first_inbound) = start(&certs, "node-1", config(CLUSTER)).await;
    let (second, mut second_inbound) = start(&certs, "node-2", config(CLUSTER)).await;
    // node-1 dials (the smaller id); it knows node-2 only by name.
    let named: crate::PeerAddress = format!("localhost:{}", second.local_addr().port())
        .parse()
        .unwrap();
    first.add_peer("node-2", named).unwrap();
    second.add_peer("node-1", first.local_addr()).unwrap();
    first.send("node-2", &"by name".to_owned()).unwrap();
    let incoming = receive(&mut second_inbound).await;
    assert_eq!(
        (incoming.from.as_str(), incoming.message.as_str()),
        ("node-1", "by name")
    );
}
