//! Consensus: a Viewstamped Replication (VSR) core. [`replica`] is the sans-IO protocol (with
//! `normal`, `view_change` and `recovery` operation beside it, and checkpoints and state
//! transfer so the log stays a bounded window); [`learner`] follows a group's committed log
//! without voting; [`journal`] and [`durable`] are where a replica's log, checkpoints and
//! superblock live; [`state_machine`] is what gets replicated; [`group`] runs a replica (or a
//! learner) in real time for any state machine, with a group id on every frame, as the metadata
//! plane does and the partition plane is to. The deterministic simulator that
//! drives many replicas over a faulty network and disk from one seed lives in `tessera-sim`.
//! The protocol is described in `docs/consensus.md`.
//!
//! Uses no other Tessera crate: it knows nothing of what it replicates. The metadata plane
//! (`tessera-metadata`) uses it.

mod apply;
pub mod checkpoint;
pub mod client_table;
pub mod config;
pub mod durable;
pub mod group;
mod image_progress;
mod image_transfer;
mod inspect;
pub mod journal;
pub mod learner;
mod log;
mod memory_journal;
pub mod message;
mod normal;
mod progress;
mod recovery;
pub mod replica;
mod replica_checkpoint;
mod replica_log;
pub mod state_machine;
mod state_transfer;
mod view_change;

#[cfg(test)]
mod checkpoint_tests;
#[cfg(test)]
mod learner_tests;
#[cfg(test)]
mod recovery_tests;
#[cfg(test)]
mod replica_tests;
#[cfg(test)]
mod test_cluster;
