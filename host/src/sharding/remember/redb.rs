//! The node's remember store: a redb table `remembered_entities` keyed by
//! `(tenant, type, shard, id)` in the database the node passes in. Every `apply` is one durable
//! write transaction, so the write-behind queue turns many records into one fsync.

use redb::{Database, ReadableDatabase, TableDefinition};
use std::sync::Arc;

use crate::envelope::TypeKey;
use crate::sharding::extractor::ShardId;
use crate::sharding::remember::{RememberOp, RememberStore, StoreError};

/// The table: key `(tenant, entity type, shard, id)`, no value.
pub const REMEMBERED_ENTITIES: TableDefinition<'static, (&str, &str, u32, &str), ()> =
    TableDefinition::new("remembered_entities");

/// Remembered ids in a redb database shared with the rest of the node.
///
/// ```
/// use std::sync::Arc;
/// use tessera_host::envelope::TypeKey;
/// use tessera_host::sharding::remember::{RememberOp, RememberStore, RememberedId, redb::RedbStore};
/// let dir = tempfile::tempdir().unwrap();
/// let database = Arc::new(redb::Database::create(dir.path().join("node.redb")).unwrap());
/// let store = RedbStore::new(database).unwrap();
/// let id = RememberedId { type_key: TypeKey::new("t", "e"), shard: 9, id: "x".into() };
/// store.apply(&[RememberOp::Started(id.clone())]).unwrap();
/// assert_eq!(store.list_ids(&id.type_key, 9).unwrap(), vec!["x".to_string()]);
/// ```
#[derive(Clone, Debug)]
pub struct RedbStore {
    database: Arc<Database>,
}

fn store_error(context: &str, error: impl std::fmt::Display) -> StoreError {
    StoreError::new(format!("redb {context}: {error}"))
}

impl RedbStore {
    /// Opens the store, creating the table if it is missing.
    pub fn new(database: Arc<Database>) -> Result<Self, StoreError> {
        let transaction = database
            .begin_write()
            .map_err(|e| store_error("begin write", e))?;
        transaction
            .open_table(REMEMBERED_ENTITIES)
            .map_err(|e| store_error("open table", e))?;
        transaction.commit().map_err(|e| store_error("commit", e))?;
        Ok(RedbStore { database })
    }
}

impl RememberStore for RedbStore {
    fn apply(&self, batch: &[RememberOp]) -> Result<(), StoreError> {
        let transaction = self
            .database
            .begin_write()
            .map_err(|e| store_error("begin write", e))?;
        {
            let mut table = transaction
                .open_table(REMEMBERED_ENTITIES)
                .map_err(|e| store_error("open table", e))?;
            // Inserting in key order keeps the B-tree walk local. The sort is stable, so the
            // operations on one id keep their order; operations on different ids commute.
            let mut ordered: Vec<&RememberOp> = batch.iter().collect();
            ordered.sort_by(|left, right| left.id().cmp(right.id()));
            for op in ordered {
                let id = op.id();
                let key = (
                    id.type_key.tenant.as_str(),
                    id.type_key.entity_type.as_str(),
                    id.shard,
                    id.id.as_str(),
                );
                match op {
                    RememberOp::Started(_) => table.insert(key, ()).map(|_| ()),
                    RememberOp::Forgotten(_) => table.remove(key).map(|_| ()),
                }
                .map_err(|e| store_error("write", e))?;
            }
        }
        transaction.commit().map_err(|e| store_error("commit", e))
    }

    fn list_shards(&self, type_key: &TypeKey) -> Result<Vec<ShardId>, StoreError> {
        let transaction = self
            .database
            .begin_read()
            .map_err(|e| store_error("begin read", e))?;
        let table = transaction
            .open_table(REMEMBERED_ENTITIES)
            .map_err(|e| store_error("open table", e))?;
        let (tenant, entity_type) = (type_key.tenant.as_str(), type_key.entity_type.as_str());
        let mut shards = Vec::new();
        let mut next: Option<u32> = Some(0);
        // One range probe per shard present: jump past each shard's ids instead of reading them.
        while let Some(from) = next {
            let mut range = table
                .range((tenant, entity_type, from, "")..)
                .map_err(|e| store_error("range", e))?;
            let Some(entry) = range.next() else { break };
            let (key, _) = entry.map_err(|e| store_error("read", e))?;
            let (found_tenant, found_type, shard, _) = key.value();
            if found_tenant != tenant || found_type != entity_type {
                break;
            }
            shards.push(shard);
            next = shard.checked_add(1);
        }
        Ok(shards)
    }

    fn list_ids(&self, type_key: &TypeKey, shard: ShardId) -> Result<Vec<String>, StoreError> {
        let transaction = self
            .database
            .begin_read()
            .map_err(|e| store_error("begin read", e))?;
        let table = transaction
            .open_table(REMEMBERED_ENTITIES)
            .map_err(|e| store_error("open table", e))?;
        let (tenant, entity_type) = (type_key.tenant.as_str(), type_key.entity_type.as_str());
        let mut ids = Vec::new();
        for entry in table
            .range((tenant, entity_type, shard, "")..)
            .map_err(|e| store_error("range", e))?
        {
            let (key, _) = entry.map_err(|e| store_error("read", e))?;
            let (found_tenant, found_type, found_shard, id) = key.value();
            if found_tenant != tenant || found_type != entity_type || found_shard != shard {
                break;
            }
            ids.push(id.to_string());
        }
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharding::remember::RememberedId;

    #[test]
    fn lists_shards_and_ids_per_type_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.redb");
        let counter = TypeKey::new("acme", "counter");
        let other = TypeKey::new("acme", "counterx");
        let id = |type_key: &TypeKey, shard, id: &str| RememberedId {
            type_key: type_key.clone(),
            shard,
            id: id.into(),
        };
        {
            let store = RedbStore::new(Arc::new(Database::create(&path).unwrap())).unwrap();
            store
                .apply(&[
                    RememberOp::Started(id(&counter, 3, "b")),
                    RememberOp::Started(id(&counter, 3, "a")),
                    RememberOp::Started(id(&counter, 7, "c")),
                    RememberOp::Started(id(&other, 5, "z")),
                    RememberOp::Started(id(&counter, u32::MAX, "m")),
                    RememberOp::Forgotten(id(&counter, 7, "c")),
                    RememberOp::Started(id(&counter, 7, "d")),
                ])
                .unwrap();
        }
        let store = RedbStore::new(Arc::new(Database::create(&path).unwrap())).unwrap();
        assert_eq!(store.list_shards(&counter).unwrap(), vec![3, 7, u32::MAX]);
        assert_eq!(store.list_shards(&other).unwrap(), vec![5]);
        assert_eq!(store.list_ids(&counter, 3).unwrap(), vec!["a", "b"]);
        assert_eq!(store.list_ids(&counter, 7).unwrap(), vec!["d"]);
        assert!(store.list_ids(&counter, 4).unwrap().is_empty());
        // Within one batch the operations on one id apply in the order given.
        store
            .apply(&[
                RememberOp::Forgotten(id(&counter, 4, "x")),
                RememberOp::Started(id(&counter, 4, "x")),
                RememberOp::Started(id(&counter, 4, "a")),
                RememberOp::Forgotten(id(&counter, 4, "a")),
            ])
            .unwrap();
        assert_eq!(store.list_ids(&counter, 4).unwrap(), vec!["x"]);
    }
}
