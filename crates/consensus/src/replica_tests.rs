//! Scenario tests of one replica group over a perfect, hand-driven network: each names one
//! protocol behaviour and asserts it directly. Randomised faults are the simulator's job.

use super::config::PIPELINE_PREPARE_QUEUE_MAX;
use super::message::{CHECKSUM_ROOT, Entry, LogSuffix, Message, Status};
use super::state_machine::KeyValueResult;
use super::test_cluster::{Cluster, SETTLE_TICKS};

#[test]
fn every_cluster_size_from_one_to_five_commits_and_replies_once() {
    for replica_count in 1..=5 {
        let mut cluster = Cluster::new(replica_count);
        cluster.put(0, 1, 1, 10);
        cluster.run(10);
        assert_eq!(
            cluster.replies.len(),
            1,
            "one reply with {replica_count} replicas"
        );
        for index in 0..usize::from(replica_count) {
            assert_eq!(
                cluster.replica(index).commit(),
                1,
                "replica {index} of {replica_count}"
            );
            assert_eq!(cluster.replica(index).state_machine().get(1), Some(10));
        }
    }
}

#[test]
fn a_retried_request_executes_once_and_gets_the_same_reply() {
    let mut cluster = Cluster::new(3);
    cluster.put(0, 1, 1, 10);
    cluster.run(5);
    cluster.put(0, 1, 1, 10);
    cluster.put(0, 1, 1, 10);
    cluster.run(5);
    assert_eq!(cluster.replies.len(), 3);
    assert!(
        cluster
            .replies
            .iter()
            .all(|reply| reply == &cluster.replies[0])
    );
    assert_eq!(
        KeyValueResult::decode(cluster.replies[0].result.as_deref().unwrap_or_default()),
        KeyValueResult::Value(None)
    );
    assert_eq!(
        cluster.replica(0).op(),
        1,
        "the retries were not prepared again"
    );
    assert_eq!(cluster.applied_counts, vec![1, 1, 1]);
}

#[test]
fn a_view_change_elects_the_next_primary_and_keeps_committed_ops() {
    let mut cluster = Cluster::new(3);
    for number in 1..=3 {
        cluster.put(0, 1, number, number);
    }
    cluster.run(5);
    cluster.crash(0);
    cluster.run(SETTLE_TICKS);
    let new_primary = cluster.replica(1);
    assert!(
        new_primary.view() >= 1 && new_primary.is_primary(),
        "replica 1 leads view 1"
    );
    assert_eq!(new_primary.status(), Status::Normal);
    let view = new_primary.view();
    cluster.put(1, 1, 4, 4);
    cluster.run(5);
    for index in 1..=2 {
        assert_eq!(
            cluster.replica(index).commit(),
            4,
            "replica {index} kept ops 1-3 and added 4"
        );
        assert_eq!(cluster.replica(index).view(), view);
        assert_eq!(cluster.replica(index).state_machine().get(1), Some(4));
    }
}

/// A backup that asks for the primary's role gets it in the next view it leads, by a view
/// change: committed ops are kept, new ones commit through it, and a primary asking changes
/// nothing.
#[test]
fn a_caught_up_backup_takes_the_primary_role_by_a_view_change_and_keeps_committed_ops() {
    let mut cluster = Cluster::new(3);
    for number in 1..=3 {
        cluster.put(0, 1, number, number);
    }
    cluster.run(5);
    cluster.take_primary(0);
    cluster.run(5);
    assert_eq!(
        cluster.replica(0).view(),
        0,
        "the primary asking changes nothing"
    );

    cluster.take_primary(2);
    cluster.run(SETTLE_TICKS);
    let taken = cluster.replica(2);
    assert!(taken.is_primary(), "replica 2 leads");
    assert_eq!(taken.view(), 2, "the next view replica 2 is the primary of");
    assert_eq!(taken.status(), Status::Normal);
    cluster.put(2, 1, 4, 4);
    cluster.run(5);
    for index in 0..=2 {
        assert_eq!(cluster.replica(index).view(), 2, "replica {index} follows");
        assert_eq!(
            cluster.replica(index).commit(),
            4,
            "replica {index} kept 1-3 and added 4"
        );
        assert_eq!(cluster.replica(index).state_machine().get(1), Some(4));
    }
}

