//! The coordinator's graceful moves: committing them (as handoffs in flight, in the catalog),
//! telling the losing region, tending handoffs that stall (a restarted losing region, a new
//! owner that went away, a losing owner removed for good), and completing them — a committed
//! `CompleteHandoff` — before the new home is announced.

use std::collections::BTreeSet;
use tokio::time::Instant;

use super::{Coordinator, Handoff, Owner};
use crate::link::LinkMessage;
use crate::membership::MemberStatus;
use crate::rebalance::{self, ShardMovement};
use tessera_contract::{Allocation, NodeId, ShardKey};
use tessera_metadata::Command;

impl Coordinator {
    /// Commits planned moves, then acts on them: a move from an owner that can hand it off is
    /// committed as a handoff in flight and the owner told; a move from an owner gone for good
    /// is an assignment, announced at once. Returns the committed moves.
    pub(super) async fn apply_moves(
        &mut self,
        movements: Vec<ShardMovement>,
    ) -> Vec<ShardMovement> {
        let (graceful, lost): (Vec<ShardMovement>, Vec<ShardMovement>) = movements
            .into_iter()
            .partition(|movement| self.owner_of(&movement.key, &movement.from) == Owner::Serving);
        let mut recorded = Vec::new();
        if !graceful.is_empty() {
            let moves = graceful
                .iter()
                .map(|m| (m.key.clone(), m.from.clone(), m.to.clone()))
                .collect();
            match self.commit_moves(moves).await {
                Ok(assigned) => {
                    for (mut movement, (key, to)) in graceful.into_iter().zip(assigned) {
                        movement.generation = to.generation;
                        self.table.insert(key.clone(), to.clone());
                        let handoff = Handoff {
                            from: movement.from.clone(),
                            to: to.clone(),
                            waiting: BTreeSet::new(),
                            told: Instant::now(),
                            completed: false,
                        };
                        self.handoffs.insert(key.clone(), handoff);
                        self.send(&movement.from, LinkMessage::HandOff { key, to });
                        recorded.push(movement);
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "shard moves not committed; the next round retries");
                }
            }
        }
        if !lost.is_empty() {
            let assignments = lost.iter().map(|m| (m.key.clone(), m.to.clone())).collect();
            match self.commit(assignments).await {
                Ok(assigned) => {
                    for (mut movement, (key, to)) in lost.into_iter().zip(assigned) {
                        movement.generation = to.generation;
                        self.table.insert(key.clone(), to.clone());
                        self.announce(&key, &to, &BTreeSet::new());
                        recorded.push(movement);
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "shard moves not committed; the next round retries");
                }
            }
        }
        recorded
    }

    /// Looks after handoffs in flight: one whose losing region is gone for good is settled
    /// (its state was shared, or declared lost); one whose losing region is alive is told
    /// again if it has not answered for a while (it may have restarted); one whose new owner
    /// went away is sent to another node.
    pub(super) async fn tend_handoffs(&mut self, eligible: &[NodeId]) {
        let resend_after = self.config.request_timeout * 4;
        // With the partition plane serving, every shard's state is in its partition.
        let partitioned = self.partitions_serve();
        let now = Instant::now();
        let mut settle = Vec::new();
        let mut retarget = Vec::new();
        for (key, handoff) in &mut self.handoffs {
            if handoff.completed {
                settle.push(key.clone());
                continue;
            }
            match (self.guard.is_some(), eligible.contains(&handoff.from)) {
                (false, false) => {
                    settle.push(key.clone());
                    continue;
                }
                (false, true) => continue,
                (true, _) => {}
            }
            let from = {
                let members = self.members.borrow();
                let silent = partitioned && self.primaries.is_silent(&handoff.from, now);
                match members.get(&handoff.from) {
                    Some(member) if member.is_serving() && !silent => Owner::Serving,
                    // A partitioned shard's state is in its partition, not with its owner: a
                    // handoff from one that is down or cut off settles without it.
                    Some(member) if member.status != MemberStatus::Removed && !partitioned => {
                        Owner::Held
                    }
                    _ => Owner::Lost,
                }
            };
            match from {
                Owner::Lost => settle.push(key.clone()),
                Owner::Held => {}
                Owner::Serving if !eligible.contains(&handoff.to.node) => {
                    retarget.push(key.clone());
                }
                Owner::Serving if handoff.told.elapsed() >= resend_after => {
                    handoff.told = Instant::now();
                    let message = LinkMessage::HandOff {
                        key: key.clone(),
                        to: handoff.to.clone(),
                    };
                    if let Err(error) = self.switchboard.send_to_region(&handoff.from, message) {
                        tracing::warn!(%key, %error, "handoff not re-sent");
                    }
                }
                Owner::Serving => {}
            }
        }
        for key in settle {
            let completed = self.handoffs.get(&key).is_some_and(|h| h.completed);
            if completed || self.owner_of_handoff_is_lost(&key) {
                self.finish_handoff(&key).await;
            }
        }
        for key in retarget {
            self.retarget(key, eligible).await;
        }
    }

