//! Reading a shard's rows out of the node's tables, in one read transaction, cut into parts.

use super::{
    EntityRecord, OutboxRow, ReceiptRow, ReminderRow, SHARD_PART_BYTES_MAX, ShardPart, ShardScope,
    StateRow, io,
};
use crate::error::StoreError;
use crate::messaging::{CLIENT_KEYS, OUTBOX, RECEIPTS, REMINDERS, SEQUENCES};
use crate::tables::{ENTITY_META, ENTITY_STATE, REMEMBERED_ENTITIES};
use redb::{ReadTransaction, TableDefinition};
use std::collections::BTreeMap;

/// Visits the rows of `table` whose key starts with `(tenant, type)` and whose id (the third
/// key element, picked by `id_of`) is in the shard.
fn each_row<K, V>(
    transaction: &ReadTransaction,
    table: TableDefinition<K, V>,
    scope: &ShardScope,
    from: K::SelfType<'_>,
    mut visit: impl FnMut(K::SelfType<'_>, V::SelfType<'_>) -> Option<()>,
    prefix: impl Fn(&K::SelfType<'_>) -> (String, String, String),
) -> Result<(), StoreError>
where
    K: redb::Key + 'static,
    V: redb::Value + 'static,
{
    let table = transaction.open_table(table).map_err(io)?;
    for row in table.range(from..).map_err(io)? {
        let (key, value) = row.map_err(io)?;
        let key = key.value();
        let (tenant, entity_type, id) = prefix(&key);
        if tenant != scope.type_key.tenant || entity_type != scope.type_key.entity_type {
            break;
        }
        if (scope.contains)(&id) {
            visit(key, value.value());
        }
    }
    Ok(())
}

/// Reads every row of the shard's entities and its remembered ids, in parts of at most
/// [`SHARD_PART_BYTES_MAX`] (always at least one part).
pub(crate) fn export(
    transaction: &ReadTransaction,
    scope: &ShardScope,
) -> Result<Vec<ShardPart>, StoreError> {
    let (tenant, entity_type) = (
        scope.type_key.tenant.as_str(),
        scope.type_key.entity_type.as_str(),
    );
    let mut records: BTreeMap<String, EntityRecord> = BTreeMap::new();
    fn entry<'a>(
        records: &'a mut BTreeMap<String, EntityRecord>,
        id: &str,
    ) -> &'a mut EntityRecord {
        records
            .entry(id.to_string())
            .or_insert_with(|| EntityRecord {
                id: id.to_string(),
                ..EntityRecord::default()
            })
    }
    let owned = |key: (&str, &str, &str)| (key.0.to_string(), key.1.to_string(), key.2.to_string());
    each_row(
        transaction,
        ENTITY_META,
        scope,
        (tenant, entity_type, ""),
        |key, meta| {
            entry(&mut records, key.2).meta = Some(meta);
            Some(())
        },
        |key| owned(*key),
    )?;
    each_row(
        transaction,
        ENTITY_STATE,
        scope,
        (tenant, entity_type, "", ""),
        |key, value| {
            entry(&mut records, key.2).state.push(StateRow {
                key: key.3.to_string(),
                value: value.to_vec(),
            });
            Some(())
        },
        |key| owned((key.0, key.1, key.2)),
    )?;
    each_row(
        transaction,
        SEQUENCES,
        scope,
        (tenant, entity_type, ""),
        |key, sequences| {
            entry(&mut records, key.2).sequences = Some(sequences);
            Some(())
        },
        |key| owned(*key),
    )?;
    each_row(
        transaction,
        OUTBOX,
        scope,
        (tenant, entity_type, "", 0),
        |key, (to_type, to_id, payload)| {
            entry(&mut records, key.2).outbox.push(OutboxRow {
                seq: key.3,
                to_type: to_type.to_string(),
                to_id: to_id.to_string(),
                payload: payload.to_vec(),
            });
            Some(())
        },
        |key| owned((key.0, key.1, key.2)),
    )?;
    each_row(
        transaction,
        RECEIPTS,
        scope,
        (tenant, entity_type, "", "", ""),
        |key, (seq, at_ms)| {
            entry(&mut records, key.2).receipts.push(ReceiptRow {
                sender_type: key.3.to_string(),
                sender_id: key.4.to_string(),
                seq,
                at_ms,
            });
            Some(())
        },
        |key| owned((key.0, key.1, key.2)),
    )?;
    each_row(
        transaction,
        CLIENT_KEYS,
        scope,
        (tenant, entity_type, "", ""),
        |key, at_ms| {
            entry(&mut records, key.2)
                .client_keys
                .push((key.3.to_string(), at_ms));
            Some(())
        },
        |key| owned((key.0, key.1, key.2)),
    )?;
    each_row(
        transaction,
        REMINDERS,
        scope,
        (tenant, entity_type, "", 0),
        |key, (due_ms, payload)| {
            entry(&mut records, key.2).reminders.push(ReminderRow {
                timer: key.3,
                due_ms,
                payload: payload.to_vec(),
            });
            Some(())
        },
        |key| owned((key.0, key.1, key.2)),
    )?;
    let remembered = remembered_ids(transaction, scope)?;

    let mut parts = Vec::new();
    let mut current = ShardPart {
        index: 0,
        last: false,
        entities: Vec::new(),
        remembered,
    };
    let mut bytes = 0;
    for record in records.into_values() {
        let size = record.bytes();
        if !current.entities.is_empty() && bytes + size > SHARD_PART_BYTES_MAX {
            let index = current.index + 1;
            parts.push(std::mem::replace(
                &mut current,
                ShardPart {
                    index,
                    last: false,
                    entities: Vec::new(),
                    remembered: Vec::new(),
                },
            ));
            bytes = 0;
        }
        bytes += size;
        current.entities.push(record);
    }
    current.last = true;
    parts.push(current);
    Ok(parts)
}

fn remembered_ids(
    transaction: &ReadTransaction,
    scope: &ShardScope,
) -> Result<Vec<String>, StoreError> {
    let (tenant, entity_type) = (
        scope.type_key.tenant.as_str(),
        scope.type_key.entity_type.as_str(),
    );
    let table = transaction.open_table(REMEMBERED_ENTITIES).map_err(io)?;
    let mut ids = Vec::new();
    for row in table
        .range((tenant, entity_type, scope.shard, "")..)
        .map_err(io)?
    {
        let (key, _) = row.map_err(io)?;
        let (found_tenant, found_type, shard, id) = key.value();
        if found_tenant != tenant || found_type != entity_type || shard != scope.shard {
            break;
        }
        ids.push(id.to_string());
    }
    Ok(ids)
}
