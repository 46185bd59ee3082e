//! The node's redb database as the state layer uses it: the table definitions, reads, and the
//! one place that applies write sets and remembered-id changes inside a write transaction —
//! keeping each entity's exact state size and version up to date as it goes.

use super::backend::EntityMeta;
use super::error::StoreError;
use super::messaging::{self, DueReminder, OutboxEntry, Receipt, Reminder, Sequences};
use super::remember::RememberOp;
use super::write_set::{StateChange, WriteSet};
use redb::{
    Database, ReadableDatabase, ReadableTable, TableDefinition, TableHandle, WriteTransaction,
};
use std::collections::HashMap;
use std::sync::Arc;
use tessera_contract::{EntityAddress, ShardId, TypeKey};

/// Entity state: `(tenant, type, id, key) -> value`.
pub(crate) const ENTITY_STATE: TableDefinition<(&str, &str, &str, &str), &[u8]> =
    TableDefinition::new("entity_state");

/// Per entity: `(plugin version of its last commit, 0 if none; exact state bytes)`.
pub(crate) const ENTITY_META: TableDefinition<(&str, &str, &str), (u32, u64)> =
    TableDefinition::new("entity_meta");

/// The version-only table of earlier releases; migrated into [`ENTITY_META`] on open.
const LEGACY_ENTITY_VERSION: TableDefinition<(&str, &str, &str), u32> =
    TableDefinition::new("entity_version");

/// Remembered ids: key `(tenant, type, shard, id)`, no value.
pub(crate) const REMEMBERED_ENTITIES: TableDefinition<(&str, &str, u32, &str), ()> =
    TableDefinition::new("remembered_entities");

/// The tables of the state layer in a node's database, and reads from them.
///
/// ```
/// use tessera_contract::EntityAddress;
/// use tessera_state::{StateStore, WriteSet};
/// let dir = tempfile::tempdir().unwrap();
/// let store = StateStore::open(&dir.path().join("tessera.redb")).unwrap();
/// let entity = EntityAddress::new("t", "counter", "c1");
/// let mut writes = WriteSet::new(entity.clone());
/// writes.put("value", vec![7]);
/// store.commit_one(&writes).unwrap();
/// assert_eq!(store.get(&entity, "value").unwrap(), Some(vec![7]));
/// assert_eq!(store.meta(&entity).unwrap().state_bytes, 6);
/// ```
#[derive(Clone)]
pub struct StateStore {
    database: Arc<Database>,
}

fn key3(entity: &EntityAddress) -> (&str, &str, &str) {
    (
        entity.tenant.as_str(),
        entity.entity_type.as_str(),
        entity.id.as_str(),
    )
}

