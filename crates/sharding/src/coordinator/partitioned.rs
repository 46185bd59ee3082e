//! Shards that follow their partitions, once the partition plane serves (a cluster with
//! `partitions.count > 0`): a shard's entities live in its partition (the shard modulo the
//! partition count), so the shard is placed only on a replica of that partition — its group's
//! primary, once a node reports leading it (`primaries.rs`) — and moved to that primary when
//! another replica is elected. Before any primary is reported, a partition's shards are
//! spread among its replicas. And a shard's state is not held by its owner: an owner that is
//! down, cut off, or silent does not keep its partitioned shards waiting for it — they move at
//! once, with no handoff, since a node that still serves them cannot commit or answer a read
//! from a stale copy (the partition's group fences it; `docs/partitions.md`).

use super::{Coordinator, Owner};
use crate::rebalance::{self, ShardMovement};
use std::collections::{BTreeMap, BTreeSet};
use tessera_contract::{AllocationTable, NodeId, ShardKey, TypeKey};
use tessera_metadata::Replication;
use tokio::time::Instant;

/// A partitioned rebalance round's moves, by why they are made.
#[derive(Debug, Default)]
pub(super) struct PartitionedMoves {
    /// Shards of an owner that cannot serve them, to another replica.
    pub(super) dead: Vec<ShardMovement>,
    /// Shards to their partition's primary.
    pub(super) follow: Vec<ShardMovement>,
    /// Shards evened out among their partition's replicas (no primary known).
    pub(super) spread: Vec<ShardMovement>,
}

impl Coordinator {
    /// Whether the partition plane serves: entity state in the partitions' groups.
    pub(super) fn partitions_serve(&self) -> bool {
        self.guard.is_some() && self.config.partitions.count() > 0
    }

    /// The partition `key`'s entities live in, while the plane serves: the shard's in its
    /// type's family ([`Replication`]).
    pub(super) fn partition_of(&self, key: &ShardKey) -> Option<u32> {
        self.partitions_serve().then(|| {
            self.replication_of(&key.type_key)
                .partition(key.shard, self.config.partitions.count())
        })
    }

    /// How many replicas keep `type_key`'s entities, as the catalog last read said
    /// ([`Coordinator::read_replication`]).
    pub(super) fn replication_of(&self, type_key: &TypeKey) -> Replication {
        self.own_replication
            .get(type_key)
            .map_or(Replication::Cluster, |factor| Replication::Own(*factor))
    }

    /// Reads again which types keep a replication factor of their own. A type's factor never
    /// changes once deployed, so what was read stays true; a read that fails keeps it.
    pub(super) fn read_replication(&mut self) {
        if !self.partitions_serve() {
            return;
        }
        match self.plane.store().own_replications() {
            Ok(own) => self.own_replication = own,
            Err(error) => tracing::warn!(%error, "the types' replication could not be read"),
        }
    }

    /// What `node` is to shard `key`: as [`Coordinator::owner`] says, except that a
    /// partitioned shard's owner that is down, cut off or silent (no primaries report for
    /// [`PRIMARY_REPORT_SILENCE`](crate::link::PRIMARY_REPORT_SILENCE)) holds nothing the shard
    /// needs and would not answer a handoff — unless it is the partition's reported primary, a
    /// slow one, say, whose group has not replaced it: a dead primary is replaced by its group,
    /// and its shards then follow the new one.
    pub(super) fn owner_of(&self, key: &ShardKey, node: &str) -> Owner {
        let Some(partition) = self.partition_of(key) else {
            return self.owner(node);
        };
        let primary = self
            .primaries
            .of(partition)
            .is_some_and(|primary| primary == node);
        match self.owner(node) {
            Owner::Serving if primary || !self.primaries.is_silent(node, Instant::now()) => {
                Owner::Serving
            }
            _ => Owner::Lost,
        }
    }

    /// Takes `node`'s report of the partitions it leads; whether a partition's primary
    /// changed (its shards then follow at once).
    pub(super) fn on_primaries(&mut self, node: &NodeId, led: &[(u32, u64, u64)]) -> bool {
        if !self.partitions_serve() {
            return false;
        }
        let count = self.config.partitions.count();
        let own = &self.own_replication;
        // A partition of the cluster's family, or of a factor some type keeps.
        let is_partition = |partition| match Replication::of_partition(partition, count) {
            Some(Replication::Cluster) => true,
            Some(Replication::Own(factor)) => own.values().any(|kept| *kept == factor),
            None => false,
        };
        self.primaries
            .report(node, led, is_partition, Instant::now())
    }

