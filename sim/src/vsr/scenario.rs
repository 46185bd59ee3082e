//! What a simulated run is made of: the options that do not come from the seed (which canary
//! to run, how long the fault phase lasts), the `Scenario` drawn from the seed (cluster size,
//! load, fault rates, checkpoint interval, a long outage), and what a run reports.

use super::canary::Canary;
use super::network::NetworkFaults;
use super::workload::WorkloadCounts;
use crate::rng::SimRng;
use tessera_consensus::config::Config;
use tessera_consensus::message::ReplicaIndex;

/// Knobs of a run that do not come from the seed.
#[derive(Clone, Copy, Debug)]
pub struct SimulationOptions {
    /// Run a deliberately broken replica.
    pub canary: Canary,
    /// Length of the fault phase.
    pub fault_ticks: u64,
}

impl Default for SimulationOptions {
    fn default() -> SimulationOptions {
        SimulationOptions {
            canary: Canary::None,
            fault_ticks: 3_000,
        }
    }
}

/// What a passing run did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Cluster size.
    pub replica_count: u8,
    /// Ops committed.
    pub ops_committed: u64,
    /// Requests acknowledged to clients.
    pub requests_acknowledged: u64,
    /// Crashes injected.
    pub crashes: u64,
    /// Of the crashes, those that lost the replica's disk.
    pub disks_lost: u64,
    /// Leadership transfers asked for (`Replica::take_primary`; a primary or a replica not
    /// caught up ignores one).
    pub primary_takeovers: u64,
    /// Checkpoints taken, over all replicas.
    pub checkpoints_taken: u64,
    /// Checkpoints installed by state transfer, over all replicas.
    pub states_transferred: u64,
    /// Transferred checkpoints rejected by their checksum, over all replicas.
    pub states_rejected: u64,
    /// Ticks until convergence after the fault phase.
    pub convergence_ticks: u64,
    /// What the workload's own check counted.
    pub workload: WorkloadCounts,
}

/// The result of one seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// The summary, or what went wrong.
    pub result: Result<Summary, String>,
}

/// Every failing seed among `outcomes`, as `seed N: why`.
pub fn failures(outcomes: &[Outcome]) -> Vec<String> {
    outcomes
        .iter()
        .filter_map(|outcome| {
            let reason = outcome.result.as_ref().err()?;
            Some(format!("seed {}: {reason}", outcome.seed))
        })
        .collect()
}

/// One replica taken down for long during the fault phase, so the others checkpoint past it
/// and it must come back by state transfer.
#[derive(Clone, Copy, Debug)]
pub(super) struct Outage {
    pub(super) start_tick: u64,
    pub(super) replica: ReplicaIndex,
    pub(super) downtime_ticks: u64,
}

/// Fault rates and sizes drawn from the seed.
#[derive(Clone, Copy, Debug)]
pub(super) struct Scenario {
    pub(super) replica_count: u8,
    pub(super) client_count: u64,
    pub(super) requests_per_client: u64,
    pub(super) issue_per_mille: u64,
    pub(super) network: NetworkFaults,
    pub(super) crash_per_mille: u64,
    /// Of the crashes, how many lose the replica's disk (its journal starts empty).
    pub(super) disk_loss_per_mille: u64,
    pub(super) partition_change_per_mille: u64,
    pub(super) checkpoint_interval_ops: u64,
    pub(super) state_chunk_bytes: usize,
    pub(super) outage: Option<Outage>,
    /// Per tick, how likely a replica asks for the primary's role (a leadership transfer).
    pub(super) take_primary_per_mille: u64,
}

impl Scenario {
    pub(super) fn from_rng(rng: &mut SimRng, fault_ticks: u64) -> Scenario {
        let replica_count = rng.between(1, 5) as u8;
        let outage = Outage {
            start_tick: rng.between(fault_ticks / 10, fault_ticks / 3),
            replica: rng.below(u64::from(replica_count)) as ReplicaIndex,
            downtime_ticks: rng.between(fault_ticks / 3, fault_ticks / 2),
        };
        Scenario {
            replica_count,
            client_count: rng.between(1, 12),
            requests_per_client: rng.between(20, 200),
            issue_per_mille: rng.between(20, 80),
            network: NetworkFaults {
                loss_per_mille: rng.below(100),
                duplicate_per_mille: rng.below(50),
                delay_ticks_max: rng.between(1, 8),
                corrupt_state_chunk_per_mille: rng.below(300),
            },
            crash_per_mille: rng.below(8),
            partition_change_per_mille: rng.below(12),
            checkpoint_interval_ops: rng.between(8, 16),
            state_chunk_bytes: rng.between(64, 512) as usize,
            outage: (replica_count >= 3 && rng.per_mille(800)).then_some(outage),
            // A group of two tolerates no failure: one that lost its disk waits for the other,
            // and the other, if it restarts meanwhile, for a vote the empty one cannot give.
            disk_loss_per_mille: if replica_count >= 3 {
                rng.below(500)
            } else {
                0
            },
            take_primary_per_mille: rng.below(6),
        }
    }

    /// The configuration of `replica` in this scenario.
    pub(super) fn config(&self, replica: ReplicaIndex, canary: Canary) -> Config {
        let mut config = Config::new(self.replica_count, replica);
        config.checkpoint_interval_ops = self.checkpoint_interval_ops;
        config.state_chunk_bytes = self.state_chunk_bytes;
        config.canaries = canary.canaries();
        config
    }
}