impl StateStore {
    /// Opens (or creates) the database at `path` and its tables.
    pub fn open(path: &std::path::Path) -> Result<Self, StoreError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| StoreError::Open(e.to_string()))?;
        }
        let database = Database::create(path).map_err(|e| StoreError::Open(e.to_string()))?;
        Self::from_database(Arc::new(database))
    }

    /// Wraps an already open database (shared with the node's catalog), creating the state
    /// tables and migrating an older layout.
    pub fn from_database(database: Arc<Database>) -> Result<Self, StoreError> {
        let transaction = database.begin_write().map_err(StoreError::io)?;
        transaction
            .open_table(ENTITY_STATE)
            .map_err(StoreError::io)?;
        transaction
            .open_table(ENTITY_META)
            .map_err(StoreError::io)?;
        transaction
            .open_table(REMEMBERED_ENTITIES)
            .map_err(StoreError::io)?;
        super::messaging::create_tables(&transaction)?;
        migrate_legacy_versions(&transaction)?;
        transaction.commit().map_err(StoreError::io)?;
        Ok(StateStore { database })
    }

    /// The underlying database.
    pub fn database(&self) -> &Arc<Database> {
        &self.database
    }

    /// The committed value of `key` for `entity`.
    pub fn get(&self, entity: &EntityAddress, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let transaction = self.database.begin_read().map_err(StoreError::io)?;
        let table = transaction
            .open_table(ENTITY_STATE)
            .map_err(StoreError::io)?;
        let (tenant, entity_type, id) = key3(entity);
        let value = table
            .get((tenant, entity_type, id, key))
            .map_err(StoreError::io)?;
        Ok(value.map(|guard| guard.value().to_vec()))
    }

    /// The entity's version and exact state size.
    pub fn meta(&self, entity: &EntityAddress) -> Result<EntityMeta, StoreError> {
        let transaction = self.database.begin_read().map_err(StoreError::io)?;
        let table = transaction
            .open_table(ENTITY_META)
            .map_err(StoreError::io)?;
        let meta = table.get(key3(entity)).map_err(StoreError::io)?;
        Ok(meta.map_or_else(EntityMeta::default, |guard| {
            let (version, state_bytes) = guard.value();
            EntityMeta {
                version: (version != 0).then_some(version),
                state_bytes,
                stamp: 0,
            }
        }))
    }

    /// Up to `limit` committed keys and values of `entity`, in key order.
    pub fn entries(
        &self,
        entity: &EntityAddress,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let transaction = self.database.begin_read().map_err(StoreError::io)?;
        let table = transaction
            .open_table(ENTITY_STATE)
            .map_err(StoreError::io)?;
        let (tenant, entity_type, id) = key3(entity);
        let mut entries = Vec::new();
        for row in table
            .range((tenant, entity_type, id, "")..)
            .map_err(StoreError::io)?
        {
            let (key, value) = row.map_err(StoreError::io)?;
            let (found_tenant, found_type, found_id, state_key) = key.value();
            if (found_tenant, found_type, found_id) != (tenant, entity_type, id)
                || entries.len() == limit
            {
                break;
            }
            entries.push((state_key.to_string(), value.value().to_vec()));
        }
        Ok(entries)
    }

    /// Shards of `type_key` that hold at least one remembered id, ascending.
    pub fn remembered_shards(&self, type_key: &TypeKey) -> Result<Vec<ShardId>, StoreError> {
        let transaction = self.database.begin_read().map_err(StoreError::io)?;
        let table = transaction
            .open_table(REMEMBERED_ENTITIES)
            .map_err(StoreError::io)?;
        remembered_shards_in(&table, type_key)
    }

    /// Remembered ids of one shard, ascending.
    pub fn remembered_ids(
        &self,
        type_key: &TypeKey,
        shard: ShardId,
    ) -> Result<Vec<String>, StoreError> {
        let transaction = self.database.begin_read().map_err(StoreError::io)?;
        let table = transaction
            .open_table(REMEMBERED_ENTITIES)
            .map_err(StoreError::io)?;
        let (tenant, entity_type) = (type_key.tenant.as_str(), type_key.entity_type.as_str());
        let mut ids = Vec::new();
        for entry in table
            .range((tenant, entity_type, shard, "")..)
            .map_err(StoreError::io)?
        {
            let (key, _) = entry.map_err(StoreError::io)?;
            let (found_tenant, found_type, found_shard, id) = key.value();
            if found_tenant != tenant || found_type != entity_type || found_shard != shard {
                break;
            }
            ids.push(id.to_string());
        }
        Ok(ids)
    }

    /// The entity's messaging counters (outbox sequence, timer ids, reminders and outbox held).
    pub fn sequences(&self, entity: &EntityAddress) -> Result<Sequences, StoreError> {
        messaging::read::sequences(&self.database, entity)
    }

    /// Whether `receiver` already committed the message `receipt` names (a duplicate).
    pub fn is_duplicate(
        &self,
        receiver: &EntityAddress,
        receipt: &Receipt,
    ) -> Result<bool, StoreError> {
        messaging::read::is_duplicate(&self.database, receiver, receipt)
    }

    /// Up to `limit` entries of `sender`'s outbox, in sequence order.
    pub fn outbox(
        &self,
        sender: &EntityAddress,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        messaging::read::outbox(&self.database, sender, limit)
    }

    /// Up to `limit` entities with a non-empty outbox, after `after` (exclusive), in order.
    pub fn outbox_senders(
        &self,
        after: Option<&EntityAddress>,
        limit: usize,
    ) -> Result<Vec<EntityAddress>, StoreError> {
        messaging::read::outbox_senders(&self.database, after, limit)
    }

    /// Up to `limit` reminders due at or before `until_ms`, earliest first, after `after`.
    pub fn due_reminders(
        &self,
        until_ms: u64,
        after: Option<&DueReminder>,
        limit: usize,
    ) -> Result<Vec<DueReminder>, StoreError> {
        messaging::read::due_reminders(&self.database, until_ms, after, limit)
    }

    /// When the earliest reminder is due (ms since the epoch), if any.
    pub fn next_due(&self) -> Result<Option<u64>, StoreError> {
        messaging::read::next_due(&self.database)
    }

    /// Outbox entries and reminders held, node-wide.
    pub fn pending_messages(&self) -> Result<(u64, u64), StoreError> {
        messaging::read::pending(&self.database)
    }

    /// One reminder, if it is still held.
    pub fn reminder(
        &self,
        entity: &EntityAddress,
        timer: u64,
    ) -> Result<Option<Reminder>, StoreError> {
        messaging::read::reminder(&self.database, entity, timer)
    }

    /// Commits one write set in its own durable transaction (the slow path the group committer
    /// avoids; used by tools and as the benchmark baseline).
    pub fn commit_one(&self, writes: &WriteSet) -> Result<(), StoreError> {
        let transaction = self.database.begin_write().map_err(StoreError::io)?;
        apply_write_sets(&transaction, std::iter::once(writes), messaging::now_ms())?;
        transaction.commit().map_err(StoreError::io)
    }
}

