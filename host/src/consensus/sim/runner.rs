//! One simulated run per seed: the scenario, the event loop and the final checks.

use std::panic::{AssertUnwindSafe, catch_unwind};

use super::checker::Checker;
use super::client::{Client, History};
use super::linearizability;
use super::network::{Address, Network, Payload};
use super::rng::Rng;
use super::scenario::{Outcome, Scenario, SimulationOptions, Summary};
use crate::consensus::config::Config;
use crate::consensus::journal::InMemoryJournal;
use crate::consensus::message::{Message, ReplicaIndex, Status};
use crate::consensus::replica::{Action, Counters, Replica};
use crate::consensus::state_machine::KeyValue;

/// Ticks allowed, after faults stop, for every replica to agree and every client to be
/// answered. Generous against the timeouts (tens of ticks) so a miss means a liveness bug.
pub const CONVERGENCE_TICKS_MAX: u64 = 5_000;

type SimReplica = Replica<InMemoryJournal, KeyValue>;

/// Runs one seed; a panic inside a replica (a violated invariant) is a failure too.
pub fn run_seed(seed: u64, options: SimulationOptions) -> Outcome {
    let result = catch_unwind(AssertUnwindSafe(|| Simulation::new(seed, options).run()))
        .unwrap_or_else(|payload| {
            let message = payload
                .downcast_ref::<&str>()
                .map(|text| text.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(format!("panic: {message}"))
        });
    Outcome { seed, result }
}

/// Runs `count` seeds from `first` on `threads` threads; outcomes in seed order.
pub fn run_seeds(
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
                        .map(|index| run_seed(first.wrapping_add(index), options))
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

struct Simulation {
    rng: Rng,
    options: SimulationOptions,
    scenario: Scenario,
    now_tick: u64,
    replicas: Vec<Option<SimReplica>>,
    down: Vec<Option<(InMemoryJournal, u64)>>,
    network: Network,
    clients: Vec<Client>,
    history: History,
    checker: Checker,
    crashes: u64,
    /// Counters of replicas that have crashed since, summed.
    counters_of_crashed: Counters,
    faults_on: bool,
}

impl Simulation {
    fn new(seed: u64, options: SimulationOptions) -> Simulation {
        let mut rng = Rng::new(seed);
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
            rng,
            options,
            scenario,
            now_tick: 0,
            replicas: (0..count).map(|_| None).collect(),
            down: (0..count).map(|_| None).collect(),
            network: Network::new(count, scenario.network),
            clients,
            history: History::default(),
            checker: Checker::new(count),
            crashes: 0,
            counters_of_crashed: Counters::default(),
            faults_on: true,
        }
    }

    fn config(&self, replica: ReplicaIndex) -> Config {
        self.scenario.config(replica, self.options.canary)
    }

    fn run(mut self) -> Result<Summary, String> {
        for replica in 0..self.scenario.replica_count {
            let formatted = Replica::format(
                self.config(replica),
                InMemoryJournal::new(),
                KeyValue::default(),
            );
            self.replicas[usize::from(replica)] =
                Some(formatted.map_err(|error| error.to_string())?);
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
        linearizability::check(&self.history)?;
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
            checkpoints_taken: counters.checkpoints_taken,
            states_transferred: counters.states_installed,
            states_rejected: counters.states_rejected,
            convergence_ticks,
        })
    }

    /// After convergence every replica has applied the same ops, so it must hold the same state
    /// machine, however it got there (applies, restarts or state transfers).
    fn check_same_state(&self) -> Result<(), String> {
        let states: Vec<&KeyValue> = self
            .replicas
            .iter()
            .flatten()
            .map(|replica| replica.state_machine())
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
        self.tick_clients();
        Ok(())
    }

    /// Takes the scenario's outage replica down for long at its start tick.
    fn start_outage(&mut self) {
        let Some(outage) = self.scenario.outage else {
            return;
        };
        if outage.start_tick == self.now_tick {
            self.crash(usize::from(outage.replica), outage.downtime_ticks);
        }
    }

    fn inject_faults(&mut self) {
        if self.rng.chance(self.scenario.partition_change_per_mille) {
            let count = self.replicas.len();
            match self.rng.below(4) {
                0 => self.network.heal(),
                1 => {
                    let side: Vec<bool> = (0..count).map(|_| self.rng.chance(500)).collect();
                    self.network.partition_symmetric(&side);
                }
                2 => self.network.partition_asymmetric(&mut self.rng, 300),
                _ => {
                    let isolated = self.rng.below(count as u64) as usize;
                    self.network.isolate(isolated);
                }
            }
        }
        if self.rng.chance(self.scenario.crash_per_mille) {
            let index = self.rng.below(self.replicas.len() as u64) as usize;
            let writes = self.rng.below(3) as u32;
            if let Some(replica) = self.replicas[index].as_mut() {
                replica.journal_mut().crash_after_writes(writes);
            }
        }
    }

    fn deliver(&mut self, index: usize, message: Message) -> Result<(), String> {
        let Some(replica) = self.replicas[index].as_mut() else {
            return Ok(());
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
            return Ok(());
        }
        self.checker
            .on_state(index, replica.view(), replica.commit())?;
        let from = Address::Replica(index as ReplicaIndex);
        for action in actions {
            match action {
                Action::Send { to, message } => {
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
                    requests,
                } => {
                    self.checker.on_applied(index, op, checksum, &requests)?;
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

    fn crash(&mut self, index: usize, downtime_ticks: u64) {
        let Some(replica) = self.replicas[index].take() else {
            return;
        };
        add_counters(&mut self.counters_of_crashed, &replica.counters());
        let mut journal = replica.into_journal();
        let rng = &mut self.rng;
        journal.crash(&mut || rng.next_u64());
        self.down[index] = Some((journal, self.now_tick + downtime_ticks));
        self.crashes += 1;
    }

    fn restart_due(&mut self) -> Result<(), String> {
        for index in 0..self.down.len() {
            let due = self.down[index]
                .as_ref()
                .is_some_and(|(_, tick)| *tick <= self.now_tick);
            if due || (!self.faults_on && self.down[index].is_some()) {
                self.restart(index)?;
            }
        }
        Ok(())
    }

    fn restart(&mut self, index: usize) -> Result<(), String> {
        let Some((journal, _)) = self.down[index].take() else {
            return Ok(());
        };
        let config = self.config(index as ReplicaIndex);
        let nonce = self.rng.next_u64();
        let replica = Replica::open(config, journal, KeyValue::default(), nonce)
            .map_err(|error| format!("replica {index} failed to recover: {error}"))?;
        self.checker
            .on_restart(index, replica.view(), replica.commit())?;
        self.replicas[index] = Some(replica);
        Ok(())
    }

    fn reply_to_client(
        &mut self,
        client: u64,
        reply: &crate::consensus::message::Reply,
    ) -> Result<(), String> {
        let Some(target) = self
            .clients
            .iter_mut()
            .find(|candidate| candidate.id() == client)
        else {
            return Ok(());
        };
        if let Some(request_number) = target.on_reply(reply, &mut self.history)? {
            self.checker.on_acknowledged(client, request_number)?;
        }
        Ok(())
    }

    fn tick_clients(&mut self) {
        for index in 0..self.clients.len() {
            let client = &mut self.clients[index];
            let from = Address::Client(client.id());
            let sends = client.tick(
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

    fn stop_faults(&mut self) -> Result<(), String> {
        self.faults_on = false;
        self.network.heal();
        self.network.faults.loss_per_mille = 0;
        self.network.faults.duplicate_per_mille = 0;
        self.network.faults.corrupt_state_chunk_per_mille = 0;
        for replica in self.replicas.iter_mut().flatten() {
            replica.journal_mut().disarm();
        }
        self.restart_due()
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

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;
