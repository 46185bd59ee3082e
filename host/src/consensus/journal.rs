//! The durability seam of a replica: a [`Journal`] stores log entries and superblocks (view,
//! log view, commit and the head of the log), and gives them back after a crash. This module
//! holds the trait, the recovery rule shared by every implementation, and [`InMemoryJournal`],
//! the simulator's disk, which loses or tears writes that were not synced when it crashes. The
//! on-disk implementation is in [`super::durable`].
//!
//! Records are only ever appended, never overwritten: an entry is found again by its checksum,
//! and a superblock names the head of its log by checksum. A superblock is written after the
//! entries it names have been synced, so the newest intact superblock whose chain walks back to
//! the root is always a state the replica had made durable before it promised anything.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::message::{CHECKSUM_ROOT, Entry, OpNumber, ViewNumber, checksum_words};

/// The replica's durable control state, written after the entries it refers to.
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
    /// Checksum over the fields above, so a torn superblock is recognised.
    pub checksum: u64,
}

impl Superblock {
    /// Builds a superblock and seals it with its checksum.
    pub fn new(
        view: ViewNumber,
        log_view: ViewNumber,
        commit: OpNumber,
        op_head: OpNumber,
        head_checksum: u64,
    ) -> Superblock {
        let mut superblock = Superblock {
            view,
            log_view,
            commit,
            op_head,
            head_checksum,
            checksum: 0,
        };
        superblock.checksum = superblock.compute_checksum();
        superblock
    }

    fn compute_checksum(&self) -> u64 {
        checksum_words(&[
            self.view,
            self.log_view,
            self.commit,
            self.op_head,
            self.head_checksum,
        ])
    }

    /// Whether the stored checksum matches the contents.
    pub fn is_intact(&self) -> bool {
        self.checksum == self.compute_checksum()
    }
}

/// What a journal gives back after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// The newest superblock whose log could be read back whole.
    pub superblock: Superblock,
    /// Ops `1..=superblock.op_head`, chained.
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
    /// Appends a superblock (not yet durable).
    fn append_superblock(&mut self, superblock: &Superblock);
    /// Makes every earlier append durable.
    fn sync(&mut self);
    /// Reads back the newest durable state.
    fn recover(&mut self) -> Result<Recovered, JournalError>;
}

/// A boxed journal is a journal, so a host can choose the storage at run time.
impl<J: Journal + ?Sized> Journal for Box<J> {
    fn append_entry(&mut self, entry: &Entry) {
        (**self).append_entry(entry);
    }

    fn append_superblock(&mut self, superblock: &Superblock) {
        (**self).append_superblock(superblock);
    }

    fn sync(&mut self) {
        (**self).sync();
    }

    fn recover(&mut self) -> Result<Recovered, JournalError> {
        (**self).recover()
    }
}

/// One record of an append-only journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// A log entry.
    Entry(Entry),
    /// A superblock.
    Superblock(Superblock),
}

/// The recovery rule: among the intact superblocks, newest first, pick the first whose log can
/// be walked from its head back to the root through intact entries.
pub fn recover_from_records<'a>(
    records: impl Iterator<Item = &'a Record>,
) -> Result<Recovered, JournalError> {
    let mut entries: HashMap<u64, &Entry> = HashMap::new();
    let mut superblocks = Vec::new();
    for record in records {
        match record {
            Record::Entry(entry) if entry.is_intact() => {
                entries.insert(entry.checksum, entry);
            }
            Record::Superblock(superblock) if superblock.is_intact() => {
                superblocks.push(*superblock)
            }
            _ => {}
        }
    }
    for superblock in superblocks.iter().rev() {
        if let Some(log) = walk_log(&entries, superblock) {
            return Ok(Recovered {
                superblock: *superblock,
                log,
            });
        }
    }
    Err(JournalError::NoSuperblock)
}

fn walk_log(entries: &HashMap<u64, &Entry>, superblock: &Superblock) -> Option<Vec<Entry>> {
    let mut log = Vec::with_capacity(superblock.op_head as usize);
    let mut checksum = superblock.head_checksum;
    for op in (1..=superblock.op_head).rev() {
        let entry = entries.get(&checksum)?;
        if entry.op != op {
            return None;
        }
        log.push((*entry).clone());
        checksum = entry.parent;
    }
    if checksum != CHECKSUM_ROOT {
        return None;
    }
    log.reverse();
    Some(log)
}

/// The simulator's disk: a journal in memory whose unsynced writes are lost, kept or torn at a
/// crash, and which can be told to crash in the middle of a handler after a number of writes.
#[derive(Debug, Default)]
pub struct InMemoryJournal {
    durable: Vec<Record>,
    pending: Vec<Record>,
    writes_until_crash: Option<u32>,
    crashed: bool,
}

impl InMemoryJournal {
    /// An empty journal.
    pub fn new() -> InMemoryJournal {
        InMemoryJournal::default()
    }

    /// Arms a crash: after `writes` more appends or syncs the journal stops persisting anything
    /// (the process died mid-handler) and [`InMemoryJournal::has_crashed`] turns true.
    pub fn crash_after_writes(&mut self, writes: u32) {
        self.writes_until_crash = Some(writes);
    }

    /// Disarms a crash that has not fired.
    pub fn disarm(&mut self) {
        self.writes_until_crash = None;
    }

    /// Whether an armed crash has fired.
    pub fn has_crashed(&self) -> bool {
        self.crashed
    }