/// Shards of `type_key` that hold at least one remembered id in `table`, ascending: one range
/// probe per shard present, jumping past each shard's ids instead of reading them.
pub(crate) fn remembered_shards_in(
    table: &impl ReadableTable<(&'static str, &'static str, u32, &'static str), ()>,
    type_key: &TypeKey,
) -> Result<Vec<ShardId>, StoreError> {
    let (tenant, entity_type) = (type_key.tenant.as_str(), type_key.entity_type.as_str());
    let mut shards = Vec::new();
    let mut next: Option<u32> = Some(0);
    while let Some(from) = next {
        let mut range = table
            .range((tenant, entity_type, from, "")..)
            .map_err(StoreError::io)?;
        let Some(entry) = range.next() else { break };
        let (key, _) = entry.map_err(StoreError::io)?;
        let (found_tenant, found_type, shard, _) = key.value();
        if found_tenant != tenant || found_type != entity_type {
            break;
        }
        shards.push(shard);
        next = shard.checked_add(1);
    }
    Ok(shards)
}

/// Applies many write sets inside one transaction, opening each table once, and keeps every
/// touched entity's exact state size and version in [`ENTITY_META`]. `at_ms` is the commit's
/// time (see [`messaging::apply_messaging`]).
pub(crate) fn apply_write_sets<'a>(
    transaction: &WriteTransaction,
    write_sets: impl Iterator<Item = &'a WriteSet>,
    at_ms: u64,
) -> Result<(), StoreError> {
    let mut state = transaction
        .open_table(ENTITY_STATE)
        .map_err(StoreError::io)?;
    let mut metas = transaction
        .open_table(ENTITY_META)
        .map_err(StoreError::io)?;
    for writes in write_sets {
        messaging::apply_messaging(transaction, writes.entity(), writes.messaging(), at_ms)?;
        if !writes.touches_state() {
            continue;
        }
        let (tenant, entity_type, id) = key3(writes.entity());
        let mut delta: i64 = 0;
        for (key, change) in writes.changes() {
            let old = match change {
                StateChange::Put(value) => {
                    delta += (key.len() + value.len()) as i64;
                    state
                        .insert((tenant, entity_type, id, key), value.as_slice())
                        .map_err(StoreError::io)?
                        .map(|old| old.value().len())
                }
                StateChange::Delete => state
                    .remove((tenant, entity_type, id, key))
                    .map_err(StoreError::io)?
                    .map(|old| old.value().len()),
            };
            if let Some(old_len) = old {
                delta -= (key.len() + old_len) as i64;
            }
        }
        let (old_version, old_bytes) = metas
            .get((tenant, entity_type, id))
            .map_err(StoreError::io)?
            .map_or((0, 0), |guard| guard.value());
        let state_bytes = old_bytes as i64 + delta;
        debug_assert!(
            state_bytes >= 0,
            "an entity cannot hold fewer than zero bytes"
        );
        let version = writes.version().unwrap_or(old_version);
        metas
            .insert(
                (tenant, entity_type, id),
                (version, state_bytes.max(0) as u64),
            )
            .map_err(StoreError::io)?;
    }
    Ok(())
}

