//! A partition's state as a stream of rows, for a peer that installs it (state transfer), so
//! that neither side holds the partition in memory (`checkpoint` encodes one image instead,
//! which a move's fill still uses).
//!
//! **Reading.** [`ImageRows`] reads from one redb read transaction, opened when the replica
//! asks (at a checkpoint), so every row is the checkpoint's however long the transfer takes and
//! whatever the machine applies meanwhile. (Redb keeps the pages a reader pins: applies are
//! slower while a transfer runs, `docs/partitions.md`.) The stream is the apply count, then
//! every row of every table a partition op writes, table by table in key order, each row one
//! MessagePack value ([`Row`]); the reminders' due-time index is rebuilt from the reminders.
//!
//! **Staging.** [`Staging`] decodes the rows as their bytes come, part by part, and writes them
//! into tables of their own beside the live ones (`image_staging.*`) — the live tables are read
//! while a replica transfers, so they are not half replaced. Bytes of a row cut by a part's end
//! wait for the next part, at most [`PENDING_ROW_BYTES_MAX`] of them. Installing swaps the
//! staged tables in for the live ones in one transaction; a stream cut short (no apply count)
//! is refused and changes nothing.

use super::moving::{MOVE_PHASE, MOVE_PIECES};
use super::stamps::STAMPS;
use crate::error::StoreError;
use crate::messaging::{CLIENT_KEYS, OUTBOX, RECEIPTS, REMINDERS, REMINDERS_DUE, SEQUENCES};
use crate::shard_transfer::SHARD_TRANSFER_CHUNKS;
use crate::tables::{ENTITY_META, ENTITY_STATE, REMEMBERED_ENTITIES, StateStore};
use redb::{
    Durability, Key, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition, TableError,
    Value, WriteTransaction,
};
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;
use tessera_consensus::state_machine::{ImageReader, RestoreError};

/// The longest a row's bytes may wait for the rest of it in a later part: the largest row a
/// partition holds is a state value or a fill piece (the store bounds both far below this).
pub const PENDING_ROW_BYTES_MAX: usize = 64 * 1024 * 1024;

/// An entity's key, owned.
type Entity = (String, String, String);

/// One value of the stream (MessagePack enums are tagged by variant index: a variant is only
/// ever added last).
#[derive(Debug, Serialize, Deserialize)]
enum Row {
    /// The requests applied since the empty state, first.
    Applied(u64),
    State(Entity, String, ByteBuf),
    Meta(Entity, u32, u64),
    Outbox(Entity, u64, String, String, ByteBuf),
    Receipt(Entity, String, String, u64, u64),
    ClientKey(Entity, String, u64),
    Reminder(Entity, u64, u64, ByteBuf),
    Sequences(Entity, (u64, u64, u64, u64)),
    Stamp(Entity, u64),
    Remembered(String, String, u32, String),
    /// A staged piece of a restored value larger than a part.
    RestoredPiece(Entity, String, u64, ByteBuf),
    /// The move phase's code.
    Phase(String, u64),
    /// A staged piece of a move's fill.
    FillPiece(u64, u32, ByteBuf),
}

fn io(error: impl std::fmt::Display) -> StoreError {
    StoreError::io(error)
}

fn owned(tenant: &str, entity_type: &str, id: &str) -> Entity {
    (tenant.to_string(), entity_type.to_string(), id.to_string())
}

/// Rows of a stream, in order.
type Rows = Box<dyn Iterator<Item = Result<Row, StoreError>> + Send>;

/// Every row of `table` as `transaction` sees it, made a [`Row`] by `row` (none when the
/// table does not exist).
fn rows_of<K: Key + Send + 'static, V: Value + Send + 'static>(
    transaction: &ReadTransaction,
    table: TableDefinition<K, V>,
    row: for<'a> fn(K::SelfType<'a>, V::SelfType<'a>) -> Row,
) -> Result<Rows, StoreError> {
    let table = match transaction.open_table(table) {
        Ok(table) => table,
        Err(TableError::TableDoesNotExist(_)) => return Ok(Box::new(std::iter::empty())),
        Err(error) => return Err(io(error)),
    };
    let range = table.range::<K::SelfType<'static>>(..).map_err(io)?;
    Ok(Box::new(range.map(move |entry| {
        let (key, value) = entry.map_err(io)?;
        Ok(row(key.value(), value.value()))
    })))
}

