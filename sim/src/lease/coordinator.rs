//! One coordinator instance, running beside the log: it reads the committed state directly and
//! commits its decisions at once (as a primary would), but reaches nodes over the network. A
//! failover replaces the instance with a new one that has its own clock and remembers nothing:
//! its [`ReassignGuard`] starts then, and it rebuilds the rest from the log.
//!
//! Each tick it (1) restarts fresh the shards whose possible servers include a removed member,
//! once the guard says every such member's lease has run out — giving the shard to a possible
//! server still a member if there is one (it may be serving right now), else to the least
//! loaded up member; (2) drains leaving members by graceful moves and removes them once they
//! are referenced by no entry; (3) spreads shards over up members; (4) resends handoffs not yet
//! completed; and announces the table when it changed.

use std::collections::{BTreeMap, BTreeSet};

use super::clock::DriftingClock;
use super::log::MetadataLog;
use super::message::{Endpoint, Message};
use super::options::Canary;
use super::table::{Entry, MemberId, MemberStatus, Start};
use tessera_sharding::lease::{GONE_OWNERS_MAX, LeaseConfig, ReassignGuard};

/// Graceful moves in flight at once; spreading waits while this many are unsettled.
pub const MOVES_IN_FLIGHT_MAX: usize = 3;

/// How long a handoff waits for its completion before the coordinator sends it again.
const HANDOFF_RETRY_MS: u64 = 500;

/// What a tick changed, for the run's report.
#[derive(Debug, Default)]
pub struct TickCounts {
    pub moves: u64,
    pub fresh_restarts: u64,
    pub leaves: u64,
}

/// One coordinator instance.
#[derive(Debug)]
pub struct Coordinator {
    clock: DriftingClock,
    guard: ReassignGuard,
    tracked: BTreeSet<MemberId>,
    /// Per shard: the generation and local time of the last handoff sent.
    handoffs_sent: BTreeMap<usize, (u64, u64)>,
    skip_guard: bool,
}

impl Coordinator {
    /// An instance starting at real time `real_ms` on `clock`.
    pub fn start(
        clock: DriftingClock,
        config: LeaseConfig,
        real_ms: u64,
        canary: Option<Canary>,
    ) -> Coordinator {
        Coordinator {
            clock,
            guard: ReassignGuard::new(config, clock.local_ms(real_ms)),
            tracked: BTreeSet::new(),
            handoffs_sent: BTreeMap::new(),
            skip_guard: canary == Some(Canary::ReassignWithoutWait),
        }
    }

    /// One round of decisions; sends go out from the log.
    pub fn tick(
        &mut self,
        log: &mut MetadataLog,
        real_ms: u64,
        sends: &mut Vec<(Endpoint, Message)>,
    ) -> TickCounts {
        let now_ms = self.clock.local_ms(real_ms);
        let fresh_restarts = self.restart_shards_of_gone(log, now_ms);
        self.forget_unreferenced(log);
        let (drained, leaves) = self.drain_leaving(log);
        let moves = drained + self.spread(log);
        self.send_handoffs(log, now_ms, sends);
        if fresh_restarts + moves + leaves > 0 {
            announce(log, sends);
        }
        TickCounts {
            moves,
            fresh_restarts,
            leaves,
        }
    }

    /// Step (1): shards a removed member may still be serving.
    fn restart_shards_of_gone(&mut self, log: &mut MetadataLog, now_ms: u64) -> u64 {
        let mut restarts = 0;
        for (shard, entry) in log.table().entries.clone().into_iter().enumerate() {
            let gone: Vec<MemberId> = entry
                .possible_servers()
                .filter(|m| is_gone(log, *m))
                .collect();
            if gone.is_empty() {
                continue;
            }
            for member in &gone {
                if self.tracked.len() < GONE_OWNERS_MAX && self.tracked.insert(*member) {
                    self.guard.owner_gone(&member.to_string(), now_ms);
                }
            }
            let expired = gone
                .iter()
                .all(|m| self.guard.may_reassign(&m.to_string(), now_ms));
            if !(expired || self.skip_guard) {
                continue;
            }
            let still_member = entry.possible_servers().find(|m| !is_gone(log, *m));
            let target = still_member.or_else(|| least_loaded_up(log, None));
            if let Some(target) = target {
                restarts += u64::from(log.restart_fresh(shard, entry.generation, target));
            }
        }
        restarts
    }

    /// Forgets gone members no entry refers to any more (bounds the guard).
    fn forget_unreferenced(&mut self, log: &MetadataLog) {
        let table = log.table();
        let forgotten: Vec<MemberId> = self
            .tracked
            .iter()
            .copied()
            .filter(|m| !table.references(*m))
            .collect();
        for member in forgotten {
            self.guard.owner_back(&member.to_string());
            self.tracked.remove(&member);
        }
    }

    /// Step (2): move settled shards off leaving members; remove those that hold nothing.
    fn drain_leaving(&mut self, log: &mut MetadataLog) -> (u64, u64) {
        let leaving: Vec<MemberId> = log
            .members()
            .filter(|(_, status)| *status == MemberStatus::Leaving)
            .map(|(member, _)| member)
            .collect();
        let mut moves = 0;
        let mut leaves = 0;
        for member in leaving {
            if !log.table().references(member) {
                leaves += u64::from(log.remove(member));
                continue;
            }
            let owned: Vec<(usize, Entry)> = owned_settled(log, member);
            for (shard, entry) in owned {
                if log.table().unsettled() >= MOVES_IN_FLIGHT_MAX {
                    return (moves, leaves);
                }
                if let Some(target) = least_loaded_up(log, Some(member)) {
                    moves += u64::from(log.move_shard(shard, entry.generation, target));
                }
            }
        }
        (moves, leaves)
    }

