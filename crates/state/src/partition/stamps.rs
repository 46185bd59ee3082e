//! Each entity's stamp in a partition: the id of the last write applied to it, in a table of
//! the partition's database beside the state tables, read by the machine that checks writes
//! against it, the checkpoint that carries it and the node that serves from the replica.

use crate::error::StoreError;
use crate::tables::StateStore;
use redb::{ReadableDatabase, TableDefinition};
use tessera_contract::EntityAddress;

/// Each entity's stamp: `(tenant, type, id) -> the stamp of the last write applied to it`.
/// Kept after an entity's last key is removed, so its stamps go on: a write computed before
/// the removal must still find another stamp.
pub(super) const STAMPS: TableDefinition<(&str, &str, &str), u64> =
    TableDefinition::new("partition_stamps");

/// An entity's key in [`STAMPS`].
pub(super) fn key3(entity: &EntityAddress) -> (&str, &str, &str) {
    (&entity.tenant, &entity.entity_type, &entity.id)
}

/// The stamp of the last write applied to `entity` in a partition's `store`; 0 if none.
pub(super) fn read_stamp(store: &StateStore, entity: &EntityAddress) -> Result<u64, StoreError> {
    let transaction = store.database().begin_read().map_err(StoreError::io)?;
    let stamps = transaction.open_table(STAMPS).map_err(StoreError::io)?;
    let stamp = stamps.get(key3(entity)).map_err(StoreError::io)?;
    Ok(stamp.map_or(0, |guard| guard.value()))
}
