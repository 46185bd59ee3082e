//! Remembered ids (`remember_entities`) with the partition plane serving: a partitioned
//! entity's id is remembered in its partition — a [`PartitionOp::Remember`](super::PartitionOp::Remember)
//! its group orders — so whichever replica's node owns the shard next (after a failover, or a
//! node lost with its disk) finds the entities to start again in its own replica; the ids of
//! other entities stay in the node's local store. Listing merges the local store and every
//! replica held here (an id lives in one of them).

use super::routed::{RoutedState, missing};
use super::served::PartitionState;
use crate::backend::{CommitFuture, RememberStore};
use crate::error::{CommitError, StoreError};
use crate::remember::RememberOp;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tessera_contract::{EntityAddress, ShardId, TypeKey};

/// The [`RememberStore`] of a node whose entity state is routed: the local store for the ids
/// of entities outside the plane, their partition (through its group) for the others.
///
/// A batch that spans partitions is applied per partition: each part is atomic and durable
/// on a quorum when it succeeds, but a failure of one part does not undo another. Every
/// change is idempotent (remember or forget an id), so the writer's retry of a failed batch
/// converges.
pub struct RoutedRemember {
    local: Arc<dyn RememberStore>,
    routed: Arc<RoutedState>,
}

impl RoutedRemember {
    /// Remembers through `routed`'s partitions, and `local` for entities outside them.
    pub fn new(local: Arc<dyn RememberStore>, routed: Arc<RoutedState>) -> Self {
        RoutedRemember { local, routed }
    }
}

impl RememberStore for RoutedRemember {
    fn apply(&self, batch: Vec<RememberOp>) -> CommitFuture {
        let mut local = Vec::new();
        let mut by_partition: BTreeMap<u32, (Arc<PartitionState>, Vec<RememberOp>)> =
            BTreeMap::new();
        for op in batch {
            let id = op.id();
            let entity = EntityAddress::new(
                id.type_key.tenant.as_str(),
                id.type_key.entity_type.as_str(),
                id.id.as_str(),
            );
            match self.routed.replica_for(&entity) {
                None => local.push(op),
                Some((partition, Some(state))) => {
                    by_partition
                        .entry(partition)
                        .or_insert_with(|| (state, Vec::new()))
                        .1
                        .push(op);
                }
                Some((partition, None)) => {
                    let error = CommitError::Unavailable(missing(partition));
                    return Box::pin(std::future::ready(Err(error)));
                }
            }
        }
        let mut commits: Vec<CommitFuture> = Vec::new();
        if !local.is_empty() {
            commits.push(self.local.apply(local));
        }
        for (state, ops) in by_partition.into_values() {
            commits.push(state.remember(ops));
        }
        Box::pin(async move {
            let mut outcome = Ok(());
            for commit in commits {
                if let Err(error) = commit.await {
                    outcome = Err(error);
                }
            }
            outcome
        })
    }

    fn list_shards(&self, type_key: &TypeKey) -> Result<Vec<ShardId>, StoreError> {
        let mut shards: BTreeSet<ShardId> = self.local.list_shards(type_key)?.into_iter().collect();
        for store in self.routed.held_stores() {
            shards.extend(store.remembered_shards(type_key)?);
        }
        Ok(shards.into_iter().collect())
    }

    fn list_ids(&self, type_key: &TypeKey, shard: ShardId) -> Result<Vec<String>, StoreError> {
        let mut ids: BTreeSet<String> = self.local.list_ids(type_key, shard)?.into_iter().collect();
        for store in self.routed.held_stores() {
            ids.extend(store.remembered_ids(type_key, shard)?);
        }
        Ok(ids.into_iter().collect())
    }
}
