//! Scenario tests of checkpoints, state transfer and evicted sessions over the hand-driven
//! cluster: each names one behaviour and asserts it directly.

use super::config::{CLIENT_SESSIONS_MAX, Config};
use super::journal::InMemoryJournal;
use super::message::{Message, ReplyError, Request};
use super::replica::Replica;
use super::state_machine::{KeyValue, KeyValueOperation};
use super::test_cluster::{Cluster, SETTLE_TICKS};

/// A small interval so a few dozen ops take several checkpoints.
const INTERVAL_OPS: u64 = 8;

fn put_sequence(cluster: &mut Cluster, numbers: std::ops::RangeInclusive<u64>) {
    for number in numbers {
        cluster.put(0, 1, number, number);
        cluster.run(1);
    }
}

fn request(client: u64, request_number: u64, value: u64) -> Message {
    let operation = KeyValueOperation::Put { key: 1, value }.encode();
    Message::Request(Request {
        client,
        request_number,
        operation,
    })
}

#[test]
fn checkpoints_keep_the_log_a_bounded_window() {
    let mut cluster = Cluster::with_checkpoint_interval(3, INTERVAL_OPS);
    put_sequence(&mut cluster, 1..=100);
    for index in 0..3 {
        let replica = cluster.replica(index);
        assert_eq!(replica.commit(), 100, "replica {index}");
        assert_eq!(
            replica.checkpoint().op,
            96,
            "checkpoint every {INTERVAL_OPS} ops"
        );
        assert!(
            replica.log_base() >= 96 - INTERVAL_OPS,
            "old entries discarded"
        );
        assert!(replica.log().len() as u64 <= 2 * INTERVAL_OPS);
        assert_eq!(replica.checkpoint(), cluster.replica(0).checkpoint());
    }
}

#[test]
fn a_cluster_commits_past_the_old_total_log_cap() {
    let mut replica = Replica::format(
        Config::new(1, 0),
        InMemoryJournal::new(),
        KeyValue::default(),
    )
    .expect("format");
    let ops = (1 << 16) + 100;
    for number in 1..=ops {
        replica.on_message(request(1, number, number));
    }
    assert_eq!(replica.commit(), ops);
    assert_eq!(replica.state_machine().get(1), Some(ops));
    assert!(replica.log().len() as u64 <= Config::new(1, 0).log_entries_max());
}

#[test]
fn a_backup_behind_the_log_window_catches_up_by_state_transfer() {
    let mut cluster = Cluster::with_checkpoint_interval(3, INTERVAL_OPS);
    cluster.inbound_blocked[2] = true;
    put_sequence(&mut cluster, 1..=60);
    assert!(
        cluster.replica(0).log_base() > 0,
        "the primary discarded op 1"
    );
    cluster.inbound_blocked[2] = false;
    cluster.run(SETTLE_TICKS);
    // The blocked replica's own view change may have moved the primary and dropped some of
    // the requests sent to replica 0; whatever committed, the lagging replica has it too.
    let committed = cluster.replica(0).commit();
    assert!(committed >= 3 * INTERVAL_OPS);
    let lagging = cluster.replica(2);
    assert_eq!(lagging.commit(), committed);
    assert!(lagging.counters().states_installed >= 1);
    assert_eq!(lagging.state_machine(), cluster.replica(0).state_machine());
}

#[test]
fn a_restarted_replica_rejoins_by_state_transfer_after_the_others_moved_on() {
    let mut cluster = Cluster::with_checkpoint_interval(3, INTERVAL_OPS);
    put_sequence(&mut cluster, 1..=5);
    cluster.crash(1);
    put_sequence(&mut cluster, 6..=70);
    cluster.restart(1);
    cluster.run(SETTLE_TICKS);
    let restarted = cluster.replica(1);
    assert_eq!(restarted.commit(), 70);
    assert!(restarted.counters().states_installed >= 1);
    assert_eq!(
        restarted.state_machine(),
        cluster.replica(0).state_machine()
    );
}

