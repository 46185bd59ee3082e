//! One simulated run per seed: the scenario, the event loop and the final checks, generic over
//! the [`Workload`] the cluster replicates.

use std::panic::{AssertUnwindSafe, catch_unwind};

use super::checker::Checker;
use super::client::Client;
use super::history::History;
use super::key_value::KeyValueWorkload;
use super::network::{Address, Network, Payload};
use super::scenario::{Outcome, Scenario, SimulationOptions, Summary};
use super::workload::{AtReplica, CommittedOrder, Workload};
use crate::rng::SimRng;
use std::collections::{HashMap, HashSet};
use tessera_consensus::config::Config;
use tessera_consensus::journal::InMemoryJournal;
use tessera_consensus::message::{ClientId, Entry, Message, OpNumber, ReplicaIndex, Reply, Status};
use tessera_consensus::replica::{Action, Counters, Replica};

/// An entry as a replica sent it: its parent's checksum and its requests.
type SentEntry = (u64, Vec<(ClientId, u64)>);

/// Ticks allowed, after faults stop, for every replica to agree and every client to be
/// answered. Generous against the timeouts (tens of ticks) so a miss means a liveness bug.
pub const CONVERGENCE_TICKS_MAX: u64 = 5_000;

type SimReplica<W> = Replica<InMemoryJournal, <W as Workload>::Machine>;

/// Runs one seed of the key-value workload; a panic inside a replica (a violated invariant) is
/// a failure too.
pub fn run_seed(seed: u64, options: SimulationOptions) -> Outcome {
    run_workload_seed(&KeyValueWorkload, seed, options)
}

/// Runs `count` key-value seeds from `first` on `threads` threads; outcomes in seed order.
pub fn run_seeds(
    first: u64,
    count: u64,
    options: SimulationOptions,
    threads: usize,
) -> Vec<Outcome> {
    run_workload_seeds(&KeyValueWorkload, first, count, options, threads)
}

/// Runs one seed of `workload`; a panic inside a replica (a violated invariant) is a failure
/// too.
pub fn run_workload_seed<W: Workload>(
    workload: &W,
    seed: u64,
    options: SimulationOptions,
) -> Outcome {
    let result = catch_unwind(AssertUnwindSafe(|| {
        Simulation::new(workload, seed, options).run()
    }))
    .unwrap_or_else(|payload| Err(format!("panic: {}", crate::panics::message(payload))));
    Outcome { seed, result }
}

