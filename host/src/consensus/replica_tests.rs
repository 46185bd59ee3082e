//! Scenario tests of one replica group over a perfect, hand-driven network: each names one
//! protocol behaviour and asserts it directly. Randomised faults are the simulator's job.

use std::collections::VecDeque;

use super::config::{Config, PIPELINE_PREPARE_QUEUE_MAX};
use super::journal::InMemoryJournal;
use super::message::{CHECKSUM_ROOT, Entry, Message, ReplicaIndex, Reply, Request, Status};
use super::replica::{Action, Replica};
use super::state_machine::{KeyValue, KeyValueOperation, KeyValueResult};

type TestReplica = Replica<InMemoryJournal, KeyValue>;

/// Ticks enough for any view change or repair with default timeouts.
const SETTLE_TICKS: u64 = 400;

struct Cluster {
    replicas: Vec<Option<TestReplica>>,
    journals: Vec<Option<InMemoryJournal>>,
    queue: VecDeque<(ReplicaIndex, Message)>,
    replies: Vec<Reply>,
    applied_counts: Vec<u64>,
    inbound_blocked: Vec<bool>,
    batch_requests_max: usize,
}

impl Cluster {
    fn new(replica_count: u8) -> Cluster {
        Cluster::with_batch(replica_count, 1)
    }

    fn with_batch(replica_count: u8, batch_requests_max: usize) -> Cluster {
        let mut cluster = Cluster {
            replicas: Vec::new(),
            journals: (0..replica_count).map(|_| None).collect(),
            queue: VecDeque::new(),
            replies: Vec::new(),
            applied_counts: vec![0; usize::from(replica_count)],
            inbound_blocked: vec![false; usize::from(replica_count)],
            batch_requests_max,
        };
        for index in 0..replica_count {
            let config = cluster.config(index);
            let replica = Replica::format(config, InMemoryJournal::new(), KeyValue::default());
            cluster
                .replicas
                .push(Some(replica.expect("a valid configuration formats")));
        }
        cluster
    }

    fn config(&self, replica: ReplicaIndex) -> Config {
        let mut config = Config::new(self.replicas.len().max(self.journals.len()) as u8, replica);
        config.batch_requests_max = self.batch_requests_max;
        config
    }

    fn replica(&self, index: usize) -> &TestReplica {
        self.replicas[index].as_ref().expect("replica is running")
    }

    fn send(&mut self, to: ReplicaIndex, message: Message) {
        self.queue.push_back((to, message));
    }

    fn put(&mut self, to: ReplicaIndex, client: u64, request_number: u64, value: u64) {
        let operation = KeyValueOperation::Put { key: 1, value }.encode();
        self.send(
            to,
            Message::Request(Request {
                client,
                request_number,
                operation,
            }),
        );
    }

    fn handle(&mut self, index: usize, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Send { to, message } => self.queue.push_back((to, message)),
                Action::Reply(reply) => self.replies.push(reply),
                Action::Applied { .. } => self.applied_counts[index] += 1,
            }
        }
    }

    fn deliver_all(&mut self) {
        while let Some((to, message)) = self.queue.pop_front() {
            let index = usize::from(to);
            if self.inbound_blocked[index] {
                continue;
            }
            if let Some(replica) = self.replicas[index].as_mut() {
                let actions = replica.on_message(message);
                self.handle(index, actions);
            }
        }
    }

    fn run(&mut self, ticks: u64) {
        for _ in 0..ticks {
            self.deliver_all();
            for index in 0..self.replicas.len() {
                if let Some(replica) = self.replicas[index].as_mut() {
                    let actions = replica.tick();
                    self.handle(index, actions);
                }
            }
        }
        self.deliver_all();
    }

    fn crash(&mut self, index: usize) {
        let replica = self.replicas[index].take().expect("replica is running");
        self.journals[index] = Some(replica.into_journal());
    }

    fn restart(&mut self, index: usize) {
        let journal = self.journals[index].take().expect("replica was crashed");
        let config = self.config(index as ReplicaIndex);
        let replica = Replica::open(config, journal, KeyValue::default(), 99 + index as u64);
        self.replicas[index] = Some(replica.expect("a synced journal recovers"));
        self.applied_counts[index] = 0;
    }
}

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
        KeyValueResult::decode(&cluster.replies[0].result),
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
            log: Vec::new(),
            commit: 0,
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
            log: vec![orphan.clone()],
            commit: 0,
        },
        Message::StartView {
            view: 3,
            log: vec![torn],
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
