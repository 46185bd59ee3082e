//! Partition moves, simulated from one seed with the real partition machine. Consensus is
//! abstracted to what a move relies on — each epoch's group orders its ops into one log, and
//! each replica applies that log in order, lagging behind by a drawn amount — while the
//! protocol above it runs as the nodes run it (`tessera-host`'s partition groups and
//! `tessera_state::partition::PartitionState`): six nodes, groups of three, counters asked
//! through random nodes, and moves that replace one replica at a time. A move starts the next
//! epoch's group on the new set (filling), the replica of both epochs that leads it seals the
//! old group, takes its image once its own replica applied the seal, fills the new group and
//! opens it (a standby of both epochs does so too when the leader is down, or beside it); a
//! replica restarts now and then, its machine rebuilt from the ops it applied; a node reads
//! from its newest replica that is not filling, activates an entity
//! behind a commit barrier, and a commit its sealed group refuses goes on to the node's
//! replica of the next epoch (one still filling is asked again later).
//!
//! The check: every add the machine applied is answered to its client, so per counter, in the
//! order the adds committed (epoch, then log position), each answers the previous answer plus
//! its amount — none lost, none applied twice, none computed from a stale or half-filled copy
//! — and the last epoch's replicas end with each counter's last answer. The canaries break the
//! protocol where a move could lose data, and the check must catch them.

use crate::rng::SimRng;
use clients::{Ask, Client};
use std::collections::BTreeMap;
use tessera_consensus::state_machine::StateMachine;
use tessera_contract::EntityAddress;
use tessera_state::partition::{FillSource, PartitionMachine, PartitionResult, Phase};

/// Nodes in the simulated cluster.
const NODES: usize = 6;
/// Replicas per group.
const REPLICAS: usize = 3;
/// Counters the clients add to.
const COUNTERS: u64 = 3;
/// Clients asking at once.
const CLIENTS: usize = 5;
/// Steps of one run before it drains.
const STEPS: usize = 1_500;
/// Per thousand steps: a move starts (when none is under way).
const MOVE_PER_MILLE: u64 = 15;
/// Per thousand steps: a replica restarts, its machine rebuilt from its journal.
const RESTART_PER_MILLE: u64 = 5;
/// The state key a counter keeps its value under.
const VALUE_KEY: &str = "value";

/// A deliberate break of the move protocol the check must catch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MoveCanary {
    /// None: every seed must pass.
    #[default]
    None,
    /// A node reads from its newest replica even while it is still filling: a moved replica
    /// serving before it caught up.
    ServeBeforeFilled,
    /// The replica leading a move takes its image as soon as it submits the seal, before its
    /// own replica applied it (and everything committed before it).
    ImageBeforeSeal,
}

/// One epoch's group: its log, and each member's replica with how much of the log it applied.
struct Group {
    log: Vec<Vec<u8>>,
    /// The result of each op, as the first replica to apply it got it (all get the same).
    results: Vec<Option<PartitionResult>>,
    replicas: BTreeMap<usize, Replica>,
}

struct Replica {
    machine: PartitionMachine,
    applied: usize,
}

impl Replica {
    /// The stream of rows a move's leader fills the next epoch with from this replica (as a
    /// node's `FillSource::sealed` does), whole; empty if it cannot be read.
    fn fill_stream(&self) -> Vec<u8> {
        FillSource::of_machine(&self.machine)
            .whole_stream()
            .unwrap_or_default()
    }
}

/// One simulated run.
struct Run {
    rng: SimRng,
    canary: MoveCanary,
    groups: Vec<Group>,
    clients: Vec<Client>,
    moving: Option<moves::Move>,
    /// Encoded write ops, by number (resubmitted as they are).
    ops: Vec<Vec<u8>>,
    /// Each applied add: `(counter, (epoch, index), amount, answered)`.
    adds: Vec<(u64, (usize, usize), u64, u64)>,
    next_stamp: u64,
}

