//! Cutting a [`ShardPart`] into smaller ones that install to the same rows, for a writer
//! whose unit of work must stay small: a partition's group orders each install as one
//! operation, and an operation of megabytes is carried whole in every prepare, retransmission
//! and view-change message. A state value larger than a piece is sent as [`ValueChunk`]s (as
//! the export sends values larger than a part), a chunk larger than a piece is cut again, and
//! the other rows of an entity go with the sub-part its rows fall in (its metadata and
//! counters with the first); the part's remembered ids go with the last. Installed in order,
//! the sub-parts leave the same rows as the part.

use super::{EntityRecord, ShardPart, ValueChunk};

/// One row of an entity record, cut out so records can be packed by size.
enum Item {
    /// The record's metadata and counters (and an empty record, so an entity with no rows
    /// still travels).
    Head(Option<(u32, u64)>, Option<(u64, u64, u64, u64)>),
    State(super::StateRow),
    Outbox(super::OutboxRow),
    Receipt(super::ReceiptRow),
    ClientKey((String, u64)),
    Reminder(super::ReminderRow),
    Chunk(ValueChunk),
}

impl Item {
    fn bytes(&self) -> usize {
        const ROW: usize = 64;
        ROW + match self {
            Item::Head(..) | Item::Receipt(_) | Item::ClientKey(_) => 0,
            Item::State(row) => row.key.len() + row.value.len(),
            Item::Outbox(row) => row.payload.len(),
            Item::Reminder(row) => row.payload.len(),
            Item::Chunk(chunk) => chunk.key.len() + chunk.bytes.len(),
        }
    }

    fn add_to(self, record: &mut EntityRecord) {
        match self {
            Item::Head(meta, sequences) => {
                record.meta = meta;
                record.sequences = sequences;
            }
            Item::State(row) => record.state.push(row),
            Item::Outbox(row) => record.outbox.push(row),
            Item::Receipt(row) => record.receipts.push(row),
            Item::ClientKey(key) => record.client_keys.push(key),
            Item::Reminder(row) => record.reminders.push(row),
            Item::Chunk(chunk) => record.chunks.push(chunk),
        }
    }
}

/// `bytes` cut into chunks of at most `piece` bytes, starting at `offset` of a value of
/// `total` bytes.
fn chunks_of(key: &str, offset: u64, total: u64, bytes: &[u8], piece: usize) -> Vec<Item> {
    let mut at = offset;
    bytes
        .chunks(piece.max(1))
        .map(|slice| {
            let chunk = ValueChunk {
                key: key.to_string(),
                offset: at,
                total,
                bytes: slice.to_vec(),
            };
            at += slice.len() as u64;
            Item::Chunk(chunk)
        })
        .collect()
}

/// The rows of `record`, values larger than `piece` cut into chunks.
fn items(record: EntityRecord, piece: usize) -> Vec<Item> {
    let mut items = vec![Item::Head(record.meta, record.sequences)];
    for row in record.state {
        if row.value.len() > piece {
            let total = row.value.len() as u64;
            items.extend(chunks_of(&row.key, 0, total, &row.value, piece));
        } else {
            items.push(Item::State(row));
        }
    }
    items.extend(record.outbox.into_iter().map(Item::Outbox));
    items.extend(record.receipts.into_iter().map(Item::Receipt));
    items.extend(record.client_keys.into_iter().map(Item::ClientKey));
    items.extend(record.reminders.into_iter().map(Item::Reminder));
    for chunk in record.chunks {
        if chunk.bytes.len() > piece {
            items.extend(chunks_of(
                &chunk.key,
                chunk.offset,
                chunk.total,
                &chunk.bytes,
                piece,
            ));
        } else {
            items.push(Item::Chunk(chunk));
        }
    }
    items
}

impl ShardPart {
    /// This part as sub-parts of about `bytes_max` bytes of rows each (a single row that
    /// cannot be cut, such as a large outbox payload, may exceed it), which installed in
    /// order leave the same rows. Each keeps this part's index; only the last is `last` and
    /// carries the remembered ids.
    ///
    /// ```
    /// use tessera_state::shard_transfer::{EntityRecord, ShardPart, StateRow};
    /// let part = ShardPart {
    ///     index: 0,
    ///     last: true,
    ///     entities: vec![EntityRecord {
    ///         id: "big".into(),
    ///         state: vec![StateRow { key: "blob".into(), value: vec![7; 10_000] }],
    ///         ..EntityRecord::default()
    ///     }],
    ///     remembered: vec!["big".into()],
    /// };
    /// let pieces = part.split(4_096);
    /// assert!(pieces.len() >= 3);
    /// assert!(pieces.last().is_some_and(|piece| piece.last && piece.remembered == ["big"]));
    /// ```
    pub fn split(self, bytes_max: usize) -> Vec<ShardPart> {
        let piece = bytes_max / 2;
        let (index, last, remembered) = (self.index, self.last, self.remembered);
        let new_part = || ShardPart {
            index,
            last: false,
            entities: Vec::new(),
            remembered: Vec::new(),
        };
        let mut parts = vec![new_part()];
        let mut bytes = 0usize;
        for record in self.entities {
            let id = record.id.clone();
            for item in items(record, piece) {
                let item_bytes = item.bytes();
                if bytes > 0 && bytes + item_bytes > bytes_max {
                    parts.push(new_part());
                    bytes = 0;
                }
                bytes += item_bytes;
                let Some(part) = parts.last_mut() else {
                    continue;
                };
                if part.entities.last().is_none_or(|open| open.id != id) {
                    part.entities.push(EntityRecord::new(&id));
                }
                if let Some(open) = part.entities.last_mut() {
                    item.add_to(open);
                }
            }
        }
        if let Some(final_part) = parts.last_mut() {
            final_part.last = last;
            final_part.remembered = remembered;
        }
        parts
    }
}
