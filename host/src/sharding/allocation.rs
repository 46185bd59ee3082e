//! The shard allocation table: `(type, shard) -> (node, generation)`. Generations only grow, so
//! two tables merge by keeping, per shard, the allocation with the highest generation (ties
//! broken by the greater node id). That merge is what a new coordinator runs over the tables of
//! the surviving regions; it gives the same result in any order.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::envelope::TypeKey;
use crate::sharding::extractor::ShardId;
use crate::sharding::link::NodeId;

/// One shard of one entity type.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ShardKey {
    /// The entity type.
    pub type_key: TypeKey,
    /// The shard within it.
    pub shard: ShardId,
}

impl ShardKey {
    /// Builds a key.
    pub fn new(type_key: TypeKey, shard: ShardId) -> Self {
        ShardKey { type_key, shard }
    }
}

impl std::fmt::Display for ShardKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.type_key, self.shard)
    }
}

/// Where a shard lives and since which allocation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Allocation {
    /// The owning node.
    pub node: NodeId,
    /// Grows with every allocation or move made by a coordinator.
    pub generation: u64,
}

impl Allocation {
    /// Whether `self` wins over `other` in a merge: higher generation, then greater node id.
    ///
    /// ```
    /// use tessera_host::sharding::Allocation;
    /// let a = Allocation { node: "a".into(), generation: 5 };
    /// let b = Allocation { node: "b".into(), generation: 5 };
    /// assert!(b.supersedes(&a) && !a.supersedes(&b));
    /// ```
    pub fn supersedes(&self, other: &Allocation) -> bool {
        (self.generation, &self.node) > (other.generation, &other.node)
    }
}

/// The allocation table, ordered by key.
pub type AllocationTable = BTreeMap<ShardKey, Allocation>;

/// Merges one entry into `table`: it replaces the current allocation only if it wins.
pub fn merge_entry(table: &mut AllocationTable, key: &ShardKey, allocation: &Allocation) {
    match table.get(key) {
        Some(existing) if !allocation.supersedes(existing) => {}
        _ => {
            table.insert(key.clone(), allocation.clone());
        }
    }
}

/// Merges `incoming` into `table`, keeping the winning allocation per shard.
pub fn merge_into(table: &mut AllocationTable, incoming: &AllocationTable) {
    for (key, allocation) in incoming {
        merge_entry(table, key, allocation);
    }
}

/// Merges many tables; the result does not depend on their order.
///
/// ```
/// use tessera_host::envelope::TypeKey;
/// use tessera_host::sharding::{Allocation, AllocationTable, ShardKey, allocation::merge};
/// let key = ShardKey::new(TypeKey::new("t", "counter"), 3);
/// let old = AllocationTable::from([(key.clone(), Allocation { node: "a".into(), generation: 1 })]);
/// let new = AllocationTable::from([(key.clone(), Allocation { node: "b".into(), generation: 2 })]);
/// assert_eq!(merge([&old, &new]), merge([&new, &old]));
/// assert_eq!(merge([&old, &new])[&key].node, "b");
/// ```
pub fn merge<'a>(tables: impl IntoIterator<Item = &'a AllocationTable>) -> AllocationTable {
    let mut merged = AllocationTable::new();
    for table in tables {
        merge_into(&mut merged, table);
    }
    merged
}

/// The highest generation in `table`, or zero.
pub fn max_generation(table: &AllocationTable) -> u64 {
    table
        .values()
        .map(|allocation| allocation.generation)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn permutations(items: Vec<usize>) -> Vec<Vec<usize>> {
        if items.len() <= 1 {
            return vec![items];
        }
        let mut all = Vec::new();
        for index in 0..items.len() {
            let mut rest = items.clone();
            let head = rest.remove(index);
            for mut tail in permutations(rest) {
                tail.insert(0, head);
                all.push(tail);
            }
        }
        all
    }

    fn random_table(rng: &mut SmallRng) -> AllocationTable {
        let nodes = ["node-a", "node-b", "node-c"];
        let mut table = AllocationTable::new();
        for shard in 0..8 {
            if rng.random_bool(0.7) {
                // Few generations so that equal-generation ties are common.
                let allocation = Allocation {
                    node: nodes[rng.random_range(0..nodes.len())].to_string(),
                    generation: rng.random_range(1..4),
                };
                table.insert(ShardKey::new(TypeKey::new("t", "e"), shard), allocation);
            }
        }
        table
    }

    #[test]
    fn merge_converges_regardless_of_order() {
        let mut rng = SmallRng::seed_from_u64(0x5eed);
        let mut ties_seen = 0;
        for _case in 0..50 {
            let tables: Vec<AllocationTable> = (0..4).map(|_| random_table(&mut rng)).collect();
            let orders = permutations((0..tables.len()).collect());
            assert_eq!(orders.len(), 24);
            let reference = merge(orders[0].iter().map(|index| &tables[*index]));
            for order in &orders {
                let merged = merge(order.iter().map(|index| &tables[*index]));
                assert_eq!(merged, reference, "order {order:?}");
            }
            for (key, winner) in &reference {
                let candidates: Vec<&Allocation> =
                    tables.iter().filter_map(|table| table.get(key)).collect();
                let top = candidates.iter().map(|a| a.generation).max().unwrap();
                assert_eq!(winner.generation, top, "highest generation kept for {key}");
                let tied: Vec<_> = candidates.iter().filter(|a| a.generation == top).collect();
                if tied.iter().any(|a| a.node != winner.node) {
                    ties_seen += 1;
                }
                assert!(
                    tied.iter().all(|a| a.node <= winner.node),
                    "greatest node wins tie"
                );
            }
        }
        assert!(ties_seen > 0, "the generator must produce generation ties");
    }

    #[test]
    fn merge_is_idempotent() {
        let mut rng = SmallRng::seed_from_u64(7);
        let table = random_table(&mut rng);
        assert_eq!(merge([&table, &table]), table);
    }
}
