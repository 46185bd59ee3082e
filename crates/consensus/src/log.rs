//! The window of the replicated log a replica holds in memory: the entries above `base`, an op
//! at or below its latest checkpoint, chained to `base_checksum`. Entries at or below the
//! checkpoint are kept only while they fit (so a slightly lagging backup can repair from them)
//! and are discarded from the oldest; entries above it are never discarded. [`Log::link`]
//! decides how a log suffix received from a peer joins this one; the replica appends to it and
//! installs suffixes in `replica_log.rs`.

use super::message::{CHECKSUM_ROOT, Entry, LogSuffix, OpNumber};

/// How a received suffix relates to the local log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Link {
    /// Both hold the same entry at this op (so the same log up to it, by the hash chain) and
    /// disagree, or one of them ends, right above it.
    At(OpNumber),
    /// They share no op: the suffix starts above the local head, or the two disagree already
    /// at the lowest op both cover.
    Disjoint,
}

/// Ops `base + 1..=op()` of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Log {
    base: OpNumber,
    base_checksum: u64,
    entries: Vec<Entry>,
}

impl Log {
    /// The empty log of a new cluster.
    pub(super) fn root() -> Log {
        Log::from_checkpoint(0, CHECKSUM_ROOT, Vec::new())
    }

    /// A log growing from the checkpoint at `base` (whose entry has `base_checksum`).
    pub(super) fn from_checkpoint(base: OpNumber, base_checksum: u64, entries: Vec<Entry>) -> Log {
        let log = Log {
            base,
            base_checksum,
            entries,
        };
        assert!(log.as_suffix_is_chained(), "a log is chained to its base");
        log
    }

    fn as_suffix_is_chained(&self) -> bool {
        super::message::is_chained_from(self.base, self.base_checksum, &self.entries)
    }

    /// The highest op held.
    pub(super) fn op(&self) -> OpNumber {
        self.base + self.entries.len() as OpNumber
    }

    /// The op below the first entry held.
    pub(super) fn base(&self) -> OpNumber {
        self.base
    }

    /// The entries held, oldest first.
    pub(super) fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The checksum of the entry at the head.
    pub(super) fn head_checksum(&self) -> u64 {
        self.entries
            .last()
            .map_or(self.base_checksum, |entry| entry.checksum)
    }

    /// The entry at `op`, if held.
    pub(super) fn entry(&self, op: OpNumber) -> Option<&Entry> {
        let index = op.checked_sub(self.base + 1)?;
        self.entries.get(usize::try_from(index).ok()?)
    }

    /// The checksum of the entry at `op`, if held (the base included).
    pub(super) fn checksum_at(&self, op: OpNumber) -> Option<u64> {
        if op == self.base {
            return Some(self.base_checksum);
        }
        self.entry(op).map(|entry| entry.checksum)
    }

    /// Appends the next entry.
    pub(super) fn push(&mut self, entry: Entry) {
        assert_eq!(entry.op, self.op() + 1, "the log grows one op at a time");
        assert_eq!(
            entry.parent,
            self.head_checksum(),
            "each entry chains to the head"
        );
        self.entries.push(entry);
    }

    /// Drops the entries above `op` (at or above the base).
    pub(super) fn truncate_after(&mut self, op: OpNumber) {
        assert!(op >= self.base, "a log is never truncated below its base");
        self.entries.truncate((op - self.base) as usize);
    }

    /// Drops the entries at and below `op`, which becomes the base.
    pub(super) fn discard_through(&mut self, op: OpNumber) {
        if op <= self.base {
            return;
        }
        assert!(op <= self.op(), "a log discards only entries it holds");
        let Some(base_checksum) = self.checksum_at(op) else {
            return;
        };
        self.entries.drain(..(op - self.base) as usize);
        self.base = op;
        self.base_checksum = base_checksum;
    }

    /// The whole window, as sent in view-change and recovery messages.
    pub(super) fn suffix(&self) -> LogSuffix {
        LogSuffix {
            base: self.base,
            base_checksum: self.base_checksum,
            entries: self.entries.clone(),
        }
    }

    /// Where `suffix` (already checked to be chained) joins this log.
    pub(super) fn link(&self, suffix: &LogSuffix) -> Link {
        let low = self.base.max(suffix.base);
        let high = self.op().min(suffix.op());
        if low > high || self.checksum_at(low) != suffix.checksum_at(low) {
            return Link::Disjoint;
        }
        let mut common = low;
        while common < high && self.checksum_at(common + 1) == suffix.checksum_at(common + 1) {
            common += 1;
        }
        Link::At(common)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Request;

    fn chain(from: OpNumber, parent: u64, count: u64, tag: u8) -> Vec<Entry> {
        let mut parent = parent;
        (from..from + count)
            .map(|op| {
                let request = Request {
                    client: 1,
                    request_number: op,
                    operation: vec![tag],
                };
                let entry = Entry::new(op, 0, parent, vec![request]);
                parent = entry.checksum;
                entry
            })
            .collect()
    }

    #[test]
    fn a_suffix_links_where_the_chains_last_agree() {
        let entries = chain(1, CHECKSUM_ROOT, 10, 0);
        let mut log = Log::root();
        entries.iter().cloned().for_each(|entry| log.push(entry));
        log.discard_through(4);
        assert_eq!((log.base(), log.op(), log.entries().len()), (4, 10, 6));

        let mut diverging = entries[..7].to_vec();
        diverging.extend(chain(8, entries[6].checksum, 5, 9));
        let suffix = LogSuffix {
            base: 2,
            base_checksum: entries[1].checksum,
            entries: diverging[2..].to_vec(),
        };
        assert!(suffix.is_chained());
        assert_eq!(log.link(&suffix), Link::At(7));

        let ahead = LogSuffix {
            base: 11,
            base_checksum: 77,
            entries: Vec::new(),
        };
        assert_eq!(log.link(&ahead), Link::Disjoint);
        log.truncate_after(7);
        assert_eq!(log.head_checksum(), entries[6].checksum);
    }
}