    /// The primary of `key`'s partition, if one is reported and it is among `candidates`.
    fn primary_among<'a>(&self, key: &ShardKey, candidates: &'a [NodeId]) -> Option<&'a NodeId> {
        let primary = self.primaries.of(self.partition_of(key)?)?;
        candidates.iter().find(|node| *node == primary)
    }

    /// Each partition's committed replicas — and, while a move to them has not settled, the
    /// replicas it leaves, whose group serves until the new one opens (empty while the plane
    /// does not serve, or before its first placement).
    pub(super) fn partition_replicas(&self) -> BTreeMap<u32, Vec<NodeId>> {
        if !self.partitions_serve() {
            return BTreeMap::new();
        }
        match self.plane.store().partitions() {
            Ok(placed) => placed
                .into_iter()
                .map(|(partition, placed)| {
                    let mut replicas = placed.replicas;
                    for node in placed.previous {
                        if !replicas.contains(&node) {
                            replicas.push(node);
                        }
                    }
                    (partition, replicas)
                })
                .collect(),
            Err(error) => {
                tracing::warn!(%error, "the partition table could not be read");
                BTreeMap::new()
            }
        }
    }

    /// The nodes of `eligible` that may own `key`: all of them for a shard outside the plane;
    /// otherwise its partition's primary if it is eligible, else its eligible replicas.
    pub(super) fn candidates(
        &self,
        key: &ShardKey,
        eligible: &[NodeId],
        replicas: &BTreeMap<u32, Vec<NodeId>>,
    ) -> Vec<NodeId> {
        match self.partition_of(key) {
            None => eligible.to_vec(),
            Some(partition) => {
                let Some(replicas) = replicas.get(&partition) else {
                    return Vec::new();
                };
                let here: Vec<NodeId> = eligible
                    .iter()
                    .filter(|node| replicas.contains(node))
                    .cloned()
                    .collect();
                match self.primary_among(key, &here) {
                    Some(primary) => vec![primary.clone()],
                    None => here,
                }
            }
        }
    }

    /// A rebalance round's moves while the plane serves, per partition: to its primary where
    /// one is reported and eligible (a move from an owner that cannot serve is made at once,
    /// the others by handoff); else the dead-owner and spread moves among its eligible
    /// replicas, at most `cap` spread moves in all.
    pub(super) fn plan_partitioned_moves(
        &self,
        eligible: &[NodeId],
        skip: &BTreeSet<ShardKey>,
        cap: usize,
    ) -> PartitionedMoves {
        let replicas = self.partition_replicas();
        let mut by_partition: BTreeMap<u32, AllocationTable> = BTreeMap::new();
        for (key, allocation) in &self.table {
            if let Some(partition) = self.partition_of(key) {
                let table = by_partition.entry(partition).or_default();
                table.insert(key.clone(), allocation.clone());
            }
        }
        let mut moves = PartitionedMoves::default();
        for (partition, mut table) in by_partition {
            let Some(placed) = replicas.get(&partition) else {
                continue;
            };
            let here: Vec<NodeId> = eligible
                .iter()
                .filter(|node| placed.contains(node))
                .cloned()
                .collect();
            let primary = self
                .primaries
                .of(partition)
                .filter(|primary| here.contains(primary));
            if let Some(primary) = primary {
                moves.follow.extend(
                    table
                        .iter()
                        .filter(|(key, allocation)| {
                            allocation.node != *primary && !skip.contains(*key)
                        })
                        .map(|(key, allocation)| ShardMovement {
                            key: key.clone(),
                            from: allocation.node.clone(),
                            to: primary.clone(),
                            generation: 0,
                        }),
                );
                continue;
            }
            if here.is_empty() {
                continue;
            }
            let moved = rebalance::plan_dead_owner_moves(&mut table, &here, skip);
            // A shard moved by this round is not moved again by its spread.
            let mut settled = skip.clone();
            settled.extend(moved.iter().map(|movement| movement.key.clone()));
            moves.dead.extend(moved);
            let left = cap.saturating_sub(moves.spread.len());
            moves.spread.extend(rebalance::plan_spread_moves(
                &mut table, &here, &settled, left,
            ));
        }
        moves
    }
}