/// Whether `bytes` start a stream of rows (its apply count first), not a whole image of
/// `checkpoint`'s (a MessagePack array of tables), as a move's fill of an earlier build is.
pub(super) fn is_stream(bytes: &[u8]) -> bool {
    let mut cursor = std::io::Cursor::new(bytes);
    let first = Row::deserialize(&mut rmp_serde::Deserializer::new(&mut cursor));
    matches!(first, Ok(Row::Applied(_)))
}

/// Reads a partition's image as a stream, from the state a read transaction pins.
pub struct ImageRows {
    rows: Rows,
    /// Encoded rows not yet read out: at most a read's worth and one row.
    pending: Vec<u8>,
}

impl ImageRows {
    /// The image of the state `store` holds now, after `applied` requests.
    pub(super) fn open(store: &StateStore, applied: u64) -> Result<ImageRows, StoreError> {
        let transaction = store.database().begin_read().map_err(io)?;
        let tables: Vec<Rows> = vec![
            Box::new(std::iter::once(Ok(Row::Applied(applied)))),
            rows_of(&transaction, ENTITY_STATE, |(t, y, i, k), v| {
                Row::State(owned(t, y, i), k.into(), ByteBuf::from(v.to_vec()))
            })?,
            rows_of(&transaction, ENTITY_META, |(t, y, i), (version, bytes)| {
                Row::Meta(owned(t, y, i), version, bytes)
            })?,
            rows_of(
                &transaction,
                OUTBOX,
                |(t, y, i, seq), (to_type, to_id, p)| {
                    let payload = ByteBuf::from(p.to_vec());
                    Row::Outbox(owned(t, y, i), seq, to_type.into(), to_id.into(), payload)
                },
            )?,
            rows_of(&transaction, RECEIPTS, |(t, y, i, st, si), (seq, at_ms)| {
                Row::Receipt(owned(t, y, i), st.into(), si.into(), seq, at_ms)
            })?,
            rows_of(&transaction, CLIENT_KEYS, |(t, y, i, key), at_ms| {
                Row::ClientKey(owned(t, y, i), key.into(), at_ms)
            })?,
            rows_of(&transaction, REMINDERS, |(t, y, i, timer), (due_ms, p)| {
                Row::Reminder(owned(t, y, i), timer, due_ms, ByteBuf::from(p.to_vec()))
            })?,
            rows_of(&transaction, SEQUENCES, |(t, y, i), counters| {
                Row::Sequences(owned(t, y, i), counters)
            })?,
            rows_of(&transaction, STAMPS, |(t, y, i), stamp| {
                Row::Stamp(owned(t, y, i), stamp)
            })?,
            rows_of(&transaction, REMEMBERED_ENTITIES, |(t, y, shard, i), ()| {
                Row::Remembered(t.into(), y.into(), shard, i.into())
            })?,
            rows_of(
                &transaction,
                SHARD_TRANSFER_CHUNKS,
                |(t, y, i, k, at), v| {
                    Row::RestoredPiece(owned(t, y, i), k.into(), at, ByteBuf::from(v.to_vec()))
                },
            )?,
            rows_of(&transaction, MOVE_PHASE, |key, code| {
                Row::Phase(key.into(), code)
            })?,
            rows_of(&transaction, MOVE_PIECES, |(checksum, index), v| {
                Row::FillPiece(checksum, index, ByteBuf::from(v.to_vec()))
            })?,
        ];
        Ok(ImageRows {
            rows: Box::new(tables.into_iter().flatten()),
            pending: Vec::new(),
        })
    }
}

impl ImageReader for ImageRows {
    fn read(&mut self, max: usize) -> Result<Vec<u8>, String> {
        while self.pending.len() < max {
            let Some(row) = self.rows.next() else {
                break;
            };
            let row = row.map_err(|error| error.to_string())?;
            rmp_serde::encode::write(&mut self.pending, &row).map_err(|error| error.to_string())?;
        }
        let take = max.min(self.pending.len());
        Ok(self.pending.drain(..take).collect())
    }
}

