//! Reading a shard's rows out of the node's tables as a stream of parts. A [`ShardExport`] holds
//! one read transaction — a snapshot: whatever is committed after it began is not seen, however
//! long the transfer takes — and a cursor into it (a table and the first key not yet sent, with
//! how much of that key's value went already). Each [`Iterator::next`] reads on from the cursor
//! until the part is full, so the export holds one part at a time, whatever the shard's size.
//! Tables are walked one after another, each over the type's key range in key order, keeping
//! the shard's ids; an entity's rows go under its id in whichever parts they fall in.

use super::{
    CHUNK_BYTES_MIN, EntityRecord, OutboxRow, PART_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES,
    REMEMBERED_OVERHEAD_BYTES, ROW_OVERHEAD_BYTES, ReceiptRow, ReminderRow, SHARD_PART_BYTES_MAX,
    ShardPart, ShardScope, StateRow, ValueChunk, io,
};
use crate::error::StoreError;
use crate::messaging::{CLIENT_KEYS, OUTBOX, RECEIPTS, REMINDERS, SEQUENCES};
use crate::tables::{ENTITY_META, ENTITY_STATE, REMEMBERED_ENTITIES};
use redb::{ReadTransaction, TableDefinition};
use std::collections::HashMap;

/// The tables of a shard's state, in the order an export reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Section {
    Meta,
    State,
    Sequences,
    Outbox,
    Receipts,
    ClientKeys,
    Reminders,
    Remembered,
    Done,
}

impl Section {
    fn next(self) -> Section {
        match self {
            Section::Meta => Section::State,
            Section::State => Section::Sequences,
            Section::Sequences => Section::Outbox,
            Section::Outbox => Section::Receipts,
            Section::Receipts => Section::ClientKeys,
            Section::ClientKeys => Section::Reminders,
            Section::Reminders => Section::Remembered,
            Section::Remembered | Section::Done => Section::Done,
        }
    }
}

/// Where the walk of a table stopped: the first key not wholly sent (its redb bytes), and how
/// many bytes of its value went already (in chunks).
struct Resume {
    key: Vec<u8>,
    offset: u64,
}

/// What a row did to the part being cut.
enum Step {
    /// Past the shard's rows in this table: the table is done.
    Past,
    /// Not the shard's (another shard of the type).
    Skip,
    /// Added whole.
    Added,
    /// The part is full: the row starts the next one.
    Full,
    /// The part is full with the value sent up to this offset; the rest goes next.
    Partly(u64),
}

/// A shard's state read from one snapshot, part by part ([`Iterator`]); the last part has
/// `last` set, after which (or after an error) the export yields nothing more.
pub struct ShardExport {
    transaction: ReadTransaction,
    scope: ShardScope,
    section: Section,
    resume: Option<Resume>,
    index: u32,
    finished: bool,
}

impl ShardExport {
    /// An export of `scope`'s shard from `transaction`'s snapshot.
    pub(crate) fn new(transaction: ReadTransaction, scope: ShardScope) -> Self {
        ShardExport {
            transaction,
            scope,
            section: Section::Meta,
            resume: None,
            index: 0,
            finished: false,
        }
    }

    /// Bytes of shard state the export holds between parts: its cursor's key only (a part,
    /// once cut, is the caller's).
    pub fn buffered_bytes(&self) -> usize {
        self.resume.as_ref().map_or(0, |resume| resume.key.len())
    }

    fn cut(&mut self) -> Result<ShardPart, StoreError> {
        let mut builder = Builder::new(self.index);
        while self.section != Section::Done {
            match self.walk(&mut builder)? {
                Some(resume) => {
                    self.resume = Some(resume);
                    break;
                }
                None => {
                    self.section = self.section.next();
                    self.resume = None;
                }
            }
        }
        self.index += 1;
        let mut part = builder.finish();
        part.last = self.section == Section::Done;
        Ok(part)
    }

