//! The metadata plane as one linearizable log (an abstract VSR: commands commit in one order
//! the moment they reach it; consensus itself is not simulated). It holds the members and the
//! shard table and applies commands deterministically. Shard commands are compare-and-set on
//! the generation, so a stale coordinator instance cannot undo a newer decision; and a deposed
//! coordinator's decisions are fenced by its epoch ([`MetadataLog::decide_as`]).

use std::collections::BTreeMap;
use std::rc::Rc;

use super::table::{Entry, MemberId, MemberStatus, Start, Table};

/// Members the log remembers, removed ones included (a removed member's renewals must keep
/// being refused). Joins beyond it are refused.
pub const MEMBERS_MAX: usize = 512;

/// Why the log refused a member's command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Declared down by an operator.
    Down,
    /// Removed: this identity is finished.
    Removed,
    /// Not a member (yet), or the member table is full.
    Unknown,
}

/// The replicated state: members and the shard table.
#[derive(Clone, Debug)]
pub struct MetadataLog {
    members: BTreeMap<MemberId, MemberStatus>,
    table: Rc<Table>,
    lineages_started: u64,
    /// The seated coordinator's epoch (the host's `SeatCoordinator`).
    seated_epoch: u64,
    /// Whether decisions of a deposed coordinator are refused (false: the
    /// [`Canary::NoCoordinatorFence`](super::Canary::NoCoordinatorFence) canary).
    fenced: bool,
}

impl MetadataLog {
    /// A log where `initial` members are up and the shards are spread over them round-robin,
    /// each to be started fresh.
    pub fn new(initial: &[MemberId], shards: usize) -> MetadataLog {
        assert!(
            !initial.is_empty(),
            "a cluster starts with at least one member"
        );
        let members = initial.iter().map(|m| (*m, MemberStatus::Up)).collect();
        let entries = (0..shards)
            .map(|shard| Entry {
                owner: initial[shard % initial.len()],
                generation: 1,
                lineage: shard as u64 + 1,
                start: Start::Fresh,
                settled: false,
            })
            .collect();
        MetadataLog {
            members,
            table: Rc::new(Table { entries }),
            lineages_started: shards as u64,
            seated_epoch: 0,
            fenced: true,
        }
    }

    /// Drops the coordinator fence (a canary).
    pub fn without_fence(mut self) -> MetadataLog {
        self.fenced = false;
        self
    }

    /// A new coordinator takes the seat; its epoch.
    pub fn seat_coordinator(&mut self) -> u64 {
        self.seated_epoch += 1;
        self.seated_epoch
    }

    /// The seated coordinator's epoch.
    pub fn seated_epoch(&self) -> u64 {
        self.seated_epoch
    }

    /// A decision of the coordinator of `epoch`, made on its own (possibly stale) copy of the
    /// table: `shard` read at `expected_generation` becomes `entry`. Committed only if that
    /// coordinator holds the seat and the shard still has the generation it read, as the
    /// host's catalog does; without the fence it overwrites whatever is there.
    pub fn decide_as(
        &mut self,
        epoch: u64,
        shard: usize,
        expected_generation: u64,
        entry: Entry,
    ) -> bool {
        if !self.fenced {
            let Some(slot) = Rc::make_mut(&mut self.table).entries.get_mut(shard) else {
                return false;
            };
            *slot = entry;
            self.lineages_started = self.lineages_started.max(entry.lineage);
            return true;
        }
        epoch == self.seated_epoch && self.change(shard, expected_generation, |_| Some(entry))
    }

    /// The committed shard table.
    pub fn table(&self) -> &Rc<Table> {
        &self.table
    }

    /// `member`'s status, if it ever joined.
    pub fn status(&self, member: MemberId) -> Option<MemberStatus> {
        self.members.get(&member).copied()
    }

