//! The simulator's disk: a [`Journal`] in memory with the same layout and rules as the file
//! journal (records, then two alternating superblock copies), whose unsynced writes are lost,
//! kept or torn when it crashes, and which can be told to crash in the middle of a handler
//! after a number of writes. A sync is two writes, as on disk: the records, then the
//! superblock copy, so a crash can also tear the copy being written. Once a superblock names a
//! newer checkpoint the journal compacts itself to that checkpoint and the log above it.

use super::journal::{
    Checkpoint, Journal, JournalError, Record, Recovered, Superblock, SuperblockCopy,
    compacted_records, copies_newest_first, recover_log,
};
use super::message::Entry;

/// Where a corruption error says an in-memory journal is.
const LOCATION: &str = "in-memory journal";

/// A journal in memory.
#[derive(Debug, Default)]
pub struct InMemoryJournal {
    records: Vec<Record>,
    pending_records: Vec<Record>,
    copies: [Option<SuperblockCopy>; 2],
    staged_superblock: Option<Superblock>,
    /// The superblock write that was under way when the crash fired (records already durable).
    superblock_in_flight: Option<SuperblockCopy>,
    sequence: u64,
    compacted_checkpoint_op: u64,
    writes_until_crash: Option<u32>,
    crashed: bool,
}

impl InMemoryJournal {
    /// An empty journal.
    pub fn new() -> InMemoryJournal {
        InMemoryJournal::default()
    }

    /// Arms a crash: after `writes` more appends or sync steps the journal stops persisting
    /// anything (the process died mid-handler) and [`InMemoryJournal::has_crashed`] turns true.
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

    /// Durable records held (bounded by compaction).
    pub fn records_held(&self) -> usize {
        self.records.len()
    }

    /// Applies a crash to the unsynced writes: each record is lost, kept, or kept torn (its
    /// checksum no longer matches), and so is a superblock copy that was being written, chosen
    /// by `random`. Re-arms nothing; the journal is usable again.
    pub fn crash(&mut self, random: &mut dyn FnMut() -> u64) {
        for mut record in std::mem::take(&mut self.pending_records) {
            match random() % 3 {
                0 => continue,
                1 => {}
                _ => tear(&mut record),
            }
            self.records.push(record);
        }
        if let Some(mut copy) = self.superblock_in_flight.take() {
            let slot = (copy.sequence % 2) as usize;
            match random() % 3 {
                0 => {}
                1 => self.copies[slot] = Some(copy),
                _ => {
                    copy.checksum ^= 1;
                    self.copies[slot] = Some(copy);
                }
            }
        }
        self.staged_superblock = None;
        self.writes_until_crash = None;
        self.crashed = false;
    }

    /// Flips a bit of a record that was already synced, as a failing disk might.
    #[cfg(test)]
    pub fn corrupt_synced_record(&mut self, index: usize) {
        tear(&mut self.records[index]);
    }

    /// Tears the newest superblock copy, as a crash in the middle of writing it would.
    #[cfg(test)]
    pub fn tear_newest_superblock(&mut self) {
        let slot = (self.sequence % 2) as usize;
        if let Some(copy) = self.copies[slot].as_mut() {
            copy.checksum ^= 1;
        }
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

    fn write_copy(&mut self, superblock: Superblock) {
        self.sequence += 1;
        let copy = SuperblockCopy::new(self.sequence, self.records.len() as u64, superblock);
        if !self.survives_write() {
            self.superblock_in_flight = Some(copy);
            return;
        }
        self.copies[(self.sequence % 2) as usize] = Some(copy);
        if superblock.checkpoint_op > self.compacted_checkpoint_op {
            self.compact(superblock);
        }
    }

    /// Keeps only the checkpoint and the log above it, and rewrites both copies to match, as
    /// the file journal's rewrite-and-rename does. A superblock whose checkpoint does not read
    /// back intact (only a broken replica writes one) leaves the records as they are, for
    /// recovery to refuse.
    fn compact(&mut self, superblock: Superblock) {
        let Some(recovered) = recover_log(&superblock, &self.records) else {
            return;
        };
        self.records = compacted_records(&recovered);
        self.compacted_checkpoint_op = superblock.checkpoint_op;
        for _ in 0..2 {
            self.sequence += 1;
            let copy = SuperblockCopy::new(self.sequence, self.records.len() as u64, superblock);
            self.copies[(self.sequence % 2) as usize] = Some(copy);
        }
    }
}

fn tear(record: &mut Record) {
    match record {
        Record::Entry(entry) => entry.checksum ^= 1,
        Record::Checkpoint(checkpoint) => checkpoint.state_checksum ^= 1,
    }
}

impl Journal for InMemoryJournal {
    fn append_entry(&mut self, entry: &Entry) {
        if self.survives_write() {
            self.pending_records.push(Record::Entry(entry.clone()));
        }
    }