#[test]
fn a_restart_resumes_from_the_latest_checkpoint_and_the_journal_above_it() {
    let mut cluster = Cluster::with_checkpoint_interval(1, INTERVAL_OPS);
    put_sequence(&mut cluster, 1..=29);
    let before = cluster.replica(0).state_machine().clone();
    cluster.crash(0);
    cluster.restart(0);
    let restarted = cluster.replica(0);
    assert_eq!(restarted.checkpoint().op, 24);
    assert_eq!(
        restarted.log_base(),
        24,
        "the log restarts at the checkpoint"
    );
    assert_eq!((restarted.commit(), restarted.applied()), (29, 29));
    assert_eq!(restarted.state_machine(), &before);
}

#[test]
fn a_corrupted_transferred_checkpoint_is_rejected() {
    let mut cluster = Cluster::with_checkpoint_interval(3, INTERVAL_OPS);
    cluster.inbound_blocked[2] = true;
    put_sequence(&mut cluster, 1..=40);
    let checkpoint = cluster.replica(0).checkpoint().clone();
    let mut bytes = checkpoint.state.clone();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    let chunk = Message::StateChunk {
        replica: 0,
        op: checkpoint.op,
        entry_checksum: checkpoint.entry_checksum,
        state_checksum: checkpoint.state_checksum,
        state_bytes: bytes.len() as u64,
        offset: 0,
        bytes,
    };
    let lagging = cluster.replicas[2].as_mut().expect("running");
    lagging.on_message(chunk);
    assert_eq!(lagging.counters().states_rejected, 1);
    assert_eq!((lagging.applied(), lagging.checkpoint().op), (0, 0));
}

#[test]
fn an_evicted_client_is_told_so_and_nothing_executes_again() {
    let mut replica = Replica::format(
        Config::new(1, 0),
        InMemoryJournal::new(),
        KeyValue::default(),
    )
    .expect("format");
    for client in 0..=CLIENT_SESSIONS_MAX as u64 {
        replica.on_message(request(client, 1, client));
    }
    let last = CLIENT_SESSIONS_MAX as u64;
    assert_eq!(replica.state_machine().get(1), Some(last));
    for request_number in [1, 2] {
        let actions = replica.on_message(request(0, request_number, 77));
        let replies: Vec<_> = actions
            .iter()
            .filter_map(|action| match action {
                super::replica::Action::Reply(reply) => Some(reply.result.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(replies, vec![Err(ReplyError::SessionEvicted)]);
    }
    assert_eq!(
        replica.state_machine().get(1),
        Some(last),
        "client 0 was not re-executed"
    );
}

/// A request carrying `bytes` of operation (not a key-value command: the machine refuses it,
/// but it is ordered and logged like any other).
fn large_request(request_number: u64, bytes: usize) -> Message {
    Message::Request(Request {
        client: 1,
        request_number,
        operation: vec![0xc1; bytes],
    })
}

#[test]
fn large_operations_checkpoint_before_the_interval_and_keep_the_log_within_its_bytes() {
    use super::config::{BATCH_BYTES_MAX, CHECKPOINT_LOG_BYTES, PIPELINE_PREPARE_QUEUE_MAX};
    const MIB: usize = 1024 * 1024;
    let mut cluster = Cluster::new(3);
    for request_number in 1..=60 {
        cluster.send(0, large_request(request_number, MIB));
        cluster.run(2);
    }
    cluster.run(SETTLE_TICKS);
    let first = cluster.replica(0).checkpoint().clone();
    for index in 0..3 {
        let replica = cluster.replica(index);
        assert_eq!(replica.commit(), 60, "replica {index}");
        // 16 ops of 1 MiB fill the bytes of an interval of 1,024 ops.
        assert!(
            replica.counters().checkpoints_taken >= 3,
            "replica {index}: {:?}",
            replica.counters()
        );
        assert_eq!(
            *replica.checkpoint(),
            first,
            "the same checkpoint on every replica"
        );
        let bytes: usize = replica
            .log()
            .iter()
            .flat_map(|entry| &entry.requests)
            .map(|request| request.operation.len())
            .sum();
        let bound = 2 * CHECKPOINT_LOG_BYTES as usize
            + PIPELINE_PREPARE_QUEUE_MAX as usize * BATCH_BYTES_MAX;
        assert!(bytes <= bound, "replica {index} logs {bytes} bytes");
        assert!(
            bytes <= 2 * CHECKPOINT_LOG_BYTES as usize,
            "all committed: {bytes}"
        );
    }
}
