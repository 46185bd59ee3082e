//! Who can reach whom, and what happens to a message on the way. A partition puts every
//! machine and every voter of the log into one of a few groups; a machine reaches the log when
//! its group holds a majority of the voters, and two machines reach each other when they share
//! a group. Clients sit outside and reach every machine. A message's fate is decided when it is
//! sent: cut off then, it is lost; otherwise it may still be lost, duplicated, or delayed —
//! sometimes by seconds, so it can arrive after a partition started or healed, and out of order;
//! a machine's inbound link may be congested for a while, delaying everything it receives.

use super::message::Endpoint;
use crate::rng::SimRng;

/// Voters of the metadata log; a majority of them must be reachable for anything to commit.
pub const VOTERS: usize = 3;

/// Most groups a partition splits the cluster into.
const PARTITION_GROUPS_MAX: u64 = 3;

/// The current partition.
#[derive(Clone, Debug)]
pub struct Topology {
    machine_group: Vec<u8>,
    voter_group: [u8; VOTERS],
}

impl Topology {
    /// Everyone connected.
    pub fn healed(machines: usize) -> Topology {
        Topology {
            machine_group: vec![0; machines],
            voter_group: [0; VOTERS],
        }
    }

    /// A random split into two or three groups (possibly leaving no majority anywhere).
    pub fn split(&mut self, rng: &mut SimRng) {
        let groups = rng.between(2, PARTITION_GROUPS_MAX);
        for group in self
            .machine_group
            .iter_mut()
            .chain(self.voter_group.iter_mut())
        {
            *group = rng.below(groups) as u8;
        }
    }

    /// Everyone connected again.
    pub fn heal(&mut self) {
        self.machine_group.iter_mut().for_each(|group| *group = 0);
        self.voter_group = [0; VOTERS];
    }

    /// Whether some group is cut off from another.
    pub fn is_split(&self) -> bool {
        let first = self.voter_group[0];
        self.machine_group
            .iter()
            .chain(&self.voter_group)
            .any(|group| *group != first)
    }

    /// The group that holds a majority of voters, if any: where the log lives now.
    fn log_group(&self) -> Option<u8> {
        (0..=PARTITION_GROUPS_MAX as u8).find(|group| {
            self.voter_group
                .iter()
                .filter(|voter| *voter == group)
                .count()
                > VOTERS / 2
        })
    }

    /// Whether the log can commit at all.
    pub fn log_available(&self) -> bool {
        self.log_group().is_some()
    }

    /// Whether `machine` can reach the log.
    pub fn reaches_log(&self, machine: usize) -> bool {
        self.log_group()
            .is_some_and(|group| self.machine_group.get(machine) == Some(&group))
    }

    /// Whether a message from `from` to `to` can be sent now.
    pub fn can_send(&self, from: Endpoint, to: Endpoint) -> bool {
        match (from, to) {
            (Endpoint::Client, _) | (_, Endpoint::Client) => true,
            (Endpoint::Log, Endpoint::Log) => self.log_available(),
            (Endpoint::Log, Endpoint::Machine(machine))
            | (Endpoint::Machine(machine), Endpoint::Log) => self.reaches_log(machine),
            (Endpoint::Machine(first), Endpoint::Machine(second)) => {
                self.machine_group.get(first) == self.machine_group.get(second)
            }
        }
    }
}

/// Extra delay of every message to a machine whose inbound link is congested (a stalled
/// process, a saturated link): its answers, renewal answers included, arrive seconds late.
const CONGESTION_DELAY_MS_MAX: u64 = 3_000;

/// Loss, duplication and delay of the network.
#[derive(Clone, Debug)]
pub struct LinkFaults {
    loss_per_mille: u64,
    duplicate_per_mille: u64,
    slow_per_mille: u64,
    very_slow_per_mille: u64,
    congested: Vec<bool>,
}

impl LinkFaults {
    /// The network while faults are injected: some loss, duplicates, and a long tail of delays
    /// (up to four seconds) that reorders messages and delivers some after a partition.
    pub fn stormy(machines: usize) -> LinkFaults {
        LinkFaults {
            loss_per_mille: 30,
            duplicate_per_mille: 20,
            slow_per_mille: 150,
            very_slow_per_mille: 50,
            congested: vec![false; machines],
        }
    }

    /// The network once faults have healed: nothing lost, short delays, nothing congested.
    pub fn calm(machines: usize) -> LinkFaults {
        LinkFaults {
            loss_per_mille: 0,
            duplicate_per_mille: 0,
            slow_per_mille: 0,
            very_slow_per_mille: 0,
            congested: vec![false; machines],
        }
    }

    /// Starts or ends congestion of `machine`'s inbound link.
    pub fn set_congested(&mut self, machine: usize, congested: bool) {
        if let Some(flag) = self.congested.get_mut(machine) {
            *flag = congested;
        }
    }

    /// Whether `machine`'s inbound link is congested.
    pub fn is_congested(&self, machine: usize) -> bool {
        self.congested.get(machine) == Some(&true)
    }

    /// How many copies of a message arrive: 0 (lost), 1, or 2 (duplicated).
    pub fn copies(&self, rng: &mut SimRng) -> usize {
        if rng.per_mille(self.loss_per_mille) {
            0
        } else if rng.per_mille(self.duplicate_per_mille) {
            2
        } else {
            1
        }
    }

    /// How long one copy to `to` takes.
    pub fn delay_ms(&self, rng: &mut SimRng, to: Endpoint) -> u64 {
        let roll = rng.below(1_000);
        let base_ms = if roll < self.very_slow_per_mille {
            rng.between(500, 4_000)
        } else if roll < self.very_slow_per_mille + self.slow_per_mille {
            rng.between(10, 500)
        } else {
            rng.between(1, 10)
        };
        let congested = matches!(to, Endpoint::Machine(machine) if self.is_congested(machine));
        base_ms
            + if congested {
                rng.between(500, CONGESTION_DELAY_MS_MAX)
            } else {
                0
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_majority_side_reaches_the_log() {
        let mut topology = Topology::healed(3);
        topology.machine_group = vec![0, 1, 1];
        topology.voter_group = [1, 1, 0];
        assert!(!topology.reaches_log(0));
        assert!(topology.reaches_log(1));
        assert!(topology.can_send(Endpoint::Machine(1), Endpoint::Machine(2)));
        assert!(!topology.can_send(Endpoint::Machine(0), Endpoint::Machine(1)));
        assert!(topology.can_send(Endpoint::Client, Endpoint::Machine(0)));
        topology.voter_group = [0, 1, 2];
        assert!(!topology.log_available());
        topology.heal();
        assert!(!topology.is_split() && topology.reaches_log(0));
    }
}
