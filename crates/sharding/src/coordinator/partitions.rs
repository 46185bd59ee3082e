//! The coordinator's placement round for the partition plane: each rebalance round reads the
//! committed partition table, computes the next placement over the eligible members
//! ([`crate::placement`]) and commits the partitions that change, fenced like shard decisions
//! (its epoch, the generation it read for each partition). The first placement waits until as
//! many members are eligible as the replication factor asks.

use super::Coordinator;
use crate::membership::MemberStatus;
use crate::placement::{self, Placement, PlacementInput};
use std::collections::BTreeSet;
use tessera_contract::NodeId;
use tessera_metadata::{Command, MetadataError, PartitionPlacement};

/// Partitions placed by one catalog command, at most (a round with more commits several).
pub const PLACEMENTS_PER_COMMIT_MAX: usize = 256;

impl Coordinator {
    /// One placement round, when the plane has partitions (`partitions.count > 0`).
    pub(super) async fn place_partitions(&mut self, eligible: &[NodeId]) {
        let config = self.config.partitions.clone();
        if config.count == 0 || self.deposed {
            return;
        }
        let committed = match self.plane.store().partitions() {
            Ok(committed) => committed,
            Err(error) => {
                tracing::warn!(%error, "the partition table could not be read");
                return;
            }
        };
        let current: Placement = committed
            .iter()
            .map(|(partition, placed)| (*partition, placed.replicas.clone()))
            .collect();
        let eligible: BTreeSet<NodeId> = eligible.iter().cloned().collect();
        // Down or cut off, not removed nor leaving: they keep their replicas.
        let holding: BTreeSet<NodeId> = self
            .members
            .borrow()
            .members()
            .filter(|member| matches!(member.status, MemberStatus::Up | MemberStatus::Down))
            .map(|member| member.node.clone())
            .filter(|node| !eligible.contains(node))
            .collect();
        // A first placement is whole or nothing: a partition's group keeps the replicas it
        // starts with until moves are built, so it must not start on fewer than its factor.
        if current.is_empty() && eligible.len() < config.replication_factor {
            tracing::debug!(
                eligible = eligible.len(),
                replication_factor = config.replication_factor,
                "the partitions wait for as many eligible members as their replication factor"
            );
            return;
        }
        let next = placement::place(&PlacementInput {
            partition_count: config.count,
            replication_factor: config.replication_factor,
            eligible: &eligible,
            holding: &holding,
            current: &current,
            spread_moves_max: self.config.rebalance_per_round,
        });
        let changed: Vec<PartitionPlacement> = next
            .into_iter()
            .filter(|(partition, replicas)| current.get(partition) != Some(replicas))
            .map(|(partition, replicas)| PartitionPlacement {
                partition,
                expected: committed.get(&partition).map(|placed| placed.generation),
                replicas,
            })
            .collect();
        for placements in changed.chunks(PLACEMENTS_PER_COMMIT_MAX) {
            let command = Command::PlacePartitions {
                epoch: self.epoch,
                placements: placements.to_vec(),
            };
            match self.plane.submit(command).await {
                Ok(_) => {}
                Err(error @ MetadataError::StaleCoordinator { .. }) => {
                    tracing::warn!(epoch = self.epoch, %error, "this coordinator was deposed; it stops");
                    self.deposed = true;
                    return;
                }
                // Read again next round (a placement raced this one, or a member left).
                Err(error) => {
                    tracing::warn!(%error, "a partition placement was not committed");
                    return;
                }
            }
        }
    }
}
