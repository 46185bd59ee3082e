//! Partition moves, simulated from one seed with the real partition machine. Consensus is
//! abstracted to what a move relies on — each epoch's group orders its ops into one log, and
//! each replica applies that log in order, lagging behind by a drawn amount — while the
//! protocol above it runs as the nodes run it (`tessera-host`'s partition groups and
//! `tessera_state::partition::PartitionState`): six nodes, groups of three, counters asked
//! through random nodes, and moves that replace one replica at a time. A move starts the next
//! epoch's group on the new set (filling), the replica of both epochs that leads it seals the
//! old group, takes its image once its own replica applied the seal, fills the new group and
//! opens it; a node reads from its newest replica that is not filling, activates an entity
//! behind a commit barrier, and a commit its sealed group refuses goes on to the node's
//! replica of the next epoch (one still filling is asked again later).
//!
//! The check: every add the machine applied is answered to its client, so per counter, in the
//! order the adds committed (epoch, then log position), each answers the previous answer plus
//! its amount — none lost, none applied twice, none computed from a stale or half-filled copy
//! — and the last epoch's replicas end with each counter's last answer. The canaries break the
//! protocol where a move could lose data, and the check must catch them.

use crate::rng::SimRng;
use std::collections::BTreeMap;
use tessera_consensus::message::checksum_bytes;
use tessera_consensus::state_machine::StateMachine;
use tessera_contract::EntityAddress;
use tessera_state::WriteSet;
use tessera_state::partition::{
    FILL_BYTES_MAX, PartitionMachine, PartitionOp, PartitionResult, Phase,
};

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

/// Where a client's ask is.
#[derive(Clone, Copy, Debug)]
enum Ask {
    /// Not started: the next step activates the counter on the client's node.
    Idle,
    /// The activation's barrier was submitted at `(epoch, index)`; the copy read `stamp`.
    Barrier { at: (usize, usize), stamp: u64 },
    /// Activated from a copy at `stamp`: the next step runs the add.
    Ready { stamp: u64 },
    /// The add was submitted at `(epoch, index)`, answering `value`.
    Commit {
        at: (usize, usize),
        stamp: u64,
        value: u64,
        op: usize,
    },
    /// Refused while filling: `op` is submitted again to `epoch` on a later step.
    Retry {
        epoch: usize,
        stamp: u64,
        value: u64,
        op: usize,
    },
}

struct Client {
    node: usize,
    counter: u64,
    amount: u64,
    ask: Ask,
}

/// A move under way: its leader, and where it is.
#[derive(Clone, Copy, Debug)]
enum Moving {
    /// The leader submitted the seal at this index of the old group's log.
    Sealing {
        leader: usize,
        index: usize,
        image: Option<usize>,
    },
    /// The new group got the fills and the open, at this index of its log.
    Opening { leader: usize, index: usize },
}

