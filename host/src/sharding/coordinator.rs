//! The coordinator: one task that owns the allocation table. It answers allocation requests
//! with least-shards placement, gives every allocation a new generation, runs a rebalance round
//! on every tick and membership change (dead-owner moves uncapped, spread moves capped), and
//! drives each graceful move as a handoff: the losing region stops the shard's entities and
//! hands its buffered messages on before the move is announced to everyone. It is reached
//! only through [`CoordinatorCommand`]s (serializable) and local read-only queries.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};

use crate::sharding::allocation::{self, Allocation, AllocationTable, ShardKey};
use crate::sharding::config::{ConfigError, ShardingConfig};
use crate::sharding::link::{LinkMessage, NodeId, Switchboard};
use crate::sharding::membership::MemberSet;
use crate::sharding::rebalance::{
    self, RebalanceHistory, RebalanceReason, RebalanceRound, ShardMovement,
};

/// A command to the coordinator; plain data so it can cross a network.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoordinatorCommand {
    /// Where does `key` live? Answered to `requester` with [`LinkMessage::Allocated`] or
    /// [`LinkMessage::AllocationFailed`].
    Allocate {
        /// The shard.
        key: ShardKey,
        /// The region asking.
        requester: NodeId,
    },
    /// The losing region finished handing `key` off (entities stopped, buffer drained).
    HandoffComplete {
        /// The shard.
        key: ShardKey,
        /// The generation of the move.
        generation: u64,
    },
    /// Moves `key` to `to` (an operator's or a test's move; a graceful handoff).
    MoveShard {
        /// The shard.
        key: ShardKey,
        /// The new owner; must be eligible.
        to: NodeId,
    },
    /// Merges a surviving region's table (coordinator takeover).
    MergeTable {
        /// The table entries as the region knows them.
        entries: Vec<(ShardKey, Allocation)>,
    },
}

/// A read-only query, answered on a local channel (an admin view; not part of the wire).
#[derive(Debug)]
pub enum CoordinatorQuery {
    /// The allocation table.
    Table(oneshot::Sender<AllocationTable>),
    /// The kept rebalance rounds, oldest first.
    Rounds(oneshot::Sender<Vec<RebalanceRound>>),
    /// Shards whose handoff is in progress.
    Moving(oneshot::Sender<BTreeSet<ShardKey>>),
}

/// What the coordinator's inbox carries.
#[derive(Debug)]
pub enum CoordinatorMessage {
    /// A command.
    Command(CoordinatorCommand),
    /// A query.
    Query(CoordinatorQuery),
}

/// A graceful move waiting for the losing region.
#[derive(Debug)]
struct Handoff {
    from: NodeId,
    to: Allocation,
    waiting: BTreeSet<NodeId>,
}

/// The coordinator task's state.
pub struct Coordinator {
    config: ShardingConfig,
    table: AllocationTable,
    next_generation: u64,
    handoffs: BTreeMap<ShardKey, Handoff>,
    history: RebalanceHistory,
    members: watch::Receiver<MemberSet>,
    switchboard: Arc<Switchboard>,
}

/// A handle to the coordinator task; clones share it.
#[derive(Clone, Debug)]
pub struct CoordinatorHandle {
    inbox: mpsc::Sender<CoordinatorMessage>,
}

impl Coordinator {
    /// Validates `config`, starts the coordinator task and connects it to `switchboard`.
    /// Must be called inside a Tokio runtime.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::Arc;
    /// use tessera_host::sharding::{Coordinator, Membership, ShardingConfig, Switchboard};
    /// let membership = Membership::new();
    /// membership.join("node-1", Vec::<String>::new());
    /// let switchboard = Arc::new(Switchboard::new());
    /// let coordinator =
    ///     Coordinator::start(ShardingConfig::default(), membership.subscribe(), switchboard)
    ///         .unwrap();
    /// assert!(coordinator.allocation_table().await.unwrap().is_empty());
    /// # }
    /// ```
    pub fn start(
        config: ShardingConfig,
        members: watch::Receiver<MemberSet>,
        switchboard: Arc<Switchboard>,
    ) -> Result<CoordinatorHandle, ConfigError> {
        config.validate()?;
        let (inbox, receiver) = mpsc::channel(config.command_buffer);
        switchboard.connect_coordinator(inbox.clone());
        let coordinator = Coordinator {
            config,
            table: AllocationTable::new(),
            next_generation: 1,
            handoffs: BTreeMap::new(),
            history: RebalanceHistory::default(),
            members,
            switchboard,
        };
        tokio::spawn(coordinator.run(receiver));
        Ok(CoordinatorHandle { inbox })
    }

