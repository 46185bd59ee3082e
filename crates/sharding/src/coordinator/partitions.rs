//! The coordinator's placement round for the partition plane: each rebalance round reads the
//! committed partition table, computes the next placement over the eligible members
//! ([`crate::placement`]) and commits the partitions that change, fenced like shard decisions
//! (its epoch, the generation it read for each partition). Each replication factor in use has
//! its family of partitions ([`Replication`]), placed at that factor; a family's first
//! placement waits until as many members are eligible as its factor asks (or as there are
//! voters, if fewer).

use super::Coordinator;
use crate::membership::MemberStatus;
use crate::placement::{self, Placement, PlacementInput};
use std::collections::{BTreeMap, BTreeSet};
use tessera_contract::NodeId;
use tessera_metadata::{
    Command, MetadataError, PartitionPlacement, PartitionReplicas, Replication, same_replica_set,
};

/// Partitions placed by one catalog command, at most (a round with more commits several).
pub const PLACEMENTS_PER_COMMIT_MAX: usize = 256;

impl Coordinator {
    /// One placement round, when the plane has partitions (`partitions.count > 0`).
    pub(super) async fn place_partitions(&mut self, eligible: &[NodeId]) {
        let config = self.config.partitions.clone();
        if config.count() == 0 || self.deposed {
            return;
        }
        let committed = match self.plane.store().partitions() {
            Ok(committed) => committed,
            Err(error) => {
                tracing::warn!(%error, "the partition table could not be read");
                return;
            }
        };
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
        let count = config.count();
        let mut next = Placement::new();
        for family in self.families(&committed) {
            let first = family.first_partition(count);
            let current: Placement = committed
                .range(first..first + count)
                .map(|(partition, placed)| (partition - first, placed.replicas.clone()))
                .collect();
            let replicas = family.replicas(config.replication_factor);
            // A first placement is whole: it waits for as many eligible members as its
            // groups start with (the factor, or every voter of a smaller cluster), rather
            // than start small and move every partition as the other members come up.
            let first_members = config.first_placement_members(replicas);
            if current.is_empty() && eligible.len() < first_members {
                tracing::debug!(
                    ?family,
                    eligible = eligible.len(),
                    waits_for = first_members,
                    "the first placement waits for its members"
                );
                continue;
            }
            let placed = placement::place(&PlacementInput {
                partition_count: count,
                replication_factor: replicas,
                eligible: &eligible,
                holding: &holding,
                current: &current,
                spread_moves_max: self.config.rebalance_per_round,
            });
            next.extend(
                placed
                    .into_iter()
                    .map(|(partition, replicas)| (partition + first, replicas)),
            );
        }
        let changed: Vec<PartitionPlacement> = next
            .into_iter()
            .filter_map(|(partition, replicas)| {
                let Some(placed) = committed.get(&partition) else {
                    return Some(PartitionPlacement {
                        partition,
                        expected: None,
                        replicas,
                        settled: false,
                    });
                };
                let settles = !placed.previous.is_empty()
                    && self.primaries.serving_epoch(partition) == Some(placed.epoch);
                let placement = |replicas: Vec<NodeId>, settled: bool| PartitionPlacement {
                    partition,
                    expected: Some(placed.generation),
                    replicas,
                    settled,
                };
                if same_replica_set(&placed.replicas, &replicas) {
                    let reordered = placed.replicas != replicas;
                    return (reordered || settles).then(|| placement(replicas, settles));
                }
                match may_move(placed, &replicas, |node| {
                    eligible.contains(node) || holding.contains(node)
                }) {
                    Ok(()) => Some(placement(replicas, false)),
                    Err(reason) => {
                        tracing::debug!(partition, reason, "a partition's move waits");
                        settles.then(|| placement(placed.replicas.clone(), true))
                    }
                }
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

impl Coordinator {
    /// The replication factors whose partitions are placed: the cluster's, every factor a
    /// type keeps (deleted types' too: their state stays), and any already placed.
    fn families(&self, committed: &BTreeMap<u32, PartitionReplicas>) -> BTreeSet<Replication> {
        let count = self.config.partitions.count();
        let mut families = BTreeSet::from([Replication::Cluster]);
        families.extend(
            self.own_replication
                .values()
                .map(|factor| Replication::Own(*factor)),
        );
        families.extend(
            committed
                .keys()
                .filter_map(|partition| Replication::of_partition(*partition, count)),
        );
        families
    }
}

/// Whether `placed` may move to the replica set `next` now (`keeps`: whether a member still
/// holds what it has). A move carries the state of the current epoch's group into a new one
/// (`docs/partitions.md`, "Moves"), so it waits while the move before it has not settled —
/// its group not yet heard serving, its replicas before not yet forgotten — and must keep
/// one of the current replicas, which fills the new group, unless none of them is still held
/// (they were all removed: their state is gone with them).
fn may_move(
    placed: &tessera_metadata::PartitionReplicas,
    next: &[NodeId],
    keeps: impl Fn(&NodeId) -> bool,
) -> Result<(), &'static str> {
    if !placed.previous.is_empty() {
        return Err("the move before it has not settled");
    }
    let kept = placed.replicas.iter().any(|node| next.contains(node));
    if !kept && placed.replicas.iter().any(keeps) {
        return Err("a move keeps one of the current replicas, which fills the new group");
    }
    Ok(())
}