/// Applies remembered-id changes inside one transaction, in order per id.
pub(crate) fn apply_remember_ops<'a>(
    transaction: &WriteTransaction,
    ops: impl Iterator<Item = &'a RememberOp>,
) -> Result<(), StoreError> {
    let mut table = transaction
        .open_table(REMEMBERED_ENTITIES)
        .map_err(StoreError::io)?;
    // Inserting in key order keeps the B-tree walk local. The sort is stable, so the operations
    // on one id keep their order; operations on different ids commute.
    let mut ordered: Vec<&RememberOp> = ops.collect();
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
        .map_err(StoreError::io)?;
    }
    Ok(())
}

/// Moves the version-only table of earlier releases into [`ENTITY_META`], computing each
/// entity's state size once, so an upgraded node keeps its entities' versions and quotas.
fn migrate_legacy_versions(transaction: &WriteTransaction) -> Result<(), StoreError> {
    let legacy_exists = transaction
        .list_tables()
        .map_err(StoreError::io)?
        .any(|table| table.name() == LEGACY_ENTITY_VERSION.name());
    if !legacy_exists {
        return Ok(());
    }
    let mut metas: HashMap<(String, String, String), (u32, u64)> = HashMap::new();
    {
        let versions = transaction
            .open_table(LEGACY_ENTITY_VERSION)
            .map_err(StoreError::io)?;
        for row in versions.iter().map_err(StoreError::io)? {
            let (key, version) = row.map_err(StoreError::io)?;
            let (tenant, entity_type, id) = key.value();
            metas.insert(
                (tenant.to_string(), entity_type.to_string(), id.to_string()),
                (version.value(), 0),
            );
        }
        let state = transaction
            .open_table(ENTITY_STATE)
            .map_err(StoreError::io)?;
        for row in state.iter().map_err(StoreError::io)? {
            let (key, value) = row.map_err(StoreError::io)?;
            let (tenant, entity_type, id, state_key) = key.value();
            let entry = metas
                .entry((tenant.to_string(), entity_type.to_string(), id.to_string()))
                .or_insert((0, 0));
            entry.1 += (state_key.len() + value.value().len()) as u64;
        }
    }
    let mut table = transaction
        .open_table(ENTITY_META)
        .map_err(StoreError::io)?;
    for ((tenant, entity_type, id), meta) in &metas {
        table
            .insert((tenant.as_str(), entity_type.as_str(), id.as_str()), *meta)
            .map_err(StoreError::io)?;
    }
    drop(table);
    transaction
        .delete_table(LEGACY_ENTITY_VERSION)
        .map_err(StoreError::io)?;
    tracing::info!(
        entities = metas.len(),
        "migrated entity versions to entity_meta"
    );
    Ok(())
}

#[cfg(test)]
mod tests;
