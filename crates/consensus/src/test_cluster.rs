//! The hand-driven cluster the scenario tests use: replicas on in-memory journals, one FIFO
//! queue as a perfect network (with per-replica inbound blocking), and the replies collected.

use std::collections::VecDeque;

use super::config::{CHECKPOINT_INTERVAL_OPS, Config};
use super::journal::InMemoryJournal;
use super::message::{Message, ReplicaIndex, Reply, Request};
use super::replica::{Action, Replica, ReplicaError};
use super::state_machine::{KeyValue, KeyValueOperation};

pub(super) type TestReplica = Replica<InMemoryJournal, KeyValue>;

/// Ticks enough for any view change or repair with default timeouts.
pub(super) const SETTLE_TICKS: u64 = 400;

pub(super) struct Cluster {
    pub(super) replicas: Vec<Option<TestReplica>>,
    pub(super) journals: Vec<Option<InMemoryJournal>>,
    pub(super) queue: VecDeque<(ReplicaIndex, Message)>,
    pub(super) replies: Vec<Reply>,
    pub(super) applied_counts: Vec<u64>,
    pub(super) inbound_blocked: Vec<bool>,
    /// Operation bytes of the prepares sent to each replica, in all.
    pub(super) prepare_bytes_to: Vec<u64>,
    pub(super) batch_requests_max: usize,
    pub(super) checkpoint_interval_ops: u64,
}

impl Cluster {
    pub(super) fn new(replica_count: u8) -> Cluster {
        Cluster::with_batch(replica_count, 1)
    }

    pub(super) fn with_batch(replica_count: u8, batch_requests_max: usize) -> Cluster {
        Cluster::with_options(replica_count, batch_requests_max, CHECKPOINT_INTERVAL_OPS)
    }

    pub(super) fn with_checkpoint_interval(replica_count: u8, interval_ops: u64) -> Cluster {
        Cluster::with_options(replica_count, 1, interval_ops)
    }

    fn with_options(
        replica_count: u8,
        batch_requests_max: usize,
        checkpoint_interval_ops: u64,
    ) -> Cluster {
        Cluster::started(
            replica_count,
            batch_requests_max,
            checkpoint_interval_ops,
            |config| Replica::format(config, InMemoryJournal::new(), KeyValue::default()),
        )
    }

    /// A new group whose replicas start on empty journals, as nodes do
    /// ([`Replica::start_empty`]): it starts once every replica has answered.
    pub(super) fn new_empty(replica_count: u8) -> Cluster {
        Cluster::started(replica_count, 1, CHECKPOINT_INTERVAL_OPS, |config| {
            let nonce = 1_000 + u64::from(config.replica);
            Replica::start_empty(config, InMemoryJournal::new(), KeyValue::default(), nonce)
        })
    }

    fn started(
        replica_count: u8,
        batch_requests_max: usize,
        checkpoint_interval_ops: u64,
        start: impl Fn(Config) -> Result<TestReplica, ReplicaError>,
    ) -> Cluster {
        let mut cluster = Cluster {
            replicas: Vec::new(),
            journals: (0..replica_count).map(|_| None).collect(),
            queue: VecDeque::new(),
            replies: Vec::new(),
            applied_counts: vec![0; usize::from(replica_count)],
            inbound_blocked: vec![false; usize::from(replica_count)],
            prepare_bytes_to: vec![0; usize::from(replica_count)],
            batch_requests_max,
            checkpoint_interval_ops,
        };
        for index in 0..replica_count {
            let config = cluster.config(index);
            let replica = start(config);
            cluster
                .replicas
                .push(Some(replica.expect("a valid configuration formats")));
        }
        cluster
    }

    pub(super) fn config(&self, replica: ReplicaIndex) -> Config {
        let mut config = Config::new(self.replicas.len().max(self.journals.len()) as u8, replica);
        config.batch_requests_max = self.batch_requests_max;
        config.checkpoint_interval_ops = self.checkpoint_interval_ops;
        config
    }

    pub(super) fn replica(&self, index: usize) -> &TestReplica {
        self.replicas[index].as_ref().expect("replica is running")
    }

    pub(super) fn send(&mut self, to: ReplicaIndex, message: Message) {
        self.queue.push_back((to, message));
    }

    pub(super) fn put(&mut self, to: ReplicaIndex, client: u64, request_number: u64, value: u64) {
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

    /// Replica `index` asks for a leadership transfer ([`Replica::take_primary`]).
    pub(super) fn take_primary(&mut self, index: usize) {
        let actions = self.replicas[index]
            .as_mut()
            .expect("replica is running")
            .take_primary();
        self.handle(index, actions);
    }

    pub(super) fn handle(&mut self, index: usize, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Send { to, message } => {
                    if let Message::Prepare { entry, .. } = &message {
                        let bytes: usize = entry.requests.iter().map(|r| r.operation.len()).sum();
                        self.prepare_bytes_to[usize::from(to)] += bytes as u64;
                    }
                    self.queue.push_back((to, message));
                }
                Action::Reply(reply) => self.replies.push(reply),
                Action::Applied { .. } => self.applied_counts[index] += 1,
                Action::Checkpoint { .. } => {}
            }
        }
    }

    pub(super) fn deliver_all(&mut self) {
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

    pub(super) fn run(&mut self, ticks: u64) {
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

    pub(super) fn crash(&mut self, index: usize) {
        let replica = self.replicas[index].take().expect("replica is running");
        self.journals[index] = Some(replica.into_journal());
    }

    pub(super) fn restart(&mut self, index: usize) {
        let journal = self.journals[index].take().expect("replica was crashed");
        let config = self.config(index as ReplicaIndex);
        let replica = Replica::open(config, journal, KeyValue::default(), 99 + index as u64);
        self.replicas[index] = Some(replica.expect("a synced journal recovers"));
        self.applied_counts[index] = 0;
    }

    /// Crashes `index` and throws its journal away, as a lost disk does.
    pub(super) fn lose_disk(&mut self, index: usize) {
        self.replicas[index] = None;
        self.journals[index] = Some(InMemoryJournal::new());
    }

    /// Starts `index` on an empty journal, as a node does after its disk was lost.
    pub(super) fn restart_empty(&mut self, index: usize) {
        self.journals[index] = None;
        let config = self.config(index as ReplicaIndex);
        let nonce = 2_000 + index as u64;
        let replica =
            Replica::start_empty(config, InMemoryJournal::new(), KeyValue::default(), nonce);
        self.replicas[index] = Some(replica.expect("a valid configuration starts"));
        self.applied_counts[index] = 0;
    }
}