/// An entity's key in a table: `(tenant, type, id)`.
type EntityKey<'a> = (&'a str, &'a str, &'a str);
/// An entity's key and a `u64` (an outbox seq, a timer).
type EntityKeyAnd<'a, T> = (&'a str, &'a str, &'a str, T);
/// An entity's key and a sender's `(type, id)`.
type ReceiptKey<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str);
/// `(target type, target id, payload)`.
type OutboxValue<'a> = (&'a str, &'a str, &'a [u8]);

/// The staged copies of the live tables, by the live table's name.
const STAGED_STATE: TableDefinition<(&str, &str, &str, &str), &[u8]> =
    TableDefinition::new("image_staging.entity_state");
const STAGED_META: TableDefinition<(&str, &str, &str), (u32, u64)> =
    TableDefinition::new("image_staging.entity_meta");
const STAGED_OUTBOX: TableDefinition<EntityKeyAnd<u64>, OutboxValue> =
    TableDefinition::new("image_staging.outbox");
const STAGED_RECEIPTS: TableDefinition<ReceiptKey, (u64, u64)> =
    TableDefinition::new("image_staging.receipts");
const STAGED_CLIENT_KEYS: TableDefinition<(&str, &str, &str, &str), u64> =
    TableDefinition::new("image_staging.client_keys");
const STAGED_REMINDERS: TableDefinition<EntityKeyAnd<u64>, (u64, &[u8])> =
    TableDefinition::new("image_staging.reminders");
const STAGED_REMINDERS_DUE: TableDefinition<(u64, &str, &str, &str, u64), ()> =
    TableDefinition::new("image_staging.reminders_due");
const STAGED_SEQUENCES: TableDefinition<EntityKey, (u64, u64, u64, u64)> =
    TableDefinition::new("image_staging.entity_sequences");
const STAGED_STAMPS: TableDefinition<(&str, &str, &str), u64> =
    TableDefinition::new("image_staging.partition_stamps");
const STAGED_REMEMBERED: TableDefinition<(&str, &str, u32, &str), ()> =
    TableDefinition::new("image_staging.remembered_entities");
const STAGED_RESTORED_PIECES: TableDefinition<(&str, &str, &str, &str, u64), &[u8]> =
    TableDefinition::new("image_staging.shard_transfer_chunks");
const STAGED_PHASE: TableDefinition<&str, u64> =
    TableDefinition::new("image_staging.partition_phase");
const STAGED_FILL_PIECES: TableDefinition<(u64, u32), &[u8]> =
    TableDefinition::new("image_staging.partition_fill_pieces");
/// The staged image's apply count, once its first row is in.
const STAGED_APPLIED: TableDefinition<(), u64> = TableDefinition::new("image_staging.applied");

/// Applies `each` to every staged table and the live table it replaces.
macro_rules! for_each_table {
    ($each:ident) => {
        $each!(STAGED_STATE, ENTITY_STATE);
        $each!(STAGED_META, ENTITY_META);
        $each!(STAGED_OUTBOX, OUTBOX);
        $each!(STAGED_RECEIPTS, RECEIPTS);
        $each!(STAGED_CLIENT_KEYS, CLIENT_KEYS);
        $each!(STAGED_REMINDERS, REMINDERS);
        $each!(STAGED_REMINDERS_DUE, REMINDERS_DUE);
        $each!(STAGED_SEQUENCES, SEQUENCES);
        $each!(STAGED_STAMPS, STAMPS);
        $each!(STAGED_REMEMBERED, REMEMBERED_ENTITIES);
        $each!(STAGED_RESTORED_PIECES, SHARD_TRANSFER_CHUNKS);
        $each!(STAGED_PHASE, MOVE_PHASE);
        $each!(STAGED_FILL_PIECES, MOVE_PIECES);
    };
}

/// Drops the staged tables inside `transaction`.
fn drop_staged(transaction: &WriteTransaction) -> Result<(), StoreError> {
    macro_rules! drop_one {
        ($staged:ident, $live:ident) => {
            transaction.delete_table($staged).map_err(io)?;
        };
    }
    for_each_table!(drop_one);
    transaction.delete_table(STAGED_APPLIED).map_err(io)?;
    Ok(())
}

