//! A partition's replicated state: what one VSR group of the partition plane orders and
//! applies. Guests are not deterministic, so the group does not order messages: the primary
//! runs the guest against its copy of the state and the group orders the *outcome*, a
//! [`PartitionOp`] carrying the message's write set. Every replica applies committed ops in
//! order to its [`PartitionMachine`], so every copy holds the same state at the same op.
//!
//! Single activation does not rest on the primary being right about its role: each entity
//! carries a *stamp* (the id of the last write applied to it), and a write names the stamp it
//! was computed from. A write computed from a stale copy (a deposed primary, a message that
//! raced another on a second node) finds another stamp when it is applied and is refused as a
//! [`PartitionResult::Conflict`] on every replica alike, so it changes nothing; a write applied
//! once and submitted again finds its own stamp (or, after later writes, another one) and is
//! never applied twice. A message run again after such a conflict finds what its first run
//! committed (its receipt or client key travels in the same write), as it does today.
//! A message that writes nothing is answered only once a [`PartitionOp::Check`] of the stamp
//! it read commits (a commit barrier): a copy that missed a write cannot answer from stale
//! state, whatever the clocks say.
//!
//! What is replicated is the whole write set of a message — state, plugin version, outbox
//! entries, reminders, cancels, the receipt or client key of the message, acknowledged outbox
//! entries — and every replica applies it to the partition's own redb database with the same
//! code as a node's local commit, so the primary serves reads, the outbox and the reminder
//! clock from the same tables a single node does. The simulator drives the machine (on an
//! in-memory database) through the real replica: `tessera-sim`'s `partition` workload. A member of a partition's group runs it as a [`PartitionReplica`], which tells
//! the member's observer what each committed write changed.

mod checkpoint;
#[cfg(test)]
mod group_tests;
mod image_stream;
#[cfg(test)]
mod image_stream_tests;
mod machine;
mod moving;
#[cfg(test)]
mod moving_tests;
mod op;
mod remembered;
mod replica;
mod routed;
#[cfg(test)]
mod routed_tests;
mod savepoint;
#[cfg(test)]
mod savepoint_tests;
mod served;
mod stamps;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod transfer_tests;

pub use machine::{PARTITION_CACHE_BYTES, PartitionMachine};
pub use moving::{FILL_BYTES_MAX, Phase, phase};
pub use op::{PartitionOp, PartitionResult, WriteNotReplicable};
pub use remembered::RoutedRemember;
pub use replica::{
    PARTITION_TICK_FACTOR, PARTITION_TIMEOUTS, PartitionApplied, PartitionReplica,
    UNOBSERVED_WRITES_MAX,
};
pub use routed::{PartitionOf, RoutedState};
pub use served::{FillSource, MOVE_WAIT_MAX, PartitionState};
