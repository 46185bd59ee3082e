//! Where each partition's replicas live: a pure function from the eligible members and the
//! current placement to the next one, as the coordinator commits it (the partition plane,
//! `docs/partitions.md`). A partition's replica set is ordered; its first node is the preferred
//! primary.
//!
//! A round keeps every replica that is still on an eligible node or on a member that holds its
//! replicas while it is not eligible (down, or cut off: not removed, not leaving), places the
//! replicas that are missing (a member gone, a larger replication factor) on the members
//! holding the fewest,
//! then evens out the replicas per node with at most `spread_moves_max` further moves (so a
//! joining node fills over several rounds, as shards do), and last evens out the preferred
//! primaries by reordering replica sets, which moves no data. So a member that leaves moves
//! only its own replicas, a member that joins takes replicas only onto itself, and a placement
//! that is already even is left as it is.

use std::collections::{BTreeMap, BTreeSet};
use tessera_contract::NodeId;

#[cfg(test)]
mod tests;

/// A partition's number, in `0..partition_count`.
pub type PartitionId = u32;

/// Every partition's ordered replica set.
pub type Placement = BTreeMap<PartitionId, Vec<NodeId>>;

/// What one placement round starts from.
#[derive(Clone, Debug)]
pub struct PlacementInput<'a> {
    /// Partitions in the cluster.
    pub partition_count: u32,
    /// Replicas per partition wanted; fewer while fewer members are eligible.
    pub replication_factor: usize,
    /// Members that may hold replicas (up, with the role).
    pub eligible: &'a BTreeSet<NodeId>,
    /// Members that are not eligible but keep the replicas they hold: down or cut off, not
    /// removed and not leaving. Their replicas are still theirs (on their disks, in their
    /// groups), and a group cannot move a replica yet: dropping one would have the member stop
    /// it when it is back and start it again under another placement, and a round that sees
    /// only itself eligible would leave each partition one replica — a group of one, which
    /// commits alone on whatever its journal holds.
    pub holding: &'a BTreeSet<NodeId>,
    /// The placement committed now.
    pub current: &'a Placement,
    /// Replicas moved only to even out the spread, at most, this round.
    pub spread_moves_max: usize,
}

/// The placement after one round: every partition's replica set, changed or not.
///
/// ```
/// use std::collections::BTreeSet;
/// use tessera_sharding::placement::{Placement, PlacementInput, place};
///
/// let eligible: BTreeSet<String> = ["n1", "n2", "n3"].map(String::from).into();
/// let placement = place(&PlacementInput {
///     partition_count: 6,
///     replication_factor: 3,
///     eligible: &eligible,
///     holding: &BTreeSet::new(),
///     current: &Placement::new(),
///     spread_moves_max: 8,
/// });
/// assert!(placement.values().all(|replicas| replicas.len() == 3));
/// // Each node is the preferred primary of two partitions.
/// let first_n1 = placement.values().filter(|replicas| replicas[0] == "n1").count();
/// assert_eq!(first_n1, 2);
/// ```
pub fn place(input: &PlacementInput<'_>) -> Placement {
    if input.eligible.is_empty() {
        return input.current.clone();
    }
    let keeps = |node: &NodeId| input.eligible.contains(node) || input.holding.contains(node);
    let members = input.eligible.union(input.holding).count();
    let replicas_wanted = input.replication_factor.clamp(1, members);
    let mut placement: Placement = (0..input.partition_count)
        .map(|partition| {
            let mut kept: Vec<NodeId> = input
                .current
                .get(&partition)
                .into_iter()
                .flatten()
                .filter(|node| keeps(node))
                .cloned()
                .collect();
            kept.truncate(replicas_wanted);
            (partition, kept)
        })
        .collect();
    let mut loads = Loads::of(&placement, input.eligible);
    fill_missing(&mut placement, &mut loads, replicas_wanted);
    spread(&mut placement, &mut loads, input.spread_moves_max);
    even_out_primaries(&mut placement, input.eligible);
    placement
}

/// Replicas held per eligible node.
struct Loads(BTreeMap<NodeId, usize>);

impl Loads {
    fn of(placement: &Placement, eligible: &BTreeSet<NodeId>) -> Loads {
        let mut loads: BTreeMap<NodeId, usize> =
            eligible.iter().map(|node| (node.clone(), 0)).collect();
        for node in placement.values().flatten() {
            if let Some(load) = loads.get_mut(node) {
                *load += 1;
            }
        }
        Loads(loads)
    }