    /// Step (3): one move from the most to the least loaded up member, if they differ by two.
    fn spread(&mut self, log: &mut MetadataLog) -> u64 {
        if log.table().unsettled() >= MOVES_IN_FLIGHT_MAX {
            return 0;
        }
        let loads: Vec<(usize, MemberId)> = log
            .up_members()
            .into_iter()
            .map(|m| (log.table().load_of(m), m))
            .collect();
        let (Some(&(most, busiest)), Some(&(least, idlest))) =
            (loads.iter().max(), loads.iter().min())
        else {
            return 0;
        };
        if most < least + 2 {
            return 0;
        }
        match owned_settled(log, busiest).first() {
            Some(&(shard, entry)) => u64::from(log.move_shard(shard, entry.generation, idlest)),
            None => 0,
        }
    }

    /// Step (4): tells each unsettled handoff's previous owner (again) to hand off.
    fn send_handoffs(
        &mut self,
        log: &MetadataLog,
        now_ms: u64,
        sends: &mut Vec<(Endpoint, Message)>,
    ) {
        for (shard, entry) in log.table().entries.iter().enumerate() {
            let Start::HandOff { from } = entry.start else {
                continue;
            };
            if entry.settled || is_gone(log, from) {
                continue;
            }
            let due = match self.handoffs_sent.get(&shard) {
                Some(&(generation, sent_ms)) => {
                    generation != entry.generation || now_ms >= sent_ms + HANDOFF_RETRY_MS
                }
                None => true,
            };
            if due {
                self.handoffs_sent.insert(shard, (entry.generation, now_ms));
                let handoff = Message::HandOff {
                    source: from,
                    shard,
                    generation: entry.generation,
                    target: entry.owner,
                };
                sends.push((Endpoint::Machine(from.machine), handoff));
            }
        }
    }
}

/// Sends the committed table to every machine that hosts a member not removed.
pub fn announce(log: &MetadataLog, sends: &mut Vec<(Endpoint, Message)>) {
    for (member, status) in log.members() {
        if status != MemberStatus::Removed {
            let update = Message::TableUpdate {
                table: log.table().clone(),
            };
            sends.push((Endpoint::Machine(member.machine), update));
        }
    }
}

/// Removed, or unknown to the log: its state is declared lost.
fn is_gone(log: &MetadataLog, member: MemberId) -> bool {
    matches!(log.status(member), Some(MemberStatus::Removed) | None)
}

/// Settled shards owned by `member`.
fn owned_settled(log: &MetadataLog, member: MemberId) -> Vec<(usize, Entry)> {
    log.table()
        .entries
        .iter()
        .enumerate()
        .filter(|(_, entry)| entry.owner == member && entry.settled)
        .map(|(shard, entry)| (shard, *entry))
        .collect()
}

/// The up member with the fewest shards (ties to the smallest id), other than `except`.
fn least_loaded_up(log: &MetadataLog, except: Option<MemberId>) -> Option<MemberId> {
    log.up_members()
        .into_iter()
        .filter(|member| Some(*member) != except)
        .min_by_key(|member| (log.table().load_of(*member), *member))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SimRng;

    fn member(machine: usize) -> MemberId {
        MemberId {
            machine,
            incarnation: 1,
        }
    }

    /// A log of members 0 and 1 with shard 0 on member 0, settled; a coordinator on a clock
    /// without drift started at real time 0.
    fn settled_cluster() -> (MetadataLog, Coordinator) {
        let mut log = MetadataLog::new(&[member(0), member(1)], 1);
        assert!(log.settle(0, 1));
        let clock = DriftingClock::random(&mut SimRng::new(1), 0);
        (
            log,
            Coordinator::start(clock, LeaseConfig::default(), 0, None),
        )
    }

    #[test]
    fn a_removed_owners_shard_waits_until_its_lease_must_have_run_out() {
        let (mut log, mut coordinator) = settled_cluster();
        let wait_ms = LeaseConfig::default().reassign_wait_ms();
        log.remove(member(0));
        let mut sends = Vec::new();
        coordinator.tick(&mut log, 1_000, &mut sends);
        coordinator.tick(&mut log, 1_000 + wait_ms - 1, &mut sends);
        assert_eq!(log.table().entries[0].owner, member(0));
        coordinator.tick(&mut log, 1_000 + wait_ms, &mut sends);
        let entry = log.table().entries[0];
        assert_eq!((entry.owner, entry.start), (member(1), Start::Fresh));
    }

    #[test]
    fn a_handoff_source_still_a_member_gets_the_shard_when_the_target_is_removed() {
        let (mut log, mut coordinator) = settled_cluster();
        assert!(log.move_shard(0, 1, member(1)));
        log.remove(member(1));
        let mut sends = Vec::new();
        coordinator.tick(&mut log, 0, &mut sends);
        coordinator.tick(
            &mut log,
            LeaseConfig::default().reassign_wait_ms(),
            &mut sends,
        );
        let entry = log.table().entries[0];
        assert_eq!((entry.owner, entry.generation), (member(0), 3));
    }
}
