//! Where things live: an entity's address `(tenant, type, id)`, an entity type `(tenant, type)`,
//! a shard of a type, the node that owns it and the allocation that says so. Plain serde data,
//! so the same values travel between layers, nodes and the replicated catalog.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The longest entity id accepted anywhere (the API, a guest's `tell`/`ask`), so an id cannot
/// bloat keys, logs and metrics.
pub const ENTITY_ID_BYTES_MAX: usize = 256;

/// The longest entity type name a guest may address (deployed names are at most 64 bytes).
pub const ENTITY_TYPE_BYTES_MAX: usize = 64;

/// The id of a node in the cluster.
pub type NodeId = String;

/// A shard number within one entity type, in `0..num_shards`.
pub type ShardId = u32;

/// The full address of one entity: `(tenant, entity type, id)`.
///
/// ```
/// use tessera_contract::EntityAddress;
/// let address = EntityAddress::new("acme", "counter", "c-1");
/// assert_eq!(address.to_string(), "acme/counter/c-1");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EntityAddress {
    /// The tenant that owns the entity.
    pub tenant: String,
    /// The entity type name, as deployed by the tenant.
    pub entity_type: String,
    /// The id within the type.
    pub id: String,
}

impl EntityAddress {
    /// Builds an address from its three parts.
    pub fn new(
        tenant: impl Into<String>,
        entity_type: impl Into<String>,
        id: impl Into<String>,
    ) -> Self {
        EntityAddress {
            tenant: tenant.into(),
            entity_type: entity_type.into(),
            id: id.into(),
        }
    }

    /// The `(tenant, type)` pair this entity belongs to.
    pub fn type_key(&self) -> TypeKey {
        TypeKey::new(self.tenant.clone(), self.entity_type.clone())
    }

    /// Whether this entity is of type `key`, without building a [`TypeKey`].
    pub fn is_of(&self, key: &TypeKey) -> bool {
        self.tenant == key.tenant && self.entity_type == key.entity_type
    }
}

impl fmt::Display for EntityAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.tenant, self.entity_type, self.id)
    }
}

/// An entity type within a tenant: `(tenant, entity type)`.
///
/// ```
/// use tessera_contract::TypeKey;
/// assert_eq!(TypeKey::new("acme", "counter").to_string(), "acme/counter");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TypeKey {
    /// The tenant.
    pub tenant: String,
    /// The entity type name.
    pub entity_type: String,
}

impl TypeKey {
    /// Builds a type key.
    pub fn new(tenant: impl Into<String>, entity_type: impl Into<String>) -> Self {
        TypeKey {
            tenant: tenant.into(),
            entity_type: entity_type.into(),
        }
    }

    /// The address of entity `id` of this type.
    pub fn entity(&self, id: impl Into<String>) -> EntityAddress {
        EntityAddress::new(self.tenant.clone(), self.entity_type.clone(), id)
    }
}

impl fmt::Display for TypeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.entity_type)
    }
}

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

impl fmt::Display for ShardKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.type_key, self.shard)
    }
}

/// Where a shard lives and since which allocation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Allocation {
    /// The owning node.
    pub node: NodeId,
    /// Grows with every allocation or move committed to the catalog.
    pub generation: u64,
}

impl Allocation {
    /// Whether `self` is newer than `other`: higher generation, then greater node id.
    ///
    /// ```
    /// use tessera_contract::Allocation;
    /// let a = Allocation { node: "a".into(), generation: 5 };
    /// let b = Allocation { node: "b".into(), generation: 6 };
    /// assert!(b.supersedes(&a) && !a.supersedes(&b));
    /// ```
    pub fn supersedes(&self, other: &Allocation) -> bool {
        (self.generation, &self.node) > (other.generation, &other.node)
    }
}

/// The allocation table, ordered by key.
pub type AllocationTable = BTreeMap<ShardKey, Allocation>;