#[test]
fn a_recovering_replica_votes_for_nothing_until_it_has_recovered() {
    let mut cluster = Cluster::new(3);
    cluster.put(0, 1, 1, 10);
    cluster.run(5);
    cluster.crash(2);
    cluster.restart(2);
    let recovering = cluster.replicas[2].as_mut().expect("restarted");
    assert_eq!(recovering.status(), Status::Recovering);
    let probes = [
        Message::StartViewChange {
            view: 5,
            replica: 1,
        },
        Message::Prepare {
            view: 0,
            entry: recovering.log()[0].clone(),
            commit: 1,
        },
        Message::DoViewChange {
            view: 5,
            replica: 0,
            log_view: 0,
            log: LogSuffix::from_root(Vec::new()),
            commit: 0,
            forgetful: false,
        },
    ];
    for probe in probes {
        let actions = recovering.on_message(probe);
        assert!(
            actions.is_empty(),
            "a recovering replica answers no vote: {actions:?}"
        );
    }
    assert_eq!(recovering.status(), Status::Recovering);
    cluster.run(SETTLE_TICKS);
    let recovered = cluster.replica(2);
    assert_eq!(recovered.status(), Status::Normal);
    assert_eq!((recovered.view(), recovered.commit()), (0, 1));
    assert_eq!(
        recovered.state_machine().get(1),
        Some(10),
        "state rebuilt from the journal"
    );
}

#[test]
fn a_lagging_replica_catches_up_by_repair() {
    let mut cluster = Cluster::new(3);
    cluster.inbound_blocked[2] = true;
    for number in 1..=40 {
        cluster.put(0, 1, number, number);
        cluster.run(1);
    }
    assert_eq!(cluster.replica(0).commit(), 40);
    assert_eq!(cluster.replica(2).op(), 0);
    cluster.inbound_blocked[2] = false;
    cluster.run(SETTLE_TICKS);
    assert_eq!(cluster.replica(2).commit(), 40);
    assert_eq!(cluster.replica(2).state_machine().get(1), Some(40));
    assert_eq!(cluster.replica(2).log(), cluster.replica(0).log());
}

#[test]
fn a_partitioned_replica_rejoins_a_later_view() {
    let mut cluster = Cluster::new(3);
    cluster.put(0, 1, 1, 1);
    cluster.run(5);
    cluster.inbound_blocked[0] = true;
    cluster.run(SETTLE_TICKS);
    cluster.put(1, 1, 2, 2);
    cluster.run(5);
    assert_eq!(cluster.replica(1).commit(), 2);
    cluster.inbound_blocked[0] = false;
    cluster.run(SETTLE_TICKS);
    let old_primary = cluster.replica(0);
    assert_eq!(old_primary.view(), cluster.replica(1).view());
    assert_eq!(old_primary.status(), Status::Normal);
    assert_eq!(old_primary.commit(), 2);
}

#[test]
fn the_pipeline_is_bounded_and_batching_drains_the_queue_in_one_op() {
    for (batch, ops_expected) in [(1, 20), (64, PIPELINE_PREPARE_QUEUE_MAX + 1)] {
        let mut cluster = Cluster::with_batch(3, batch);
        cluster.inbound_blocked[1] = true;
        cluster.inbound_blocked[2] = true;
        for client in 1..=20 {
            cluster.put(0, client, 1, client);
        }
        cluster.deliver_all();
        assert_eq!(
            cluster.replica(0).op(),
            PIPELINE_PREPARE_QUEUE_MAX,
            "pipeline caps prepares"
        );
        assert_eq!(cluster.replica(0).commit(), 0, "no quorum, no commit");
        cluster.inbound_blocked[1] = false;
        cluster.inbound_blocked[2] = false;
        cluster.run(SETTLE_TICKS);
        assert_eq!(cluster.replica(0).op(), ops_expected, "batch size {batch}");
        assert_eq!(cluster.replies.len(), 20);
    }
}

