//! Writing a shard's rows: installing a part that arrived, and discarding a shard that left.
//! Part 0 of a move clears the shard and marks the move installing; later parts add rows; the
//! last one makes the move the shard's lineage. A shard this node starts serving while a move
//! to it is still installing (its last part never came) starts from empty, never from the
//! parts that did.

use super::chunks::{self, SHARD_TRANSFER_CHUNKS};
use super::{ShardPart, ShardScope, io};
use crate::error::StoreError;
use crate::messaging::{CLIENT_KEYS, OUTBOX, RECEIPTS, REMINDERS, REMINDERS_DUE, SEQUENCES};
use crate::tables::{ENTITY_META, ENTITY_STATE, REMEMBERED_ENTITIES};
use redb::{ReadableTable, TableDefinition, WriteTransaction};

/// The newest move whose every part this node installed, per shard:
/// `(tenant, type, shard) -> generation`.
pub(crate) const SHARD_ARRIVALS: TableDefinition<(&str, &str, u32), u64> =
    TableDefinition::new("shard_arrivals");

/// The generation whose state this node's rows of a shard hold, per shard:
/// `(tenant, type, shard) -> generation` — set when a move's last part is installed, and when
/// the node starts serving the shard from its own rows ([`begin_lineage`]).
pub(crate) const SHARD_LINEAGES: TableDefinition<(&str, &str, u32), u64> =
    TableDefinition::new("shard_lineages");

/// The move whose parts are arriving, per shard: `(tenant, type, shard) -> generation` — set by
/// its part 0, removed by its last part (or when the node starts serving the shard).
pub(crate) const SHARD_INSTALLING: TableDefinition<(&str, &str, u32), u64> =
    TableDefinition::new("shard_installing");

/// The node starts serving the shard at `generation`. Rows held for an older generation — an
/// earlier ownership whose discard was lost in a crash, parts of a move that was sent elsewhere
/// — are not this lineage's: they go, and the shard starts from what its owner installed or
/// from empty; so do the parts of a move at this generation or before that never completed.
/// Rows of this generation or a later one (a restart; a move installed) stay, and so do the
/// parts of a later move still arriving. A shard with no record (rows written before records
/// were kept) keeps its rows.
pub(crate) fn begin_lineage(
    transaction: &WriteTransaction,
    scope: &ShardScope,
    generation: u64,
) -> Result<(), StoreError> {
    let row = (
        scope.type_key.tenant.as_str(),
        scope.type_key.entity_type.as_str(),
        scope.shard,
    );
    let (held, installing) = {
        let lineages = transaction.open_table(SHARD_LINEAGES).map_err(io)?;
        let arrivals = transaction.open_table(SHARD_ARRIVALS).map_err(io)?;
        let installing = transaction.open_table(SHARD_INSTALLING).map_err(io)?;
        let lineage = lineages.get(row).map_err(io)?.map(|guard| guard.value());
        let arrived = arrivals.get(row).map_err(io)?.map(|guard| guard.value());
        let installing = installing.get(row).map_err(io)?.map(|guard| guard.value());
        (lineage.max(arrived), installing)
    };
    if installing.is_some_and(|installing| installing > generation) {
        return Ok(());
    }
    if installing.is_none() && held.is_some_and(|held| held >= generation) {
        return Ok(());
    }
    if held.is_some() || installing.is_some() {
        discard(transaction, scope)?;
    }
    transaction
        .open_table(SHARD_LINEAGES)
        .map_err(io)?
        .insert(row, generation)
        .map_err(io)?;
    Ok(())
}

