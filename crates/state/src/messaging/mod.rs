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
use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};
use tessera_contract::EntityAddress;

pub(crate) mod read;

/// An entity's key in a table: `(tenant, type, id)`.
type EntityKey<'a> = (&'a str, &'a str, &'a str);

/// An outbox entry: `(target type, target id, payload)`.
type OutboxValue<'a> = (&'a str, &'a str, &'a [u8]);

/// Outbox: `(tenant, type, id, seq) -> (target type, target id, payload)`.
pub(crate) const OUTBOX: TableDefinition<(&str, &str, &str, u64), OutboxValue> =
    TableDefinition::new("outbox");

/// A receipt's key: the receiver's `(tenant, type, id)`, then the sender's `(type, id)`.
type ReceiptKey<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str);

/// The receipt key of `receiver` for messages from `sender`.
fn receipt_key<'a>(receiver: &'a EntityAddress, sender: &'a EntityAddress) -> ReceiptKey<'a> {
    let (tenant, entity_type, id) = key3(receiver);
    (
        tenant,
        entity_type,
        id,
        sender.entity_type.as_str(),
        sender.id.as_str(),
    )
}

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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxEntry {
    /// Its sequence number, increasing per sender.
    pub seq: u64,
    /// The receiver (same tenant as the sender).
    pub to: EntityAddress,
    /// The MessagePack payload.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
}

/// A durable reminder: a message an entity sends itself at `due_ms`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reminder {
    /// The timer id `schedule` returned.
    pub timer: u64,
    /// When it fires, in milliseconds since the Unix epoch.
    pub due_ms: u64,
    /// The MessagePack payload.
    #[serde(with = "serde_bytes")]
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
/// [`Origin`](tessera_contract::Origin) — the sender and its sequence number (highest kept per
/// sender), the reminder's timer (its row is deleted), or the client's idempotency key.
pub type Receipt = tessera_contract::Origin;

/// The messaging part of one commit: what a message sent and scheduled, and what it received.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// Now, in milliseconds since the Unix epoch: when a local commit happens.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

/// Applies one entity's messaging writes inside `transaction`, as committed at `at_ms` (the
/// time receipts and client keys are stamped with: a replicated commit passes its primary's
/// time, so every replica writes the same rows).
pub(crate) fn apply_messaging(
    transaction: &WriteTransaction,
    entity: &EntityAddress,
    writes: &MessagingWrites,
    at_ms: u64,
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
            record_receipt(transaction, entity, sender, *seq, at_ms)?;
        }
        Some(Receipt::Client { key }) => record_client_key(transaction, entity, key, at_ms)?,
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
    at_ms: u64,
) -> Result<(), StoreError> {
    let (tenant, entity_type, id) = key3(entity);
    let mut receipts = transaction.open_table(RECEIPTS).map_err(io)?;
    let key = receipt_key(entity, sender);
    let known = receipts.get(key).map_err(io)?.is_some();
    receipts.insert(key, (seq, at_ms)).map_err(io)?;
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
    now: u64,
) -> Result<(), StoreError> {
    let (tenant, entity_type, id) = key3(entity);
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
