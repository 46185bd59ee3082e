//! Reads of the messaging tables: an entity's counters and outbox, whether a message is a
//! duplicate, which senders have outboxes to deliver, and the reminders that are due.

use super::{
    CLIENT_KEY_HORIZON_MS, CLIENT_KEYS, DueReminder, OUTBOX, OutboxEntry, RECEIPTS, REMINDERS,
    REMINDERS_DUE, Receipt, Reminder, SEQUENCES, Sequences, io, key3, now_ms, receipt_key,
};
use crate::error::StoreError;
use redb::{Database, ReadableDatabase, ReadableTable};
use std::ops::Bound;
use tessera_contract::EntityAddress;

/// The entity's messaging counters.
pub(crate) fn sequences(
    database: &Database,
    entity: &EntityAddress,
) -> Result<Sequences, StoreError> {
    let transaction = database.begin_read().map_err(io)?;
    let table = transaction.open_table(SEQUENCES).map_err(io)?;
    Ok(table
        .get(key3(entity))
        .map_err(io)?
        .map_or(Sequences::default(), |guard| {
            Sequences::from_row(guard.value())
        }))
}

/// Whether `receiver` already committed the message identified by `receipt`.
pub(crate) fn is_duplicate(
    database: &Database,
    receiver: &EntityAddress,
    receipt: &Receipt,
) -> Result<bool, StoreError> {
    let transaction = database.begin_read().map_err(io)?;
    let (tenant, entity_type, id) = key3(receiver);
    match receipt {
        Receipt::Entity { sender, seq } => {
            let table = transaction.open_table(RECEIPTS).map_err(io)?;
            let key = receipt_key(receiver, sender);
            let highest = table.get(key).map_err(io)?.map(|guard| guard.value().0);
            Ok(highest.is_some_and(|highest| *seq <= highest))
        }
        Receipt::Reminder { timer } => {
            let table = transaction.open_table(REMINDERS).map_err(io)?;
            let held = table
                .get((tenant, entity_type, id, *timer))
                .map_err(io)?
                .is_some();
            Ok(!held)
        }
        Receipt::Client { key } => {
            let table = transaction.open_table(CLIENT_KEYS).map_err(io)?;
            let at = table
                .get((tenant, entity_type, id, key.as_str()))
                .map_err(io)?
                .map(|guard| guard.value());
            Ok(at.is_some_and(|at| now_ms().saturating_sub(at) <= CLIENT_KEY_HORIZON_MS))
        }
    }
}

/// Up to `limit` entries of `sender`'s outbox, in sequence order.
pub(crate) fn outbox(
    database: &Database,
    sender: &EntityAddress,
    limit: usize,
) -> Result<Vec<OutboxEntry>, StoreError> {
    let transaction = database.begin_read().map_err(io)?;
    let table = transaction.open_table(OUTBOX).map_err(io)?;
    let (tenant, entity_type, id) = key3(sender);
    let mut entries = Vec::new();
    for row in table.range((tenant, entity_type, id, 0)..).map_err(io)? {
        let (key, value) = row.map_err(io)?;
        let (t, ty, i, seq) = key.value();
        if (t, ty, i) != (tenant, entity_type, id) || entries.len() == limit {
            break;
        }
        let (to_type, to_id, payload) = value.value();
        entries.push(OutboxEntry {
            seq,
            to: EntityAddress::new(tenant, to_type, to_id),
            payload: payload.to_vec(),
        });
    }
    Ok(entries)
}

