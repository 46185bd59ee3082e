//! The node's redb database and the entity-state tables: reads, and applying write sets inside
//! a transaction the committer owns.

use super::write_set::{StateChange, WriteSet};
use crate::envelope::EntityAddress;
use redb::{Database, ReadableDatabase, TableDefinition, WriteTransaction};
use std::path::Path;
use std::sync::Arc;

/// Entity state: `(tenant, type, id, key) -> value`.
const ENTITY_STATE: TableDefinition<(&str, &str, &str, &str), &[u8]> =
    TableDefinition::new("entity_state");

/// The plugin version each entity last committed under: `(tenant, type, id) -> version`.
/// Its absence means the entity never committed anything (a first start).
const ENTITY_VERSION: TableDefinition<(&str, &str, &str), u32> =
    TableDefinition::new("entity_version");

/// The most keys [`StateStore::entries`] returns for one entity, so that inspecting a huge
/// entity cannot exhaust host memory.
pub const ENTITY_ENTRIES_MAX: usize = 10_000;

/// A failure of the storage engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database could not be opened or created.
    #[error("cannot open the state database: {0}")]
    Open(String),
    /// A read or write failed.
    #[error("state storage failed: {0}")]
    Io(String),
}

impl StoreError {
    fn io(error: impl std::fmt::Display) -> Self {
        StoreError::Io(error.to_string())
    }
}

/// The durable state of every entity on this node.
///
/// ```
/// use tessera_host::envelope::EntityAddress;
/// use tessera_host::state::{StateStore, WriteSet};
/// let dir = tempfile::tempdir().unwrap();
/// let store = StateStore::open(&dir.path().join("tessera.redb")).unwrap();
/// let entity = EntityAddress::new("t", "counter", "c1");
/// let mut writes = WriteSet::new(entity.clone());
/// writes.put("value", vec![7]);
/// store.commit_one(&writes).unwrap();
/// assert_eq!(store.get(&entity, "value").unwrap(), Some(vec![7]));
/// ```
#[derive(Clone)]
pub struct StateStore {
    database: Arc<Database>,
}

