//! The replica's side of its log (`log.rs`): appending an entry (journaling it), deciding where a
//! log suffix received from a peer joins ([`Join`]), and installing it.

use super::journal::Journal;
use super::log::Link;
use super::message::{Entry, LogSuffix, OpNumber, ReplicaIndex};
use super::replica::Replica;
use super::state_machine::StateMachine;

/// What a replica can do with a log suffix from a peer (see [`Replica::join`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Join {
    /// Install it above this op, where both logs agree.
    At(OpNumber),
    /// Not yet: a state transfer must bring the ops below it first.
    Pending,
    /// Never: it predates the state the replica has applied.
    Stale,
}

impl<J: Journal, S: StateMachine> Replica<J, S> {
    pub(super) fn append(&mut self, entry: Entry) {
        self.journal.append_entry(&entry);
        self.log.push(entry);
        self.durable_dirty = true;
    }

    /// Where `suffix` would join the log, if it can: it must agree with the state the replica
    /// has applied, link to the log and fit in the window above the checkpoint.
    ///
    /// A suffix that ends below the applied state, or disagrees with it, is [`Join::Stale`]: a
    /// replica that installed a checkpoint from a later view can receive a log of an earlier
    /// one, whose uncommitted tail that later view replaced. A suffix that starts above the
    /// applied state and does not link is [`Join::Pending`]: the replica misses ops below it
    /// (committed: a suffix's base is) and asks `source` for its checkpoint.
    pub(super) fn join(&mut self, suffix: &LogSuffix, source: ReplicaIndex) -> Join {
        let applied_checksum = self.log.checksum_at(self.applied);
        let consistent = suffix.op() >= self.applied
            && suffix
                .checksum_at(self.applied)
                .is_none_or(|checksum| Some(checksum) == applied_checksum);
        if !consistent {
            self.ignore();
            return Join::Stale;
        }
        let fits = suffix.op().saturating_sub(self.checkpoint.op) <= self.config.log_entries_max();
        match self.log.link(suffix) {
            Link::At(common) if fits => Join::At(common),
            link => {
                assert!(
                    link != Link::Disjoint || suffix.base > self.applied,
                    "a log that agrees with the applied state links to it"
                );
                self.request_state(source);
                Join::Pending
            }
        }
    }

    /// Replaces the log above `common` (where it agrees with `suffix`, see [`Replica::join`])
    /// with the suffix's entries. Committed ops are never
    /// replaced.
    pub(super) fn install_suffix(&mut self, suffix: LogSuffix, common: OpNumber) {
        assert!(
            common >= self.applied && suffix.op() >= self.applied,
            "a committed op is never truncated or changed by a view change"
        );
        self.log.truncate_after(common);
        for entry in suffix.entries.into_iter().filter(|entry| entry.op > common) {
            self.append(entry);
        }
        self.durable_dirty = true;
    }
}
