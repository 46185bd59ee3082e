//! What every cell of a node shares with the directory that made it: the runtime and state
//! backends, the type table, the table of live cells, the router guest `ask`s and `tell`s go
//! through, the remember-entities writer, the layer's counters and its per-message warnings.

use super::counters::TypeCounters;
use super::delivery::config::DeliveryConfig;
use super::delivery::senders::Delivery;
use super::reminders::clock::ReminderClock;
use super::types::TypeTable;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use tessera_contract::{EntityAddress, Router, TypeKey};
use tessera_runtime::{Clock, Runtime};
use tessera_state::EntityState;
use tessera_state::remember::RememberWriter;

/// Node-wide settings of the entity layer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EntityConfig {
    /// The most live entities on this node; starting one more passivates the least recently
    /// used. `None` means no limit beyond the runtime's instance pool.
    pub active_entities_max: Option<usize>,
    /// How committed tells and reminders are delivered.
    pub delivery: DeliveryConfig,
    /// Whether guests' tells go through the durable outbox (the default) or are sent from
    /// memory after the commit.
    pub tells: TellDelivery,
}

/// How a guest's tells reach their receiver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TellDelivery {
    /// Committed to the sender's outbox with its writes, retried until the receiver commits
    /// them, duplicates dropped (`docs/messaging.md`).
    #[default]
    EffectivelyOnce,
    /// Sent from memory once the sender's writes commit, not retried: lost if the receiver is
    /// busy or the node stops first. Faster; for tells whose loss does not matter.
    AtMostOnce,
}

/// Counters of the entity layer.
#[derive(Debug, Default)]
pub struct EntitiesStats {
    /// Activations (instance created and `activate` ran).
    pub activations: AtomicU64,
    /// Activations refused: the guest's `activate` (a migration) failed or trapped, so the
    /// entity kept its old state and the message that needed it failed.
    pub activation_failures: AtomicU64,
    /// Cells that ended by passivation.
    pub passivations: AtomicU64,
    /// Live cells passivated to respect the active-entity limit.
    pub evictions: AtomicU64,
    /// Messages refused because a mailbox was full.
    pub mailbox_rejections: AtomicU64,
    /// Instances discarded after a trap, deadline, memory cap or oversized reply.
    pub instance_discards: AtomicU64,
    /// Tells committed to outboxes.
    pub outbox_enqueued: AtomicU64,
    /// Tells and reminders sent again after an attempt that was not acknowledged.
    pub redeliveries: AtomicU64,
    /// Messages a receiver had already committed, acknowledged without running again.
    pub duplicates_dropped: AtomicU64,
    /// Tells and reminders given up: the receiver answered with an error, or retries ran past
    /// `give_up_after_ms`.
    pub dead_letters: AtomicU64,
    /// Reminders fired and committed.
    pub reminders_fired: AtomicU64,
    /// Asks not executed because their deadline passed before they started.
    pub expired_asks: AtomicU64,
    /// Guest stdout/stderr/log lines dropped by the per-message log budget.
    pub guest_log_lines_dropped: AtomicU64,
    /// Instances given back to a full pool by idle live entities, for another entity's use.
    pub instance_swaps: AtomicU64,
    /// Guest calls that waited at their tenant's gate (concurrency cap or CPU budget).
    pub throttled_calls: AtomicU64,
    /// Entities' tells that waited for their tenant's message rate before delivery.
    pub throttled_tells: AtomicU64,
    /// Guests' asks that waited for their tenant's message rate before they were sent.
    pub throttled_asks: AtomicU64,
}

/// What a cell asks of the table of live cells it is in (the directory's
/// [`CellTable`](super::cell_table::CellTable)). The table holds the cells' mailboxes, so it sits
/// above the cells; they reach it through this.
pub(crate) trait CellRegistry: Send + Sync {
    /// Notes that the cell of `entity` took an instance (at use `tick`), for the release order.
    fn took_instance(&self, entity: &EntityAddress, tick: u64);

    /// Asks the least recently used cell that holds an instance (other than `except`) to give
    /// it back to the pool. False if none was asked.
    fn release_lru_instance(&self, except: &EntityAddress) -> bool;

    /// Under the table's lock: the cell of `entity` (generation `generation`) leaves the table
    /// unless `stays()` says it must stay (messages arrived), in which case it counts as live
    /// again. True if it left.
    fn leave_unless(
        &self,
        entity: &EntityAddress,
        generation: u64,
        stays: &mut dyn FnMut() -> bool,
    ) -> bool;
}

