//! A deterministic simulation of the sharding protocol built on [`tessera_sharding::lease`],
//! replayable from a seed. The model, and where each part lives:
//!
//! - Time is real milliseconds, event-driven (`queue`); every process reads its own clock,
//!   drifting within the configured bound (`clock`); randomness comes from one seeded
//!   generator (`rng`).
//! - The metadata plane is one linearizable log (`log`, `log_service`): a command commits
//!   when it arrives, if a majority of the log's voters is reachable; a node's command reaches
//!   it only if the node is on the majority side of the partition (`network`). The answer
//!   travels back and may be lost or late. The log refuses renewals of down or removed members.
//! - A coordinator instance runs beside the log (`coordinator`); a failover starts a new one
//!   with its own clock and an empty [`tessera_sharding::lease::ReassignGuard`].
//! - Nodes (`node`) renew their lease every `renew_every_ms` of their clock, serve by the
//!   serving rule (owner in the newest entry they learned, state installed for that generation,
//!   lease valid), hand shards off gracefully (stop, send the state with the ids applied, drop it
//!   once the new owner answered), start fresh shards whose state was declared lost, and
//!   forward client messages. A crash loses the lease and the learned table, not shard state.
//! - Clients (`client`) send messages with unique ids through random machines and resend
//!   until acknowledged. Faults (`faults`): partitions, loss, duplication, delay (reordering),
//!   crashes and restarts, joins, graceful leaves, coordinator failovers, and operators who
//!   declare members down, bring them back up, or remove them.
//! - Checks after every event (`checker`): at most one node serves each shard at every
//!   instant, and no message is applied twice within one lineage of a shard's state. After the
//!   faults heal: every shard served again and every client message acknowledged.
//!
//! [`run_seed`] runs one seed; [`Canary`] breaks one rule on purpose to show the checks bite.

mod checker;
mod client;
mod clock;
mod coordinator;
mod faults;
mod log;
mod log_service;
mod message;
mod network;
mod node;
mod options;
mod queue;
mod table;
mod world;

pub use options::{Canary, SeedReport, SimOptions, Violation, ViolationKind};
pub use world::run_seed;

#[cfg(test)]
mod seeds_tests;