/// Up to `limit` entities with a non-empty outbox, from `after` (exclusive) on, in order.
pub(crate) fn outbox_senders(
    database: &Database,
    after: Option<&EntityAddress>,
    limit: usize,
) -> Result<Vec<EntityAddress>, StoreError> {
    let transaction = database.begin_read().map_err(io)?;
    let table = transaction.open_table(OUTBOX).map_err(io)?;
    let mut senders: Vec<EntityAddress> = Vec::new();
    let mut from = after.map(|after| {
        (
            after.tenant.clone(),
            after.entity_type.clone(),
            after.id.clone(),
            u64::MAX,
        )
    });
    // One range probe per sender: jump past each sender's entries instead of reading them.
    while senders.len() < limit {
        let mut range = match &from {
            Some((t, ty, i, seq)) => table
                .range((t.as_str(), ty.as_str(), i.as_str(), *seq)..)
                .map_err(io)?,
            None => table.iter().map_err(io)?,
        };
        let mut found = None;
        for row in range.by_ref() {
            let (key, _) = row.map_err(io)?;
            let (t, ty, i, seq) = key.value();
            let is_after = match &from {
                Some((ft, fty, fi, fseq)) => {
                    (t, ty, i, seq) > (ft.as_str(), fty.as_str(), fi.as_str(), *fseq)
                }
                None => true,
            };
            if is_after {
                found = Some(EntityAddress::new(t, ty, i));
                break;
            }
        }
        let Some(sender) = found else { break };
        from = Some((
            sender.tenant.clone(),
            sender.entity_type.clone(),
            sender.id.clone(),
            u64::MAX,
        ));
        senders.push(sender);
    }
    Ok(senders)
}

/// Up to `limit` reminders due at or before `until_ms`, earliest first, after `after` (a
/// reminder a previous page ended with) if given.
pub(crate) fn due_reminders(
    database: &Database,
    until_ms: u64,
    after: Option<&DueReminder>,
    limit: usize,
) -> Result<Vec<DueReminder>, StoreError> {
    let transaction = database.begin_read().map_err(io)?;
    let table = transaction.open_table(REMINDERS_DUE).map_err(io)?;
    let mut due = Vec::new();
    let rows = match after {
        Some(after) => {
            let entity = &after.entity;
            let start = (
                after.due_ms,
                entity.tenant.as_str(),
                entity.entity_type.as_str(),
                entity.id.as_str(),
                after.timer,
            );
            table
                .range((Bound::Excluded(start), Bound::Unbounded))
                .map_err(io)?
        }
        None => table
            .range::<(u64, &str, &str, &str, u64)>(..)
            .map_err(io)?,
    };
    for row in rows {
        let (key, _) = row.map_err(io)?;
        let (due_ms, tenant, entity_type, id, timer) = key.value();
        if due_ms > until_ms || due.len() == limit {
            break;
        }
        due.push(DueReminder {
            entity: EntityAddress::new(tenant, entity_type, id),
            timer,
            due_ms,
        });
    }
    Ok(due)
}

/// Outbox entries and reminders held (table lengths, kept by redb in each table's header).
pub(crate) fn pending(database: &Database) -> Result<(u64, u64), StoreError> {
    use redb::ReadableTableMetadata;
    let transaction = database.begin_read().map_err(io)?;
    let outbox = transaction
        .open_table(OUTBOX)
        .map_err(io)?
        .len()
        .map_err(io)?;
    let reminders = transaction
        .open_table(REMINDERS)
        .map_err(io)?
        .len()
        .map_err(io)?;
    Ok((outbox, reminders))
}

/// When the earliest reminder is due, if any.
pub(crate) fn next_due(database: &Database) -> Result<Option<u64>, StoreError> {
    let transaction = database.begin_read().map_err(io)?;
    let table = transaction.open_table(REMINDERS_DUE).map_err(io)?;
    let first = table.first().map_err(io)?;
    Ok(first.map(|(key, _)| key.value().0))
}

/// The payload of one reminder, if it is still held.
pub(crate) fn reminder(
    database: &Database,
    entity: &EntityAddress,
    timer: u64,
) -> Result<Option<Reminder>, StoreError> {
    let transaction = database.begin_read().map_err(io)?;
    let table = transaction.open_table(REMINDERS).map_err(io)?;
    let (tenant, entity_type, id) = key3(entity);
    Ok(table
        .get((tenant, entity_type, id, timer))
        .map_err(io)?
        .map(|guard| {
            let (due_ms, payload) = guard.value();
            Reminder {
                timer,
                due_ms,
                payload: payload.to_vec(),
            }
        }))
}