/// An image being staged, on the receiving replica: the bytes of a row not yet whole.
#[derive(Debug, Default)]
pub(super) struct Staging {
    pending: Vec<u8>,
    /// Stream bytes taken so far.
    taken: u64,
}

impl Staging {
    /// Drops whatever was staged.
    pub(super) fn clear(&mut self, store: &StateStore) -> Result<(), StoreError> {
        let transaction = begin(store)?;
        drop_staged(&transaction)?;
        transaction.commit().map_err(io)?;
        *self = Staging::default();
        Ok(())
    }

    /// Takes the stream's bytes at `offset` (0: a new image, whatever was staged is
    /// dropped), writing every row they complete into the staged tables. The live tables are
    /// not touched. Bytes that do not decode, or do not follow what was taken, are refused.
    pub(super) fn stage(
        &mut self,
        store: &StateStore,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), RestoreError> {
        let storage = |error: StoreError| RestoreError::Malformed(format!("storage: {error}"));
        let transaction = begin(store).map_err(storage)?;
        if offset == 0 {
            *self = Staging::default();
            drop_staged(&transaction).map_err(storage)?;
        } else if offset != self.taken {
            return Err(RestoreError::Malformed(format!(
                "image bytes at {offset} where {} were taken",
                self.taken
            )));
        }
        self.pending.extend_from_slice(bytes);
        self.taken += bytes.len() as u64;
        let mut used = 0;
        loop {
            let mut cursor = std::io::Cursor::new(&self.pending[used..]);
            match Row::deserialize(&mut rmp_serde::Deserializer::new(&mut cursor)) {
                Ok(row) => {
                    used += cursor.position() as usize;
                    write_row(&transaction, row).map_err(storage)?;
                }
                Err(error) if cut_short(&error) => break,
                Err(error) => return Err(RestoreError::Malformed(error.to_string())),
            }
        }
        self.pending.drain(..used);
        if self.pending.len() > PENDING_ROW_BYTES_MAX {
            return Err(RestoreError::Malformed(format!(
                "an image row longer than {PENDING_ROW_BYTES_MAX} bytes"
            )));
        }
        transaction.commit().map_err(io).map_err(storage)
    }

    /// Swaps the staged tables in for the live ones; the image's apply count. A stream cut
    /// short (a row unfinished, or no apply count) is refused and changes nothing.
    pub(super) fn install(&mut self, store: &StateStore) -> Result<u64, RestoreError> {
        let storage = |error: StoreError| RestoreError::Malformed(format!("storage: {error}"));
        if !self.pending.is_empty() {
            return Err(RestoreError::Malformed(
                "the image ends inside a row".into(),
            ));
        }
        let transaction = begin(store).map_err(storage)?;
        let applied = match transaction.open_table(STAGED_APPLIED) {
            Ok(table) => table
                .get(())
                .map_err(io)
                .map_err(storage)?
                .map(|count| count.value()),
            Err(error) => return Err(storage(io(error))),
        };
        let Some(applied) = applied else {
            return Err(RestoreError::Malformed(
                "the image has no apply count".into(),
            ));
        };
        macro_rules! swap_one {
            ($staged:ident, $live:ident) => {
                transaction
                    .open_table($staged)
                    .map_err(io)
                    .map_err(storage)?;
                transaction
                    .delete_table($live)
                    .map_err(io)
                    .map_err(storage)?;
                transaction
                    .rename_table($staged, $live)
                    .map_err(io)
                    .map_err(storage)?;
            };
        }
        for_each_table!(swap_one);
        transaction
            .delete_table(STAGED_APPLIED)
            .map_err(io)
            .map_err(storage)?;
        transaction.commit().map_err(io).map_err(storage)?;
        *self = Staging::default();
        Ok(applied)
    }
}

fn begin(store: &StateStore) -> Result<WriteTransaction, StoreError> {
    let mut transaction = store.database().begin_write().map_err(io)?;
    transaction.set_durability(Durability::None).map_err(io)?;
    Ok(transaction)
}

/// Whether a decode failed only because the bytes end inside a value.
fn cut_short(error: &rmp_serde::decode::Error) -> bool {
    use rmp_serde::decode::Error;
    match error {
        Error::InvalidMarkerRead(error) | Error::InvalidDataRead(error) => {
            error.kind() == std::io::ErrorKind::UnexpectedEof
        }
        _ => false,
    }
}

