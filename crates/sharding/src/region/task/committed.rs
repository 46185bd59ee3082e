//! What the committed catalog says of a shard this region is told it owns. The coordinator's
//! answers, a handoff's announcement and a peer's forwarded envelope all name an allocation;
//! before this region serves a shard because of one, the allocation must be the one this
//! node's catalog committed. One the catalog has not applied yet waits (parked, bounded) until
//! it has; one the catalog has since replaced is dropped for the committed one. And a committed
//! assignment that gives a shard this region serves to another node stops it here, even when
//! no coordinator tells this node (a deposed coordinator's message lost, a node cut off while
//! its shards were reassigned).

use tessera_contract::{Allocation, ShardKey};

use super::RegionTask;
use crate::region::homes::Home;

/// Allocations naming this node that its catalog has not applied yet, at most; beyond it one
/// is dropped (the coordinator answers again on the next allocation retry).
pub(crate) const UNCONFIRMED_SHARDS_MAX: usize = 4096;

/// How an allocation naming this node compares with the committed catalog.
pub(super) enum Confirmation {
    /// The catalog committed exactly this allocation (or the region has no catalog to check:
    /// regions sharing one process and one catalog).
    Committed,
    /// The catalog has not applied it yet (or could not be read).
    Lagging,
    /// The catalog committed a later allocation.
    Superseded(Allocation),
}

impl RegionTask {
    /// How `allocation` (naming this node) compares with the committed catalog.
    pub(super) fn confirm(&self, key: &ShardKey, allocation: &Allocation) -> Confirmation {
        let Some(catalog) = &self.shared.catalog else {
            return Confirmation::Committed;
        };
        match catalog.shard_allocation(key) {
            Ok(Some(committed)) if committed == *allocation => Confirmation::Committed,
            Ok(Some(committed)) if committed.generation > allocation.generation => {
                Confirmation::Superseded(committed)
            }
            Ok(_) => Confirmation::Lagging,
            Err(error) => {
                tracing::warn!(%key, %error, "the committed shard table could not be read");
                Confirmation::Lagging
            }
        }
    }

    /// `key`'s committed allocation, if the catalog says its handoff at `generation` is
    /// settled: the allocation at that generation or later, and no handoff of it in flight
    /// from this node. `None` without a catalog (then only the handoff's end settles it).
    pub(super) fn handoff_settled(&self, key: &ShardKey, generation: u64) -> Option<Allocation> {
        let committed = self.shared.catalog.as_ref()?.committed().ok()?;
        let allocation = committed.allocation(key).ok()??;
        let from = committed.handoff_from(key).ok()?;
        let settled =
            allocation.generation >= generation && from.as_deref() != Some(&self.shared.node);
        settled.then_some(allocation)
    }

    /// Keeps `allocation` until the catalog applies it.
    pub(super) fn park(&mut self, key: &ShardKey, allocation: Allocation) {
        if let Some(parked) = self.unconfirmed.get_mut(key) {
            if parked.generation < allocation.generation {
                *parked = allocation;
            }
            return;
        }
        if self.unconfirmed.len() >= UNCONFIRMED_SHARDS_MAX {
            tracing::debug!(%key, "too many unconfirmed allocations; this one waits for a retry");
            return;
        }
        self.unconfirmed.insert(key.clone(), allocation);
    }

    /// Learns the parked allocations the catalog has applied meanwhile.
    pub(super) fn recheck_unconfirmed(&mut self) {
        let parked: Vec<(ShardKey, Allocation)> = self.unconfirmed.drain().collect();
        for (key, allocation) in parked {
            self.learn(&key, allocation);
        }
    }

    /// The catalog applied `assigned` on this node. Assignments are learned as they are (a
    /// region that serves one of these shards and lost it stops it); moves are not, since the
    /// losing region serves until the coordinator hands the shard off and the new owner waits
    /// for the state — they only settle what was parked.
    pub(super) fn on_committed(&mut self, assigned: Vec<(ShardKey, Allocation)>, moved: bool) {
        if !moved {
            for (key, allocation) in assigned {
                self.learn(&key, allocation);
            }
        }
        self.recheck_unconfirmed();
    }

    /// The catalog was replaced by a snapshot: every shard served here is checked against it.
    pub(super) fn on_catalog_restored(&mut self) {
        let Some(catalog) = self.shared.catalog.clone() else {
            return;
        };
        for ty in self.shared.homes.all() {
            for shard in 0..ty.num_shards() {
                let local = ty
                    .slot(shard)
                    .is_some_and(|home| matches!(*home, Home::Local { .. }));
                if !local {
                    continue;
                }
                let key = ShardKey::new(ty.key.clone(), shard);
                match catalog.shard_allocation(&key) {
                    Ok(Some(committed)) => self.learn(&key, committed),
                    Ok(None) => {}
                    Err(error) => {
                        tracing::warn!(%key, %error, "the committed shard table could not be read");
                    }
                }
            }
        }
        self.recheck_unconfirmed();
    }
}