    /// Walks the current section's table from the cursor, filling `builder`.
    fn walk(&self, builder: &mut Builder) -> Result<Option<Resume>, StoreError> {
        let (tenant, entity_type) = (
            self.scope.type_key.tenant.as_str(),
            self.scope.type_key.entity_type.as_str(),
        );
        let scope = &self.scope;
        let transaction = &self.transaction;
        let resume = self.resume.as_ref();
        match self.section {
            Section::Meta => walk(
                transaction,
                ENTITY_META,
                (tenant, entity_type, ""),
                resume,
                |key, meta, _| {
                    within(scope, key.0, key.1, key.2, || {
                        builder.add(key.2, 0, |record| record.meta = Some(meta))
                    })
                },
            ),
            Section::State => walk(
                transaction,
                ENTITY_STATE,
                (tenant, entity_type, "", ""),
                resume,
                |key, value, offset| {
                    within(scope, key.0, key.1, key.2, || {
                        builder.add_value(key.2, key.3, value, offset)
                    })
                },
            ),
            Section::Sequences => walk(
                transaction,
                SEQUENCES,
                (tenant, entity_type, ""),
                resume,
                |key, sequences, _| {
                    within(scope, key.0, key.1, key.2, || {
                        builder.add(key.2, 0, |record| record.sequences = Some(sequences))
                    })
                },
            ),
            Section::Outbox => walk(
                transaction,
                OUTBOX,
                (tenant, entity_type, "", 0),
                resume,
                |key, (to_type, to_id, payload), _| {
                    within(scope, key.0, key.1, key.2, || {
                        let bytes = to_type.len() + to_id.len() + payload.len();
                        builder.add(key.2, bytes + ROW_OVERHEAD_BYTES, |record| {
                            record.outbox.push(OutboxRow {
                                seq: key.3,
                                to_type: to_type.to_string(),
                                to_id: to_id.to_string(),
                                payload: payload.to_vec(),
                            })
                        })
                    })
                },
            ),
            Section::Receipts => walk(
                transaction,
                RECEIPTS,
                (tenant, entity_type, "", "", ""),
                resume,
                |key, (seq, at_ms), _| {
                    within(scope, key.0, key.1, key.2, || {
                        let bytes = key.3.len() + key.4.len() + ROW_OVERHEAD_BYTES;
                        builder.add(key.2, bytes, |record| {
                            record.receipts.push(ReceiptRow {
                                sender_type: key.3.to_string(),
                                sender_id: key.4.to_string(),
                                seq,
                                at_ms,
                            })
                        })
                    })
                },
            ),
            Section::ClientKeys => walk(
                transaction,
                CLIENT_KEYS,
                (tenant, entity_type, "", ""),
                resume,
                |key, at_ms, _| {
                    within(scope, key.0, key.1, key.2, || {
                        let bytes = key.3.len() + ROW_OVERHEAD_BYTES;
                        builder.add(key.2, bytes, |record| {
                            record.client_keys.push((key.3.to_string(), at_ms))
                        })
                    })
                },
            ),
            Section::Reminders => walk(
                transaction,
                REMINDERS,
                (tenant, entity_type, "", 0),
                resume,
                |key, (due_ms, payload), _| {
                    within(scope, key.0, key.1, key.2, || {
                        let bytes = payload.len() + ROW_OVERHEAD_BYTES;
                        builder.add(key.2, bytes, |record| {
                            record.reminders.push(ReminderRow {
                                timer: key.3,
                                due_ms,
                                payload: payload.to_vec(),
                            })
                        })
                    })
                },
            ),
            Section::Remembered => walk(
                transaction,
                REMEMBERED_ENTITIES,
                (tenant, entity_type, scope.shard, ""),
                resume,
                |key, (), _| {
                    if (key.0, key.1, key.2) != (tenant, entity_type, scope.shard) {
                        return Step::Past;
                    }
                    builder.add_remembered(key.3)
                },
            ),
            Section::Done => Ok(None),
        }
    }
}

impl Iterator for ShardExport {
    type Item = Result<ShardPart, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.finished {
            return None;
        }
        let cut = self.cut();
        self.finished = cut.as_ref().map_or(true, |part| part.last);
        Some(cut)
    }
}

/// Calls `take` for a row of the shard; a row past the type ends the table, a row of another
/// shard is skipped.
fn within(
    scope: &ShardScope,
    tenant: &str,
    entity_type: &str,
    id: &str,
    take: impl FnOnce() -> Step,
) -> Step {
    if tenant != scope.type_key.tenant || entity_type != scope.type_key.entity_type {
        Step::Past
    } else if (scope.contains)(id) {
        take()
    } else {
        Step::Skip
    }
}

