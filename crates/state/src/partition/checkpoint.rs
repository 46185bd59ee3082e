//! A partition machine's whole state as one checkpoint image, and back: every row of every
//! table a partition op writes (state keys, entity metadata, outbox, receipts, client keys,
//! reminders, sequence counters, stamps), in key order, so replicas in the same state encode
//! the same bytes (checkpoints are compared by checksum). The reminders' due-time index is not
//! carried: it is rebuilt from the reminders. Remembered ids (`PartitionOp::Remember`) are
//! carried too, and so are the staged pieces of a restored value larger than a part, whose
//! pieces come in several installs (a replica that installs a checkpoint between them must
//! still assemble the value when its last piece commits).
//!
//! A move's phase and staged pieces (`moving`) follow the image as a second value, only when
//! there are any.
//!
//! A replica's own checkpoints do not carry this image (`savepoint`), and a state transfer or
//! a move streams the rows instead (`image_stream`). The image is what a follower is sent
//! (`StateMachine::transfer_image`), what a checkpoint or a move's fill of an earlier build
//! holds (still restored and opened), and how tests and the simulator compare replicas. One
//! image holds the partition's whole state in memory while it is made or installed.

use super::moving::{self, MoveImage, Phase};
use super::stamps::STAMPS;
use crate::error::StoreError;
use crate::messaging::{CLIENT_KEYS, OUTBOX, RECEIPTS, REMINDERS, REMINDERS_DUE, SEQUENCES};
use crate::shard_transfer::SHARD_TRANSFER_CHUNKS;
use crate::tables::{ENTITY_META, ENTITY_STATE, REMEMBERED_ENTITIES, StateStore};
use redb::{Durability, ReadTransaction, ReadableDatabase, ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;
use tessera_consensus::state_machine::RestoreError;

/// An entity's key, owned.
type Entity = (String, String, String);

/// Every row of a partition machine, table by table, each in key order (MessagePack structs
/// are positional: a field is only ever added last, with a default).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Image {
    state: Vec<(Entity, String, ByteBuf)>,
    meta: Vec<(Entity, u32, u64)>,
    outbox: Vec<(Entity, u64, String, String, ByteBuf)>,
    receipts: Vec<(Entity, String, String, u64, u64)>,
    client_keys: Vec<(Entity, String, u64)>,
    reminders: Vec<(Entity, u64, u64, ByteBuf)>,
    sequences: Vec<(Entity, (u64, u64, u64, u64))>,
    stamps: Vec<(Entity, u64)>,
    /// `(tenant, type, shard, id)` of each remembered entity.
    #[serde(default)]
    remembered: Vec<(String, String, u32, String)>,
    /// `(entity, state key, offset, bytes)` of each staged piece of a restored value. Left
    /// out when empty (it is last), so an image without one encodes as before it existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    staged: Vec<(Entity, String, u64, ByteBuf)>,
}

fn owned(tenant: &str, entity_type: &str, id: &str) -> Entity {
    (tenant.to_string(), entity_type.to_string(), id.to_string())
}

fn io(error: impl std::fmt::Display) -> StoreError {
    StoreError::io(error)
}

/// Reads every row into an image and encodes it.
pub(super) fn encode(store: &StateStore) -> Result<Vec<u8>, StoreError> {
    let transaction = store.database().begin_read().map_err(io)?;
    encode_from(&transaction)
}

