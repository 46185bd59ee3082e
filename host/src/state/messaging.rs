//! The durable side of effectively-once messaging: each entity's outbox of committed tells, the
//! receipts a receiver keeps to drop duplicates, its durable reminders, and its sequence
//! counters — all written in the same transaction as the message's state writes, so a message's
//! effects exist exactly when its writes do.
//!
//! Bounds and horizons (see `docs/messaging.md`):
//! - a receiver keeps one receipt per sender (its highest committed sequence number); at most
//!   [`RECEIPTS_PER_ENTITY_MAX`] senders, the least recently seen evicted first;
//! - a receiver keeps at most [`CLIENT_KEYS_PER_ENTITY_MAX`] client idempotency keys, none older
//!   than [`CLIENT_KEY_HORIZON_MS`];
//! - outbox and reminder counts per entity are bounded by the entity layer before commit.

use super::error::StoreError;
use crate::contract::EntityAddress;
use redb::{ReadableTable, TableDefinition, WriteTransaction};

/// An entity's key in a table: `(tenant, type, id)`.
type EntityKey<'a> = (&'a str, &'a str, &'a str);

/// An outbox entry: `(target type, target id, payload)`.
type OutboxValue<'a> = (&'a str, &'a str, &'a [u8]);

/// Outbox: `(tenant, type, id, seq) -> (target type, target id, payload)`.
pub(crate) const OUTBOX: TableDefinition<(&str, &str, &str, u64), OutboxValue> =
    TableDefinition::new("outbox");

/// A receipt's key: the receiver's `(tenant, type, id)`, then the sender's `(type, id)`.
type ReceiptKey<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str);

/// Receipts: `(tenant, type, id, sender type, sender id) -> (highest seq committed, at ms)`.
pub(crate) const RECEIPTS: TableDefinition<ReceiptKey, (u64, u64)> =
    TableDefinition::new("receipts");

/// Client idempotency keys: `(tenant, type, id, key) -> committed at ms`.
pub(crate) const CLIENT_KEYS: TableDefinition<(&str, &str, &str, &str), u64> =
    TableDefinition::new("client_keys");

/// A reminder's key: the entity's `(tenant, type, id)` and the timer id.
type ReminderKey<'a> = (&'a str, &'a str, &'a str, u64);

/// Reminders: `(tenant, type, id, timer) -> (due ms since the epoch, payload)`.
pub(crate) const REMINDERS: TableDefinition<ReminderKey, (u64, &[u8])> =
    TableDefinition::new("reminders");

/// Reminders by due time: `(due ms, tenant, type, id, timer)`.
pub(crate) const REMINDERS_DUE: TableDefinition<(u64, &str, &str, &str, u64), ()> =
    TableDefinition::new("reminders_due");

/// An entity's counters: `(next outbox seq, last timer id, reminders held, outbox held)`.
type SequencesValue = (u64, u64, u64, u64);

/// Per entity: its [`SequencesValue`].
pub(crate) const SEQUENCES: TableDefinition<EntityKey, SequencesValue> =
    TableDefinition::new("entity_sequences");

/// Senders a receiver keeps a receipt for; past it the least recently seen is evicted.
pub const RECEIPTS_PER_ENTITY_MAX: usize = 4096;

/// Client idempotency keys a receiver keeps; past it the oldest is evicted.
pub const CLIENT_KEYS_PER_ENTITY_MAX: usize = 1024;

/// How long a client idempotency key is remembered: a retry after this may run again.
pub const CLIENT_KEY_HORIZON_MS: u64 = 24 * 60 * 60 * 1000;

/// One committed tell waiting in its sender's outbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxEntry {
    /// Its sequence number, increasing per sender.
    pub seq: u64,
    /// The receiver (same tenant as the sender).
    pub to: EntityAddress,
    /// The MessagePack payload.
    pub payload: Vec<u8>,
}

/// A durable reminder: a message an entity sends itself at `due_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reminder {
    /// The timer id `schedule` returned.
    pub timer: u64,
    /// When it fires, in milliseconds since the Unix epoch.
    pub due_ms: u64,
    /// The MessagePack payload.
    pub payload: Vec<u8>,
}

/// A reminder that is due, as the reminder service finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DueReminder {
    /// The entity it belongs to.
    pub entity: EntityAddress,
    /// Its timer id.
    pub timer: u64,
    /// When it is due, in milliseconds since the Unix epoch.
    pub due_ms: u64,
}

/// An entity's messaging counters, kept with its state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sequences {
    /// The sequence number its next outbox entry gets.
    pub next_seq: u64,
    /// The highest timer id it was given (the next `schedule` returns one more).
    pub last_timer: u64,
    /// Reminders it holds.
    pub reminders: u64,
    /// Outbox entries not yet acknowledged.
    pub outbox: u64,
}

impl Sequences {
    /// The counters as stored in [`SEQUENCES`].
    fn from_row((next_seq, last_timer, reminders, outbox): SequencesValue) -> Self {
        Sequences {
            next_seq,
            last_timer,
            reminders,
            outbox,
        }
    }
}

