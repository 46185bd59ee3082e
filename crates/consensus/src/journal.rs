//! The durability seam of a replica: a [`Journal`] stores log entries, checkpoints and
//! superblocks (view, log view, commit, the head of the log and the checkpoint it grows from),
//! and gives them back after a crash. This module holds the trait, the record and superblock
//! types and the recovery rule shared by every implementation; [`InMemoryJournal`] (the
//! simulator's disk) is in `memory_journal.rs` and `FileJournal` in [`super::durable`].
//!
//! Entries and checkpoints are appended as records and found again by checksum. The superblock
//! is kept in two copies written alternately, each with a sequence number and the length of
//! the records it covers, and it is written only after those records are durable. So one torn
//! superblock write always leaves the previous copy, every record it covers is known to have
//! been synced (a bad one there is corruption, not a torn tail), and recovery starts from the
//! newest intact copy: its checkpoint plus the entries from there to its head.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use super::checkpoint::Checkpoint;
pub use super::memory_journal::InMemoryJournal;
use super::message::{CHECKSUM_ROOT, Entry, OpNumber, ViewNumber, checksum_words};

/// The replica's durable control state, written after the records it refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Superblock {
    /// The highest view the replica has entered.
    pub view: ViewNumber,
    /// The last view in which the replica's status was normal (the view its log belongs to).
    pub log_view: ViewNumber,
    /// The highest op known committed when this superblock was written.
    pub commit: OpNumber,
    /// The op of the last entry of the log.
    pub op_head: OpNumber,
    /// The checksum of that entry ([`CHECKSUM_ROOT`] for an empty log).
    pub head_checksum: u64,
    /// The op of the checkpoint the log grows from (0: the empty state).
    pub checkpoint_op: OpNumber,
    /// That checkpoint's state checksum (0 with `checkpoint_op` 0).
    pub checkpoint_state_checksum: u64,
    /// The replica started on an empty journal (a new group, or a lost disk) and has not yet
    /// installed the log of a view: what it acknowledged before, if anything, it forgot.
    #[serde(default)]
    pub forgetful: bool,
}

/// One copy of the superblock as stored: sealed with a checksum, numbered so the newer of the
/// two copies is known, and bounding the records that were synced before it was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SuperblockCopy {
    /// Increases by one per copy written; copy `n` lives in slot `n % 2`.
    pub(crate) sequence: u64,
    /// How far the records extend that were durable when this copy was written (a record
    /// count or a byte offset, as the journal measures it).
    pub(crate) records_length: u64,
    pub(crate) superblock: Superblock,
    pub(crate) checksum: u64,
}

impl SuperblockCopy {
    pub(crate) fn new(sequence: u64, records_length: u64, superblock: Superblock) -> Self {
        let mut copy = SuperblockCopy {
            sequence,
            records_length,
            superblock,
            checksum: 0,
        };
        copy.checksum = copy.compute_checksum();
        copy
    }

    fn compute_checksum(&self) -> u64 {
        let block = &self.superblock;
        checksum_words(&[
            self.sequence,
            self.records_length,
            block.view,
            block.log_view,
            block.commit,
            block.op_head,
            block.head_checksum,
            block.checkpoint_op,
            block.checkpoint_state_checksum,
        ])
    }

    pub(crate) fn is_intact(&self) -> bool {
        self.checksum == self.compute_checksum()
    }
}

/// The intact copies, newest first.
pub(crate) fn copies_newest_first(copies: &[Option<SuperblockCopy>]) -> Vec<SuperblockCopy> {
    let mut intact: Vec<SuperblockCopy> = copies
        .iter()
        .flatten()
        .filter(|copy| copy.is_intact())
        .copied()
        .collect();
    intact.sort_by_key(|copy| std::cmp::Reverse(copy.sequence));
    intact
}

/// What a journal gives back after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// The newest superblock whose log could be read back whole.
    pub superblock: Superblock,
    /// The checkpoint it names (`None` for the empty state at op 0).
    pub checkpoint: Option<Checkpoint>,
    /// Ops `superblock.checkpoint_op + 1..=superblock.op_head`, chained to the checkpoint.
    pub log: Vec<Entry>,
}

/// Why a journal could not be opened.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum JournalError {
    /// No intact superblock with a complete log: the journal was never formatted, or lost
    /// data it had acknowledged as synced.
    #[error("journal holds no intact superblock with a complete log")]
    NoSuperblock,
    /// A record that had been synced (it lies before the end recorded in the newest superblock)
    /// fails its checksum: the storage corrupted acknowledged data. Truncating would silently
    /// forget promises, so the replica refuses to start.
    #[error("journal {location}: synced record at offset {offset} is corrupt; refusing to start")]
    Corrupt {
        /// The journal file (or which in-memory journal).
        location: String,
        /// Where the bad record starts (bytes into the file, or a record index).
        offset: u64,
    },
    /// The underlying storage failed.
    #[error("journal storage: {0}")]
    Io(#[from] std::io::Error),
}

