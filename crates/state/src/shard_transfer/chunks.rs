//! State values too large for one part, on the receiving side: each [`ValueChunk`] is staged in a
//! table of its own, keyed by where it starts in its value, and once the staged pieces cover the
//! whole value (checked when its final piece arrives) it is written to the entity's state in
//! place, piece by piece. Staging by offset makes a piece installed twice (a part sent again)
//! harmless; the staged pieces go when the move's last part is installed or the shard's rows
//! are discarded. A peer's pieces are checked to lie within their value before they are staged
//! ([`is_within`]), and a value is reserved only once every byte of it is staged.

use super::{ShardScope, ValueChunk, io};
use crate::error::StoreError;
use redb::{ReadableTable, Table, TableDefinition, WriteTransaction};

/// Pieces of values in transit: `(tenant, type, id, state key, offset) -> bytes`.
pub(crate) const SHARD_TRANSFER_CHUNKS: TableDefinition<(&str, &str, &str, &str, u64), &[u8]> =
    TableDefinition::new("shard_transfer_chunks");

type Chunks<'t> =
    Table<'t, (&'static str, &'static str, &'static str, &'static str, u64), &'static [u8]>;
type State<'t> = Table<'t, (&'static str, &'static str, &'static str, &'static str), &'static [u8]>;

/// Whether `chunk` holds some bytes and they lie within its value.
pub(super) fn is_within(chunk: &ValueChunk) -> bool {
    let end = u64::try_from(chunk.bytes.len())
        .ok()
        .and_then(|len| chunk.offset.checked_add(len));
    !chunk.bytes.is_empty() && end.is_some_and(|end| end <= chunk.total)
}

/// Stages `chunk` of `id`'s value; when it is the value's final piece and every byte before it
/// is staged, writes the value to `state` and returns true.
pub(super) fn stage(
    chunks: &mut Chunks<'_>,
    state: &mut State<'_>,
    (tenant, entity_type, id): (&str, &str, &str),
    chunk: &ValueChunk,
) -> Result<bool, StoreError> {
    let key = chunk.key.as_str();
    chunks
        .insert(
            (tenant, entity_type, id, key, chunk.offset),
            chunk.bytes.as_slice(),
        )
        .map_err(io)?;
    if chunk.offset.saturating_add(chunk.bytes.len() as u64) != chunk.total {
        return Ok(false);
    }
    let pieces = (tenant, entity_type, id, key, 0)..=(tenant, entity_type, id, key, u64::MAX);
    // Pieces may overlap (a part of an earlier export of the move, sent again): what matters
    // is that they leave no gap.
    let mut covered = 0u64;
    for piece in chunks.range(pieces.clone()).map_err(io)? {
        let (at, bytes) = piece.map_err(io)?;
        let offset = at.value().4;
        if offset > covered {
            return Ok(false);
        }
        covered = covered.max(offset.saturating_add(bytes.value().len() as u64));
    }
    if covered != chunk.total {
        return Ok(false);
    }
    let length = usize::try_from(chunk.total).map_err(io)?;
    let mut value = state
        .insert_reserve((tenant, entity_type, id, key), length)
        .map_err(io)?;
    let buffer = value.as_mut();
    for piece in chunks.range(pieces).map_err(io)? {
        let (at, bytes) = piece.map_err(io)?;
        let bytes = bytes.value();
        let start = usize::try_from(at.value().4).map_err(io)?;
        let Some(target) = buffer.get_mut(start..start.saturating_add(bytes.len())) else {
            return Err(StoreError::Io(format!(
                "a staged piece of {key} lies past its value's {length} bytes"
            )));
        };
        target.copy_from_slice(bytes);
    }
    Ok(true)
}

/// Removes the staged pieces of one value: `(tenant, type, id, state key)`.
pub(crate) fn unstage(
    transaction: &WriteTransaction,
    (tenant, entity_type, id, key): (&str, &str, &str, &str),
) -> Result<(), StoreError> {
    transaction
        .open_table(SHARD_TRANSFER_CHUNKS)
        .map_err(io)?
        .retain_in(
            (tenant, entity_type, id, key, 0)..=(tenant, entity_type, id, key, u64::MAX),
            |_, _| false,
        )
        .map_err(io)
}

/// Removes the staged pieces of the shard's entities (`past` is the first type name after the
/// scope's).
pub(super) fn clear(
    transaction: &WriteTransaction,
    scope: &ShardScope,
    past: &str,
) -> Result<(), StoreError> {
    let tenant = scope.type_key.tenant.as_str();
    let entity_type = scope.type_key.entity_type.as_str();
    transaction
        .open_table(SHARD_TRANSFER_CHUNKS)
        .map_err(io)?
        .retain_in(
            (tenant, entity_type, "", "", 0)..(tenant, past, "", "", 0),
            |key, _| !(scope.contains)(key.2),
        )
        .map_err(io)
}