impl StateStore {
    /// Opens (or creates) the database at `path` and its tables.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| StoreError::Open(e.to_string()))?;
        }
        let database = Database::create(path).map_err(|e| StoreError::Open(e.to_string()))?;
        Self::from_database(Arc::new(database))
    }

    /// Wraps an already open database (shared with other tables of the node).
    pub fn from_database(database: Arc<Database>) -> Result<Self, StoreError> {
        let transaction = database.begin_write().map_err(StoreError::io)?;
        transaction
            .open_table(ENTITY_STATE)
            .map_err(StoreError::io)?;
        transaction
            .open_table(ENTITY_VERSION)
            .map_err(StoreError::io)?;
        transaction.commit().map_err(StoreError::io)?;
        Ok(StateStore { database })
    }

    /// The underlying database, for other tables of the node (remembered ids, metadata).
    pub fn database(&self) -> &Arc<Database> {
        &self.database
    }

    /// The committed value of `key` for `entity`.
    pub fn get(&self, entity: &EntityAddress, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let transaction = self.database.begin_read().map_err(StoreError::io)?;
        let table = transaction
            .open_table(ENTITY_STATE)
            .map_err(StoreError::io)?;
        let value = table
            .get((
                entity.tenant.as_str(),
                entity.entity_type.as_str(),
                entity.id.as_str(),
                key,
            ))
            .map_err(StoreError::io)?;
        Ok(value.map(|guard| guard.value().to_vec()))
    }

    /// Every committed key and value of `entity`, in key order (at most
    /// [`ENTITY_ENTRIES_MAX`]).
    pub fn entries(&self, entity: &EntityAddress) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let transaction = self.database.begin_read().map_err(StoreError::io)?;
        let table = transaction
            .open_table(ENTITY_STATE)
            .map_err(StoreError::io)?;
        let start = (
            entity.tenant.as_str(),
            entity.entity_type.as_str(),
            entity.id.as_str(),
            "",
        );
        let mut entries = Vec::new();
        for row in table.range(start..).map_err(StoreError::io)? {
            let (key, value) = row.map_err(StoreError::io)?;
            let (tenant, entity_type, id, state_key) = key.value();
            if tenant != entity.tenant || entity_type != entity.entity_type || id != entity.id {
                break;
            }
            if entries.len() == ENTITY_ENTRIES_MAX {
                break;
            }
            entries.push((state_key.to_string(), value.value().to_vec()));
        }
        Ok(entries)
    }

    /// Total bytes (keys plus values) `entity` holds, for the state quota.
    pub fn state_bytes(&self, entity: &EntityAddress) -> Result<usize, StoreError> {
        Ok(self
            .entries(entity)?
            .iter()
            .map(|(key, value)| key.len() + value.len())
            .sum())
    }

    /// The plugin version `entity` last committed under, or `None` if it never committed.
    pub fn version(&self, entity: &EntityAddress) -> Result<Option<u32>, StoreError> {
        let transaction = self.database.begin_read().map_err(StoreError::io)?;
        let table = transaction
            .open_table(ENTITY_VERSION)
            .map_err(StoreError::io)?;
        let version = table
            .get((
                entity.tenant.as_str(),
                entity.entity_type.as_str(),
                entity.id.as_str(),
            ))
            .map_err(StoreError::io)?;
        Ok(version.map(|guard| guard.value()))
    }

    /// Applies `writes` inside `transaction` (which the caller commits).
    pub fn apply(transaction: &WriteTransaction, writes: &WriteSet) -> Result<(), StoreError> {
        Self::apply_all(transaction, std::slice::from_ref(writes).iter())
    }

    /// Applies many write sets inside one transaction, opening each table once.
    pub fn apply_all<'a>(
        transaction: &WriteTransaction,
        write_sets: impl Iterator<Item = &'a WriteSet>,
    ) -> Result<(), StoreError> {
        let mut state = transaction
            .open_table(ENTITY_STATE)
            .map_err(StoreError::io)?;
        let mut versions = transaction
            .open_table(ENTITY_VERSION)
            .map_err(StoreError::io)?;
        for writes in write_sets {
            let entity = writes.entity();
            let (tenant, entity_type, id) = (
                entity.tenant.as_str(),
                entity.entity_type.as_str(),
                entity.id.as_str(),
            );
            for (key, change) in writes.changes() {
                match change {
                    StateChange::Put(value) => {
                        state
                            .insert((tenant, entity_type, id, key), value.as_slice())
                            .map_err(StoreError::io)?;
                    }
                    StateChange::Delete => {
                        state
                            .remove((tenant, entity_type, id, key))
                            .map_err(StoreError::io)?;
                    }
                }
            }
            if let Some(version) = writes.version() {
                versions
                    .insert((tenant, entity_type, id), version)
                    .map_err(StoreError::io)?;
            }
        }
        Ok(())
    }

    /// Removes every key and the version record of `entity` (used when a type is deleted).
    pub fn remove_entity(&self, entity: &EntityAddress) -> Result<(), StoreError> {
        let keys: Vec<String> = self.entries(entity)?.into_iter().map(|(k, _)| k).collect();
        let mut writes = WriteSet::new(entity.clone());
        for key in keys {
            writes.delete(key);
        }
        let transaction = self.database.begin_write().map_err(StoreError::io)?;
        Self::apply(&transaction, &writes)?;
        {
            let mut versions = transaction
                .open_table(ENTITY_VERSION)
                .map_err(StoreError::io)?;
            versions
                .remove((
                    entity.tenant.as_str(),
                    entity.entity_type.as_str(),
                    entity.id.as_str(),
                ))
                .map_err(StoreError::io)?;
        }
        transaction.commit().map_err(StoreError::io)
    }

    /// Commits one write set in its own durable transaction (the slow path the group committer
    /// avoids; used by tools and as the benchmark baseline).
    pub fn commit_one(&self, writes: &WriteSet) -> Result<(), StoreError> {
        let transaction = self.database.begin_write().map_err(StoreError::io)?;
        Self::apply(&transaction, writes)?;
        transaction.commit().map_err(StoreError::io)
    }
}