/// The parts a node hands the entity layer.
pub struct EntityParts {
    /// The engine entities run on.
    pub runtime: Arc<Runtime>,
    /// Where entity state is read and committed.
    pub state: Arc<dyn EntityState>,
    /// What each type runs.
    pub types: Arc<TypeTable>,
    /// Records started and passivated entities of remembered types (`None`: remember nothing).
    pub remember: Option<RememberWriter>,
    /// Layer settings.
    pub config: EntityConfig,
}

pub(crate) struct Core {
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) state: Arc<dyn EntityState>,
    pub(crate) types: Arc<TypeTable>,
    pub(crate) remember: Option<RememberWriter>,
    pub(crate) config: EntityConfig,
    pub(crate) router: Arc<dyn Router>,
    /// The table of live cells the directory keeps, as its cells see it.
    pub(crate) cells: Arc<dyn CellRegistry>,
    /// The use clock: ticks once per message sent to a cell, so cells' last uses are ordered
    /// without ties (a wall-clock reading would tie within a millisecond).
    pub(crate) uses: AtomicU64,
    pub(crate) stats: EntitiesStats,
    pub(crate) counters: RwLock<HashMap<TypeKey, Arc<TypeCounters>>>,
    /// Senders whose outboxes are being delivered.
    pub(crate) delivery: Delivery,
    /// Durable reminders being fired.
    pub(crate) reminders: ReminderClock,
    /// Whether the delivery sweep and the reminder clock run.
    pub(crate) messaging_started: std::sync::atomic::AtomicBool,
    /// Each tenant's gate to guest execution (concurrency cap and CPU budget).
    pub(crate) gates: super::fairness::Gates,
    /// Set when the node shuts down: cells answer their queued messages `unavailable` instead
    /// of running them, so shutdown waits at most for the guest calls already running.
    /// Also every instance's interrupt flag: running calls trap at their next epoch tick.
    pub(crate) closing: Arc<std::sync::atomic::AtomicBool>,
    /// The per-message warnings, counted per kind.
    pub(crate) warnings: super::warnings::EntityWarnings,
    /// The trace context of tells and reminders waiting for delivery.
    pub(crate) trace_links: super::trace::links::TraceLinks,
    /// The wall clock reminders are due in and guests read (`now-ms`).
    pub(crate) clock: Arc<dyn Clock>,
    /// Where the stamps of this node's commits come from (see [`Core::next_stamp`]).
    stamps: AtomicU64,
}

/// A random start for this process's stamps, from the standard library's randomly keyed hasher.
fn first_stamp() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now())
}

impl Core {
    pub(crate) fn new(
        parts: EntityParts,
        router: Arc<dyn Router>,
        cells: Arc<dyn CellRegistry>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Core {
            runtime: parts.runtime,
            state: parts.state,
            types: parts.types,
            remember: parts.remember,
            config: parts.config,
            router,
            cells,
            uses: AtomicU64::new(0),
            stats: EntitiesStats::default(),
            counters: RwLock::default(),
            delivery: Delivery::default(),
            reminders: ReminderClock::default(),
            messaging_started: std::sync::atomic::AtomicBool::new(false),
            gates: super::fairness::Gates::default(),
            closing: Arc::default(),
            warnings: super::warnings::entity_warnings(),
            trace_links: Default::default(),
            clock,
            stamps: AtomicU64::new(first_stamp()),
        }
    }

    /// A stamp for a commit of this node (see `tessera_state::WriteStamps`): never 0, and
    /// unique among an entity's writes because every node counts up from its own random start
    /// in a space of 2^64 (two nodes' runs of stamps meet only after about 2^32 commits each
    /// with a chance of about one in 2^32, and a meeting matters only for one entity written on
    /// both at once).
    pub(crate) fn next_stamp(&self) -> u64 {
        loop {
            let stamp = self.stamps.fetch_add(1, Ordering::Relaxed);
            if stamp != 0 {
                return stamp;
            }
        }
    }

    /// The next tick of the use clock, for a message sent to a cell now.
    pub(crate) fn next_use(&self) -> u64 {
        self.uses.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Milliseconds since the Unix epoch on this layer's clock.
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Whether the node is shutting down (no new guest call starts).
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// The counters of one type, created on first use.
    pub(crate) fn counters(&self, key: &TypeKey) -> Arc<TypeCounters> {
        if let Some(counters) = self
            .counters
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(key)
        {
            return counters.clone();
        }
        self.counters
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(key.clone())
            .or_default()
            .clone()
    }
}
