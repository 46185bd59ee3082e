//! The deterministic simulator: replicas, clients, network and disks in one thread, driven by
//! one seed. [`runner`] builds a scenario from the seed (cluster size, fault rates), runs a
//! fault phase (loss, duplication, reordering, partitions, crashes mid-handler that lose or
//! tear unsynced writes, a long outage that forces state transfer, corrupted state chunks),
//! heals everything and waits for convergence; [`checker`] and
//! [`linearizability`] decide whether the run was correct. A failing seed replays exactly with
//! `cargo run --release --bin vsr-sim -- --seed S`.

pub mod checker;
pub mod client;
pub mod linearizability;
pub mod network;
pub mod rng;
pub mod runner;
pub mod scenario;

pub use runner::{run_seed, run_seeds};
pub use scenario::{Canary, Outcome, SimulationOptions, Summary};
