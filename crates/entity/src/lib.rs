//! Entity cells: one task per live entity, with a bounded mailbox, that activates the entity on
//! its first message, hands it one message at a time, commits each message's writes before
//! replying, upgrades it at a message boundary and passivates it (explicitly, when idle, or to
//! respect the node's active-entity limit). A client's message for an idle live entity runs on
//! the sender's own task instead ([`Entities::deliver_here`], or, for a sender holding the cell,
//! [`LiveCell::run_here`]), in order with the sender's others.
//!
//! [`Entities`] is the directory of a node's live cells and the only way in: the sharding layer
//! above delivers to it with the shard it computed, and hands it, at construction, the
//! [`Router`](tessera_contract::Router) guest messages leave through. The plugin each type runs
//! comes from the [`TypeTable`], which the node updates on deploy, rollback and delete.
//! Starts and passivations of remembered types are recorded here, through the state layer's
//! remember writer.
//!
//! Messaging between entities is effectively once: a message's tells and reminders are
//! committed with its writes (the state layer's outbox and reminder tables); the delivery
//! service sends tells until the receiver acknowledges its own commit, and the reminder clock
//! fires reminders when due; a receiver drops what it already committed. See
//! `docs/messaging.md`.
//!
//! A caller may drive that messaging one step at a time instead (`stepping`: the deterministic
//! simulation of `tessera-testkit`), through the same code.
//!
//! Each message gets a span when the node exports traces ([`trace`]).
//!
//! Uses `tessera-contract`, `tessera-state`, `tessera-runtime` and `tessera-logs` (per-message
//! warnings counted per kind). Sharding and the node use it.

mod cell;
mod cell_router;
mod cell_table;
mod core;
mod counters;
mod delivery;
mod directory;
mod fairness;
mod live_cell;
mod reminders;
mod stepping;
pub mod trace;
mod types;
mod warnings;

pub use self::core::{EntitiesStats, EntityConfig, EntityParts, TellDelivery};
pub use cell::ClaimedRun;
pub use counters::{ACTIVATION_REASONS, COMMIT_BUCKETS_US, StripedCounter, TypeCounters};
pub use delivery::{DELIVERY_BATCH_MAX, DELIVERY_SENDERS_MAX, DeliveryConfig, TellAttempt};
pub use directory::{Entities, Refused};
pub use live_cell::LiveCell;
pub use reminders::{REMINDER_SCAN_ROWS_MAX, REMINDERS_IN_FLIGHT_MAX, ReminderAttempt};
pub use types::{TypeBinding, TypeTable};