/// What a receiving commit records so the same message is never applied twice: the message's
/// [`Origin`](crate::contract::Origin) — the sender and its sequence number (highest kept per
/// sender), the reminder's timer (its row is deleted), or the client's idempotency key.
pub type Receipt = crate::contract::Origin;

/// The messaging part of one commit: what a message sent and scheduled, and what it received.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MessagingWrites {
    /// Tells to append to the entity's outbox.
    pub outbox: Vec<OutboxEntry>,
    /// Reminders to store.
    pub reminders: Vec<Reminder>,
    /// Reminders to cancel, by timer id.
    pub cancels: Vec<u64>,
    /// The receipt of the message being committed.
    pub receipt: Option<Receipt>,
    /// Outbox entries the receivers acknowledged (removed).
    pub acked: Vec<u64>,
    /// New `(next_seq, last_timer)` counters, if the message used any.
    pub counters: Option<(u64, u64)>,
}

impl MessagingWrites {
    /// Nothing to write.
    pub const EMPTY: MessagingWrites = MessagingWrites {
        outbox: Vec::new(),
        reminders: Vec::new(),
        cancels: Vec::new(),
        receipt: None,
        acked: Vec::new(),
        counters: None,
    };

    /// Whether nothing is to be written.
    pub fn is_empty(&self) -> bool {
        self.outbox.is_empty()
            && self.reminders.is_empty()
            && self.cancels.is_empty()
            && self.receipt.is_none()
            && self.acked.is_empty()
            && self.counters.is_none()
    }

    /// Bytes the entries carry, for batch limits.
    pub fn payload_bytes(&self) -> usize {
        let outbox: usize = self
            .outbox
            .iter()
            .map(|entry| entry.payload.len() + entry.to.id.len() + 16)
            .sum();
        let reminders: usize = self.reminders.iter().map(|r| r.payload.len() + 16).sum();
        outbox + reminders + 8 * (self.cancels.len() + self.acked.len())
    }
}

fn io(error: impl std::fmt::Display) -> StoreError {
    StoreError::io(error)
}

