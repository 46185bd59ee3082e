//! Shard extraction: which shard an entity id belongs to. The default is FNV-1a 64 over the
//! UTF-8 id modulo the shard count, a function that must never change because every node of a
//! cluster, of every version, has to agree on it. An entity type may bring its own.

use std::fmt;

pub use tessera_contract::ShardId;

/// Maps an entity id to its shard. Implementations must be pure and identical on every node.
///
/// ```
/// use tessera_sharding::{ShardExtractor, ShardId};
/// #[derive(Debug)]
/// struct ByPrefix;
/// impl ShardExtractor for ByPrefix {
///     fn shard_of(&self, id: &str) -> ShardId {
///         id.split(':').next().and_then(|p| p.parse().ok()).unwrap_or(0) % 16
///     }
///     fn num_shards(&self) -> u32 { 16 }
/// }
/// assert_eq!(ByPrefix.shard_of("7:order-1"), 7);
/// ```
pub trait ShardExtractor: fmt::Debug + Send + Sync + 'static {
    /// The shard of entity `id`; always below [`num_shards`](Self::num_shards) (a region
    /// refuses the message otherwise).
    fn shard_of(&self, id: &str) -> ShardId;

    /// How many shards this extractor maps ids to.
    fn num_shards(&self) -> u32;
}

/// The default extractor: `fnv1a_64(id) % num_shards`.
///
/// ```
/// use tessera_sharding::{FnvExtractor, ShardExtractor};
/// assert_eq!(FnvExtractor::new(16).shard_of("hello"), 11);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FnvExtractor {
    num_shards: u32,
}

impl FnvExtractor {
    /// An extractor over `num_shards` shards; zero is treated as one (config validation refuses
    /// zero before it gets here).
    pub fn new(num_shards: u32) -> Self {
        FnvExtractor {
            num_shards: num_shards.max(1),
        }
    }
}

impl ShardExtractor for FnvExtractor {
    fn shard_of(&self, id: &str) -> ShardId {
        let shard = fnv1a_64(id.as_bytes()) % u64::from(self.num_shards);
        ShardId::try_from(shard).expect("a value modulo a u32 shard count fits in u32")
    }

    fn num_shards(&self) -> u32 {
        self.num_shards
    }
}

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64-bit, over `bytes`.
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET_BASIS, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(FNV_PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_shard_map_with_sixteen_shards() {
        let extractor = FnvExtractor::new(16);
        let golden = [
            ("entity-0", 15),
            ("entity-1", 12),
            ("entity-100", 12),
            ("entity-999", 10),
            ("a", 12),
            ("hello", 11),
            ("", 5),
            ("datum-sharding", 3),
            ("very-long-entity-id-that-exercises-fnv-loop-0123456789", 8),
        ];
        for (id, shard) in golden {
            assert_eq!(extractor.shard_of(id), shard, "id {id:?}");
        }
    }

    #[test]
    fn fnv_of_empty_input_is_the_offset_basis() {
        assert_eq!(fnv1a_64(b""), FNV_OFFSET_BASIS);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
