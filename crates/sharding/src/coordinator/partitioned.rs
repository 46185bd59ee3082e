//! Shards that follow their partitions, once the partition plane serves (a cluster with
//! `partitions.count > 0`): a shard's entities live in its partition (the shard modulo the
//! partition count), so the shard is placed only on a replica of that partition, and moved
//! only among its replicas. And its state is not held by its owner: an owner that is down or
//! cut off does not keep its partitioned shards waiting for it — they move to another replica
//! at once, since a node that still serves them cannot commit or answer a read from a stale
//! copy (the partition's group fences it; `docs/partitions.md`).

use super::{Coordinator, Owner};
use crate::rebalance::{self, ShardMovement};
use std::collections::{BTreeMap, BTreeSet};
use tessera_contract::{AllocationTable, NodeId, ShardKey};

impl Coordinator {
    /// Whether the partition plane serves: entity state in the partitions' groups.
    pub(super) fn partitions_serve(&self) -> bool {
        self.guard.is_some() && self.config.partitions.count > 0
    }

    /// The partition `key`'s entities live in, while the plane serves.
    pub(super) fn partition_of(&self, key: &ShardKey) -> Option<u32> {
        self.partitions_serve()
            .then(|| key.shard % self.config.partitions.count)
    }

    /// What `node` is to shard `key`: as [`Coordinator::owner`] says, except that a
    /// partitioned shard's owner that is down or cut off holds nothing the shard needs.
    pub(super) fn owner_of(&self, key: &ShardKey, node: &str) -> Owner {
        match self.owner(node) {
            Owner::Held if self.partition_of(key).is_some() => Owner::Lost,
            owner => owner,
        }
    }

    /// Each partition's committed replicas (empty while the plane does not serve, or before
    /// its first placement).
    pub(super) fn partition_replicas(&self) -> BTreeMap<u32, Vec<NodeId>> {
        if !self.partitions_serve() {
            return BTreeMap::new();
        }
        match self.plane.store().partitions() {
            Ok(placed) => placed
                .into_iter()
                .map(|(partition, placed)| (partition, placed.replicas))
                .collect(),
            Err(error) => {
                tracing::warn!(%error, "the partition table could not be read");
                BTreeMap::new()
            }
        }
    }

    /// The nodes of `eligible` that may own `key`: all of them for a shard outside the plane,
    /// its partition's replicas among them otherwise.
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
                eligible
                    .iter()
                    .filter(|node| replicas.contains(node))
                    .cloned()
                    .collect()
            }
        }
    }

    /// A rebalance round's moves while the plane serves: the dead-owner and spread moves of
    /// each partition's shards among its eligible replicas, at most `cap` spread moves in
    /// all.
    pub(super) fn plan_partitioned_moves(
        &self,
        eligible: &[NodeId],
        skip: &BTreeSet<ShardKey>,
        cap: usize,
    ) -> (Vec<ShardMovement>, Vec<ShardMovement>) {
        let replicas = self.partition_replicas();
        let mut by_partition: BTreeMap<u32, AllocationTable> = BTreeMap::new();
        for (key, allocation) in &self.table {
            if let Some(partition) = self.partition_of(key) {
                let table = by_partition.entry(partition).or_default();
                table.insert(key.clone(), allocation.clone());
            }
        }
        let (mut dead, mut spread) = (Vec::new(), Vec::new());
        for (partition, mut table) in by_partition {
            let Some(placed) = replicas.get(&partition) else {
                continue;
            };
            let here: Vec<NodeId> = eligible
                .iter()
                .filter(|node| placed.contains(node))
                .cloned()
                .collect();
            if here.is_empty() {
                continue;
            }
            let moved = rebalance::plan_dead_owner_moves(&mut table, &here, skip);
            // A shard moved by this round is not moved again by its spread.
            let mut settled = skip.clone();
            settled.extend(moved.iter().map(|movement| movement.key.clone()));
            dead.extend(moved);
            let left = cap.saturating_sub(spread.len());
            spread.extend(rebalance::plan_spread_moves(
                &mut table, &here, &settled, left,
            ));
        }
        (dead, spread)
    }
}
