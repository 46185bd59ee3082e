//! Which partition an entity lives in, on this node: its shard (the node's shard function over
//! `num_shards`) modulo the partition count, in the family of partitions of its type's
//! replication ([`Replication`]). A type's replication is read from the catalog the first time
//! one of its entities is routed and kept: it is fixed for the type's life, so what was read
//! never goes stale. Every node must agree on both numbers, as they must on `num_shards` alone.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use tessera_contract::{EntityAddress, ShardKey};
use tessera_metadata::{MetadataStore, Replication};
use tessera_sharding::{FnvExtractor, ShardExtractor};
use tessera_state::partition::PartitionOf;

/// Where the entities of each type live, with the partition plane on.
pub(in crate::node) struct PartitionMap {
    shards: FnvExtractor,
    /// Partitions in each family; 0 with the plane off.
    count: u32,
    catalog: MetadataStore,
    /// The replication read for each deployed type, by tenant then type (bounded by the
    /// catalog's types: one entry each).
    known: RwLock<HashMap<String, HashMap<String, Replication>>>,
}

impl PartitionMap {
    pub(in crate::node) fn new(num_shards: u32, count: u32, catalog: MetadataStore) -> Arc<Self> {
        Arc::new(PartitionMap {
            shards: FnvExtractor::new(num_shards),
            count,
            catalog,
            known: RwLock::default(),
        })
    }

    /// The replication `tenant`'s type `entity_type` keeps: as recorded by its first deploy;
    /// the cluster's for a type not deployed (it has no entities to route) or deployed before
    /// factors were recorded.
    pub(in crate::node) fn replication(&self, tenant: &str, entity_type: &str) -> Replication {
        let known = self
            .known
            .read()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(replication) = known.get(tenant).and_then(|types| types.get(entity_type)) {
            return *replication;
        }
        drop(known);
        match self.catalog.type_replication(tenant, entity_type) {
            Ok(Some(replication)) => {
                let mut known = self
                    .known
                    .write()
                    .unwrap_or_else(|poison| poison.into_inner());
                known
                    .entry(tenant.to_string())
                    .or_default()
                    .insert(entity_type.to_string(), replication);
                replication
            }
            Ok(None) => Replication::Cluster,
            Err(error) => {
                tracing::error!(%tenant, %entity_type, %error, "a type's replication could not be read");
                Replication::Cluster
            }
        }
    }

    /// The partition of shard `key`, with the plane on.
    pub(in crate::node) fn of_shard(&self, key: &ShardKey) -> Option<u32> {
        (self.count > 0).then(|| {
            self.replication(&key.type_key.tenant, &key.type_key.entity_type)
                .partition(key.shard, self.count)
        })
    }

    /// The partition `entity` lives in, with the plane on.
    pub(in crate::node) fn of_entity(&self, entity: &EntityAddress) -> Option<u32> {
        (self.count > 0).then(|| {
            self.replication(&entity.tenant, &entity.entity_type)
                .partition(self.shards.shard_of(&entity.id), self.count)
        })
    }

    /// [`PartitionMap::of_entity`] as the routed state asks it.
    pub(in crate::node) fn partition_of(self: &Arc<Self>) -> PartitionOf {
        let map = self.clone();
        Arc::new(move |entity: &EntityAddress| map.of_entity(entity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_contract::TypeKey;
    use tessera_metadata::{Command, Quotas, TypeOptions};

    fn catalog() -> MetadataStore {
        let backend = redb::backends::InMemoryBackend::new();
        let database = redb::Database::builder()
            .create_with_backend(backend)
            .expect("an in-memory database");
        MetadataStore::open(Arc::new(database)).expect("catalog tables")
    }

    fn deploy(catalog: &MetadataStore, entity_type: &str, factor: Option<u8>) {
        catalog
            .apply(Command::DeployVersion {
                tenant: "acme".into(),
                entity_type: entity_type.into(),
                sha256: "p".into(),
                size_bytes: 1,
                options: TypeOptions {
                    replication_factor: factor,
                    ..TypeOptions::default()
                },
                deployed_ms: 1,
            })
            .expect("deployed");
    }

    #[test]
    fn a_type_of_its_own_factor_lives_in_its_familys_partitions() {
        let catalog = catalog();
        catalog
            .apply(Command::CreateTenant {
                name: "acme".into(),
                token_sha256: "aa".into(),
                quotas: Quotas::default(),
                created_ms: 0,
            })
            .expect("a tenant");
        deploy(&catalog, "plain", None);
        deploy(&catalog, "single", Some(1));
        let map = PartitionMap::new(64, 8, catalog.clone());
        let shards = FnvExtractor::new(64);
        for id in ["a", "b", "c", "counter-17"] {
            let shard = shards.shard_of(id);
            let plain = EntityAddress::new("acme", "plain", id);
            let single = EntityAddress::new("acme", "single", id);
            assert_eq!(map.of_entity(&plain), Some(shard % 8));
            assert_eq!(map.of_entity(&single), Some(8 + shard % 8));
            let key = ShardKey::new(TypeKey::new("acme", "single"), shard);
            assert_eq!(map.of_shard(&key), map.of_entity(&single));
        }
        // Deleted, the type's entities still live where its factor put them.
        catalog
            .apply(Command::DeleteType {
                tenant: "acme".into(),
                entity_type: "single".into(),
            })
            .expect("deleted");
        let fresh = PartitionMap::new(64, 8, catalog);
        let single = EntityAddress::new("acme", "single", "a");
        assert_eq!(fresh.of_entity(&single), Some(8 + shards.shard_of("a") % 8));
        // The plane off: no partition.
        let off = PartitionMap::new(64, 0, fresh.catalog.clone());
        assert_eq!(off.of_entity(&single), None);
    }
}
