//! The partition plane as a workload of the VSR simulator ([`crate::vsr`]): every replica runs
//! the real [`PartitionMachine`], and requests are *messages to entities* executed where they
//! arrive, as a partition's primary executes them: the node reads the entity from its own copy,
//! runs the message (a counter: `Add` answers the new value, `Get` the value), and submits the
//! outcome — a write guarded by the stamp it read, or a barrier for a read — to its replica.
//! A few counters and many clients, so messages to one entity race on one node and across a
//! view change.
//!
//! The check is per entity. Every acknowledged `Add` must be committed (its request carried by
//! a committed op), and an entity's acknowledged adds, in commit order, must each answer the
//! previous answer plus its amount (none lost, none applied twice, none computed from a stale
//! copy). Every acknowledged `Get` must answer the value at its barrier's commit, and no value
//! older than an add acknowledged before the get was sent (no stale read). The state the
//! replicas converge to must hold each counter's last acknowledged value (or a later one an
//! add committed whose answer was lost to its client's retry: none here, since clients retry
//! until answered).

use std::collections::{BTreeMap, HashMap};

use crate::rng::SimRng;
use crate::vsr::history::History;
use crate::vsr::{AtReplica, Canary, CommittedOrder, Workload, WorkloadCounts};
use serde::{Deserialize, Serialize};
use tessera_consensus::message::{ClientId, Request};
use tessera_contract::EntityAddress;
use tessera_state::WriteSet;
use tessera_state::partition::{PartitionMachine, PartitionOp, PartitionResult};

/// Counters the clients send to: few, so messages to one entity race.
const COUNTERS: u64 = 4;
/// Per thousand: a message that reads (`Get`) rather than adds.
const GET_PER_MILLE: u64 = 350;
/// The largest amount one `Add` adds.
const AMOUNT_MAX: u64 = 9;
/// The state key a counter keeps its value under.
const VALUE_KEY: &str = "value";

/// A message a client sends to a counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CounterMessage {
    /// Adds `amount`; answers the new value.
    Add {
        /// Which counter.
        counter: u64,
        /// How much, at least 1.
        amount: u64,
    },
    /// Answers the value.
    Get {
        /// Which counter.
        counter: u64,
    },
}

impl CounterMessage {
    fn counter(&self) -> u64 {
        match *self {
            CounterMessage::Add { counter, .. } | CounterMessage::Get { counter } => counter,
        }
    }
}

/// What a client was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterAnswer {
    /// The value the message answered.
    Value(u64),
    /// The counter changed between the node's read and the commit: nothing was applied.
    Conflict,
}

/// The partition plane's workload.
pub struct PartitionWorkload;

fn address(counter: u64) -> EntityAddress {
    EntityAddress::new("sim", "counter", format!("c{counter}"))
}

/// A counter's value in `machine`'s copy (0 if unset; an in-memory database does not fail).
fn value_of(machine: &PartitionMachine, entity: &EntityAddress) -> u64 {
    machine
        .get(entity, VALUE_KEY)
        .ok()
        .flatten()
        .and_then(|bytes| <[u8; 8]>::try_from(bytes.as_slice()).ok())
        .map_or(0, u64::from_le_bytes)
}

/// A write's stamp: unique per request of the run, never 0 (request numbers start at 1).
fn stamp_of(request: &Request) -> u64 {
    (request.client << 32) | (request.request_number & 0xffff_ffff)
}

impl PartitionWorkload {
    /// What the node the request reached submits (or answers) for `message`, run against its
    /// copy `machine`.
    fn execute(
        &self,
        machine: &PartitionMachine,
        is_primary: bool,
        canary: Canary,
        request: &Request,
        message: CounterMessage,
    ) -> AtReplica {
        let entity = address(message.counter());
        let value = value_of(machine, &entity);
        let expect = machine.stamp(&entity).unwrap_or(0);
        let op = match message {
            CounterMessage::Add { amount, .. } => {
                let new_value = value + amount;
                let mut writes = WriteSet::new(entity);
                writes.put(VALUE_KEY, new_value.to_le_bytes().to_vec());
                PartitionOp::Write {
                    expect,
                    stamp: stamp_of(request),
                    // A counter writes no receipt or client key: no commit time is read.
                    at_ms: 0,
                    writes,
                    reply: new_value.to_le_bytes().to_vec(),
                }
            }
            CounterMessage::Get { .. } => {
                let reply = value.to_le_bytes().to_vec();
                // Not a client's first request: the replicas' client table opens a client's
                // session with its first committed request, and a session the table never
                // saw would answer the client's next one as evicted.
                if canary == Canary::ReadWithoutBarrier && is_primary && request.request_number > 1
                {
                    return AtReplica::Answer(PartitionResult::Checked { reply }.encode());
                }
                PartitionOp::Check {
                    entity,
                    expect,
                    reply,
                }
            }
        };
        AtReplica::Submit(op.encode())
    }
}

