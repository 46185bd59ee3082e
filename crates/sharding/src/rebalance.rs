//! Placement and rebalancing as pure functions over the allocation table: least-shards
//! placement, moves away from owners that are no longer eligible (uncapped), spread moves that
//! even out the shard count per node (capped per round), and the bounded history of rounds.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tessera_contract::{AllocationTable, NodeId, ShardId, ShardKey, TypeKey};

/// Rebalance rounds kept for inspection; older rounds are dropped first. Bounds the
/// coordinator's memory however long it runs.
pub const REBALANCE_ROUNDS_KEPT: usize = 1024;

/// Why a round moved shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RebalanceReason {
    /// The owner is no longer eligible (left, unreachable, lost its role).
    DeadOwner,
    /// Shards were spread to even out load across eligible nodes.
    GracefulSpread,
    /// A partition's shards went to its group's primary (the partition plane serving).
    FollowPrimary,
}

/// One shard moved by a round.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMovement {
    /// The shard.
    pub key: ShardKey,
    /// The previous owner.
    pub from: NodeId,
    /// The new owner.
    pub to: NodeId,
    /// The generation of the new allocation (filled in by the coordinator).
    pub generation: u64,
}

/// One rebalance round with at least one movement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebalanceRound {
    /// Coordinator-local round number, growing from 1.
    pub round: u64,
    /// Why it moved shards.
    pub reason: RebalanceReason,
    /// What moved.
    pub movements: Vec<ShardMovement>,
}

/// The last [`REBALANCE_ROUNDS_KEPT`] rounds, oldest first.
#[derive(Clone, Debug, Default)]
pub struct RebalanceHistory {
    rounds: VecDeque<RebalanceRound>,
    next_round: u64,
}

impl RebalanceHistory {
    /// Records a round with `movements`, unless there are none. Returns the round number.
    pub fn record(
        &mut self,
        reason: RebalanceReason,
        movements: Vec<ShardMovement>,
    ) -> Option<u64> {
        if movements.is_empty() {
            return None;
        }
        self.next_round += 1;
        if self.rounds.len() == REBALANCE_ROUNDS_KEPT {
            self.rounds.pop_front();
        }
        self.rounds.push_back(RebalanceRound {
            round: self.next_round,
            reason,
            movements,
        });
        Some(self.next_round)
    }

    /// The kept rounds, oldest first.
    pub fn rounds(&self) -> Vec<RebalanceRound> {
        self.rounds.iter().cloned().collect()
    }
}

/// Shards of `type_key` per eligible node (zero for nodes that own none).
pub fn shard_counts(
    table: &AllocationTable,
    type_key: &TypeKey,
    eligible: &[NodeId],
) -> BTreeMap<NodeId, usize> {
    let mut counts: BTreeMap<NodeId, usize> =
        eligible.iter().map(|node| (node.clone(), 0)).collect();
    let first = ShardKey::new(type_key.clone(), 0);
    let last = ShardKey::new(type_key.clone(), ShardId::MAX);
    for (_, allocation) in table.range(first..=last) {
        if let Some(count) = counts.get_mut(&allocation.node) {
            *count += 1;
        }
    }
    counts
}

/// The eligible node with the fewest shards of `type_key`; ties go to the smallest node id.
///
/// ```
/// use tessera_contract::{AllocationTable, TypeKey};
/// use tessera_sharding::rebalance::least_shards_owner;
/// let table = AllocationTable::new();
/// let nodes = vec!["b".to_string(), "a".to_string()];
/// assert_eq!(least_shards_owner(&table, &TypeKey::new("t", "e"), &nodes), Some("a".into()));
/// ```
pub fn least_shards_owner(
    table: &AllocationTable,
    type_key: &TypeKey,
    eligible: &[NodeId],
) -> Option<NodeId> {
    shard_counts(table, type_key, eligible)
        .into_iter()
        .min_by(|(left_node, left), (right_node, right)| {
            left.cmp(right).then_with(|| left_node.cmp(right_node))
        })
        .map(|(node, _)| node)
}

/// Moves every shard whose owner is not eligible to the least-loaded eligible node, applying
/// each move to `table` as it goes so later placements see earlier ones. Not capped: a shard
/// with a dead owner is unreachable until it moves. `skip` holds shards already moving.
pub fn plan_dead_owner_moves(
    table: &mut AllocationTable,
    eligible: &[NodeId],
    skip: &BTreeSet<ShardKey>,
) -> Vec<ShardMovement> {
    let eligible_set: BTreeSet<&NodeId> = eligible.iter().collect();
    let orphaned: Vec<ShardKey> = table
        .iter()
        .filter(|(key, allocation)| {
            !eligible_set.contains(&allocation.node) && !skip.contains(*key)
        })
        .map(|(key, _)| key.clone())
        .collect();
    let mut movements = Vec::new();
    for key in orphaned {
        let Some(target) = least_shards_owner(table, &key.type_key, eligible) else {
            break;
        };
        if let Some(allocation) = table.get_mut(&key) {
            movements.push(ShardMovement {
                key: key.clone(),
                from: std::mem::replace(&mut allocation.node, target.clone()),
                to: target,
                generation: 0,
            });
        }
    }
    movements
}