/// One simulated run.
struct Run {
    rng: SimRng,
    canary: MoveCanary,
    groups: Vec<Group>,
    clients: Vec<Client>,
    moving: Option<Moving>,
    /// Encoded write ops, by number (resubmitted as they are).
    ops: Vec<Vec<u8>>,
    /// Images taken early (the [`MoveCanary::ImageBeforeSeal`] canary), by number.
    images: Vec<Vec<u8>>,
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
            images: Vec::new(),
            adds: Vec::new(),
            next_stamp: 1,
        })
    }

    fn step(&mut self, summary: &mut MoveSummary, asking: bool) -> Result<(), String> {
        match self.rng.below(10) {
            0..=4 => self.apply_somewhere(),
            5..=8 => {
                let client = self.rng.index(CLIENTS);
                self.advance_client(client, summary, asking)
            }
            _ => self.advance_move(summary, asking),
        }
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

    fn advance_client(
        &mut self,
        index: usize,
        summary: &mut MoveSummary,
        asking: bool,
    ) -> Result<(), String> {
        let (node, counter, amount) = {
            let client = &self.clients[index];
            (client.node, client.counter, client.amount)
        };
        let next = match self.clients[index].ask {
            Ask::Idle if !asking => Ask::Idle,
            Ask::Idle => {
                let Some(epoch) = self.route(node) else {
                    self.finish(index);
                    return Ok(());
                };
                let stamp = self.groups[epoch].replicas[&node]
                    .machine
                    .stamp(&address(counter))
                    .map_err(|error| error.to_string())?;
                let check = PartitionOp::Check {
                    entity: address(counter),
                    expect: stamp,
                    reply: Vec::new(),
                };
                let at = (epoch, self.submit(epoch, check.encode()));
                Ask::Barrier { at, stamp }
            }
            Ask::Barrier { at, stamp } => match self.answer(node, at) {
                None => return Ok(()),
                Some(PartitionResult::Checked { .. }) => Ask::Ready { stamp },
                // Not open yet: asked again (as a commit is).
                Some(PartitionResult::Filling) => {
                    let check = self.groups[at.0].log[at.1].clone();
                    let at = (at.0, self.submit(at.0, check));
                    Ask::Barrier { at, stamp }
                }
                // Behind, or moved on: read again from the replica routed now (the barrier
                // made the one it went through current).
                Some(_) => match self.route(node) {
                    Some(epoch) => Ask::Ready {
                        stamp: self.groups[epoch].replicas[&node]
                            .machine
                            .stamp(&address(counter))
                            .map_err(|error| error.to_string())?,
                    },
                    None => {
                        self.finish(index);
                        return Ok(());
                    }
                },
            },
            Ask::Ready { stamp } => {
                let Some(epoch) = self.route(node) else {
                    self.finish(index);
                    return Ok(());
                };
                // The guest reads its state while it runs: from the copy routed now.
                let value = value_of(&self.groups[epoch].replicas[&node].machine, counter) + amount;
                let mut writes = WriteSet::new(address(counter));
                writes.put(VALUE_KEY, value.to_le_bytes().to_vec());
                let written = self.next_stamp;
                self.next_stamp += 1;
                let op =
                    PartitionOp::write(writes, stamp, written, 0, value.to_le_bytes().to_vec())
                        .map_err(|error| error.to_string())?
                        .encode();
                self.ops.push(op.clone());
                let at = (epoch, self.submit(epoch, op));
                Ask::Commit {
                    at,
                    stamp,
                    value,
                    op: self.ops.len() - 1,
                }
            }
            Ask::Commit {
                at,
                stamp,
                value,
                op,
            } => match self.answer(node, at) {
                None => return Ok(()),
                Some(PartitionResult::Applied { .. }) => {
                    self.adds.push((counter, at, amount, value));
                    self.finish(index);
                    return Ok(());
                }
                Some(PartitionResult::Sealed) => {
                    let next = at.0 + 1;
                    if self
                        .groups
                        .get(next)
                        .is_some_and(|group| group.replicas.contains_key(&node))
                    {
                        summary.followed += 1;
                        let at = (next, self.submit(next, self.ops[op].clone()));
                        Ask::Commit {
                            at,
                            stamp,
                            value,
                            op,
                        }
                    } else {
                        summary.refused += 1;
                        self.finish(index);
                        return Ok(());
                    }
                }
                Some(PartitionResult::Filling) => Ask::Retry {
                    epoch: at.0,
                    stamp,
                    value,
                    op,
                },
                Some(_) => {
                    summary.refused += 1;
                    self.finish(index);
                    return Ok(());
                }
            },
            Ask::Retry {
                epoch,
                stamp,
                value,
                op,
            } => {
                let at = (epoch, self.submit(epoch, self.ops[op].clone()));
                Ask::Commit {
                    at,
                    stamp,
                    value,
                    op,
                }
            }
        };
        self.clients[index].ask = next;
        Ok(())
    }

    /// Ends client `index`'s ask; its next one goes to a drawn counter through a drawn node.
    fn finish(&mut self, index: usize) {
        let client = &mut self.clients[index];
        client.ask = Ask::Idle;
        client.node = self.rng.index(NODES);
        client.counter = self.rng.below(COUNTERS);
        client.amount = self.rng.between(1, 9);
    }

    fn advance_move(&mut self, summary: &mut MoveSummary, asking: bool) -> Result<(), String> {
        match self.moving {
            None if asking && self.rng.per_mille(MOVE_PER_MILLE * 10) => self.start_move(),
            None => Ok(()),
            Some(Moving::Sealing {
                leader,
                index,
                image,
            }) => {
                let old = self.groups.len() - 2;
                if self.answer(leader, (old, index)).is_none() {
                    return Ok(());
                }
                let image = match image {
                    Some(early) => self.images[early].clone(),
                    None => self.groups[old].replicas[&leader].machine.snapshot(),
                };
                let new = old + 1;
                let checksum = checksum_bytes(&image);
                let mut pieces = 0u32;
                for (index, bytes) in image.chunks(FILL_BYTES_MAX / 64).enumerate() {
                    let fill = PartitionOp::Fill {
                        checksum,
                        index: index as u32,
                        bytes: bytes.to_vec(),
                    };
                    self.submit(new, fill.encode());
                    pieces = index as u32 + 1;
                }
                let open = PartitionOp::Open { checksum, pieces };
                let index = self.submit(new, open.encode());
                self.moving = Some(Moving::Opening { leader, index });
                Ok(())
            }
            Some(Moving::Opening { leader, index }) => {
                let new = self.groups.len() - 1;
                match self.answer(leader, (new, index)) {
                    None => Ok(()),
                    Some(PartitionResult::Applied { .. }) => {
                        summary.moves += 1;
                        self.moving = None;
                        Ok(())
                    }
                    Some(other) => Err(format!("epoch {new}'s open answered {other:?}")),
                }
            }
        }
    }

    /// Places the next epoch: one replica of the newest group replaced by a node outside it.
    fn start_move(&mut self) -> Result<(), String> {
        let old = self.groups.len() - 1;
        let members: Vec<usize> = self.groups[old].replicas.keys().copied().collect();
        let outside: Vec<usize> = (0..NODES).filter(|node| !members.contains(node)).collect();
        let leaving = members[self.rng.index(members.len())];
        let joining = outside[self.rng.index(outside.len())];
        let mut replicas = BTreeMap::new();
        for node in members
            .iter()
            .copied()
            .filter(|node| *node != leaving)
            .chain([joining])
        {
            let machine = PartitionMachine::in_memory()
                .and_then(PartitionMachine::filling)
                .map_err(|error| error.to_string())?;
            replicas.insert(
                node,
                Replica {
                    machine,
                    applied: 0,
                },
            );
        }
        self.groups.push(Group {
            log: Vec::new(),
            results: Vec::new(),
            replicas,
        });
        let leader = *members
            .iter()
            .find(|node| **node != leaving)
            .ok_or("a group of one")?;
        let image = (self.canary == MoveCanary::ImageBeforeSeal).then(|| {
            self.images
                .push(self.groups[old].replicas[&leader].machine.snapshot());
            self.images.len() - 1
        });
        let index = self.submit(old, PartitionOp::Seal.encode());
        self.moving = Some(Moving::Sealing {
            leader,
            index,
            image,
        });
        Ok(())
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

#[cfg(test)]
#[path = "partition_move_tests.rs"]
mod tests;