/// What one run did, for the tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MoveSummary {
    /// Moves that completed.
    pub moves: u64,
    /// Adds applied and answered.
    pub adds: u64,
    /// Adds refused (a conflict, or sealed with no next epoch on their node).
    pub refused: u64,
    /// Commits that went on from a sealed group to the next epoch's.
    pub followed: u64,
    /// Replicas restarted (rebuilt from their journals).
    pub restarts: u64,
}

fn address(counter: u64) -> EntityAddress {
    EntityAddress::new("sim", "counter", format!("c{counter}"))
}

fn value_of(machine: &PartitionMachine, counter: u64) -> u64 {
    machine
        .get(&address(counter), VALUE_KEY)
        .ok()
        .flatten()
        .and_then(|bytes| <[u8; 8]>::try_from(bytes.as_slice()).ok())
        .map_or(0, u64::from_le_bytes)
}

/// Runs seed `seed` with `canary`; an error says what the check found.
pub fn run_seed(seed: u64, canary: MoveCanary) -> Result<MoveSummary, String> {
    let mut run = Run::new(seed, canary)?;
    let mut summary = MoveSummary::default();
    for _ in 0..STEPS {
        run.step(&mut summary, true)?;
    }
    // Drain: no new asks or moves; every replica catches up and every ask ends.
    for _ in 0..200_000 {
        let busy = run.moving.is_some()
            || run
                .clients
                .iter()
                .any(|client| !matches!(client.ask, Ask::Idle));
        if !busy {
            break;
        }
        run.step(&mut summary, false)?;
    }
    run.catch_up_all()?;
    run.check()?;
    summary.adds = run.adds.len() as u64;
    Ok(summary)
}

impl Run {
    fn new(seed: u64, canary: MoveCanary) -> Result<Run, String> {
        let mut rng = SimRng::new(seed);
        let mut replicas = BTreeMap::new();
        for node in 0..REPLICAS {
            let machine = PartitionMachine::in_memory().map_err(|error| error.to_string())?;
            replicas.insert(
                node,
                Replica {
                    machine,
                    applied: 0,
                },
            );
        }
        let clients = (0..CLIENTS)
            .map(|_| Client {
                node: rng.index(NODES),
                counter: rng.below(COUNTERS),
                amount: rng.between(1, 9),
                ask: Ask::Idle,
            })
            .collect();
        Ok(Run {
            rng,
            canary,
            groups: vec![Group {
                log: Vec::new(),
                results: Vec::new(),
                replicas,
            }],
            clients,
            moving: None,
            ops: Vec::new(),
            adds: Vec::new(),
            next_stamp: 1,
        })
    }

    fn step(&mut self, summary: &mut MoveSummary, asking: bool) -> Result<(), String> {
        if self.rng.per_mille(RESTART_PER_MILLE) {
            summary.restarts += 1;
            return self.restart_somewhere();
        }
        match self.rng.below(10) {
            0..=4 => self.apply_somewhere(),
            5..=8 => {
                let client = self.rng.index(CLIENTS);
                self.advance_client(client, summary, asking)
            }
            _ => self.advance_move(summary, asking),
        }
    }

    /// A random replica restarts: its machine, emptied (filling for a move's new group), is
    /// rebuilt from the ops it applied — its journal — and must answer them as before.
    fn restart_somewhere(&mut self) -> Result<(), String> {
        let epoch = self.rng.index(self.groups.len());
        let group = &mut self.groups[epoch];
        let nodes: Vec<usize> = group.replicas.keys().copied().collect();
        let node = nodes[self.rng.index(nodes.len())];
        let mut machine = PartitionMachine::in_memory().map_err(|error| error.to_string())?;
        if epoch > 0 {
            machine = machine.filling().map_err(|error| error.to_string())?;
        }
        let applied = group.replicas[&node].applied;
        for (index, op) in group.log[..applied].iter().enumerate() {
            let result = PartitionResult::decode(&machine.apply(op));
            if group.results[index].as_ref() != Some(&result) {
                return Err(format!(
                    "epoch {epoch} op {index}: node {node} restarted answers {result:?}, not {:?}",
                    group.results[index]
                ));
            }
        }
        if let Some(replica) = group.replicas.get_mut(&node) {
            replica.machine = machine;
        }
        Ok(())
    }