/// Moves at most `cap` shards from the most- to the least-loaded eligible node, per type,
/// until no node has more than one shard above another. Applies the moves to `table`.
pub fn plan_spread_moves(
    table: &mut AllocationTable,
    eligible: &[NodeId],
    skip: &BTreeSet<ShardKey>,
    cap: usize,
) -> Vec<ShardMovement> {
    let mut movements = Vec::new();
    if eligible.len() < 2 {
        return movements;
    }
    let types: BTreeSet<TypeKey> = table.keys().map(|key| key.type_key.clone()).collect();
    let mut moved: BTreeSet<ShardKey> = BTreeSet::new();
    for type_key in types {
        while movements.len() < cap {
            let counts = shard_counts(table, &type_key, eligible);
            let most = counts
                .iter()
                .max_by(|(ln, lc), (rn, rc)| lc.cmp(rc).then_with(|| rn.cmp(ln)));
            let least = counts
                .iter()
                .min_by(|(ln, lc), (rn, rc)| lc.cmp(rc).then_with(|| ln.cmp(rn)));
            let (Some((source, source_count)), Some((target, target_count))) = (most, least) else {
                break;
            };
            if *source_count <= target_count + 1 {
                break;
            }
            let candidate = table
                .iter()
                .find(|(key, allocation)| {
                    key.type_key == type_key
                        && &allocation.node == source
                        && !skip.contains(*key)
                        && !moved.contains(*key)
                })
                .map(|(key, _)| key.clone());
            let Some(key) = candidate else {
                break;
            };
            let (source, target) = (source.clone(), target.clone());
            if let Some(allocation) = table.get_mut(&key) {
                allocation.node = target.clone();
            }
            moved.insert(key.clone());
            movements.push(ShardMovement {
                key,
                from: source,
                to: target,
                generation: 0,
            });
        }
    }
    movements
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_contract::Allocation;

    fn table_with(owners: &[(&str, u32)]) -> AllocationTable {
        let mut table = AllocationTable::new();
        let mut shard = 0;
        for (node, count) in owners {
            for _ in 0..*count {
                let key = ShardKey::new(TypeKey::new("t", "e"), shard);
                table.insert(
                    key,
                    Allocation {
                        node: node.to_string(),
                        generation: 1,
                    },
                );
                shard += 1;
            }
        }
        table
    }

    fn nodes(names: &[&str]) -> Vec<NodeId> {
        names.iter().map(|name| name.to_string()).collect()
    }

    #[test]
    fn history_keeps_exactly_the_last_1024_rounds() {
        let mut history = RebalanceHistory::default();
        for index in 0..1500u32 {
            let movement = ShardMovement {
                key: ShardKey::new(TypeKey::new("t", "e"), index),
                from: "a".into(),
                to: "b".into(),
                generation: u64::from(index),
            };
            history.record(RebalanceReason::GracefulSpread, vec![movement]);
        }
        assert_eq!(history.record(RebalanceReason::DeadOwner, Vec::new()), None);
        let rounds = history.rounds();
        assert_eq!(rounds.len(), REBALANCE_ROUNDS_KEPT);
        assert_eq!(rounds.first().map(|r| r.round), Some(1500 - 1024 + 1));
        assert_eq!(rounds.last().map(|r| r.round), Some(1500));
    }

    #[test]
    fn least_shards_placement_breaks_ties_by_node_id() {
        let table = table_with(&[("a", 2), ("b", 1), ("c", 1)]);
        let type_key = TypeKey::new("t", "e");
        assert_eq!(
            least_shards_owner(&table, &type_key, &nodes(&["a", "b", "c"])),
            Some("b".into())
        );
        assert_eq!(
            least_shards_owner(&table, &type_key, &nodes(&["a", "c", "d"])),
            Some("d".into())
        );
        assert_eq!(least_shards_owner(&table, &type_key, &[]), None);
    }

    #[test]
    fn dead_owner_moves_are_uncapped_and_spread_evenly() {
        let mut table = table_with(&[("a", 20), ("b", 20), ("c", 20)]);
        let moves = plan_dead_owner_moves(&mut table, &nodes(&["a", "c"]), &BTreeSet::new());
        assert_eq!(moves.len(), 20, "every orphaned shard moves in one round");
        assert!(
            moves
                .iter()
                .all(|m| m.from == "b" && (m.to == "a" || m.to == "c"))
        );
        let counts = shard_counts(&table, &TypeKey::new("t", "e"), &nodes(&["a", "c"]));
        assert_eq!(counts.values().copied().collect::<Vec<_>>(), vec![30, 30]);
    }

    #[test]
    fn spread_moves_are_capped_per_round_and_converge() {
        let mut table = table_with(&[("a", 30)]);
        let eligible = nodes(&["a", "b", "c"]);
        let first = plan_spread_moves(&mut table, &eligible, &BTreeSet::new(), 10);
        assert_eq!(first.len(), 10);
        let mut rounds = 1;
        while !plan_spread_moves(&mut table, &eligible, &BTreeSet::new(), 10).is_empty() {
            rounds += 1;
            assert!(rounds < 10, "spread must converge");
        }
        let counts = shard_counts(&table, &TypeKey::new("t", "e"), &eligible);
        assert_eq!(
            counts.values().copied().collect::<Vec<_>>(),
            vec![10, 10, 10]
        );
        assert_eq!(rounds, 2);
    }

    #[test]
    fn spread_skips_shards_already_moving() {
        let mut table = table_with(&[("a", 2)]);
        let skip: BTreeSet<ShardKey> = table.keys().cloned().collect();
        assert!(plan_spread_moves(&mut table, &nodes(&["a", "b"]), &skip, 10).is_empty());
    }
}
