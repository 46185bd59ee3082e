//! The simulated clients: each ask activates its counter on a node behind a commit barrier,
//! reads the value while it runs from the copy routed then, and commits the add through the
//! node's routed group, following a sealed group to the next epoch's replica on that node and
//! asking a filling one again later — as `tessera_state::partition::PartitionState` does.

use super::{COUNTERS, MoveSummary, NODES, Run, VALUE_KEY, address, value_of};
use tessera_consensus::message::ClientId;
use tessera_state::WriteSet;
use tessera_state::partition::{PartitionOp, PartitionResult};

/// Where a client's ask is.
#[derive(Clone, Copy, Debug)]
pub(super) enum Ask {
    /// Not started: the next step activates the counter on the client's node.
    Idle,
    /// The activation's barrier was submitted at `(epoch, ticket)`; the copy read `stamp`.
    Barrier { at: (usize, usize), stamp: u64 },
    /// Activated from a copy at `stamp`: the next step runs the add.
    Ready { stamp: u64 },
    /// The add was submitted at `(epoch, ticket)`, answering `value`.
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

pub(super) struct Client {
    pub(super) node: usize,
    pub(super) counter: u64,
    pub(super) amount: u64,
    pub(super) ask: Ask,
}

impl Run {
    pub(super) fn advance_client(
        &mut self,
        index: usize,
        summary: &mut MoveSummary,
        asking: bool,
    ) -> Result<(), String> {
        let (node, counter, amount) = {
            let client = &self.clients[index];
            (client.node, client.counter, client.amount)
        };
        // Its session in every group.
        let session = index as ClientId + 1;
        let next = match self.clients[index].ask {
            Ask::Idle if !asking => Ask::Idle,
            Ask::Idle => {
                let Some(epoch) = self.route(node) else {
                    self.finish(index);
                    return Ok(());
                };
                let stamp = self
                    .machine(epoch, node)?
                    .stamp(&address(counter))
                    .map_err(|error| error.to_string())?;
                let check = PartitionOp::Check {
                    entity: address(counter),
                    expect: stamp,
                    reply: Vec::new(),
                };
                let at = (epoch, self.submit(epoch, session, check.encode()));
                Ask::Barrier { at, stamp }
            }
            Ask::Barrier { at, stamp } => match self.answer(node, at) {
                None => return Ok(()),
                Some((_, PartitionResult::Checked { .. })) => Ask::Ready { stamp },
                // Not open yet: asked again (as a commit is).
                Some((_, PartitionResult::Filling)) => {
                    let check = self.groups[at.0].operation(at.1);
                    let at = (at.0, self.submit(at.0, session, check));
                    Ask::Barrier { at, stamp }
                }
                // Behind, or moved on: read again from the replica routed now (the barrier
                // made the one it went through current).
                Some(_) => match self.route(node) {
                    Some(epoch) => Ask::Ready {
                        stamp: self
                            .machine(epoch, node)?
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
                let value = value_of(self.machine(epoch, node)?, counter) + amount;
                let mut writes = WriteSet::new(address(counter));
                writes.put(VALUE_KEY, value.to_le_bytes().to_vec());
                let written = self.next_stamp;
                self.next_stamp += 1;
                let op =
                    PartitionOp::write(writes, stamp, written, 0, value.to_le_bytes().to_vec())
                        .map_err(|error| error.to_string())?
                        .encode();
                self.ops.push(op.clone());
                let at = (epoch, self.submit(epoch, session, op));
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
                Some((committed, PartitionResult::Applied { .. })) => {
                    self.adds.push((counter, (at.0, committed), amount, value));
                    self.finish(index);
                    return Ok(());
                }
                Some((_, PartitionResult::Sealed)) => {
                    let next = at.0 + 1;
                    if self.groups.get(next).is_some_and(|group| group.has(node)) {
                        summary.followed += 1;
                        let at = (next, self.submit(next, session, self.ops[op].clone()));
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
                Some((_, PartitionResult::Filling)) => Ask::Retry {
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
                let at = (epoch, self.submit(epoch, session, self.ops[op].clone()));
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
    pub(super) fn finish(&mut self, index: usize) {
        let client = &mut self.clients[index];
        client.ask = Ask::Idle;
        client.node = self.rng.index(NODES);
        client.counter = self.rng.below(COUNTERS);
        client.amount = self.rng.between(1, 9);
    }
}
