//! The directory's table of live cells ([`CellTable`]): each live entity's mailbox, shard and
//! generation, the per-tenant counts the live-entity quota reads, and the order cells took
//! instances in, for giving instances back to a full pool (a CLOCK walk). The directory reads
//! and changes it under its lock; a cell reaches it through
//! [`CellRegistry`](super::core::CellRegistry), since the table, holding the cells' mailboxes,
//! sits above them.

use super::cell::{CellMessage, InstanceHold, Mailbox};
use super::core::{CellRegistry, EntityParts};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tessera_contract::{EntityAddress, ShardId};

/// The directory's record of one live cell.
pub(crate) struct CellHandle {
    pub(crate) mailbox: Mailbox,
    pub(crate) generation: u64,
    pub(crate) shard: ShardId,
    pub(crate) evicting: bool,
    /// Whether the cell holds an instance now (set by the cell), so a cell that needs a pool
    /// slot can ask the least recently used holder to give its up.
    pub(crate) hold: Arc<InstanceHold>,
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

/// The live cells of a node, and the cells holding instances in the order they took them.
pub(crate) struct CellTable {
    cells: Mutex<Cells>,
    /// Cells holding instances, in the order they took them (with their last use then): the
    /// order a full pool asks them to give their instances back in.
    instance_holders: Mutex<VecDeque<(EntityAddress, u64)>>,
    /// Past this many entries the instance holders are swept of cells that no longer hold one.
    instance_holders_max: usize,
}

impl CellTable {
    /// An empty table for the entity layer made of `parts`.
    pub(crate) fn for_parts(parts: &EntityParts) -> Self {
        let instances_max = parts.runtime.config().instances_max as usize;
        CellTable {
            cells: Mutex::default(),
            instance_holders: Mutex::default(),
            // Entries of cells that gave their instance up by other ways (passivation, a
            // trap) are dropped when met; past this size they are swept all at once.
            instance_holders_max: 4 * instances_max + 64,
        }
    }

    /// The live cells, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Cells> {
        self.cells.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn instance_holders(&self) -> MutexGuard<'_, VecDeque<(EntityAddress, u64)>> {
        self.instance_holders
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl CellRegistry for CellTable {
    fn took_instance(&self, entity: &EntityAddress, tick: u64) {
        let mut holders = self.instance_holders();
        holders.push_back((entity.clone(), tick));
        if holders.len() > self.instance_holders_max {
            let cells = self.lock();
            holders.retain(|(address, _)| {
                cells
                    .live
                    .get(address)
                    .is_some_and(|handle| handle.hold.is_held())
            });
        }
    }

    /// A CLOCK walk over the cells in the order they took instances, where a cell used since it
    /// took its instance gets a second chance.
    fn release_lru_instance(&self, except: &EntityAddress) -> bool {
        let mut holders = self.instance_holders();
        let cells = self.lock();
        for _ in 0..holders.len() {
            let Some((address, tick)) = holders.pop_front() else {
                return false;
            };
            let Some(handle) = cells.live.get(&address) else {
                continue;
            };
            if !handle.hold.is_held() {
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
            // Not chosen again while its release is on the way; and given back at once if the
            // cell waits at its tenant's gate, rather than after its backlog.
            handle.hold.want_back();
            return true;
        }
        false
    }

    fn leave_unless(
        &self,
        entity: &EntityAddress,
        generation: u64,
        stays: &mut dyn FnMut() -> bool,
    ) -> bool {
        let mut cells = self.lock();
        if stays() {
            cells.keep(entity, generation);
            return false;
        }
        cells.remove(entity, generation);
        true
    }
}