    /// A random replica of a random group applies its next op, if it has one.
    fn apply_somewhere(&mut self) -> Result<(), String> {
        let epoch = self.rng.index(self.groups.len());
        let nodes: Vec<usize> = self.groups[epoch].replicas.keys().copied().collect();
        let node = nodes[self.rng.index(nodes.len())];
        self.apply_next(epoch, node)
    }

    fn apply_next(&mut self, epoch: usize, node: usize) -> Result<(), String> {
        let group = &mut self.groups[epoch];
        let Some(replica) = group.replicas.get_mut(&node) else {
            return Ok(());
        };
        let Some(op) = group.log.get(replica.applied) else {
            return Ok(());
        };
        let result = PartitionResult::decode(&replica.machine.apply(op));
        let first = &mut group.results[replica.applied];
        match first {
            None => *first = Some(result),
            Some(earlier) if *earlier != result => {
                return Err(format!(
                    "epoch {epoch} op {}: node {node} got {result:?}, another {earlier:?}",
                    replica.applied
                ));
            }
            Some(_) => {}
        }
        replica.applied += 1;
        Ok(())
    }

    fn catch_up_all(&mut self) -> Result<(), String> {
        for epoch in 0..self.groups.len() {
            let nodes: Vec<usize> = self.groups[epoch].replicas.keys().copied().collect();
            for node in nodes {
                while self.groups[epoch].replicas[&node].applied < self.groups[epoch].log.len() {
                    self.apply_next(epoch, node)?;
                }
            }
        }
        Ok(())
    }

    /// Appends `op` to `epoch`'s log (its group committed it); its index.
    fn submit(&mut self, epoch: usize, op: Vec<u8>) -> usize {
        let group = &mut self.groups[epoch];
        group.log.push(op);
        group.results.push(None);
        group.log.len() - 1
    }

    /// The answer to op `at` as `node` hears it: once its replica applied it.
    fn answer(&self, node: usize, (epoch, index): (usize, usize)) -> Option<PartitionResult> {
        let group = &self.groups[epoch];
        let replica = group.replicas.get(&node)?;
        (replica.applied > index)
            .then(|| group.results[index].clone())
            .flatten()
    }

    /// The epoch `node` reads from and commits through: its newest replica that is not
    /// filling (with the canary, its newest).
    fn route(&self, node: usize) -> Option<usize> {
        (0..self.groups.len()).rev().find(|epoch| {
            self.groups[*epoch]
                .replicas
                .get(&node)
                .is_some_and(|replica| {
                    self.canary == MoveCanary::ServeBeforeFilled
                        || replica.machine.phase() != Phase::Filling
                })
        })
    }

    /// Every applied add answered its counter's previous answer plus its amount, in commit
    /// order; the last epoch holds each counter's last answer.
    fn check(&self) -> Result<(), String> {
        let mut adds = self.adds.clone();
        adds.sort_by_key(|(counter, at, ..)| (*counter, *at));
        let mut last: BTreeMap<u64, u64> = BTreeMap::new();
        for (counter, at, amount, answered) in adds {
            let before = last.get(&counter).copied().unwrap_or(0);
            if answered != before + amount {
                return Err(format!(
                    "c{counter}: an add of {amount} committed at epoch {} op {} answered \
                     {answered} after {before}",
                    at.0, at.1
                ));
            }
            last.insert(counter, answered);
        }
        let newest = self.groups.last().ok_or("no group")?;
        for (node, replica) in &newest.replicas {
            for counter in 0..COUNTERS {
                let held = value_of(&replica.machine, counter);
                let expected = last.get(&counter).copied().unwrap_or(0);
                if held != expected {
                    return Err(format!(
                        "c{counter} holds {held} on node {node}, last answered {expected}"
                    ));
                }
            }
        }
        Ok(())
    }
}

mod clients;
mod moves;
#[cfg(test)]
mod tests;