/// Removes every row of the shard's entities, its remembered ids, the pieces of values staged
/// for it and its mark of a move installing: each table is walked over the type's key range
/// only (`past` is the first type name after it) and keeps the rows of other shards.
pub(crate) fn discard(
    transaction: &WriteTransaction,
    scope: &ShardScope,
) -> Result<(), StoreError> {
    let tenant = scope.type_key.tenant.as_str();
    let entity_type = scope.type_key.entity_type.as_str();
    let past = format!("{entity_type}\0");
    let past = past.as_str();
    let keep = |id: &str| !(scope.contains)(id);
    transaction
        .open_table(ENTITY_META)
        .map_err(io)?
        .retain_in((tenant, entity_type, "")..(tenant, past, ""), |key, _| {
            keep(key.2)
        })
        .map_err(io)?;
    transaction
        .open_table(SEQUENCES)
        .map_err(io)?
        .retain_in((tenant, entity_type, "")..(tenant, past, ""), |key, _| {
            keep(key.2)
        })
        .map_err(io)?;
    transaction
        .open_table(ENTITY_STATE)
        .map_err(io)?
        .retain_in(
            (tenant, entity_type, "", "")..(tenant, past, "", ""),
            |key, _| keep(key.2),
        )
        .map_err(io)?;
    transaction
        .open_table(OUTBOX)
        .map_err(io)?
        .retain_in(
            (tenant, entity_type, "", 0)..(tenant, past, "", 0),
            |key, _| keep(key.2),
        )
        .map_err(io)?;
    transaction
        .open_table(RECEIPTS)
        .map_err(io)?
        .retain_in(
            (tenant, entity_type, "", "", "")..(tenant, past, "", "", ""),
            |key, _| keep(key.2),
        )
        .map_err(io)?;
    transaction
        .open_table(CLIENT_KEYS)
        .map_err(io)?
        .retain_in(
            (tenant, entity_type, "", "")..(tenant, past, "", ""),
            |key, _| keep(key.2),
        )
        .map_err(io)?;
    // A reminder goes from both of its tables: the due-time index is keyed by when it fires.
    let mut due_keys = Vec::new();
    {
        let mut reminders = transaction.open_table(REMINDERS).map_err(io)?;
        let range = (tenant, entity_type, "", 0)..(tenant, past, "", 0);
        for removed in reminders
            .extract_from_if(range, |key, _| !keep(key.2))
            .map_err(io)?
        {
            let (key, value) = removed.map_err(io)?;
            let (_, _, id, timer) = key.value();
            due_keys.push((value.value().0, id.to_string(), timer));
        }
    }
    let mut due = transaction.open_table(REMINDERS_DUE).map_err(io)?;
    for (due_ms, id, timer) in due_keys {
        due.remove((due_ms, tenant, entity_type, id.as_str(), timer))
            .map_err(io)?;
    }
    transaction
        .open_table(REMEMBERED_ENTITIES)
        .map_err(io)?
        .retain_in(
            (tenant, entity_type, scope.shard, "")..(tenant, past, 0, ""),
            |key, _| key.1 != entity_type || key.2 != scope.shard,
        )
        .map_err(io)?;
    chunks::clear(transaction, scope, past)?;
    transaction
        .open_table(SHARD_INSTALLING)
        .map_err(io)?
        .remove((tenant, entity_type, scope.shard))
        .map_err(io)?;
    Ok(())
}

/// Installs one part (checked against its scope by [`ShardPart::check`] before it reached the
/// writer): part 0 first discards whatever this node held for the shard; a later part is
/// refused unless part 0 of the same move came first; the last part completes the move.
pub(crate) fn install(
    transaction: &WriteTransaction,
    scope: &ShardScope,
    generation: u64,
    part: &ShardPart,
) -> Result<(), StoreError> {
    let tenant = scope.type_key.tenant.as_str();
    let entity_type = scope.type_key.entity_type.as_str();
    let row = (tenant, entity_type, scope.shard);
    let arrived = transaction
        .open_table(SHARD_ARRIVALS)
        .map_err(io)?
        .get(row)
        .map_err(io)?
        .map(|guard| guard.value());
    if arrived.is_some_and(|arrived| arrived >= generation) {
        return Ok(());
    }
    if part.index == 0 {
        discard(transaction, scope)?;
        transaction
            .open_table(SHARD_INSTALLING)
            .map_err(io)?
            .insert(row, generation)
            .map_err(io)?;
    } else {
        let installing = transaction
            .open_table(SHARD_INSTALLING)
            .map_err(io)?
            .get(row)
            .map_err(io)?
            .map(|guard| guard.value());
        if installing != Some(generation) {
            return Err(StoreError::Io(format!(
                "part {} of move {generation} of {scope:?} came without its part 0",
                part.index
            )));
        }
    }
    // Staged pieces stay until the move's last part: a part sent again finds them.
    install_rows(transaction, scope, part)?;
    if part.last {
        transaction
            .open_table(SHARD_ARRIVALS)
            .map_err(io)?
            .insert(row, generation)
            .map_err(io)?;
        transaction
            .open_table(SHARD_LINEAGES)
            .map_err(io)?
            .insert(row, generation)
            .map_err(io)?;
        transaction
            .open_table(SHARD_INSTALLING)
            .map_err(io)?
            .remove(row)
            .map_err(io)?;
        chunks::clear(transaction, scope, &format!("{entity_type}\0"))?;
    }
    Ok(())
}

