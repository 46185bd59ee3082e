//! What every cell of a node shares with the directory that made it: the runtime and state
//! backends, the type table, the table of live cells, the router guest `ask`s and `tell`s go
//! through, the remember-entities writer and the layer's counters.

use super::counters::TypeCounters;
use super::delivery::{Delivery, DeliveryConfig};
use super::reminders::ReminderClock;
use super::types::TypeTable;
use crate::contract::{EntityAddress, Router, ShardId, TypeKey};
use crate::runtime::Runtime;
use crate::state::EntityState;
use crate::state::remember::RememberWriter;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use tokio::sync::oneshot;

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

/// What a cell's mailbox carries.
pub(crate) enum CellMessage {
    /// A message for the entity.
    Deliver(crate::contract::Envelope),
    /// Activate without a message (remember-entities respawn).
    Activate,
    /// Passivate after the messages ahead of this one.
    Passivate,
    /// Passivate and report when the cell is gone (handoff, shutdown); not a passivation for
    /// remember-entities, so the entity stays remembered.
    Stop(oneshot::Sender<()>),
    /// Give the instance back to the pool (deactivating it) but stay live: another entity
    /// needs the slot. The next message activates a fresh instance.
    Release,
}

/// The directory's record of one live cell.
pub(crate) struct CellHandle {
    pub(crate) mailbox: super::cell::Mailbox,
    pub(crate) generation: u64,
    pub(crate) shard: ShardId,
    pub(crate) evicting: bool,
    /// Whether the cell holds an instance now (set by the cell), so a cell that needs a pool
    /// slot can ask the least recently used holder to give its up.
    pub(crate) holds_instance: Arc<std::sync::atomic::AtomicBool>,
}

/// The live cells of a node and the per-tenant counts the quota reads. The maps hash with
/// foldhash (seeded per process): they are on every message's path.
#[derive(Default)]
pub(crate) struct Cells {
    pub(crate) live: foldhash::HashMap<EntityAddress, CellHandle>,
    pub(crate) tenants: foldhash::HashMap<String, usize>,
    pub(crate) evicting: usize,
    pub(crate) next_generation: u64,
}

impl Cells {
    /// Counts the cell of `entity` (generation `generation`) as live again after its
    /// passivation was abandoned because messages arrived: an eviction that did not happen
    /// must not keep discounting it from the node's live-entity limit.
    pub(crate) fn keep(&mut self, entity: &EntityAddress, generation: u64) {
        if let Some(handle) = self.live.get_mut(entity)
            && handle.generation == generation
            && handle.evicting
        {
            handle.evicting = false;
            self.evicting -= 1;
        }
    }

    /// Removes the cell of `entity` if it is still generation `generation`.
    pub(crate) fn remove(&mut self, entity: &EntityAddress, generation: u64) -> bool {
        match self.live.get(entity) {
            Some(handle) if handle.generation == generation => {}
            _ => return false,
        }
        if let Some(handle) = self.live.remove(entity) {
            // Senders holding the cell directly ([`LiveCell`](super::LiveCell)) see it gone.
            handle.mailbox.cell().mark_gone();
            if handle.evicting {
                self.evicting -= 1;
            }
            if let Some(count) = self.tenants.get_mut(&entity.tenant) {
                *count = count.saturating_sub(1);
            }
        }
        debug_assert!(
            self.evicting <= self.live.len(),
            "evicting cells are live cells"
        );
        true
    }
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
    pub(crate) cells: Mutex<Cells>,
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
    /// Cells holding instances, in the order they took them (with their last use then): the
    /// order a full pool asks them to give their instances back in.
    pub(crate) instance_holders: Mutex<std::collections::VecDeque<(EntityAddress, u64)>>,
    /// Set when the node shuts down: cells answer their queued messages `unavailable` instead
    /// of running them, so shutdown waits at most for the guest calls already running.
    /// Also every instance's interrupt flag: running calls trap at their next epoch tick.
    pub(crate) closing: Arc<std::sync::atomic::AtomicBool>,
}

impl Core {
    pub(crate) fn new(parts: EntityParts, router: Arc<dyn Router>) -> Self {
        Core {
            runtime: parts.runtime,
            state: parts.state,
            types: parts.types,
            remember: parts.remember,
            config: parts.config,
            router,
            cells: Mutex::default(),
            uses: AtomicU64::new(0),
            stats: EntitiesStats::default(),
            counters: RwLock::default(),
            delivery: Delivery::default(),
            reminders: ReminderClock::default(),
            messaging_started: std::sync::atomic::AtomicBool::new(false),
            instance_holders: Mutex::default(),
            gates: super::fairness::Gates::default(),
            closing: Arc::default(),
        }
    }

    /// The next tick of the use clock, for a message sent to a cell now.
    pub(crate) fn next_use(&self) -> u64 {
        self.uses.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Whether the node is shutting down (no new guest call starts).
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// Notes that the cell of `entity` took an instance (at `tick`), for the release order.
    pub(crate) fn took_instance(&self, entity: &EntityAddress, tick: u64) {
        let mut holders = self.instance_holders();
        holders.push_back((entity.clone(), tick));
        // Entries of cells that gave their instance up by other ways (passivation, a trap)
        // are dropped when met; past this size they are swept all at once.
        let bound = 4 * self.runtime.config().instances_max as usize + 64;
        if holders.len() > bound {
            let cells = self.cells();
            holders.retain(|(address, _)| {
                cells
                    .live
                    .get(address)
                    .is_some_and(|handle| handle.holds_instance.load(Ordering::Relaxed))
            });
        }
    }

    /// Asks the least recently used cell that holds an instance (other than `except`) to give
    /// it back to the pool: a CLOCK walk over the cells in the order they took instances, where
    /// a cell used since it took its instance gets a second chance. False if none was asked.
    pub(crate) fn release_lru_instance(&self, except: &EntityAddress) -> bool {
        let mut holders = self.instance_holders();
        let cells = self.cells();
        for _ in 0..holders.len() {
            let Some((address, tick)) = holders.pop_front() else {
                return false;
            };
            let Some(handle) = cells.live.get(&address) else {
                continue;
            };
            if !handle.holds_instance.load(Ordering::Relaxed) {
                continue;
            }
            let last_used = handle.mailbox.cell().last_used();
            if address == *except || last_used > tick {
                holders.push_back((address, last_used));
                continue;
            }
            if handle.mailbox.try_post(CellMessage::Release).is_err() {
                // Busy (a full mailbox): not idle, look further.
                holders.push_back((address, last_used));
                continue;
            }
            // Not chosen again while its release is on the way.
            handle.holds_instance.store(false, Ordering::Relaxed);
            return true;
        }
        false
    }

    fn instance_holders(&self) -> MutexGuard<'_, std::collections::VecDeque<(EntityAddress, u64)>> {
        self.instance_holders
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn cells(&self) -> MutexGuard<'_, Cells> {
        self.cells
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