#[test]
fn malformed_and_stale_messages_are_ignored_and_counted() {
    let mut cluster = Cluster::new(3);
    cluster.put(0, 1, 1, 1);
    cluster.run(5);
    let replica = cluster.replicas[1].as_mut().expect("running");
    let mut torn = replica.log()[0].clone();
    torn.checksum ^= 1;
    let orphan = Entry::new(1, 0, 12345, Vec::new());
    let garbage = [
        Message::PrepareOk {
            view: 0,
            op: 1,
            replica: 9,
        },
        Message::StartViewChange {
            view: 3,
            replica: 200,
        },
        Message::DoViewChange {
            view: 4,
            replica: 0,
            log_view: 0,
            log: LogSuffix::from_root(vec![orphan.clone()]),
            commit: 0,
            forgetful: false,
        },
        Message::StartView {
            view: 3,
            log: LogSuffix::from_root(vec![torn]),
            commit: 1,
        },
        Message::Prepare {
            view: 0,
            entry: Entry::new(1, 0, CHECKSUM_ROOT, Vec::new()),
            commit: 0,
        },
        Message::RecoveryResponse {
            view: 0,
            replica: 0,
            nonce: 1,
            status: Status::Normal,
            log: None,
            commit: 0,
            empty: false,
        },
        Message::Prepare {
            view: 0,
            entry: Entry::new(0, 0, CHECKSUM_ROOT, Vec::new()),
            commit: 0,
        },
    ];
    let before = replica.counters().messages_ignored;
    for message in garbage {
        replica.on_message(message);
    }
    assert_eq!(replica.counters().messages_ignored, before + 7);
    assert_eq!(
        (replica.view(), replica.commit(), replica.status()),
        (0, 1, Status::Normal)
    );
}

/// A backup that acknowledges nothing is retransmitted to less and less often (the interval
/// doubling up to 16 times), and as often as ever again once it acknowledges.
#[test]
fn retransmissions_to_a_silent_backup_back_off_and_resume_when_it_acknowledges() {
    use super::config::RETRANSMIT_DOUBLINGS_MAX;
    use super::replica::Retransmit;
    let interval = 6;
    let mut schedule = Retransmit::default();
    let sends: Vec<u64> = (0..2_000)
        .filter(|&now| schedule.due(3, true, now, interval))
        .collect();
    let gaps: Vec<u64> = sends.windows(2).map(|pair| pair[1] - pair[0]).collect();
    assert_eq!(&gaps[..4], &[6, 12, 24, 48], "doubling: {gaps:?}");
    let longest = interval << RETRANSMIT_DOUBLINGS_MAX;
    assert!(gaps.iter().all(|gap| *gap <= longest), "capped: {gaps:?}");
    assert!(
        sends.len() < 2_000 / longest as usize + 6,
        "{} retransmissions in 2,000 ticks, against {} at a fixed interval",
        sends.len(),
        2_000 / interval
    );

    // It acknowledges: the next retransmission is due at once, then an interval later.
    assert!(schedule.due(4, true, 2_000, interval));
    assert!(!schedule.due(4, true, 2_001, interval));
    assert!(schedule.due(4, true, 2_000 + interval, interval));
    // Nothing pending: nothing sent.
    assert!(!schedule.due(9, false, 3_000, interval));
}

/// Prepares of large operations still reach a lagging backup, a few megabytes per repair
/// request or retransmission rather than sixteen prepares whatever their size.
#[test]
fn a_backup_lagging_behind_large_operations_catches_up_by_bounded_repairs() {
    use super::config::REPAIR_BYTES_MAX;
    use super::message::Request;
    let mut cluster = Cluster::new(3);
    cluster.inbound_blocked[2] = true;
    let operation_bytes = 1 << 20;
    for number in 1..=12 {
        let request = Request {
            client: 1,
            request_number: number,
            operation: vec![number as u8; operation_bytes],
        };
        cluster.send(0, Message::Request(request));
        cluster.run(2);
    }
    assert_eq!(cluster.replica(0).commit(), 12);
    cluster.inbound_blocked[2] = false;
    let mut largest_burst = 0;
    for _ in 0..SETTLE_TICKS {
        let before = cluster.prepare_bytes_to[2];
        cluster.run(1);
        largest_burst = largest_burst.max(cluster.prepare_bytes_to[2] - before);
    }
    assert_eq!(cluster.replica(2).commit(), 12, "caught up");
    assert_eq!(cluster.replica(2).log(), cluster.replica(0).log());
    assert!(
        largest_burst <= REPAIR_BYTES_MAX + operation_bytes as u64,
        "{largest_burst} bytes of prepares sent to it in one tick"
    );
}