    /// Every member with its status, in id order.
    pub fn members(&self) -> impl Iterator<Item = (MemberId, MemberStatus)> + '_ {
        self.members
            .iter()
            .map(|(member, status)| (*member, *status))
    }

    /// Up members, in id order.
    pub fn up_members(&self) -> Vec<MemberId> {
        self.members()
            .filter(|(_, status)| *status == MemberStatus::Up)
            .map(|(member, _)| member)
            .collect()
    }

    /// A lease renewal: committed for an up or leaving member, refused otherwise.
    pub fn renew(&self, member: MemberId) -> Result<MemberStatus, Refusal> {
        match self.status(member) {
            Some(status @ (MemberStatus::Up | MemberStatus::Leaving)) => Ok(status),
            Some(MemberStatus::Down) => Err(Refusal::Down),
            Some(MemberStatus::Removed) => Err(Refusal::Removed),
            None => Err(Refusal::Unknown),
        }
    }

    /// A node joins (or its restarted process announces itself): a new member becomes up; a
    /// known member keeps its status.
    pub fn join(&mut self, member: MemberId) -> Result<MemberStatus, Refusal> {
        match self.status(member) {
            Some(MemberStatus::Removed) => Err(Refusal::Removed),
            Some(status) => Ok(status),
            None if self.members.len() >= MEMBERS_MAX => Err(Refusal::Unknown),
            None => {
                self.members.insert(member, MemberStatus::Up);
                Ok(MemberStatus::Up)
            }
        }
    }

    /// A member asks to leave gracefully.
    pub fn leave(&mut self, member: MemberId) -> Result<(), Refusal> {
        match self.status(member) {
            Some(MemberStatus::Up | MemberStatus::Leaving) => {
                self.members.insert(member, MemberStatus::Leaving);
                Ok(())
            }
            Some(MemberStatus::Down) => Err(Refusal::Down),
            Some(MemberStatus::Removed) => Err(Refusal::Removed),
            None => Err(Refusal::Unknown),
        }
    }

    /// An operator moves `member` from `from` to `to`; false if it was not in `from`.
    pub fn set_status(&mut self, member: MemberId, from: MemberStatus, to: MemberStatus) -> bool {
        match self.members.get_mut(&member) {
            Some(status) if *status == from => {
                *status = to;
                true
            }
            _ => false,
        }
    }

    /// Removes `member` (operator removal, or the end of a graceful leave); false if it was
    /// removed already or never joined.
    pub fn remove(&mut self, member: MemberId) -> bool {
        match self.members.get_mut(&member) {
            Some(status) if *status != MemberStatus::Removed => {
                *status = MemberStatus::Removed;
                true
            }
            _ => false,
        }
    }

    /// A graceful move of a settled shard at `expected_generation` to `to`.
    pub fn move_shard(&mut self, shard: usize, expected_generation: u64, to: MemberId) -> bool {
        self.change(shard, expected_generation, |entry| {
            entry.settled.then_some(Entry {
                owner: to,
                generation: entry.generation + 1,
                lineage: entry.lineage,
                start: Start::HandOff { from: entry.owner },
                settled: false,
            })
        })
    }

    /// Gives the shard to `to` with fresh state (the old state is declared lost).
    pub fn restart_fresh(&mut self, shard: usize, expected_generation: u64, to: MemberId) -> bool {
        let lineage = self.lineages_started + 1;
        let changed = self.change(shard, expected_generation, |entry| {
            Some(Entry {
                owner: to,
                generation: entry.generation + 1,
                lineage,
                start: Start::Fresh,
                settled: false,
            })
        });
        if changed {
            self.lineages_started = lineage;
        }
        changed
    }

    /// The owner installed the state, or the previous owner completed the handoff.
    pub fn settle(&mut self, shard: usize, generation: u64) -> bool {
        self.change(shard, generation, |entry| {
            (!entry.settled).then_some(Entry {
                settled: true,
                ..*entry
            })
        })
    }

    fn change(
        &mut self,
        shard: usize,
        expected_generation: u64,
        next: impl FnOnce(&Entry) -> Option<Entry>,
    ) -> bool {
        let Some(current) = self.table.entries.get(shard) else {
            return false;
        };
        if current.generation != expected_generation {
            return false;
        }
        let Some(entry) = next(current) else {
            return false;
        };
        Rc::make_mut(&mut self.table).entries[shard] = entry;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(machine: usize) -> MemberId {
        MemberId {
            machine,
            incarnation: 1,
        }
    }

    #[test]
    fn removed_members_are_refused_for_good() {
        let mut log = MetadataLog::new(&[member(0), member(1)], 4);
        assert_eq!(log.renew(member(0)), Ok(MemberStatus::Up));
        assert!(log.remove(member(0)));
        assert_eq!(log.renew(member(0)), Err(Refusal::Removed));
        assert_eq!(log.join(member(0)), Err(Refusal::Removed));
        assert!(log.set_status(member(1), MemberStatus::Up, MemberStatus::Down));
        assert_eq!(log.renew(member(1)), Err(Refusal::Down));
    }

    #[test]
    fn shard_commands_are_compare_and_set_on_the_generation() {
        let mut log = MetadataLog::new(&[member(0), member(1)], 2);
        assert!(
            !log.move_shard(0, 1, member(1)),
            "unsettled shards do not move"
        );
        assert!(log.settle(0, 1));
        assert!(log.move_shard(0, 1, member(1)));
        assert!(
            !log.move_shard(0, 1, member(0)),
            "a stale generation changes nothing"
        );
        let entry = log.table().entries[0];
        assert_eq!((entry.owner, entry.generation), (member(1), 2));
        assert!(log.restart_fresh(0, 2, member(1)));
        assert_ne!(log.table().entries[0].lineage, entry.lineage);
    }
}