    /// The node holding the fewest replicas (lowest id first) that `replicas` does not hold.
    fn least_outside(&self, replicas: &[NodeId]) -> Option<NodeId> {
        self.0
            .iter()
            .filter(|(node, _)| !replicas.contains(node))
            .min_by_key(|(node, load)| (**load, (*node).clone()))
            .map(|(node, _)| node.clone())
    }

    fn moved(&mut self, from: Option<&NodeId>, to: &NodeId) {
        if let Some(load) = from.and_then(|from| self.0.get_mut(from)) {
            *load -= 1;
        }
        if let Some(load) = self.0.get_mut(to) {
            *load += 1;
        }
    }

    /// The most and the least loaded nodes (lowest id first among equals).
    fn extremes(&self) -> Option<((NodeId, usize), (NodeId, usize))> {
        let most = self
            .0
            .iter()
            .max_by_key(|(node, load)| (**load, std::cmp::Reverse((*node).clone())))?;
        let least = self
            .0
            .iter()
            .min_by_key(|(node, load)| (**load, (*node).clone()))?;
        Some(((most.0.clone(), *most.1), (least.0.clone(), *least.1)))
    }
}

/// Places each partition's missing replicas on the least loaded members it lacks.
fn fill_missing(placement: &mut Placement, loads: &mut Loads, replicas_wanted: usize) {
    for replicas in placement.values_mut() {
        while replicas.len() < replicas_wanted {
            let Some(node) = loads.least_outside(replicas) else {
                break;
            };
            loads.moved(None, &node);
            replicas.push(node);
        }
    }
}

/// Moves replicas from the most to the least loaded member until they differ by at most one
/// or `moves_max` moves were made; a preferred primary is moved only when nothing else can be.
fn spread(placement: &mut Placement, loads: &mut Loads, moves_max: usize) {
    for _ in 0..moves_max {
        let Some(((most, most_load), (least, least_load))) = loads.extremes() else {
            return;
        };
        if most_load <= least_load + 1 {
            return;
        }
        let candidate = |allow_first: bool| {
            placement.iter().find_map(|(partition, replicas)| {
                let position = replicas.iter().position(|node| *node == most)?;
                let movable = (allow_first || position > 0) && !replicas.contains(&least);
                movable.then_some((*partition, position))
            })
        };
        let Some((partition, position)) = candidate(false).or_else(|| candidate(true)) else {
            return;
        };
        if let Some(replicas) = placement.get_mut(&partition) {
            replicas[position] = least.clone();
            loads.moved(Some(&most), &least);
        }
    }
}

/// Evens out the preferred primaries by putting another replica of a partition first; bounded
/// by one reorder per partition.
fn even_out_primaries(placement: &mut Placement, eligible: &BTreeSet<NodeId>) {
    let mut primaries: BTreeMap<NodeId, usize> =
        eligible.iter().map(|node| (node.clone(), 0)).collect();
    for replicas in placement.values() {
        if let Some(count) = replicas.first().and_then(|first| primaries.get_mut(first)) {
            *count += 1;
        }
    }
    for _ in 0..placement.len() {
        let Some((most, most_count)) = primaries
            .iter()
            .max_by_key(|(node, count)| (**count, std::cmp::Reverse((*node).clone())))
            .map(|(node, count)| (node.clone(), *count))
        else {
            return;
        };
        // The partition led by `most` whose other replica leads the fewest partitions.
        let best = placement
            .iter()
            .filter(|(_, replicas)| replicas.first() == Some(&most))
            .flat_map(|(partition, replicas)| {
                replicas.iter().enumerate().skip(1).map(|(position, node)| {
                    (
                        primaries.get(node).copied().unwrap_or(usize::MAX),
                        *partition,
                        position,
                    )
                })
            })
            .min();
        let Some((count, partition, position)) = best else {
            return;
        };
        if count.saturating_add(1) >= most_count {
            return;
        }
        if let Some(replicas) = placement.get_mut(&partition) {
            replicas.swap(0, position);
            let new_first = replicas[0].clone();
            primaries.entry(most).and_modify(|count| *count -= 1);
            primaries.entry(new_first).and_modify(|count| *count += 1);
        }
    }
}
