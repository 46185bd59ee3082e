//! Partition moves, simulated from one seed with the real partition machine on real VSR
//! replicas: each epoch's group is a group of [`tessera_consensus::replica::Replica`]s over a
//! network of its own that drops, duplicates and reorders messages, its replicas restarting
//! now and then on their journals (`group.rs`). The protocol above it runs as the nodes run it
//! (`tessera-host`'s partition groups and `tessera_state::partition::PartitionState`): six
//! nodes, groups of three, counters asked through random nodes, and moves that replace one
//! replica at a time. A move starts the next epoch's group on the new set (filling), the
//! replica of both epochs that leads it seals the old group, takes its image once its own
//! replica applied the seal, fills the new group and opens it (a standby of both epochs does so
//! too when the leader is down, or beside it); a node reads from its newest replica that is not
//! filling, activates an entity behind a commit barrier, and a commit its sealed group refuses
//! goes on to the node's replica of the next epoch (one still filling is asked again later).
//!
//! The check: every add the machine applied is answered to its client, so per counter, in the
//! order the adds committed (epoch, then op), each answers the previous answer plus its amount
//! — none lost, none applied twice, none computed from a stale or half-filled copy — and the
//! last epoch's replicas end with each counter's last answer. The canaries break the protocol
//! where a move could lose data, and one breaks the consensus below it; the check must catch
//! them.

use crate::rng::SimRng;
use clients::{Ask, Client};
use group::Group;
use std::collections::BTreeMap;
use tessera_consensus::config::Canaries;
use tessera_consensus::message::{ClientId, OpNumber};
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
/// Per thousand steps: a replica loses its disk (when its group can bear it).
const DISK_LOSS_PER_MILLE: u64 = 3;
/// Per thousand steps: a replica restarts, reopening on its journal.
const RESTART_PER_MILLE: u64 = 5;
/// The state key a counter keeps its value under.
const VALUE_KEY: &str = "value";
/// Group steps, at most, for one group to settle once faults are over.
const CATCH_UP_STEPS_MAX: usize = 200_000;
/// The client session of a filler on node `n` is `FILLER_CLIENTS + n` (asking clients are
/// numbered from 1).
const FILLER_CLIENTS: ClientId = 1_000;

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
    /// Below the move protocol: a group's primary commits ops no quorum holds
    /// (`Canaries::commit_without_quorum`), so a view change or a lost disk can undo
    /// acknowledged ones.
    CommitWithoutQuorum,
}

impl MoveCanary {
    /// The consensus canaries the groups' replicas run with.
    fn consensus(self) -> Canaries {
        Canaries {
            commit_without_quorum: self == MoveCanary::CommitWithoutQuorum,
            ..Canaries::default()
        }
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
    /// Each applied add: `(counter, (epoch, op), amount, answered)`.
    adds: Vec<(u64, (usize, OpNumber), u64, u64)>,
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
    /// Replicas restarted (reopened on their journals).
    pub restarts: u64,
    /// Replicas that lost their disk and recovered from their peers.
    pub disks_lost: u64,
    /// Replicas cut off from their group for a while.
    pub cuts: u64,
    /// View changes the groups' replicas started (counted since each last reopened).
    pub view_changes: u64,
    /// Checkpoints the replicas took (likewise).
    pub checkpoints: u64,
    /// States replicas installed from a peer (likewise).
    pub states_installed: u64,
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

/// Runs seed `seed` with `canary`; an error says what the check found. A panic inside a
/// replica (an invariant it asserts) is a failure too.
pub fn run_seed(seed: u64, canary: MoveCanary) -> Result<MoveSummary, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_checked(seed, canary)))
        .unwrap_or_else(|payload| Err(format!("panic: {}", crate::panics::message(payload))))
}

fn run_checked(seed: u64, canary: MoveCanary) -> Result<MoveSummary, String> {
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
    for group in &run.groups {
        let (cuts, view_changes, checkpoints, installed) = group.counted();
        summary.cuts += cuts;
        summary.view_changes += view_changes;
        summary.checkpoints += checkpoints;
        summary.states_installed += installed;
    }
    Ok(summary)
}