/// Reads every row `transaction` sees into an image and encodes it.
pub(super) fn encode_from(transaction: &ReadTransaction) -> Result<Vec<u8>, StoreError> {
    let mut image = Image::default();
    for row in transaction
        .open_table(ENTITY_STATE)
        .map_err(io)?
        .iter()
        .map_err(io)?
    {
        let (key, value) = row.map_err(io)?;
        let (tenant, entity_type, id, state_key) = key.value();
        let value = ByteBuf::from(value.value().to_vec());
        let entity = owned(tenant, entity_type, id);
        image.state.push((entity, state_key.to_string(), value));
    }
    for row in transaction
        .open_table(ENTITY_META)
        .map_err(io)?
        .iter()
        .map_err(io)?
    {
        let (key, value) = row.map_err(io)?;
        let (tenant, entity_type, id) = key.value();
        let (version, bytes) = value.value();
        image
            .meta
            .push((owned(tenant, entity_type, id), version, bytes));
    }
    for row in transaction
        .open_table(OUTBOX)
        .map_err(io)?
        .iter()
        .map_err(io)?
    {
        let (key, value) = row.map_err(io)?;
        let (tenant, entity_type, id, seq) = key.value();
        let (to_type, to_id, payload) = value.value();
        image.outbox.push((
            owned(tenant, entity_type, id),
            seq,
            to_type.to_string(),
            to_id.to_string(),
            ByteBuf::from(payload.to_vec()),
        ));
    }
    for row in transaction
        .open_table(RECEIPTS)
        .map_err(io)?
        .iter()
        .map_err(io)?
    {
        let (key, value) = row.map_err(io)?;
        let (tenant, entity_type, id, sender_type, sender_id) = key.value();
        let (seq, at_ms) = value.value();
        image.receipts.push((
            owned(tenant, entity_type, id),
            sender_type.to_string(),
            sender_id.to_string(),
            seq,
            at_ms,
        ));
    }
    for row in transaction
        .open_table(CLIENT_KEYS)
        .map_err(io)?
        .iter()
        .map_err(io)?
    {
        let (key, value) = row.map_err(io)?;
        let (tenant, entity_type, id, client_key) = key.value();
        let entity = owned(tenant, entity_type, id);
        image
            .client_keys
            .push((entity, client_key.to_string(), value.value()));
    }
    for row in transaction
        .open_table(REMINDERS)
        .map_err(io)?
        .iter()
        .map_err(io)?
    {
        let (key, value) = row.map_err(io)?;
        let (tenant, entity_type, id, timer) = key.value();
        let (due_ms, payload) = value.value();
        let payload = ByteBuf::from(payload.to_vec());
        let entity = owned(tenant, entity_type, id);
        image.reminders.push((entity, timer, due_ms, payload));
    }
    for row in transaction
        .open_table(SEQUENCES)
        .map_err(io)?
        .iter()
        .map_err(io)?
    {
        let (key, value) = row.map_err(io)?;
        let (tenant, entity_type, id) = key.value();
        image
            .sequences
            .push((owned(tenant, entity_type, id), value.value()));
    }
    for row in transaction
        .open_table(STAMPS)
        .map_err(io)?
        .iter()
        .map_err(io)?
    {
        let (key, value) = row.map_err(io)?;
        let (tenant, entity_type, id) = key.value();
        image
            .stamps
            .push((owned(tenant, entity_type, id), value.value()));
    }
    for row in transaction
        .open_table(REMEMBERED_ENTITIES)
        .map_err(io)?
        .iter()
        .map_err(io)?
    {
        let (key, _) = row.map_err(io)?;
        let (tenant, entity_type, shard, id) = key.value();
        image.remembered.push((
            tenant.to_string(),
            entity_type.to_string(),
            shard,
            id.to_string(),
        ));
    }
    for row in transaction
        .open_table(SHARD_TRANSFER_CHUNKS)
        .map_err(io)?
        .iter()
        .map_err(io)?
    {
        let (key, value) = row.map_err(io)?;
        let (tenant, entity_type, id, state_key, offset) = key.value();
        image.staged.push((
            owned(tenant, entity_type, id),
            state_key.to_string(),
            offset,
            ByteBuf::from(value.value().to_vec()),
        ));
    }
    let mut bytes = rmp_serde::to_vec(&image).map_err(io)?;
    if let Some(moving) = MoveImage::read(transaction)? {
        bytes.extend(rmp_serde::to_vec(&moving).map_err(io)?);
    }
    Ok(bytes)
}