/// Durable storage for one replica. Writes become durable only at [`Journal::sync`]; the
/// replica syncs before it sends anything that depends on what it wrote.
///
/// A storage failure while writing or syncing is fatal to the replica (its implementation
/// panics): once a write may be lost, the promises the replica makes can no longer be kept.
pub trait Journal {
    /// Appends a log entry (not yet durable).
    fn append_entry(&mut self, entry: &Entry);
    /// Appends a checkpoint (not yet durable).
    fn append_checkpoint(&mut self, checkpoint: &Checkpoint);
    /// Stages a superblock, written by the next sync once the records before it are durable.
    fn write_superblock(&mut self, superblock: &Superblock);
    /// Makes every earlier append durable, then writes the staged superblock durably. A journal
    /// may compact itself here once a superblock names a newer checkpoint.
    fn sync(&mut self);
    /// Reads back the newest durable state.
    fn recover(&mut self) -> Result<Recovered, JournalError>;
    /// Whether a write was lost with the replica still running: never for a journal that
    /// panics on a failed write (the replica stops with it), but the simulator's crash point
    /// lets the handler run on to its end, then takes the replica down. Nothing the replica
    /// does from there survives, so it takes and installs no more checkpoints: a machine that
    /// keeps its own state forgets older checkpoints when it takes one, and the journal would
    /// still name them.
    fn has_failed(&self) -> bool {
        false
    }
}

/// A boxed journal is a journal, so a host can choose the storage at run time.
impl<J: Journal + ?Sized> Journal for Box<J> {
    fn append_entry(&mut self, entry: &Entry) {
        (**self).append_entry(entry);
    }

    fn append_checkpoint(&mut self, checkpoint: &Checkpoint) {
        (**self).append_checkpoint(checkpoint);
    }

    fn write_superblock(&mut self, superblock: &Superblock) {
        (**self).write_superblock(superblock);
    }

    fn sync(&mut self) {
        (**self).sync();
    }

    fn has_failed(&self) -> bool {
        (**self).has_failed()
    }

    fn recover(&mut self) -> Result<Recovered, JournalError> {
        (**self).recover()
    }
}

/// One record of a journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// A log entry.
    Entry(Entry),
    /// A checkpoint.
    Checkpoint(Checkpoint),
}

impl Record {
    /// Whether the record's own checksum matches its contents.
    pub fn is_intact(&self) -> bool {
        match self {
            Record::Entry(entry) => entry.is_intact(),
            Record::Checkpoint(checkpoint) => checkpoint.is_intact(),
        }
    }
}

/// The recovery rule for one superblock: its checkpoint, and its log walked from the head back
/// to that checkpoint through intact entries. `None` if anything is missing.
pub(crate) fn recover_log(superblock: &Superblock, records: &[Record]) -> Option<Recovered> {
    let mut entries: HashMap<u64, &Entry> = HashMap::new();
    let mut checkpoint = None;
    for record in records.iter().filter(|record| record.is_intact()) {
        match record {
            Record::Entry(entry) => {
                entries.insert(entry.checksum, entry);
            }
            Record::Checkpoint(candidate)
                if candidate.op == superblock.checkpoint_op
                    && candidate.state_checksum == superblock.checkpoint_state_checksum =>
            {
                checkpoint = Some(candidate);
            }
            Record::Checkpoint(_) => {}
        }
    }
    let root = match (superblock.checkpoint_op, checkpoint) {
        (0, _) => CHECKSUM_ROOT,
        (_, Some(checkpoint)) => checkpoint.entry_checksum,
        (_, None) => return None,
    };
    let length = superblock.op_head.checked_sub(superblock.checkpoint_op)?;
    let mut log = Vec::with_capacity(usize::try_from(length).ok()?);
    let mut checksum = superblock.head_checksum;
    for op in (superblock.checkpoint_op + 1..=superblock.op_head).rev() {
        let entry = entries.get(&checksum)?;
        if entry.op != op {
            return None;
        }
        log.push((*entry).clone());
        checksum = entry.parent;
    }
    if checksum != root {
        return None;
    }
    log.reverse();
    Some(Recovered {
        superblock: *superblock,
        checkpoint: checkpoint.filter(|_| superblock.checkpoint_op > 0).cloned(),
        log,
    })
}

/// What a compacted journal holds: the checkpoint and the log above it, nothing else.
pub(crate) fn compacted_records(recovered: &Recovered) -> Vec<Record> {
    let checkpoint = recovered.checkpoint.iter().cloned().map(Record::Checkpoint);
    let entries = recovered.log.iter().cloned().map(Record::Entry);
    checkpoint.chain(entries).collect()
}
