//! The instance pool's accounting: how many entity instances are alive (each holds one slot
//! of the pool), and the bell rung when one is dropped, for a cell waiting for a free slot.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many pool slots are taken, shared with every instance's [`SlotGuard`] so its drop frees
/// one.
#[derive(Debug, Default)]
pub(crate) struct InstanceSlots {
    live: AtomicU64,
    freed: tokio::sync::Notify,
}

impl InstanceSlots {
    /// Instances alive now.
    pub(crate) fn live(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }

    /// Resolves when an instance is dropped. Register before checking.
    pub(crate) fn freed(&self) -> tokio::sync::futures::Notified<'_> {
        self.freed.notified()
    }

    /// Counts one more instance alive, until the guard is dropped.
    pub(crate) fn take(self: &Arc<Self>) -> SlotGuard {
        self.live.fetch_add(1, Ordering::Relaxed);
        SlotGuard(self.clone())
    }
}

/// One instance's slot of the pool accounting: given back when dropped.
pub(crate) struct SlotGuard(Arc<InstanceSlots>);

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::Relaxed);
        self.0.freed.notify_waiters();
    }
}