/// Empties every table a partition op writes, inside `transaction`.
fn clear_tables(transaction: &WriteTransaction) -> Result<(), StoreError> {
    transaction.delete_table(ENTITY_STATE).map_err(io)?;
    transaction.delete_table(ENTITY_META).map_err(io)?;
    transaction.delete_table(OUTBOX).map_err(io)?;
    transaction.delete_table(RECEIPTS).map_err(io)?;
    transaction.delete_table(CLIENT_KEYS).map_err(io)?;
    transaction.delete_table(REMINDERS).map_err(io)?;
    transaction.delete_table(REMINDERS_DUE).map_err(io)?;
    transaction.delete_table(SEQUENCES).map_err(io)?;
    transaction.delete_table(STAMPS).map_err(io)?;
    transaction.delete_table(REMEMBERED_ENTITIES).map_err(io)?;
    transaction
        .delete_table(SHARD_TRANSFER_CHUNKS)
        .map_err(io)?;
    transaction.open_table(ENTITY_STATE).map_err(io)?;
    transaction.open_table(ENTITY_META).map_err(io)?;
    crate::messaging::create_tables(transaction)?;
    transaction.open_table(STAMPS).map_err(io)?;
    transaction.open_table(REMEMBERED_ENTITIES).map_err(io)?;
    transaction.open_table(SHARD_TRANSFER_CHUNKS).map_err(io)?;
    moving::reset(transaction, Phase::Serving)
}

/// Removes every row, leaving the machine in `phase` (see [`super::PartitionMachine::clear`]).
pub(super) fn clear(store: &StateStore, phase: Phase) -> Result<(), StoreError> {
    let mut transaction = store.database().begin_write().map_err(io)?;
    transaction.set_durability(Durability::None).map_err(io)?;
    clear_tables(&transaction)?;
    moving::set_phase(&transaction, phase)?;
    transaction.commit().map_err(io)
}

/// Replaces every row with the image's; on an image that does not decode, changes nothing.
/// The phase the machine is in afterwards.
pub(super) fn restore(store: &StateStore, bytes: &[u8]) -> Result<Phase, RestoreError> {
    let storage = |error: StoreError| RestoreError::Malformed(format!("storage: {error}"));
    let mut transaction = store
        .database()
        .begin_write()
        .map_err(io)
        .map_err(storage)?;
    transaction
        .set_durability(Durability::None)
        .map_err(io)
        .map_err(storage)?;
    let phase = restore_into(&transaction, bytes)?;
    transaction.commit().map_err(io).map_err(storage)?;
    Ok(phase)
}

/// Replaces every row with the image's inside `transaction` (which the caller drops on an
/// error, changing nothing); the phase the image leaves the machine in.
pub(super) fn restore_into(
    transaction: &WriteTransaction,
    bytes: &[u8],
) -> Result<Phase, RestoreError> {
    let malformed = |error: rmp_serde::decode::Error| RestoreError::Malformed(error.to_string());
    let storage = |error: StoreError| RestoreError::Malformed(format!("storage: {error}"));
    let mut cursor = std::io::Cursor::new(bytes);
    let image =
        Image::deserialize(&mut rmp_serde::Deserializer::new(&mut cursor)).map_err(malformed)?;
    let rest = bytes.get(cursor.position() as usize..).unwrap_or_default();
    let moving: Option<MoveImage> = if rest.is_empty() {
        None
    } else {
        Some(rmp_serde::from_slice(rest).map_err(malformed)?)
    };
    clear_tables(transaction).map_err(storage)?;
    install(transaction, &image).map_err(storage)?;
    match moving {
        Some(moving) => {
            moving.install(transaction).map_err(storage)?;
            Ok(moving.phase())
        }
        None => Ok(Phase::Serving),
    }
}