    /// Applies a crash to the unsynced writes: each is lost, kept, or kept torn (its checksum
    /// no longer matches), chosen by `random`. Re-arms nothing; the journal is usable again.
    pub fn crash(&mut self, random: &mut dyn FnMut() -> u64) {
        for mut record in std::mem::take(&mut self.pending) {
            match random() % 3 {
                0 => continue,
                1 => {}
                _ => tear(&mut record),
            }
            self.durable.push(record);
        }
        self.writes_until_crash = None;
        self.crashed = false;
    }

    /// Counts a write against an armed crash; returns false once the crash has fired.
    fn survives_write(&mut self) -> bool {
        if self.crashed {
            return false;
        }
        match self.writes_until_crash {
            Some(0) => {
                self.crashed = true;
                false
            }
            Some(remaining) => {
                self.writes_until_crash = Some(remaining - 1);
                true
            }
            None => true,
        }
    }
}

fn tear(record: &mut Record) {
    match record {
        Record::Entry(entry) => entry.checksum ^= 1,
        Record::Superblock(superblock) => superblock.commit ^= 1 << 40,
    }
}

impl Journal for InMemoryJournal {
    fn append_entry(&mut self, entry: &Entry) {
        if self.survives_write() {
            self.pending.push(Record::Entry(entry.clone()));
        }
    }

    fn append_superblock(&mut self, superblock: &Superblock) {
        if self.survives_write() {
            self.pending.push(Record::Superblock(*superblock));
        }
    }

    fn sync(&mut self) {
        if self.survives_write() {
            self.durable.append(&mut self.pending);
        }
    }

    fn recover(&mut self) -> Result<Recovered, JournalError> {
        recover_from_records(self.durable.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::message::Request;

    fn entry(op: OpNumber, view: ViewNumber, parent: u64, tag: u8) -> Entry {
        let request = Request {
            client: 1,
            request_number: op,
            operation: vec![tag],
        };
        Entry::new(op, view, parent, vec![request])
    }

    fn always(value: u64) -> impl FnMut() -> u64 {
        move || value
    }

    #[test]
    fn synced_state_survives_a_crash_and_unsynced_state_is_lost() {
        let mut journal = InMemoryJournal::new();
        let first = entry(1, 0, CHECKSUM_ROOT, 0);
        journal.append_entry(&first);
        journal.sync();
        journal.append_superblock(&Superblock::new(0, 0, 1, 1, first.checksum));
        journal.sync();
        let second = entry(2, 0, first.checksum, 0);
        journal.append_entry(&second);
        journal.append_superblock(&Superblock::new(0, 0, 2, 2, second.checksum));
        journal.crash(&mut always(0));
        let recovered = journal.recover().expect("a synced superblock exists");
        assert_eq!(recovered.superblock.op_head, 1);
        assert_eq!(recovered.log, vec![first]);
    }

    #[test]
    fn a_torn_entry_makes_recovery_fall_back_to_the_previous_superblock() {
        let mut journal = InMemoryJournal::new();
        journal.append_superblock(&Superblock::new(0, 0, 0, 0, CHECKSUM_ROOT));
        journal.sync();
        let first = entry(1, 0, CHECKSUM_ROOT, 0);
        journal.append_entry(&first);
        journal.append_superblock(&Superblock::new(0, 0, 0, 1, first.checksum));
        let mut choices = [2u64, 1].into_iter();
        journal.crash(&mut move || choices.next().unwrap_or(1));
        let recovered = journal
            .recover()
            .expect("the formatting superblock is synced");
        assert_eq!(recovered.superblock.op_head, 0);
        assert!(recovered.log.is_empty());
    }

    #[test]
    fn a_truncated_suffix_never_mixes_with_a_new_one() {
        let mut journal = InMemoryJournal::new();
        let first = entry(1, 0, CHECKSUM_ROOT, 0);
        let old_second = entry(2, 0, first.checksum, 0);
        journal.append_entry(&first);
        journal.append_entry(&old_second);
        journal.sync();
        journal.append_superblock(&Superblock::new(0, 0, 1, 2, old_second.checksum));
        journal.sync();
        let new_second = entry(2, 1, first.checksum, 9);
        journal.append_entry(&new_second);
        journal.sync();
        journal.append_superblock(&Superblock::new(1, 1, 1, 2, new_second.checksum));
        journal.sync();
        let recovered = journal.recover().expect("synced");
        assert_eq!(recovered.log, vec![first, new_second]);
        assert_eq!(recovered.superblock.log_view, 1);
    }

    #[test]
    fn an_armed_crash_stops_persisting_mid_handler() {
        let mut journal = InMemoryJournal::new();
        journal.append_superblock(&Superblock::new(0, 0, 0, 0, CHECKSUM_ROOT));
        journal.sync();
        journal.crash_after_writes(1);
        let first = entry(1, 0, CHECKSUM_ROOT, 0);
        journal.append_entry(&first);
        journal.sync();
        assert!(journal.has_crashed());
        journal.crash(&mut always(1));
        assert!(!journal.has_crashed());
        let recovered = journal.recover().expect("formatted");
        assert_eq!(recovered.superblock.op_head, 0);
    }

    #[test]
    fn an_unformatted_journal_has_nothing_to_recover() {
        assert!(matches!(
            InMemoryJournal::new().recover(),
            Err(JournalError::NoSuperblock)
        ));
    }
}