impl Workload for PartitionWorkload {
    type Machine = PartitionMachine;
    type Operation = CounterMessage;
    type Answer = CounterAnswer;

    fn name(&self) -> &'static str {
        "partition"
    }

    fn machine(&self) -> Result<PartitionMachine, String> {
        PartitionMachine::in_memory().map_err(|error| error.to_string())
    }

    /// As a node's group driver restarts it: forgotten, its rows emptied only if the journal
    /// restores no checkpoint (`machine_opened`).
    fn machine_after_crash(
        &self,
        mut crashed: PartitionMachine,
    ) -> Result<PartitionMachine, String> {
        crashed.forget();
        Ok(crashed)
    }

    fn machine_opened(&self, machine: &mut PartitionMachine) -> Result<(), String> {
        machine.settle().map_err(|error| error.to_string())
    }

    fn state_of(&self, machine: &PartitionMachine) -> Vec<u8> {
        machine.image().unwrap_or_default()
    }

    fn next_operation(&self, rng: &mut SimRng, _: ClientId, _: u64) -> CounterMessage {
        let counter = rng.below(COUNTERS);
        if rng.per_mille(GET_PER_MILLE) {
            CounterMessage::Get { counter }
        } else {
            CounterMessage::Add {
                counter,
                amount: rng.between(1, AMOUNT_MAX),
            }
        }
    }

    fn encode(&self, operation: &CounterMessage) -> Vec<u8> {
        rmp_serde::to_vec(operation).unwrap_or_default()
    }

    fn at_replica(
        &self,
        machine: &PartitionMachine,
        is_primary: bool,
        canary: Canary,
        request: &Request,
    ) -> AtReplica {
        match rmp_serde::from_slice::<CounterMessage>(&request.operation) {
            Ok(message) => self.execute(machine, is_primary, canary, request, message),
            // Not a message this node can run: the machine refuses the bytes as they are.
            Err(_) => AtReplica::Submit(request.operation.clone()),
        }
    }

    fn decode_answer(&self, bytes: &[u8]) -> Result<CounterAnswer, String> {
        let value = |reply: &[u8]| {
            <[u8; 8]>::try_from(reply)
                .map(u64::from_le_bytes)
                .map_err(|_| format!("a reply of {} bytes, not a counter value", reply.len()))
        };
        match PartitionResult::decode(bytes) {
            PartitionResult::Applied { reply } | PartitionResult::Checked { reply } => {
                value(&reply).map(CounterAnswer::Value)
            }
            PartitionResult::Conflict { .. } => Ok(CounterAnswer::Conflict),
            PartitionResult::Malformed(reason) | PartitionResult::StorageFailed(reason) => {
                Err(reason)
            }
            // The simulated group is never moved: a move's refusals are errors here.
            moved @ (PartitionResult::Sealed
            | PartitionResult::Filling
            | PartitionResult::Opened) => Err(format!("{moved:?} from a group never moved")),
        }
    }

    fn check_final_state(
        &self,
        machine: &PartitionMachine,
        history: &History<CounterMessage, CounterAnswer>,
    ) -> Result<(), String> {
        for counter in 0..COUNTERS {
            let acknowledged = history
                .operations
                .iter()
                .filter(|operation| {
                    matches!(operation.operation, CounterMessage::Add { counter: c, .. } if c == counter)
                })
                .filter_map(|operation| match operation.completed {
                    Some((_, CounterAnswer::Value(value))) => Some(value),
                    _ => None,
                })
                .max()
                .unwrap_or(0);
            let held = value_of(machine, &address(counter));
            if held != acknowledged {
                return Err(format!(
                    "counter {counter} holds {held}, but its last acknowledged add answered {acknowledged}"
                ));
            }
        }
        Ok(())
    }

    fn check(
        &self,
        history: &History<CounterMessage, CounterAnswer>,
        committed: &CommittedOrder,
    ) -> Result<WorkloadCounts, String> {
        let mut position: HashMap<(ClientId, u64), Position> = HashMap::new();
        for (op, requests) in committed {
            for (index, request) in requests.iter().enumerate() {
                position.entry(*request).or_insert((*op, index));
            }
        }
        let mut checked = 0;
        let mut conflicts = 0;
        for counter in 0..COUNTERS {
            let (replies, refused) = check_counter(history, &position, counter)?;
            checked += replies;
            conflicts += refused;
        }
        Ok(WorkloadCounts {
            replies_checked: checked,
            refusals: conflicts,
            membership_commands: 0,
        })
    }
}

