//! The deterministic simulator: replicas, clients, network and disks in one thread, driven by one
//! seed and generic over the [`Workload`] it replicates. [`runner`] builds a scenario from the seed
//! (cluster size, fault rates), runs a fault phase (loss, duplication, reordering, partitions,
//! crashes mid-handler that lose or tear unsynced writes, a long outage that forces state transfer,
//! corrupted state chunks, leadership transfers), heals everything and waits for convergence; [`checker`] and the
//! workload's own check ([`linearizability`] for [`key_value`]) decide whether the run was correct.
//! A failing seed replays exactly with `cargo run --release --bin vsr-sim -- --seed S`.

pub mod canary;
pub mod checker;
pub mod client;
pub mod history;
pub mod key_value;
pub mod linearizability;
pub mod network;
pub mod runner;
pub mod scenario;
pub mod workload;

pub use canary::Canary;
pub use key_value::KeyValueWorkload;
pub use runner::{run_seed, run_seeds, run_workload_seed, run_workload_seeds};
pub use scenario::{Outcome, SimulationOptions, Summary, failures};
pub use workload::{AtReplica, CommittedOrder, Workload, WorkloadCounts};