    fn append_checkpoint(&mut self, checkpoint: &Checkpoint) {
        if self.survives_write() {
            self.pending_records
                .push(Record::Checkpoint(checkpoint.clone()));
        }
    }

    fn write_superblock(&mut self, superblock: &Superblock) {
        self.staged_superblock = Some(*superblock);
    }

    fn sync(&mut self) {
        if !self.survives_write() {
            return;
        }
        self.records.append(&mut self.pending_records);
        if let Some(superblock) = self.staged_superblock.take() {
            self.write_copy(superblock);
        }
    }

    fn has_failed(&self) -> bool {
        self.crashed
    }

    fn recover(&mut self) -> Result<Recovered, JournalError> {
        self.pending_records.clear();
        self.staged_superblock = None;
        for copy in copies_newest_first(&self.copies) {
            let synced = (copy.records_length as usize).min(self.records.len());
            if let Some(offset) = self.records[..synced].iter().position(|r| !r.is_intact()) {
                return Err(JournalError::Corrupt {
                    location: LOCATION.to_string(),
                    offset: offset as u64,
                });
            }
            if let Some(recovered) = recover_log(&copy.superblock, &self.records[..synced]) {
                self.records.truncate(synced);
                self.sequence = copy.sequence;
                self.compacted_checkpoint_op = copy.superblock.checkpoint_op;
                return Ok(recovered);
            }
        }
        Err(JournalError::NoSuperblock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{CHECKSUM_ROOT, OpNumber, Request, ViewNumber};

    fn entry(op: OpNumber, view: ViewNumber, parent: u64, tag: u8) -> Entry {
        let request = Request {
            client: 1,
            request_number: op,
            operation: vec![tag],
        };
        Entry::new(op, view, parent, vec![request])
    }

    fn superblock(view: ViewNumber, commit: OpNumber, op_head: OpNumber, head: u64) -> Superblock {
        Superblock {
            view,
            log_view: view,
            commit,
            op_head,
            head_checksum: head,
            checkpoint_op: 0,
            checkpoint_state_checksum: 0,
            forgetful: false,
        }
    }

    fn always(value: u64) -> impl FnMut() -> u64 {
        move || value
    }

    #[test]
    fn synced_state_survives_a_crash_and_unsynced_state_is_lost() {
        let mut journal = InMemoryJournal::new();
        let first = entry(1, 0, CHECKSUM_ROOT, 0);
        journal.append_entry(&first);
        journal.write_superblock(&superblock(0, 1, 1, first.checksum));
        journal.sync();
        let second = entry(2, 0, first.checksum, 0);
        journal.append_entry(&second);
        journal.write_superblock(&superblock(0, 2, 2, second.checksum));
        journal.crash(&mut always(1));
        let recovered = journal.recover().expect("a synced superblock exists");
        assert_eq!(recovered.superblock.op_head, 1);
        assert_eq!(recovered.log, vec![first]);
    }

    #[test]
    fn a_crash_while_writing_a_superblock_falls_back_to_the_other_copy() {
        let mut journal = InMemoryJournal::new();
        journal.write_superblock(&superblock(0, 0, 0, CHECKSUM_ROOT));
        journal.sync();
        let first = entry(1, 0, CHECKSUM_ROOT, 0);
        journal.append_entry(&first);
        journal.write_superblock(&superblock(0, 0, 1, first.checksum));
        journal.crash_after_writes(1);
        journal.sync();
        assert!(journal.has_crashed());
        journal.crash(&mut always(2));
        let recovered = journal.recover().expect("the older copy is intact");
        assert_eq!(recovered.superblock.op_head, 0);
        assert!(recovered.log.is_empty());
    }

    #[test]
    fn a_torn_superblock_copy_recovers_from_the_other() {
        let mut journal = InMemoryJournal::new();
        let first = entry(1, 0, CHECKSUM_ROOT, 0);
        journal.append_entry(&first);
        journal.write_superblock(&superblock(0, 0, 1, first.checksum));
        journal.sync();
        journal.write_superblock(&superblock(4, 1, 1, first.checksum));
        journal.sync();
        journal.tear_newest_superblock();
        let recovered = journal.recover().expect("one copy is intact");
        assert_eq!((recovered.superblock.view, recovered.log.len()), (0, 1));
        journal.write_superblock(&superblock(5, 1, 1, first.checksum));
        journal.sync();
        let recovered = journal.recover().expect("the torn slot was rewritten");
        assert_eq!(recovered.superblock.view, 5);
    }

    #[test]
    fn a_corrupt_synced_record_refuses_to_start_with_its_offset() {
        let mut journal = InMemoryJournal::new();
        let first = entry(1, 0, CHECKSUM_ROOT, 0);
        let second = entry(2, 0, first.checksum, 0);
        journal.append_entry(&first);
        journal.append_entry(&second);
        journal.write_superblock(&superblock(0, 2, 2, second.checksum));
        journal.sync();
        journal.corrupt_synced_record(1);
        match journal.recover() {
            Err(JournalError::Corrupt { offset, .. }) => assert_eq!(offset, 1),
            other => panic!("expected a corruption error, got {other:?}"),
        }
    }

    #[test]
    fn a_truncated_suffix_never_mixes_with_a_new_one() {
        let mut journal = InMemoryJournal::new();
        let first = entry(1, 0, CHECKSUM_ROOT, 0);
        let old_second = entry(2, 0, first.checksum, 0);
        journal.append_entry(&first);
        journal.append_entry(&old_second);
        journal.write_superblock(&superblock(0, 1, 2, old_second.checksum));
        journal.sync();
        let new_second = entry(2, 1, first.checksum, 9);
        journal.append_entry(&new_second);
        journal.write_superblock(&superblock(1, 1, 2, new_second.checksum));
        journal.sync();
        let recovered = journal.recover().expect("synced");
        assert_eq!(recovered.log, vec![first, new_second]);
        assert_eq!(recovered.superblock.log_view, 1);
    }

    #[test]
    fn a_checkpoint_compacts_the_journal_and_recovery_starts_from_it() {
        let mut journal = InMemoryJournal::new();
        let mut parent = CHECKSUM_ROOT;
        let mut entries = Vec::new();
        for op in 1..=40 {
            let next = entry(op, 0, parent, 0);
            parent = next.checksum;
            journal.append_entry(&next);
            entries.push(next);
            if op % 10 == 0 {
                let checkpoint =
                    Checkpoint::new(op - 5, entries[op as usize - 6].checksum, vec![1]);
                journal.append_checkpoint(&checkpoint);
                let mut block = superblock(0, op, op, parent);
                block.checkpoint_op = checkpoint.op;
                block.checkpoint_state_checksum = checkpoint.state_checksum;
                journal.write_superblock(&block);
                journal.sync();
                assert!(journal.records_held() <= 6, "checkpoint and five entries");
            }
        }
        let recovered = journal.recover().expect("compacted journal recovers");
        assert_eq!(
            recovered.checkpoint.map(|checkpoint| checkpoint.op),
            Some(35)
        );
        assert_eq!(recovered.log, entries[35..].to_vec());
    }

    #[test]
    fn an_unformatted_journal_has_nothing_to_recover() {
        assert!(matches!(
            InMemoryJournal::new().recover(),
            Err(JournalError::NoSuperblock)
        ));
    }
}