    async fn run(mut self, mut receiver: mpsc::Receiver<CoordinatorMessage>) {
        let mut tick = tokio::time::interval(self.config.coordinator_tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                message = receiver.recv() => match message {
                    Some(CoordinatorMessage::Command(command)) => self.on_command(command),
                    Some(CoordinatorMessage::Query(query)) => self.on_query(query),
                    None => break,
                },
                _ = tick.tick() => self.rebalance(),
                changed = self.members.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    self.rebalance();
                }
            }
        }
    }

    fn eligible(&self) -> Vec<NodeId> {
        self.members
            .borrow()
            .eligible(self.config.role_constraint.as_deref())
    }

    fn take_generation(&mut self) -> u64 {
        let generation = self.next_generation;
        self.next_generation += 1;
        generation
    }

    fn on_command(&mut self, command: CoordinatorCommand) {
        match command {
            CoordinatorCommand::Allocate { key, requester } => self.allocate(key, requester),
            CoordinatorCommand::HandoffComplete { key, generation } => {
                if self
                    .handoffs
                    .get(&key)
                    .is_some_and(|handoff| handoff.to.generation == generation)
                {
                    self.finish_handoff(&key);
                }
            }
            CoordinatorCommand::MoveShard { key, to } => {
                if !self.eligible().contains(&to) || self.handoffs.contains_key(&key) {
                    tracing::warn!(%key, %to, "move refused: target not eligible or shard moving");
                    return;
                }
                let Some(current) = self.table.get(&key) else {
                    tracing::warn!(%key, "move refused: shard is not allocated");
                    return;
                };
                if current.node == to {
                    return;
                }
                let movement = ShardMovement {
                    key,
                    from: current.node.clone(),
                    to,
                    generation: 0,
                };
                let recorded = self.apply_moves(vec![movement]);
                self.history
                    .record(RebalanceReason::GracefulSpread, recorded);
            }
            CoordinatorCommand::MergeTable { entries } => {
                // Entry by entry: the same shard may appear several times (one per region).
                for (key, allocation) in &entries {
                    allocation::merge_entry(&mut self.table, key, allocation);
                }
                let highest = allocation::max_generation(&self.table);
                self.next_generation = self.next_generation.max(highest + 1);
            }
        }
    }

    fn on_query(&self, query: CoordinatorQuery) {
        match query {
            CoordinatorQuery::Table(reply) => {
                let _ = reply.send(self.table.clone());
            }
            CoordinatorQuery::Rounds(reply) => {
                let _ = reply.send(self.history.rounds());
            }
            CoordinatorQuery::Moving(reply) => {
                let _ = reply.send(self.handoffs.keys().cloned().collect());
            }
        }
    }

    fn send(&self, node: &str, message: LinkMessage) {
        if let Err(error) = self.switchboard.send_to_region(node, message) {
            // The region re-requests after its request timeout; nothing is lost for good.
            tracing::warn!(%node, %error, "coordinator could not reach region");
        }
    }

    fn allocate(&mut self, key: ShardKey, requester: NodeId) {
        if let Some(handoff) = self.handoffs.get_mut(&key) {
            handoff.waiting.insert(requester);
            return;
        }
        let eligible = self.eligible();
        let current = self.table.get(&key).cloned();
        let allocation = match current {
            Some(allocation) if eligible.contains(&allocation.node) => allocation,
            _ => {
                let Some(node) =
                    rebalance::least_shards_owner(&self.table, &key.type_key, &eligible)
                else {
                    let reason = match &self.config.role_constraint {
                        Some(role) => format!("no reachable member with role `{role}`"),
                        None => "no reachable member".to_string(),
                    };
                    self.send(&requester, LinkMessage::AllocationFailed { key, reason });
                    return;
                };
                let allocation = Allocation {
                    node,
                    generation: self.take_generation(),
                };
                self.table.insert(key.clone(), allocation.clone());
                if allocation.node != requester {
                    self.send(
                        &allocation.node,
                        LinkMessage::Allocated {
                            key: key.clone(),
                            allocation: allocation.clone(),
                        },
                    );
                }
                allocation
            }
        };
        self.send(&requester, LinkMessage::Allocated { key, allocation });
    }

    /// One rebalance round of each kind; rounds without movements are not recorded.
    fn rebalance(&mut self) {
        let eligible = self.eligible();
        if eligible.is_empty() {
            return;
        }
        // A handoff whose losing region is gone will never complete: settle it now.
        let stuck: Vec<ShardKey> = self
            .handoffs
            .iter()
            .filter(|(_, handoff)| !eligible.contains(&handoff.from))
            .map(|(key, _)| key.clone())
            .collect();
        for key in stuck {
            self.finish_handoff(&key);
        }
        let moving: BTreeSet<ShardKey> = self.handoffs.keys().cloned().collect();
        let mut planned = self.table.clone();
        let dead = rebalance::plan_dead_owner_moves(&mut planned, &eligible, &moving);
        let recorded = self.apply_moves(dead);
        self.history.record(RebalanceReason::DeadOwner, recorded);

        let moving: BTreeSet<ShardKey> = self.handoffs.keys().cloned().collect();
        let mut planned = self.table.clone();
        let cap = self.config.rebalance_per_round;
        let spread = rebalance::plan_spread_moves(&mut planned, &eligible, &moving, cap);
        let recorded = self.apply_moves(spread);
        self.history
            .record(RebalanceReason::GracefulSpread, recorded);
    }

    /// Applies planned moves: a new generation each; a move from an eligible owner becomes a
    /// handoff, a move from a dead owner is announced at once.
    fn apply_moves(&mut self, movements: Vec<ShardMovement>) -> Vec<ShardMovement> {
        let eligible = self.eligible();
        let mut recorded = Vec::with_capacity(movements.len());
        for mut movement in movements {
            movement.generation = self.take_generation();
            let to = Allocation {
                node: movement.to.clone(),
                generation: movement.generation,
            };
            self.table.insert(movement.key.clone(), to.clone());
            if eligible.contains(&movement.from) {
                self.handoffs.insert(
                    movement.key.clone(),
                    Handoff {
                        from: movement.from.clone(),
                        to: to.clone(),
                        waiting: BTreeSet::new(),
                    },
                );
                self.send(
                    &movement.from,
                    LinkMessage::HandOff {
                        key: movement.key.clone(),
                        to,
                    },
                );
            } else {
                self.announce(&movement.key, &to, &BTreeSet::new());
            }
            recorded.push(movement);
        }
        recorded
    }

    fn finish_handoff(&mut self, key: &ShardKey) {
        let Some(handoff) = self.handoffs.remove(key) else {
            return;
        };
        self.announce(key, &handoff.to, &handoff.waiting);
    }

    /// Tells every connected region (and every waiting requester) where `key` lives now.
    fn announce(&self, key: &ShardKey, allocation: &Allocation, waiting: &BTreeSet<NodeId>) {
        let mut targets: BTreeSet<NodeId> = self.switchboard.regions().into_iter().collect();
        targets.extend(waiting.iter().cloned());
        for node in targets {
            self.send(
                &node,
                LinkMessage::Allocated {
                    key: key.clone(),
                    allocation: allocation.clone(),
                },
            );
        }
    }
}