/// Visits the rows of `table` from `resume` (else from `first`) until `take` says the part is
/// full or the shard's rows in it are past; answers where to resume, or `None` when the table
/// is done.
fn walk<'a, K, V>(
    transaction: &ReadTransaction,
    table: TableDefinition<K, V>,
    first: K::SelfType<'a>,
    resume: Option<&'a Resume>,
    mut take: impl FnMut(&K::SelfType<'_>, V::SelfType<'_>, u64) -> Step,
) -> Result<Option<Resume>, StoreError>
where
    K: redb::Key + 'static,
    V: redb::Value + 'static,
{
    let table = transaction.open_table(table).map_err(io)?;
    let (start, mut offset) = match resume {
        Some(resume) => (K::from_bytes(&resume.key), resume.offset),
        None => (first, 0),
    };
    for row in table.range(start..).map_err(io)? {
        let (key, value) = row.map_err(io)?;
        let key = key.value();
        let at = |offset| Resume {
            key: K::as_bytes(&key).as_ref().to_vec(),
            offset,
        };
        match take(&key, value.value(), offset) {
            Step::Past => return Ok(None),
            Step::Skip | Step::Added => {}
            Step::Full => return Ok(Some(at(offset))),
            Step::Partly(sent) => return Ok(Some(at(sent))),
        }
        offset = 0;
    }
    Ok(None)
}

/// The part being cut, and what it costs so far (as [`ShardPart::bytes`] counts it).
struct Builder {
    part: ShardPart,
    bytes: usize,
    /// Where each entity's record is in `part.entities`.
    records: HashMap<String, usize>,
}

impl Builder {
    fn new(index: u32) -> Self {
        Builder {
            part: ShardPart {
                index,
                last: false,
                entities: Vec::new(),
                remembered: Vec::new(),
            },
            bytes: PART_OVERHEAD_BYTES,
            records: HashMap::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.part.entities.is_empty() && self.part.remembered.is_empty()
    }

    fn room(&self) -> usize {
        SHARD_PART_BYTES_MAX.saturating_sub(self.bytes)
    }

    /// What a row of `bytes` for `id` costs: a record's own cost too if `id` has none yet.
    fn cost(&self, id: &str, bytes: usize) -> usize {
        match self.records.contains_key(id) {
            true => bytes,
            false => bytes + id.len() + RECORD_OVERHEAD_BYTES,
        }
    }

    /// Adds a row costing `bytes` to `id`'s record if it fits, or if the part is empty (an
    /// outbox or reminder payload larger than a part travels alone).
    fn add(&mut self, id: &str, bytes: usize, row: impl FnOnce(&mut EntityRecord)) -> Step {
        let cost = self.cost(id, bytes);
        if cost > self.room() && !self.is_empty() {
            return Step::Full;
        }
        self.bytes += cost;
        let index = match self.records.get(id) {
            Some(index) => *index,
            None => {
                self.part.entities.push(EntityRecord::new(id));
                let index = self.part.entities.len() - 1;
                self.records.insert(id.to_string(), index);
                index
            }
        };
        row(&mut self.part.entities[index]);
        Step::Added
    }

    /// Adds state `key` of `id` from `offset` on: whole if it fits, else as much of it as
    /// fits in a chunk (or, with too little room left, nothing: it starts the next part).
    fn add_value(&mut self, id: &str, key: &str, value: &[u8], offset: u64) -> Step {
        let whole = ROW_OVERHEAD_BYTES + key.len() + value.len();
        let alone = PART_OVERHEAD_BYTES + id.len() + RECORD_OVERHEAD_BYTES + whole;
        if offset == 0 && (self.cost(id, whole) <= self.room() || alone <= SHARD_PART_BYTES_MAX) {
            return self.add(id, whole, |record| {
                record.state.push(StateRow {
                    key: key.to_string(),
                    value: value.to_vec(),
                })
            });
        }
        let room = self
            .room()
            .saturating_sub(self.cost(id, ROW_OVERHEAD_BYTES + key.len()));
        if room < CHUNK_BYTES_MIN && !self.is_empty() {
            return Step::Full;
        }
        // An empty part has room for a chunk: keys and ids are far smaller than a part.
        let start = usize::try_from(offset).map_or(value.len(), |start| start.min(value.len()));
        let end = value.len().min(start + room.max(1));
        let total = value.len() as u64;
        self.add(id, ROW_OVERHEAD_BYTES + key.len() + end - start, |record| {
            record.chunks.push(ValueChunk {
                key: key.to_string(),
                offset: start as u64,
                total,
                bytes: value[start..end].to_vec(),
            })
        });
        match end == value.len() {
            true => Step::Added,
            false => Step::Partly(end as u64),
        }
    }

    fn add_remembered(&mut self, id: &str) -> Step {
        let cost = id.len() + REMEMBERED_OVERHEAD_BYTES;
        if cost > self.room() && !self.is_empty() {
            return Step::Full;
        }
        self.bytes += cost;
        self.part.remembered.push(id.to_string());
        Step::Added
    }

    fn finish(self) -> ShardPart {
        debug_assert_eq!(
            self.bytes,
            self.part.bytes(),
            "a part's cost is counted as cut"
        );
        self.part
    }
}