fn install(transaction: &WriteTransaction, image: &Image) -> Result<(), StoreError> {
    let mut state = transaction.open_table(ENTITY_STATE).map_err(io)?;
    for ((tenant, entity_type, id), key, value) in &image.state {
        let row = (
            tenant.as_str(),
            entity_type.as_str(),
            id.as_str(),
            key.as_str(),
        );
        state.insert(row, value.as_slice()).map_err(io)?;
    }
    let mut meta = transaction.open_table(ENTITY_META).map_err(io)?;
    for ((tenant, entity_type, id), version, bytes) in &image.meta {
        let row = (tenant.as_str(), entity_type.as_str(), id.as_str());
        meta.insert(row, (*version, *bytes)).map_err(io)?;
    }
    let mut outbox = transaction.open_table(OUTBOX).map_err(io)?;
    for ((tenant, entity_type, id), seq, to_type, to_id, payload) in &image.outbox {
        let row = (tenant.as_str(), entity_type.as_str(), id.as_str(), *seq);
        let value = (to_type.as_str(), to_id.as_str(), payload.as_slice());
        outbox.insert(row, value).map_err(io)?;
    }
    let mut receipts = transaction.open_table(RECEIPTS).map_err(io)?;
    for ((tenant, entity_type, id), sender_type, sender_id, seq, at_ms) in &image.receipts {
        let row = (
            tenant.as_str(),
            entity_type.as_str(),
            id.as_str(),
            sender_type.as_str(),
            sender_id.as_str(),
        );
        receipts.insert(row, (*seq, *at_ms)).map_err(io)?;
    }
    let mut client_keys = transaction.open_table(CLIENT_KEYS).map_err(io)?;
    for ((tenant, entity_type, id), key, at_ms) in &image.client_keys {
        let row = (
            tenant.as_str(),
            entity_type.as_str(),
            id.as_str(),
            key.as_str(),
        );
        client_keys.insert(row, *at_ms).map_err(io)?;
    }
    let mut reminders = transaction.open_table(REMINDERS).map_err(io)?;
    let mut due = transaction.open_table(REMINDERS_DUE).map_err(io)?;
    for ((tenant, entity_type, id), timer, due_ms, payload) in &image.reminders {
        let (tenant, entity_type, id) = (tenant.as_str(), entity_type.as_str(), id.as_str());
        let row = (tenant, entity_type, id, *timer);
        reminders
            .insert(row, (*due_ms, payload.as_slice()))
            .map_err(io)?;
        due.insert((*due_ms, tenant, entity_type, id, *timer), ())
            .map_err(io)?;
    }
    let mut sequences = transaction.open_table(SEQUENCES).map_err(io)?;
    for ((tenant, entity_type, id), counters) in &image.sequences {
        let row = (tenant.as_str(), entity_type.as_str(), id.as_str());
        sequences.insert(row, *counters).map_err(io)?;
    }
    let mut stamps = transaction.open_table(STAMPS).map_err(io)?;
    for ((tenant, entity_type, id), stamp) in &image.stamps {
        let row = (tenant.as_str(), entity_type.as_str(), id.as_str());
        stamps.insert(row, *stamp).map_err(io)?;
    }
    let mut remembered = transaction.open_table(REMEMBERED_ENTITIES).map_err(io)?;
    for (tenant, entity_type, shard, id) in &image.remembered {
        let row = (tenant.as_str(), entity_type.as_str(), *shard, id.as_str());
        remembered.insert(row, ()).map_err(io)?;
    }
    let mut staged = transaction.open_table(SHARD_TRANSFER_CHUNKS).map_err(io)?;
    for ((tenant, entity_type, id), state_key, offset, bytes) in &image.staged {
        let row = (
            tenant.as_str(),
            entity_type.as_str(),
            id.as_str(),
            state_key.as_str(),
            *offset,
        );
        staged.insert(row, bytes.as_slice()).map_err(io)?;
    }
    Ok(())
}
