//! Consensus: a Viewstamped Replication (VSR) core and the deterministic simulator that tests
//! it. [`replica`] is the sans-IO protocol (with `normal`, `view_change` and `recovery`
//! operation beside it); [`journal`] and [`durable`] are where a replica's log and superblock
//! live; [`state_machine`] is what gets replicated; [`sim`] drives many replicas over a faulty
//! network and disk from one seed and checks safety, linearizability and liveness. The
//! protocol is described in `docs/consensus.md`.

pub mod client_table;
pub mod config;
pub mod durable;
pub mod journal;
pub mod message;
mod normal;
mod progress;
mod recovery;
pub mod replica;
pub mod sim;
pub mod state_machine;
mod view_change;

#[cfg(test)]
mod replica_tests;
