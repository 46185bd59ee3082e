//! The router: frames of a running group are delivered, others parked within their bounds and
//! delivered in order on materialisation, discarded with their group, and counted throughout.

use super::*;
use crate::message::Request;

fn commit(group: u64, commit: u64) -> GroupFrame {
    GroupFrame {
        group: GroupId(group),
        message: GroupMessage::Replica(Message::Commit { view: 1, commit }),
    }
}

fn submit(group: u64, bytes: usize) -> GroupFrame {
    GroupFrame {
        group: GroupId(group),
        message: GroupMessage::Submit {
            origin: "n1".into(),
            request: Request {
                client: 1,
                request_number: 1,
                operation: vec![0; bytes],
            },
        },
    }
}

#[test]
fn parked_frames_reach_their_group_in_order_when_it_materialises() {
    let router = GroupRouter::default();
    for op in 1..=3 {
        router.route("n2".into(), commit(5, op));
    }
    assert_eq!(router.parked_now().0, 3);
    let (queue, mut inbound) = mpsc::channel(16);
    router.materialise(GroupId(5), queue);
    for op in 1..=3 {
        assert_eq!(
            inbound.try_recv().expect("parked frame"),
            ("n2".into(), commit(5, op))
        );
    }
    router.route("n3".into(), commit(5, 4));
    assert_eq!(
        inbound.try_recv().expect("routed"),
        ("n3".into(), commit(5, 4))
    );
    let stats = router.stats();
    assert_eq!(
        (stats.parked, stats.parked_delivered, stats.delivered),
        (3, 3, 1)
    );
    assert_eq!(router.parked_now(), (0, 0));
}

#[test]
fn parking_is_bounded_per_group_across_groups_and_in_bytes() {
    let router = GroupRouter::default();
    for op in 0..PARKED_FRAMES_PER_GROUP_MAX as u64 + 10 {
        router.route("n2".into(), commit(1, op));
    }
    assert_eq!(router.parked_now().0, PARKED_FRAMES_PER_GROUP_MAX);
    assert_eq!(router.stats().parked_dropped, 10);
    // Group 1 is parked already: 5 groups more than the bound have nowhere to go.
    for group in 2..=PARKED_GROUPS_MAX as u64 + 5 {
        router.route("n2".into(), commit(group, 1));
    }
    assert_eq!(router.stats().parked_dropped, 10 + 5);
    let router = GroupRouter::default();
    let big = PARKED_BYTES_MAX / 4;
    for _ in 0..6 {
        router.route("n2".into(), submit(1, big));
    }
    let (frames, bytes) = router.parked_now();
    assert_eq!(
        frames, 3,
        "three quarters fit, the fourth would pass the byte bound"
    );
    assert!(bytes <= PARKED_BYTES_MAX);
}

#[test]
fn a_removed_group_discards_its_parked_frames_and_a_full_queue_drops_and_counts() {
    let router = GroupRouter::default();
    router.route("n2".into(), submit(7, 1000));
    router.remove(GroupId(7));
    assert_eq!(router.parked_now(), (0, 0));
    assert_eq!(router.stats().parked_discarded, 1);
    let (queue, _inbound) = mpsc::channel(1);
    router.materialise(GroupId(8), queue);
    router.route("n2".into(), commit(8, 1));
    router.route("n2".into(), commit(8, 2));
    let stats = router.stats();
    assert_eq!((stats.delivered, stats.queue_full), (1, 1));
}

#[test]
fn a_group_whose_driver_stopped_has_its_frames_parked_again() {
    let router = GroupRouter::default();
    let (queue, inbound) = mpsc::channel(4);
    router.materialise(GroupId(3), queue);
    drop(inbound);
    router.route("n2".into(), commit(3, 1));
    assert_eq!(router.parked_now().0, 1);
}