    /// Whether a handoff may settle without its losing region: always when state is shared,
    /// else once the removed owner's lease has run out.
    fn owner_of_handoff_is_lost(&self, key: &ShardKey) -> bool {
        let Some(handoff) = self.handoffs.get(key) else {
            return false;
        };
        self.guard.is_none() || self.owner_of(key, &handoff.from) == Owner::Lost
    }

    /// Sends a handoff whose new owner went away to another eligible node (or back to the
    /// losing one, if it is up).
    async fn retarget(&mut self, key: ShardKey, eligible: &[NodeId]) {
        let Some(handoff) = self.handoffs.get(&key) else {
            return;
        };
        let candidates: Vec<NodeId> = eligible
            .iter()
            .filter(|node| **node != handoff.to.node)
            .cloned()
            .collect();
        let Some(target) = rebalance::least_shards_owner(&self.table, &key.type_key, &candidates)
        else {
            return;
        };
        let moves = vec![(key.clone(), handoff.from.clone(), target)];
        let assigned = match self.commit_moves(moves).await {
            Ok(assigned) => assigned,
            Err(error) => {
                tracing::warn!(%key, %error, "handoff retarget not committed; retrying");
                return;
            }
        };
        let Some((_, to)) = assigned.into_iter().next() else {
            return;
        };
        self.table.insert(key.clone(), to.clone());
        if let Some(handoff) = self.handoffs.get_mut(&key) {
            tracing::info!(%key, from = %handoff.from, to = %to.node, "handoff sent to another node");
            handoff.to = to.clone();
            handoff.told = Instant::now();
            let message = LinkMessage::HandOff { key, to };
            if let Err(error) = self.switchboard.send_to_region(&handoff.from, message) {
                tracing::warn!(%error, "retargeted handoff not sent");
            }
        }
    }

    /// Ends `key`'s handoff: commits `CompleteHandoff`, then tells everyone where it lives.
    /// Should the commit fail, the handoff stays (marked complete) and is tried again.
    pub(super) async fn finish_handoff(&mut self, key: &ShardKey) {
        let Some(handoff) = self.handoffs.get_mut(key) else {
            return;
        };
        handoff.completed = true;
        let command = Command::CompleteHandoff {
            key: key.clone(),
            generation: handoff.to.generation,
        };
        if let Err(error) = self.plane.submit(command).await {
            tracing::warn!(%key, %error, "handoff completion not committed; retrying");
            return;
        }
        if let Some(handoff) = self.handoffs.remove(key) {
            self.announce(key, &handoff.to, &handoff.waiting);
        }
    }

    /// Tells every connected region (and every waiting requester) where `key` lives now.
    pub(super) fn announce(
        &self,
        key: &ShardKey,
        allocation: &Allocation,
        waiting: &BTreeSet<NodeId>,
    ) {
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
