//! A learner follows a voter of the hand-driven cluster: from the log, from a checkpoint when
//! the log was trimmed, and refusing entries that do not chain.

use super::learner::{LearnError, Learner};
use super::message::Entry;
use super::state_machine::KeyValue;
use super::test_cluster::Cluster;

/// A small interval so the log is trimmed within a few dozen ops.
const INTERVAL_OPS: u64 = 8;

fn run_puts(cluster: &mut Cluster, numbers: std::ops::RangeInclusive<u64>) {
    for number in numbers {
        cluster.put(0, 1, number, number);
        cluster.run(1);
    }
}

/// What a voter would send a learner that applied `after`: its committed entries above it.
fn entries_after(cluster: &Cluster, after: u64) -> Vec<Entry> {
    let voter = cluster.replica(1);
    voter
        .log()
        .iter()
        .filter(|entry| entry.op > after && entry.op <= voter.applied())
        .cloned()
        .collect()
}

#[test]
fn a_learner_applies_the_committed_log_and_ends_in_the_voters_state() {
    let mut cluster = Cluster::new(3);
    run_puts(&mut cluster, 1..=20);
    let mut learner = Learner::new(KeyValue::default());
    for entry in entries_after(&cluster, 0) {
        learner.apply(&entry).expect("the next committed entry");
    }
    let voter = cluster.replica(1);
    assert_eq!(learner.applied(), voter.applied());
    assert_eq!(learner.state_machine(), voter.state_machine());
    assert_eq!(learner.state_machine().get(1), Some(20));
}

#[test]
fn a_learner_behind_the_trimmed_log_installs_the_checkpoint_then_applies_the_rest() {
    let mut cluster = Cluster::with_checkpoint_interval(3, INTERVAL_OPS);
    run_puts(&mut cluster, 1..=60);
    let voter = cluster.replica(1);
    assert!(voter.log_base() > 0, "the log was trimmed");
    let mut learner = Learner::new(KeyValue::default());
    let first = entries_after(&cluster, 0);
    assert!(
        learner.apply(&first[0]).is_err(),
        "op 1 is gone: the first entry held is not the next op"
    );
    learner
        .install(voter.checkpoint())
        .expect("an intact, newer checkpoint");
    for entry in entries_after(&cluster, learner.applied()) {
        learner.apply(&entry).expect("entries above the checkpoint");
    }
    assert_eq!(learner.applied(), voter.applied());
    assert_eq!(learner.state_machine(), voter.state_machine());
}

#[test]
fn entries_that_do_not_chain_or_are_corrupt_change_nothing() {
    let mut cluster = Cluster::new(3);
    run_puts(&mut cluster, 1..=5);
    let entries = entries_after(&cluster, 0);
    let mut learner = Learner::new(KeyValue::default());
    learner.apply(&entries[0]).expect("op 1");

    let skipped = learner.apply(&entries[2]);
    assert_eq!(skipped, Err(LearnError::NotNext { applied: 1, got: 3 }));
    let mut corrupt = entries[1].clone();
    corrupt.requests[0].operation.push(0);
    assert_eq!(learner.apply(&corrupt), Err(LearnError::Broken(2)));
    let mut forged = entries[1].clone();
    forged.parent ^= 1;
    forged.checksum = forged.compute_checksum();
    assert_eq!(learner.apply(&forged), Err(LearnError::Broken(2)));
    assert_eq!(learner.applied(), 1, "nothing applied past op 1");
    assert_eq!(learner.state_machine().get(1), Some(1));

    let mut stale = cluster.replica(1).checkpoint().clone();
    stale.state_checksum ^= 1;
    assert!(learner.install(&stale).is_err(), "a corrupt checkpoint");
    learner.apply(&entries[1]).expect("op 2, intact, chains");
}
