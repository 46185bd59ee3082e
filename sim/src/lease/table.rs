//! The data the metadata log holds and nodes learn: member identities and statuses, and the
//! shard table (`shard -> owner, generation`). A generation grows by one with every change of a
//! shard's owner, so a node can always tell which of two entries it heard of is newer. A
//! lineage names one unbroken history of a shard's state: a graceful move keeps it, a fresh
//! start after state was declared lost begins a new one.

use std::fmt;

/// A member: one incarnation of a machine. A removed member never comes back; the machine
/// joins again as a new incarnation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberId {
    /// The machine it runs on.
    pub machine: usize,
    /// Which time this machine joined.
    pub incarnation: u32,
}

impl fmt::Display for MemberId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "n{}.{}", self.machine, self.incarnation)
    }
}

/// A member's committed status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberStatus {
    /// May own shards and renew its lease.
    Up,
    /// Leaving gracefully: renews, gets no new shards, hands its shards off with their state.
    Leaving,
    /// Declared down by an operator: keeps its shards (and their state) but serves nothing,
    /// because its renewals are refused.
    Down,
    /// Removed by an operator (or after a graceful leave): its state is declared lost; its
    /// shards go to others once its lease has run out.
    Removed,
}

/// How the owner named by an entry gets the shard's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// From nothing: a new shard, or state declared lost.
    Fresh,
    /// From the previous owner, by a graceful handoff.
    HandOff {
        /// The previous owner, which hands the state over.
        from: MemberId,
    },
}

/// One shard's row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The member that serves the shard once it holds the state.
    pub owner: MemberId,
    /// Grows by one with every change of owner.
    pub generation: u64,
    /// The history of state the owner continues.
    pub lineage: u64,
    /// Where the owner's state comes from.
    pub start: Start,
    /// Whether the owner has the state (installed, or the handoff completed).
    pub settled: bool,
}

impl Entry {
    /// Members that may be serving the shard under this entry: the owner and, while a
    /// handoff is not settled, the previous owner (it serves until the handoff reaches it).
    pub fn possible_servers(&self) -> impl Iterator<Item = MemberId> {
        let source = match self.start {
            Start::HandOff { from } if !self.settled => Some(from),
            _ => None,
        };
        std::iter::once(self.owner).chain(source)
    }

    /// Whether `self` carries news over `other`: a later generation, or the same one settled.
    pub fn is_newer_than(&self, other: &Entry) -> bool {
        (self.generation, self.settled) > (other.generation, other.settled)
    }
}

/// The shard table: one entry per shard, indexed by shard number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// One entry per shard.
    pub entries: Vec<Entry>,
}

impl Table {
    /// Shards owned (or being received) by `member`.
    pub fn load_of(&self, member: MemberId) -> usize {
        self.entries
            .iter()
            .filter(|entry| entry.owner == member)
            .count()
    }

    /// Unsettled entries: moves and fresh starts in flight.
    pub fn unsettled(&self) -> usize {
        self.entries.iter().filter(|entry| !entry.settled).count()
    }

    /// Whether `member` may serve some shard under this table.
    pub fn references(&self, member: MemberId) -> bool {
        self.entries
            .iter()
            .any(|entry| entry.possible_servers().any(|server| server == member))
    }
}
