//! Deterministic simulators that drive Tessera's real protocol code from one seed, for tests
//! and the `vsr-sim` and `lease-sim` binaries; never part of the `tessera` binary.
//!
//! - [`vsr`] runs replicas of `tessera-consensus` over a simulated network and disks, with
//!   faults, and checks safety, linearizability and liveness;
//! - [`catalog`] is a [`vsr::Workload`] that replicates the real catalog state machine of
//!   `tessera-metadata`;
//! - [`partition`] is a [`vsr::Workload`] of the partition plane: messages to counters run
//!   where they arrive against that replica's copy, and the real `tessera-state` partition
//!   machine replicates their outcomes;
//! - [`partition_move`] runs partition moves — seal, fill, open, commits following the
//!   partition — with the real partition machine and checks that no add is lost;
//! - [`lease`] simulates the sharding protocol built on `tessera-sharding`'s leases and checks
//!   that at most one node serves a shard at a time;
//! - [`rng`] is the one seeded generator they all draw from.
//!
//! Uses `tessera-consensus`, `tessera-contract`, `tessera-metadata`, `tessera-sharding` and
//! `tessera-state`; no
//! crate of the product uses it.

pub mod catalog;
pub mod lease;
mod panics;
pub mod partition;
pub mod partition_move;
pub mod rng;
pub mod vsr;