/// Why a coordinator query failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CoordinatorError {
    /// The coordinator task has stopped.
    #[error("the shard coordinator has stopped")]
    Stopped,
}

impl CoordinatorHandle {
    /// Sends a command, waiting for room in the inbox.
    pub async fn command(&self, command: CoordinatorCommand) -> Result<(), CoordinatorError> {
        self.inbox
            .send(CoordinatorMessage::Command(command))
            .await
            .map_err(|_| CoordinatorError::Stopped)
    }

    async fn query<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> CoordinatorQuery,
    ) -> Result<T, CoordinatorError> {
        let (reply, receiver) = oneshot::channel();
        self.inbox
            .send(CoordinatorMessage::Query(make(reply)))
            .await
            .map_err(|_| CoordinatorError::Stopped)?;
        receiver.await.map_err(|_| CoordinatorError::Stopped)
    }

    /// The allocation table.
    pub async fn allocation_table(&self) -> Result<AllocationTable, CoordinatorError> {
        self.query(CoordinatorQuery::Table).await
    }

    /// The kept rebalance rounds, oldest first.
    pub async fn rebalance_rounds(&self) -> Result<Vec<RebalanceRound>, CoordinatorError> {
        self.query(CoordinatorQuery::Rounds).await
    }

    /// Shards with a handoff in progress.
    pub async fn moving_shards(&self) -> Result<BTreeSet<ShardKey>, CoordinatorError> {
        self.query(CoordinatorQuery::Moving).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::TypeKey;
    use crate::sharding::membership::Membership;

    #[tokio::test(start_paused = true)]
    async fn takeover_merges_region_tables_in_any_order_and_generations_keep_growing() {
        let key = |shard| ShardKey::new(TypeKey::new("t", "e"), shard);
        let at = |node: &str, generation| Allocation {
            node: node.into(),
            generation,
        };
        let from_a = vec![(key(1), at("a", 4)), (key(2), at("a", 7))];
        let from_b = vec![
            (key(1), at("b", 4)),
            (key(2), at("b", 6)),
            (key(3), at("b", 2)),
        ];
        let mut tables = Vec::new();
        for order in [[&from_a, &from_b], [&from_b, &from_a]] {
            let membership = Membership::new();
            membership.join("a", Vec::<String>::new());
            membership.join("b", Vec::<String>::new());
            let config = ShardingConfig::default();
            let switchboard = Arc::new(Switchboard::new());
            let coordinator =
                Coordinator::start(config, membership.subscribe(), switchboard).unwrap();
            // One command holding both regions' tables, so no rebalance round runs between
            // them; the entry order is the merge order.
            let entries: Vec<_> = order.into_iter().flatten().cloned().collect();
            let command = CoordinatorCommand::MergeTable { entries };
            coordinator.command(command).await.unwrap();
            coordinator
                .command(CoordinatorCommand::MoveShard {
                    key: key(3),
                    to: "a".into(),
                })
                .await
                .unwrap();
            tables.push(coordinator.allocation_table().await.unwrap());
        }
        assert_eq!(tables[0], tables[1]);
        assert_eq!(
            tables[0][&key(1)],
            at("b", 4),
            "tie on generation: greater node id"
        );
        assert_eq!(tables[0][&key(2)], at("a", 7), "highest generation wins");
        assert_eq!(tables[0][&key(3)].node, "a");
        assert_eq!(
            tables[0][&key(3)].generation,
            8,
            "new generations follow the merged max"
        );
    }
}
