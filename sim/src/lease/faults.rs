//! Fault injection, and the heal at the end of the faulty phase. Every fault tick may split or heal
//! the network, congest a machine's inbound link, crash or restart a process, let a spare machine
//! join, make a member leave, fail the coordinator over, or have an operator act: declare an
//! unreachable member down, bring a reachable down member back up, or remove an unreachable member
//! (declaring its state lost) — and, rarely, remove a member that was reachable after all: safety
//! must not depend on the operator being right.

use super::network::LinkFaults;
use super::queue::Event;
use super::table::MemberStatus;
use super::world::World;

/// Longest gap between a coordinator instance failing and the next one starting.
const FAILOVER_GAP_MS_MAX: u64 = 2_000;

impl World {
    /// One fault tick: each kind of fault strikes with its own (per-mille) chance.
    pub(super) fn inject_fault(&mut self) {
        let split = self.topology.is_split();
        if (split && self.rng.per_mille(50)) || (!split && self.rng.per_mille(40)) {
            self.toggle_partition();
        }
        if self.rng.per_mille(15) {
            self.crash_one();
        }
        for machine in 0..self.nodes.len() {
            let congested = self.links.is_congested(machine);
            if (congested && self.rng.per_mille(80)) || (!congested && self.rng.per_mille(15)) {
                self.links.set_congested(machine, !congested);
            }
        }
        for machine in 0..self.nodes.len() {
            if self.nodes[machine].is_crashed() && self.rng.per_mille(50) {
                self.nodes[machine].restart(self.real_ms);
            }
        }
        if self.rng.per_mille(10) {
            self.join_spare();
        }
        if self.rng.per_mille(8) {
            self.leave_one();
        }
        if self.rng.per_mille(10) && self.coordinator.is_some() {
            self.fail_over();
        }
        if self.rng.per_mille(150) {
            self.operator_removes(true);
        }
        if self.rng.per_mille(3) {
            self.operator_removes(false);
        }
        if self.rng.per_mille(20) {
            self.operator_sets(MemberStatus::Up, MemberStatus::Down, false);
        }
        if self.rng.per_mille(50) {
            self.operator_sets(MemberStatus::Down, MemberStatus::Up, true);
        }
    }

    fn toggle_partition(&mut self) {
        if self.topology.is_split() {
            self.topology.heal();
        } else {
            self.topology.split(&mut self.rng);
            self.report.partitions += 1;
        }
    }

    fn running(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|machine| self.nodes[*machine].is_running())
            .collect()
    }

    fn crash_one(&mut self) {
        let running = self.running();
        if running.len() >= 2 {
            let machine = running[self.rng.index(running.len())];
            self.nodes[machine].crash();
            self.report.crashes += 1;
        }
    }

    fn join_spare(&mut self) {
        let spares: Vec<usize> = (0..self.nodes.len())
            .filter(|m| self.nodes[*m].is_departed())
            .collect();
        if !spares.is_empty() {
            let machine = spares[self.rng.index(spares.len())];
            self.nodes[machine].join_as_new_member(self.real_ms);
        }
    }

    fn leave_one(&mut self) {
        let up: Vec<usize> = self
            .running()
            .into_iter()
            .filter(|machine| self.nodes[*machine].known_status() == Some(MemberStatus::Up))
            .collect();
        if up.len() >= 3 {
            let machine = up[self.rng.index(up.len())];
            self.nodes[machine].request_leave();
        }
    }

    fn fail_over(&mut self) {
        // The deposed instance goes on for a while on the table as it last read it.
        if let Some(coordinator) = self.coordinator.take() {
            let wakes_ms = self.real_ms + self.rng.below(super::world::DEPOSED_STALL_MS_MAX);
            let until_ms = wakes_ms + self.rng.below(super::world::DEPOSED_FOR_MS_MAX);
            self.deposed = Some(super::world::Deposed {
                coordinator,
                belief: self.log.clone(),
                epoch: self.log.seated_epoch(),
                wakes_ms,
                until_ms,
            });
        }
        self.report.failovers += 1;
        let gap_ms = self.rng.below(FAILOVER_GAP_MS_MAX);
        self.queue
            .schedule(self.real_ms + gap_ms, Event::CoordinatorStart);
    }

    /// Whether the machine of the member is cut off from the log (or its process is down).
    fn unreachable(&self, machine: usize) -> bool {
        !self.nodes[machine].is_running() || !self.topology.reaches_log(machine)
    }

    /// An operator removes a member: one that is unreachable, or (`only_unreachable` false)
    /// any member at all.
    fn operator_removes(&mut self, only_unreachable: bool) {
        if !self.topology.log_available() {
            return;
        }
        let candidates: Vec<_> = self
            .log
            .members()
            .filter(|(member, status)| {
                *status != MemberStatus::Removed
                    && (!only_unreachable || self.unreachable(member.machine))
            })
            .map(|(member, _)| member)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let member = candidates[self.rng.index(candidates.len())];
        if self.log.remove(member) {
            self.report.removals += 1;
        }
    }

    /// An operator moves a member from `from` to `to`: a reachable one if `reachable`, else an
    /// unreachable one.
    fn operator_sets(&mut self, from: MemberStatus, to: MemberStatus, reachable: bool) {
        if !self.topology.log_available() {
            return;
        }
        let candidates: Vec<_> = self
            .log
            .members()
            .filter(|(member, status)| {
                *status == from && self.unreachable(member.machine) != reachable
            })
            .map(|(member, _)| member)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let member = candidates[self.rng.index(candidates.len())];
        if self.log.set_status(member, from, to) && to == MemberStatus::Down {
            self.report.downs += 1;
        }
    }

    /// The end of the faulty phase: the network heals and calms, crashed processes restart, a
    /// coordinator runs, down members come back up, and some machine runs.
    pub(super) fn heal(&mut self) {
        self.healed = true;
        self.topology.heal();
        self.links = LinkFaults::calm(self.nodes.len());
        for node in &mut self.nodes {
            node.restart(self.real_ms);
        }
        if self.coordinator.is_none() {
            self.start_coordinator();
        }
        let down: Vec<_> = self
            .log
            .members()
            .filter(|(_, status)| *status == MemberStatus::Down)
            .map(|(member, _)| member)
            .collect();
        for member in down {
            self.log
                .set_status(member, MemberStatus::Down, MemberStatus::Up);
        }
        if self.running().is_empty() {
            self.join_spare();
        }
    }
}
