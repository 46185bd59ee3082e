//! Scenario tests of recovery on an empty journal (`Replica::start_empty`): a new group starts
//! only once every replica has answered, and a replica that lost its disk takes its state from
//! its peers and never votes on what it forgot.

use super::message::{LogSuffix, Message, Status};
use super::test_cluster::{Cluster, SETTLE_TICKS};

fn committed_everywhere(cluster: &Cluster, op: u64) -> bool {
    (0..cluster.replicas.len()).all(|index| {
        cluster.replicas[index]
            .as_ref()
            .is_some_and(|replica| replica.status() == Status::Normal && replica.commit() >= op)
    })
}

#[test]
fn a_new_group_on_empty_journals_starts_only_once_every_replica_has_answered() {
    let mut cluster = Cluster::new_empty(3);
    cluster.lose_disk(2);
    cluster.put(0, 1, 1, 10);
    cluster.run(SETTLE_TICKS);
    assert!(
        cluster.replies.is_empty(),
        "nothing commits before the group has started"
    );
    for index in 0..2 {
        assert_eq!(
            cluster.replica(index).status(),
            Status::Recovering,
            "replica {index} cannot tell a new group from a lost disk without replica 2"
        );
    }
    cluster.restart_empty(2);
    cluster.run(SETTLE_TICKS);
    let primary = (cluster.replica(0).view() % 3) as u8;
    cluster.put(primary, 1, 1, 10);
    cluster.run(SETTLE_TICKS);
    assert_eq!(cluster.replies.len(), 1);
    assert!(committed_everywhere(&cluster, 1));
}

#[test]
fn a_replica_that_lost_its_disk_acknowledges_nothing_until_it_has_every_committed_op() {
    let mut cluster = Cluster::new(3);
    for request_number in 1..=3 {
        cluster.put(0, 1, request_number, request_number * 10);
        cluster.run(5);
    }
    assert!(committed_everywhere(&cluster, 3));
    cluster.lose_disk(1);
    cluster.restart_empty(1);
    let empty = cluster.replicas[1].as_mut().expect("restarted");
    assert_eq!(empty.status(), Status::Recovering);
    let probes = [
        Message::StartViewChange {
            view: 1,
            replica: 2,
        },
        Message::DoViewChange {
            view: 1,
            replica: 2,
            log_view: 0,
            log: LogSuffix::from_root(Vec::new()),
            commit: 0,
            forgetful: false,
        },
    ];
    for probe in probes {
        let actions = empty.on_message(probe);
        assert!(
            actions.is_empty(),
            "an empty replica votes for nothing: {actions:?}"
        );
    }
    cluster.run(SETTLE_TICKS);
    let recovered = cluster.replica(1);
    assert_eq!(recovered.status(), Status::Normal);
    assert_eq!(recovered.commit(), 3);
    assert_eq!(
        recovered.state_machine().get(1),
        Some(30),
        "state taken from the primary"
    );
}

/// Ops 1–2 are committed by replicas 0 and 1 only; then replica 1 loses its disk and replica 0
/// crashes. Replica 2 never saw the ops, so a view change of replicas 1 and 2 would lose them:
/// the empty replica must not take part. Once replica 0 is back with its journal, the group goes
/// on with both ops.
#[test]
fn an_empty_replica_never_makes_up_a_quorum_that_would_forget_committed_ops() {
    let mut cluster = Cluster::new(3);
    cluster.inbound_blocked[2] = true;
    cluster.put(0, 1, 1, 10);
    cluster.run(5);
    cluster.put(0, 1, 2, 20);
    cluster.run(5);
    assert_eq!(
        cluster.replies.len(),
        2,
        "replicas 0 and 1 committed both ops"
    );
    assert_eq!(cluster.replica(2).op(), 0);
    cluster.lose_disk(1);
    cluster.crash(0);
    cluster.inbound_blocked[2] = false;
    cluster.restart_empty(1);
    cluster.run(SETTLE_TICKS * 3);
    assert_eq!(cluster.replica(1).status(), Status::Recovering);
    assert_ne!(
        cluster.replica(2).status(),
        Status::Normal,
        "replica 2 finds no quorum to elect a primary with"
    );
    cluster.restart(0);
    cluster.run(SETTLE_TICKS * 3);
    cluster.put(cluster.replica(0).view() as u8 % 3, 1, 3, 30);
    cluster.run(SETTLE_TICKS);
    for index in 0..3 {
        let replica = cluster.replica(index);
        assert_eq!(replica.status(), Status::Normal, "replica {index}");
        assert_eq!(replica.state_machine().get(1), Some(30), "replica {index}");
    }
    assert!(cluster.replica(1).commit() >= 3);
}