impl Run {
    fn new(seed: u64, canary: MoveCanary) -> Result<Run, String> {
        let mut rng = SimRng::new(seed);
        let first = Group::start((0..REPLICAS).collect(), false, canary.consensus(), &mut rng)?;
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
            groups: vec![first],
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
        if asking && self.rng.per_mille(DISK_LOSS_PER_MILLE) {
            return self.lose_disk_somewhere(summary);
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

    /// A random replica of a random group restarts on its journal — its node's process
    /// restarts, as far as the node's asks go: one that activated its counter and has not yet
    /// read it activates again (a reopened replica may be behind what it had applied, until
    /// it hears the group's commit; a node's activations do not outlive it).
    fn restart_somewhere(&mut self) -> Result<(), String> {
        let epoch = self.rng.index(self.groups.len());
        let nodes = self.groups[epoch].nodes().to_vec();
        let node = nodes[self.rng.index(nodes.len())];
        self.groups[epoch].restart(node, &mut self.rng)?;
        self.forget_activations(node);
        Ok(())
    }

    /// A random replica of a random group loses its disk, if its group can bear it now;
    /// its node's asks that had not read their counter activate again, as after a restart.
    fn lose_disk_somewhere(&mut self, summary: &mut MoveSummary) -> Result<(), String> {
        let epoch = self.rng.index(self.groups.len());
        let nodes = self.groups[epoch].nodes().to_vec();
        let node = nodes[self.rng.index(nodes.len())];
        if self.groups[epoch].lose_disk(node, &mut self.rng)? {
            summary.disks_lost += 1;
            self.forget_activations(node);
        }
        Ok(())
    }

    /// The asks on `node` that activated their counter and have not read it yet activate
    /// again: the node's replica went back (a restart, a lost disk).
    fn forget_activations(&mut self, node: usize) {
        for client in self.clients.iter_mut().filter(|client| client.node == node) {
            if matches!(client.ask, Ask::Ready { .. }) {
                client.ask = Ask::Idle;
            }
        }
    }

    /// A random group delivers a few messages, or ticks.
    fn apply_somewhere(&mut self) -> Result<(), String> {
        let epoch = self.rng.index(self.groups.len());
        self.groups[epoch].step(&mut self.rng, true)
    }

    /// Every group, its faults over, until each replica applied what its group committed and
    /// every submission is answered.
    fn catch_up_all(&mut self) -> Result<(), String> {
        for epoch in 0..self.groups.len() {
            let mut steps = 0;
            while !self.groups[epoch].settled() {
                if steps == CATCH_UP_STEPS_MAX {
                    return Err(format!("epoch {epoch}'s group did not settle"));
                }
                self.groups[epoch].step(&mut self.rng, false)?;
                steps += 1;
            }
        }
        Ok(())
    }

    /// Submits `op` to `epoch`'s group as `client`'s next request; its ticket there.
    fn submit(&mut self, epoch: usize, client: ClientId, op: Vec<u8>) -> usize {
        self.groups[epoch].submit(client, op)
    }

    /// The answer to the submission at `(epoch, ticket)` as `node` hears it — once its own
    /// replica applied it — with the op it committed at.
    fn answer(
        &self,
        node: usize,
        (epoch, ticket): (usize, usize),
    ) -> Option<(OpNumber, PartitionResult)> {
        self.groups[epoch].answer(node, ticket)
    }

    /// `node`'s replica of `epoch`'s group.
    fn machine(&self, epoch: usize, node: usize) -> Result<&PartitionMachine, String> {
        self.groups[epoch]
            .machine(node)
            .ok_or_else(|| format!("node {node} holds no replica of epoch {epoch}"))
    }

    /// The stream of rows a move's leader fills the next epoch with from `node`'s replica of
    /// `epoch` (as a node's `FillSource::sealed` does), whole; empty if it cannot be read.
    fn fill_stream(&self, epoch: usize, node: usize) -> Result<Vec<u8>, String> {
        Ok(FillSource::of_machine(self.machine(epoch, node)?)
            .whole_stream()
            .unwrap_or_default())
    }

    /// The epoch `node` reads from and commits through: its newest replica that is not
    /// filling (with the canary, its newest).
    fn route(&self, node: usize) -> Option<usize> {
        (0..self.groups.len()).rev().find(|epoch| {
            self.groups[*epoch].machine(node).is_some_and(|machine| {
                self.canary == MoveCanary::ServeBeforeFilled || machine.phase() != Phase::Filling
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
        let newest = self.groups.len().checked_sub(1).ok_or("no group")?;
        for node in self.groups[newest].nodes().to_vec() {
            let machine = self.machine(newest, node)?;
            for counter in 0..COUNTERS {
                let held = value_of(machine, counter);
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
mod group;
mod moves;
#[cfg(test)]
mod tests;