/// Runs `count` seeds of `workload` from `first` on `threads` threads; outcomes in seed order.
pub fn run_workload_seeds<W: Workload>(
    workload: &W,
    first: u64,
    count: u64,
    options: SimulationOptions,
    threads: usize,
) -> Vec<Outcome> {
    let threads = threads.max(1) as u64;
    let mut outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|worker| {
                scope.spawn(move || {
                    (worker..count)
                        .step_by(threads as usize)
                        .map(|index| {
                            run_workload_seed(workload, first.wrapping_add(index), options)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().unwrap_or_default())
            .collect()
    });
    outcomes.sort_by_key(|outcome| outcome.seed.wrapping_sub(first));
    outcomes
}

/// A replica that crashed, until it restarts.
struct Down<W: Workload> {
    journal: InMemoryJournal,
    machine: Option<W::Machine>,
    restart_tick: u64,
}

struct Simulation<'w, W: Workload> {
    workload: &'w W,
    rng: SimRng,
    options: SimulationOptions,
    scenario: Scenario,
    now_tick: u64,
    replicas: Vec<Option<SimReplica<W>>>,
    /// Replicas down: their journal, their machine as the crash left it (gone with a lost
    /// disk) and the tick they restart at.
    down: Vec<Option<Down<W>>>,
    /// Replicas down whose disk was lost: they restart on an empty journal.
    disk_lost: Vec<bool>,
    /// Replicas that lost their disk and have not yet recovered (are not normal again); at
    /// most one at a time, so the group stays within the failures it tolerates.
    forgetting: Vec<bool>,
    network: Network,
    clients: Vec<Client>,
    history: History<W::Operation, W::Answer>,
    /// Every committed op's requests, as live replicas reported applying them.
    committed: CommittedOrder,
    /// Every entry a replica sent (in a prepare or a log suffix), by op and checksum: its
    /// parent's checksum and its requests. An op every replica applied without reporting it
    /// (it crashed in that handler, or received the op inside a checkpoint) is recovered
    /// from here, along the checksum chain of the ops reported above it.
    sent_entries: HashMap<(OpNumber, u64), SentEntry>,
    checker: Checker,
    /// Requests a node answered itself ([`AtReplica::Answer`]): never ordered, so the checker
    /// does not look for them among the committed ops; the workload's check judges them.
    answered_at_node: HashSet<(ClientId, u64)>,
    crashes: u64,
    disks_lost: u64,
    primary_takeovers: u64,
    /// Counters of replicas that have crashed since, summed.
    counters_of_crashed: Counters,
    faults_on: bool,
}

impl<'w, W: Workload> Simulation<'w, W> {
    fn new(workload: &'w W, seed: u64, options: SimulationOptions) -> Self {
        let mut rng = SimRng::new(seed);
        let scenario = Scenario::from_rng(&mut rng, options.fault_ticks);
        let count = usize::from(scenario.replica_count);
        let clients = (0..scenario.client_count)
            .map(|id| {
                Client::new(
                    id + 1,
                    scenario.replica_count,
                    scenario.requests_per_client,
                    scenario.issue_per_mille,
                )
            })
            .collect();
        Simulation {
            workload,
            rng,
            options,
            scenario,
            now_tick: 0,
            replicas: (0..count).map(|_| None).collect(),
            down: (0..count).map(|_| None).collect(),
            disk_lost: vec![false; count],
            forgetting: vec![false; count],
            network: Network::new(count, scenario.network),
            clients,
            history: History::default(),
            committed: CommittedOrder::new(),
            sent_entries: HashMap::new(),
            checker: Checker::new(count),
            answered_at_node: HashSet::new(),
            crashes: 0,
            disks_lost: 0,
            primary_takeovers: 0,
            counters_of_crashed: Counters::default(),
            faults_on: true,
        }
    }

    fn config(&self, replica: ReplicaIndex) -> Config {
        self.scenario.config(replica, self.options.canary)
    }

    fn run(mut self) -> Result<Summary, String> {
        // As nodes do: every replica starts on an empty journal and finds out from the others
        // that the group is new.
        for replica in 0..self.scenario.replica_count {
            let nonce = self.rng.next_u64();
            let started = Replica::start_empty(
                self.config(replica),
                InMemoryJournal::new(),
                self.workload.machine()?,
                nonce,
            );
            self.replicas[usize::from(replica)] = Some(started.map_err(|error| error.to_string())?);
        }
        for _ in 0..self.options.fault_ticks {
            self.step()?;
        }
        self.stop_faults()?;
        let mut convergence_ticks = 0;
        while !self.converged() {
            if convergence_ticks == CONVERGENCE_TICKS_MAX {
                return Err(format!(
                    "no convergence {CONVERGENCE_TICKS_MAX} ticks after faults stopped: {}",
                    self.describe()
                ));
            }
            self.step()?;
            convergence_ticks += 1;
        }
        let live = vec![true; self.replicas.len()];
        self.checker.check_acknowledged_everywhere(&live)?;
        self.check_same_state()?;
        if let Some(Some(replica)) = self.replicas.first() {
            self.workload
                .check_final_state(replica.state_machine(), &self.history)?;
        }
        self.recover_unreported();
        let workload = self.workload.check(&self.history, &self.committed)?;
        let mut counters = self.counters_of_crashed;
        for replica in self.replicas.iter().flatten() {
            add_counters(&mut counters, &replica.counters());
        }
        Ok(Summary {
            replica_count: self.scenario.replica_count,
            ops_committed: self.checker.committed_max(),
            requests_acknowledged: self
                .history
                .operations
                .iter()
                .filter(|operation| operation.completed.is_some())
                .count() as u64,
            crashes: self.crashes,
            disks_lost: self.disks_lost,
            primary_takeovers: self.primary_takeovers,
            checkpoints_taken: counters.checkpoints_taken,
            states_transferred: counters.states_installed,
            states_rejected: counters.states_rejected,
            convergence_ticks,
            workload,
        })
    }

    /// After convergence every replica has applied the same ops, so it must hold the same state
    /// machine, however it got there (applies, restarts or state transfers): the same snapshot
    /// bytes, since snapshots are deterministic.
    fn check_same_state(&self) -> Result<(), String> {
        let states: Vec<Vec<u8>> = self
            .replicas
            .iter()
            .flatten()
            .map(|replica| self.workload.state_of(replica.state_machine()))
            .collect();
        match states.iter().position(|state| *state != states[0]) {
            Some(replica) => Err(format!(
                "replica {replica} holds a different state than replica 0 at the same op"
            )),
            None => Ok(()),
        }
    }

    fn step(&mut self) -> Result<(), String> {
        self.now_tick += 1;
        if self.faults_on {
            self.inject_faults();
            self.start_outage();
            self.take_primary_at_random()?;
        }
        self.restart_due()?;
        while let Some(packet) = self.network.pop_due(self.now_tick) {
            match (packet.to, packet.payload) {
                (Address::Replica(replica), Payload::Message(message)) => {
                    self.deliver(usize::from(replica), message)?;
                }
                (Address::Client(client), Payload::Reply(reply)) => {
                    self.reply_to_client(client, &reply)?
                }
                _ => {}
            }
        }
        for index in 0..self.replicas.len() {
            if let Some(replica) = self.replicas[index].as_mut() {
                let actions = replica.tick();
                self.after_handler(index, actions)?;
            }
        }
        for (replica, forgetting) in self.replicas.iter().zip(self.forgetting.iter_mut()) {
            if replica
                .as_ref()
                .is_some_and(|replica| replica.status() == Status::Normal)
            {
                *forgetting = false;
            }
        }
        self.tick_clients();
        Ok(())
    }

    fn deliver(&mut self, index: usize, message: Message) -> Result<(), String> {
        let Some(replica) = self.replicas[index].as_mut() else {
            return Ok(());
        };
        let message = match message {
            Message::Request(mut request) => {
                let is_primary = replica.status() == Status::Normal && replica.is_primary();
                match self.workload.at_replica(
                    replica.state_machine(),
                    is_primary,
                    self.options.canary,
                    &request,
                ) {
                    AtReplica::Submit(operation) => {
                        request.operation = operation;
                        Message::Request(request)
                    }
                    AtReplica::Answer(result) => {
                        self.answered_at_node
                            .insert((request.client, request.request_number));
                        let reply = Reply {
                            client: request.client,
                            request_number: request.request_number,
                            view: replica.view(),
                            result: Ok(result),
                        };
                        let (from, to) = (
                            Address::Replica(index as ReplicaIndex),
                            Address::Client(request.client),
                        );
                        let payload = Payload::Reply(reply);
                        self.network
                            .send(&mut self.rng, self.now_tick, from, to, payload);
                        return Ok(());
                    }
                }
            }
            message => message,
        };
        let actions = replica.on_message(message);
        self.after_handler(index, actions)
    }

    /// Checks and carries out a handler's actions, unless the replica crashed during it.
    fn after_handler(&mut self, index: usize, actions: Vec<Action>) -> Result<(), String> {
        let Some(replica) = self.replicas[index].as_mut() else {
            return Ok(());
        };
        if replica.journal_mut().has_crashed() {
            let downtime_ticks = self.rng.between(10, 300);
            self.crash(index, downtime_ticks);
            if self.rng.per_mille(self.scenario.disk_loss_per_mille) {
                self.lose_disk(index);
            }
            return Ok(());
        }
        self.checker
            .on_state(index, replica.view(), replica.commit())?;
        let from = Address::Replica(index as ReplicaIndex);
        for action in actions {
            match action {
                Action::Send { to, message } => {
                    self.note_entries(&message);
                    let payload = Payload::Message(message);
                    self.network.send(
                        &mut self.rng,
                        self.now_tick,
                        from,
                        Address::Replica(to),
                        payload,
                    );
                }
                Action::Reply(reply) => {
                    let to = Address::Client(reply.client);
                    self.network.send(
                        &mut self.rng,
                        self.now_tick,
                        from,
                        to,
                        Payload::Reply(reply),
                    );
                }
                Action::Applied {
                    op,
                    checksum,
                    ref requests,
                } => {
                    self.checker.on_applied(index, op, checksum, requests)?;
                    self.record_committed(&action);
                }
                Action::Checkpoint {
                    op,
                    state_checksum,
                    installed,
                } => {
                    self.checker
                        .on_checkpoint(index, op, state_checksum, installed)?;
                    if installed {
                        self.report_sessions(index);
                    }
                }
            }
        }
        Ok(())
    }

    /// Tells the checker which requests the client table of `index` holds as committed.
    fn report_sessions(&mut self, index: usize) {
        let Some(replica) = self.replicas[index].as_ref() else {
            return;
        };
        for (client, session) in replica.client_table().sessions() {
            self.checker
                .on_session(client, session.request_number, session.op);
        }
    }

    /// Keeps every entry `message` carries (see `sent_entries`).
    fn note_entries(&mut self, message: &Message) {
        let entries: &[Entry] = match message {
            Message::Prepare { entry, .. } => std::slice::from_ref(entry),
            Message::DoViewChange { log, .. } | Message::StartView { log, .. } => &log.entries,
            Message::RecoveryResponse { log: Some(log), .. } => &log.entries,
            _ => &[],
        };
        for entry in entries {
            self.sent_entries
                .entry((entry.op, entry.checksum))
                .or_insert_with(|| {
                    let requests = entry
                        .requests
                        .iter()
                        .map(|request| (request.client, request.request_number))
                        .collect();
                    (entry.parent, requests)
                });
        }
    }

    /// Fills ops no replica reported applying: walking down from the highest reported op,
    /// each entry's parent checksum names the committed entry below it.
    fn recover_unreported(&mut self) {
        let mut parent_below: Option<u64> = None;
        for op in (1..=self.checker.committed_max()).rev() {
            let checksum = match self.checker.committed_checksum(op) {
                Some(checksum) => Some(checksum),
                None if !self.committed.contains_key(&op) => parent_below,
                None => None,
            };
            let Some(checksum) = checksum else {
                parent_below = None;
                continue;
            };
            match self.sent_entries.get(&(op, checksum)) {
                Some((parent, requests)) => {
                    self.committed.entry(op).or_insert_with(|| requests.clone());
                    parent_below = Some(*parent);
                }
                None => parent_below = None,
            }
        }
    }

    /// Keeps the first report of each applied op's requests.
    fn record_committed(&mut self, action: &Action) {
        if let Action::Applied { op, requests, .. } = action {
            self.committed
                .entry(*op)
                .or_insert_with(|| requests.clone());
        }
    }

    fn reply_to_client(&mut self, client: u64, reply: &Reply) -> Result<(), String> {
        let Some(target) = self
            .clients
            .iter_mut()
            .find(|candidate| candidate.id() == client)
        else {
            return Ok(());
        };
        if let Some(request_number) = target.on_reply(self.workload, reply, &mut self.history)?
            && !self.answered_at_node.contains(&(client, request_number))
        {
            self.checker.on_acknowledged(client, request_number)?;
        }
        Ok(())
    }

    fn tick_clients(&mut self) {
        for index in 0..self.clients.len() {
            let client = &mut self.clients[index];
            let from = Address::Client(client.id());
            let sends = client.tick(
                self.workload,
                &mut self.rng,
                self.now_tick,
                self.faults_on,
                &mut self.history,
            );
            for (replica, message) in sends {
                let to = Address::Replica(replica);
                self.network.send(
                    &mut self.rng,
                    self.now_tick,
                    from,
                    to,
                    Payload::Message(message),
                );
            }
        }
    }

    fn converged(&self) -> bool {
        let Some(Some(first)) = self.replicas.first() else {
            return false;
        };
        let op = first.op();
        let all_agree = self.replicas.iter().all(|replica| {
            replica.as_ref().is_some_and(|replica| {
                replica.status() == Status::Normal
                    && replica.view() == first.view()
                    && replica.op() == op
                    && replica.commit() == op
                    && replica.applied() == op
            })
        });
        all_agree && self.clients.iter().all(|client| !client.is_waiting())
    }

    fn describe(&self) -> String {
        let replicas: Vec<String> = self
            .replicas
            .iter()
            .enumerate()
            .map(|(index, replica)| match replica {
                Some(replica) => format!(
                    "r{index} {:?} view {} op {} commit {} applied {} log base {} checkpoint {} {:?}",
                    replica.status(),
                    replica.view(),
                    replica.op(),
                    replica.commit(),
                    replica.applied(),
                    replica.log_base(),
                    replica.checkpoint().op,
                    replica.counters(),
                ),
                None => format!("r{index} down"),
            })
            .collect();
        let waiting = self
            .clients
            .iter()
            .filter(|client| client.is_waiting())
            .count();
        format!("{}; {waiting} clients waiting", replicas.join(", "))
    }
}

fn add_counters(total: &mut Counters, counters: &Counters) {
    total.checkpoints_taken += counters.checkpoints_taken;
    total.states_installed += counters.states_installed;
    total.states_rejected += counters.states_rejected;
}

mod faults;

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;