fn key3(entity: &EntityAddress) -> (&str, &str, &str) {
    (&entity.tenant, &entity.entity_type, &entity.id)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

/// Applies one entity's messaging writes inside `transaction`.
pub(crate) fn apply_messaging(
    transaction: &WriteTransaction,
    entity: &EntityAddress,
    writes: &MessagingWrites,
) -> Result<(), StoreError> {
    if writes.is_empty() {
        return Ok(());
    }
    let (tenant, entity_type, id) = key3(entity);
    let mut sequences = transaction.open_table(SEQUENCES).map_err(io)?;
    let mut current = sequences
        .get((tenant, entity_type, id))
        .map_err(io)?
        .map_or(Sequences::default(), |guard| {
            Sequences::from_row(guard.value())
        });
    {
        let mut outbox = transaction.open_table(OUTBOX).map_err(io)?;
        for entry in &writes.outbox {
            let value = (
                entry.to.entity_type.as_str(),
                entry.to.id.as_str(),
                entry.payload.as_slice(),
            );
            if outbox
                .insert((tenant, entity_type, id, entry.seq), value)
                .map_err(io)?
                .is_none()
            {
                current.outbox += 1;
            }
        }
        for seq in &writes.acked {
            if outbox
                .remove((tenant, entity_type, id, *seq))
                .map_err(io)?
                .is_some()
            {
                current.outbox = current.outbox.saturating_sub(1);
            }
        }
    }
    {
        let mut reminders = transaction.open_table(REMINDERS).map_err(io)?;
        let mut due = transaction.open_table(REMINDERS_DUE).map_err(io)?;
        let mut remove = |timer: u64, current: &mut Sequences| -> Result<(), StoreError> {
            let removed = reminders
                .remove((tenant, entity_type, id, timer))
                .map_err(io)?
                .map(|guard| guard.value().0);
            if let Some(due_ms) = removed {
                due.remove((due_ms, tenant, entity_type, id, timer))
                    .map_err(io)?;
                current.reminders = current.reminders.saturating_sub(1);
            }
            Ok(())
        };
        for timer in &writes.cancels {
            remove(*timer, &mut current)?;
        }
        if let Some(Receipt::Reminder { timer }) = &writes.receipt {
            remove(*timer, &mut current)?;
        }
        for reminder in &writes.reminders {
            let previous = reminders
                .insert(
                    (tenant, entity_type, id, reminder.timer),
                    (reminder.due_ms, reminder.payload.as_slice()),
                )
                .map_err(io)?
                .map(|guard| guard.value().0);
            match previous {
                Some(old_due) => {
                    due.remove((old_due, tenant, entity_type, id, reminder.timer))
                        .map_err(io)?;
                }
                None => current.reminders += 1,
            }
            due.insert(
                (reminder.due_ms, tenant, entity_type, id, reminder.timer),
                (),
            )
            .map_err(io)?;
        }
    }
    match &writes.receipt {
        Some(Receipt::Entity { sender, seq }) => {
            record_receipt(transaction, entity, sender, *seq)?;
        }
        Some(Receipt::Client { key }) => record_client_key(transaction, entity, key)?,
        Some(Receipt::Reminder { .. }) | None => {}
    }
    if let Some((next_seq, last_timer)) = writes.counters {
        current.next_seq = current.next_seq.max(next_seq);
        current.last_timer = current.last_timer.max(last_timer);
    }
    sequences
        .insert(
            (tenant, entity_type, id),
            (
                current.next_seq,
                current.last_timer,
                current.reminders,
                current.outbox,
            ),
        )
        .map_err(io)?;
    Ok(())
}

fn record_receipt(
    transaction: &WriteTransaction,
    entity: &EntityAddress,
    sender: &EntityAddress,
    seq: u64,
) -> Result<(), StoreError> {
    let (tenant, entity_type, id) = key3(entity);
    let mut receipts = transaction.open_table(RECEIPTS).map_err(io)?;
    let key = (
        tenant,
        entity_type,
        id,
        sender.entity_type.as_str(),
        sender.id.as_str(),
    );
    let known = receipts.get(key).map_err(io)?.is_some();
    receipts.insert(key, (seq, now_ms())).map_err(io)?;
    if known {
        return Ok(());
    }
    // A new sender: keep the receiver's receipts bounded, evicting the least recently seen.
    let mut held: Vec<(u64, String, String)> = Vec::new();
    for row in receipts
        .range((tenant, entity_type, id, "", "")..)
        .map_err(io)?
    {
        let (found, value) = row.map_err(io)?;
        let (t, ty, i, sender_type, sender_id) = found.value();
        if (t, ty, i) != (tenant, entity_type, id) {
            break;
        }
        held.push((
            value.value().1,
            sender_type.to_string(),
            sender_id.to_string(),
        ));
    }
    if held.len() <= RECEIPTS_PER_ENTITY_MAX {
        return Ok(());
    }
    held.sort();
    for (_, sender_type, sender_id) in &held[..held.len() - RECEIPTS_PER_ENTITY_MAX] {
        receipts
            .remove((
                tenant,
                entity_type,
                id,
                sender_type.as_str(),
                sender_id.as_str(),
            ))
            .map_err(io)?;
    }
    Ok(())
}

fn record_client_key(
    transaction: &WriteTransaction,
    entity: &EntityAddress,
    key: &str,
) -> Result<(), StoreError> {
    let (tenant, entity_type, id) = key3(entity);
    let now = now_ms();
    let mut keys = transaction.open_table(CLIENT_KEYS).map_err(io)?;
    keys.insert((tenant, entity_type, id, key), now)
        .map_err(io)?;
    let mut held: Vec<(u64, String)> = Vec::new();
    for row in keys.range((tenant, entity_type, id, "")..).map_err(io)? {
        let (found, at) = row.map_err(io)?;
        let (t, ty, i, found_key) = found.value();
        if (t, ty, i) != (tenant, entity_type, id) {
            break;
        }
        held.push((at.value(), found_key.to_string()));
    }
    held.sort();
    let expired = held
        .iter()
        .take_while(|(at, _)| now.saturating_sub(*at) > CLIENT_KEY_HORIZON_MS)
        .count();
    let excess = held.len().saturating_sub(CLIENT_KEYS_PER_ENTITY_MAX);
    for (_, old_key) in &held[..expired.max(excess)] {
        keys.remove((tenant, entity_type, id, old_key.as_str()))
            .map_err(io)?;
    }
    Ok(())
}

/// Creates the messaging tables.
pub(crate) fn create_tables(transaction: &WriteTransaction) -> Result<(), StoreError> {
    transaction.open_table(OUTBOX).map_err(io)?;
    transaction.open_table(RECEIPTS).map_err(io)?;
    transaction.open_table(CLIENT_KEYS).map_err(io)?;
    transaction.open_table(REMINDERS).map_err(io)?;
    transaction.open_table(REMINDERS_DUE).map_err(io)?;
    transaction.open_table(SEQUENCES).map_err(io)?;
    Ok(())
}

/// Reads of the messaging tables.
pub(crate) mod read {
    use super::*;
    use redb::{Database, ReadableDatabase};

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
                let key = (
                    tenant,
                    entity_type,
                    id,
                    sender.entity_type.as_str(),
                    sender.id.as_str(),
                );
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

    /// Up to `limit` reminders due at or before `until_ms`, earliest first.
    pub(crate) fn due_reminders(
        database: &Database,
        until_ms: u64,
        limit: usize,
    ) -> Result<Vec<DueReminder>, StoreError> {
        let transaction = database.begin_read().map_err(io)?;
        let table = transaction.open_table(REMINDERS_DUE).map_err(io)?;
        let mut due = Vec::new();
        for row in table.iter().map_err(io)? {
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
}