/// Writes one row into its staged table inside `transaction`.
fn write_row(transaction: &WriteTransaction, row: Row) -> Result<(), StoreError> {
    match row {
        Row::Applied(applied) => {
            let mut staged = transaction.open_table(STAGED_APPLIED).map_err(io)?;
            staged.insert((), applied).map_err(io)?;
        }
        Row::State((t, y, i), key, value) => {
            let mut staged = transaction.open_table(STAGED_STATE).map_err(io)?;
            let row = (t.as_str(), y.as_str(), i.as_str(), key.as_str());
            staged.insert(row, value.as_slice()).map_err(io)?;
        }
        Row::Meta((t, y, i), version, bytes) => {
            let mut staged = transaction.open_table(STAGED_META).map_err(io)?;
            let row = (t.as_str(), y.as_str(), i.as_str());
            staged.insert(row, (version, bytes)).map_err(io)?;
        }
        Row::Outbox((t, y, i), seq, to_type, to_id, payload) => {
            let mut staged = transaction.open_table(STAGED_OUTBOX).map_err(io)?;
            let row = (t.as_str(), y.as_str(), i.as_str(), seq);
            let value = (to_type.as_str(), to_id.as_str(), payload.as_slice());
            staged.insert(row, value).map_err(io)?;
        }
        Row::Receipt((t, y, i), sender_type, sender_id, seq, at_ms) => {
            let mut staged = transaction.open_table(STAGED_RECEIPTS).map_err(io)?;
            let row = (
                t.as_str(),
                y.as_str(),
                i.as_str(),
                sender_type.as_str(),
                sender_id.as_str(),
            );
            staged.insert(row, (seq, at_ms)).map_err(io)?;
        }
        Row::ClientKey((t, y, i), key, at_ms) => {
            let mut staged = transaction.open_table(STAGED_CLIENT_KEYS).map_err(io)?;
            let row = (t.as_str(), y.as_str(), i.as_str(), key.as_str());
            staged.insert(row, at_ms).map_err(io)?;
        }
        Row::Reminder((t, y, i), timer, due_ms, payload) => {
            let (t, y, i) = (t.as_str(), y.as_str(), i.as_str());
            let mut staged = transaction.open_table(STAGED_REMINDERS).map_err(io)?;
            staged
                .insert((t, y, i, timer), (due_ms, payload.as_slice()))
                .map_err(io)?;
            let mut due = transaction.open_table(STAGED_REMINDERS_DUE).map_err(io)?;
            due.insert((due_ms, t, y, i, timer), ()).map_err(io)?;
        }
        Row::Sequences((t, y, i), counters) => {
            let mut staged = transaction.open_table(STAGED_SEQUENCES).map_err(io)?;
            let row = (t.as_str(), y.as_str(), i.as_str());
            staged.insert(row, counters).map_err(io)?;
        }
        Row::Stamp((t, y, i), stamp) => {
            let mut staged = transaction.open_table(STAGED_STAMPS).map_err(io)?;
            let row = (t.as_str(), y.as_str(), i.as_str());
            staged.insert(row, stamp).map_err(io)?;
        }
        Row::Remembered(t, y, shard, i) => {
            let mut staged = transaction.open_table(STAGED_REMEMBERED).map_err(io)?;
            let row = (t.as_str(), y.as_str(), shard, i.as_str());
            staged.insert(row, ()).map_err(io)?;
        }
        Row::RestoredPiece((t, y, i), key, offset, bytes) => {
            let mut staged = transaction.open_table(STAGED_RESTORED_PIECES).map_err(io)?;
            let row = (t.as_str(), y.as_str(), i.as_str(), key.as_str(), offset);
            staged.insert(row, bytes.as_slice()).map_err(io)?;
        }
        Row::Phase(key, code) => {
            let mut staged = transaction.open_table(STAGED_PHASE).map_err(io)?;
            staged.insert(key.as_str(), code).map_err(io)?;
        }
        Row::FillPiece(checksum, index, bytes) => {
            let mut staged = transaction.open_table(STAGED_FILL_PIECES).map_err(io)?;
            staged
                .insert((checksum, index), bytes.as_slice())
                .map_err(io)?;
        }
    }
    Ok(())
}