/// Writes the part's rows; a chunk is staged, and its value written once whole. Returns the
/// `(id, state key)` of each value written whole by this part.
pub(crate) fn install_rows(
    transaction: &WriteTransaction,
    scope: &ShardScope,
    part: &ShardPart,
) -> Result<Vec<(String, String)>, StoreError> {
    let tenant = scope.type_key.tenant.as_str();
    let entity_type = scope.type_key.entity_type.as_str();
    let mut metas = transaction.open_table(ENTITY_META).map_err(io)?;
    let mut state = transaction.open_table(ENTITY_STATE).map_err(io)?;
    let mut sequences = transaction.open_table(SEQUENCES).map_err(io)?;
    let mut outbox = transaction.open_table(OUTBOX).map_err(io)?;
    let mut receipts = transaction.open_table(RECEIPTS).map_err(io)?;
    let mut client_keys = transaction.open_table(CLIENT_KEYS).map_err(io)?;
    let mut reminders = transaction.open_table(REMINDERS).map_err(io)?;
    let mut due = transaction.open_table(REMINDERS_DUE).map_err(io)?;
    let mut remembered = transaction.open_table(REMEMBERED_ENTITIES).map_err(io)?;
    let mut staged = transaction.open_table(SHARD_TRANSFER_CHUNKS).map_err(io)?;
    let mut assembled = Vec::new();
    for record in &part.entities {
        let id = record.id.as_str();
        if let Some(meta) = record.meta {
            metas.insert((tenant, entity_type, id), meta).map_err(io)?;
        }
        for row in &record.state {
            state
                .insert(
                    (tenant, entity_type, id, row.key.as_str()),
                    row.value.as_slice(),
                )
                .map_err(io)?;
        }
        if let Some(counters) = record.sequences {
            sequences
                .insert((tenant, entity_type, id), counters)
                .map_err(io)?;
        }
        for row in &record.outbox {
            let value = (
                row.to_type.as_str(),
                row.to_id.as_str(),
                row.payload.as_slice(),
            );
            outbox
                .insert((tenant, entity_type, id, row.seq), value)
                .map_err(io)?;
        }
        for row in &record.receipts {
            let key = (
                tenant,
                entity_type,
                id,
                row.sender_type.as_str(),
                row.sender_id.as_str(),
            );
            receipts.insert(key, (row.seq, row.at_ms)).map_err(io)?;
        }
        for (client_key, at_ms) in &record.client_keys {
            client_keys
                .insert((tenant, entity_type, id, client_key.as_str()), *at_ms)
                .map_err(io)?;
        }
        for row in &record.reminders {
            reminders
                .insert(
                    (tenant, entity_type, id, row.timer),
                    (row.due_ms, row.payload.as_slice()),
                )
                .map_err(io)?;
            due.insert((row.due_ms, tenant, entity_type, id, row.timer), ())
                .map_err(io)?;
        }
        for chunk in &record.chunks {
            if chunks::stage(&mut staged, &mut state, (tenant, entity_type, id), chunk)? {
                assembled.push((record.id.clone(), chunk.key.clone()));
            }
        }
    }
    for id in &part.remembered {
        remembered
            .insert((tenant, entity_type, scope.shard, id.as_str()), ())
            .map_err(io)?;
    }
    Ok(assembled)
}
