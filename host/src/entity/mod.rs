//! Entity cells: one task per live entity, with a bounded mailbox, that activates the entity on
//! its first message, hands it one message at a time, commits each message's writes before
//! replying, upgrades it at a message boundary and passivates it (explicitly, when idle, or to
//! respect the node's active-entity limit).
//!
//! [`Entities`] is the directory of a node's live cells and the only way in. It also routes
//! messages between entities of the node until a sharding region takes over that role through
//! [`Entities::set_router`]. The plugin each type runs comes from the [`TypeTable`], which the
//! layers above update on deploy and rollback.

mod cell;
mod counters;
mod directory;
mod types;

pub use counters::{ACTIVATION_REASONS, COMMIT_BUCKETS_US, ERROR_KINDS, TypeCounters};
pub use directory::{Entities, EntitiesStats, EntityConfig, Lifecycle};
pub use types::{TypeBinding, TypeTable};