/// Where a request was applied: its op, and its place among the op's requests.
type Position = (u64, usize);

/// One acknowledged message to a counter, as the check reads it.
struct Acknowledged {
    message: CounterMessage,
    value: u64,
    invoked: u64,
    completed: u64,
    /// Where its request was committed, if it was.
    op: Option<Position>,
}

/// Checks one counter's history (see the module's doc); returns the replies checked and the
/// conflicts answered.
fn check_counter(
    history: &History<CounterMessage, CounterAnswer>,
    position: &HashMap<(ClientId, u64), Position>,
    counter: u64,
) -> Result<(u64, u64), String> {
    let mut acknowledged = Vec::new();
    let mut conflicts = 0;
    for operation in &history.operations {
        if operation.operation.counter() != counter {
            continue;
        }
        match operation.completed {
            Some((completed, CounterAnswer::Value(value))) => acknowledged.push(Acknowledged {
                message: operation.operation,
                value,
                invoked: operation.invoked,
                completed,
                op: position
                    .get(&(operation.client, operation.request_number))
                    .copied(),
            }),
            Some((_, CounterAnswer::Conflict)) => conflicts += 1,
            None => return Err(format!("{operation:?} was never answered")),
        }
    }
    // The value after each committed add, by op: the counter's history.
    let mut adds: BTreeMap<Position, (u64, u64)> = BTreeMap::new();
    for ack in &acknowledged {
        if let CounterMessage::Add { amount, .. } = ack.message {
            let op = ack.op.ok_or_else(|| {
                format!(
                    "counter {counter}: an add answered {} is in no committed op",
                    ack.value
                )
            })?;
            if adds.insert(op, (amount, ack.value)).is_some() {
                return Err(format!("counter {counter}: two adds answered from {op:?}"));
            }
        }
    }
    let mut value = 0;
    for (op, (amount, answered)) in &adds {
        if *answered != value + amount {
            return Err(format!(
                "counter {counter}: the add of {amount} at {op:?} answered {answered}, \
                 not {value} + {amount} (lost, doubled or stale)"
            ));
        }
        value = *answered;
    }
    let value_before = |op: Position| {
        adds.range(..op)
            .next_back()
            .map_or(0, |(_, (_, answered))| *answered)
    };
    // Adds by when they were acknowledged, with the highest value acknowledged by then.
    let mut by_completion: Vec<(u64, u64)> = acknowledged
        .iter()
        .filter(|ack| matches!(ack.message, CounterMessage::Add { .. }))
        .map(|ack| (ack.completed, ack.value))
        .collect();
    by_completion.sort_unstable();
    let mut highest = 0;
    for entry in &mut by_completion {
        highest = highest.max(entry.1);
        entry.1 = highest;
    }
    for ack in &acknowledged {
        let known = by_completion.partition_point(|(completed, _)| *completed < ack.invoked);
        let floor = known
            .checked_sub(1)
            .map_or(0, |index| by_completion[index].1);
        if ack.value < floor {
            return Err(format!(
                "counter {counter}: {:?} answered {} after an add had answered {floor} (stale)",
                ack.message, ack.value
            ));
        }
        if let (CounterMessage::Get { .. }, Some(op)) = (ack.message, ack.op)
            && ack.value != value_before(op)
        {
            return Err(format!(
                "counter {counter}: a get answered {} but held {} at its barrier ({op:?})",
                ack.value,
                value_before(op)
            ));
        }
    }
    Ok((acknowledged.len() as u64, conflicts))
}

#[cfg(test)]
#[path = "partition_tests.rs"]
mod tests;
