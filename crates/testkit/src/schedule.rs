//! What the seeded scheduler may do next and what delivery has done so far ([`Progress`]).
//!
//! The host's delivery service reads a sender's outbox in batches, sends each entry in
//! sequence order until its receiver acknowledges it, and then removes the batch with one
//! commit; a crash loses what it sent but had not removed yet, so those entries go again and
//! the receivers' dedup drops them. The scheduler keeps that same per-sender progress in memory
//! (lost on a crash too) and offers, per step, each sender's next delivery or its
//! acknowledgement, and each due reminder; the seed picks one.

use std::collections::{BTreeMap, VecDeque};
use tessera_contract::EntityAddress;
use tessera_state::OutboxEntry;

/// Delivered tells kept after their acknowledgement, to arrive again later as network
/// duplicates: enough to reach back over many steps without growing with the run.
pub(crate) const LATE_DUPLICATES_KEPT: usize = 64;

/// The most steps a delayed sender is held back.
pub(crate) const DELAY_STEPS_MAX: u32 = 8;

/// One thing the scheduler may do.
#[derive(Clone, Debug)]
pub(crate) enum Action {
    /// Send the sender's next undelivered outbox entry.
    Deliver(EntityAddress, OutboxEntry),
    /// Remove the sender's delivered entries from its outbox.
    Acknowledge(EntityAddress),
    /// Fire a due reminder.
    Fire(EntityAddress, u64),
}

/// Delivery's volatile progress, as the host's delivery service holds it.
#[derive(Default)]
pub(crate) struct Progress {
    /// Per sender: entries delivered (receiver committed, or given up) and not yet removed.
    pub(crate) delivered: BTreeMap<EntityAddress, Vec<OutboxEntry>>,
    /// Per sender: steps it is still held back.
    pub(crate) delayed: BTreeMap<EntityAddress, u32>,
}

impl Progress {
    /// The entry of `outbox` (a sender's, in sequence order) to deliver next, if any.
    pub(crate) fn next_of<'a>(
        &self,
        sender: &EntityAddress,
        outbox: &'a [OutboxEntry],
    ) -> Option<&'a OutboxEntry> {
        let delivered = self.delivered.get(sender);
        let last = delivered
            .and_then(|entries| entries.last())
            .map(|entry| entry.seq);
        outbox
            .iter()
            .find(|entry| last.is_none_or(|last| entry.seq > last))
    }

    /// Whether `sender` is held back now.
    pub(crate) fn is_delayed(&self, sender: &EntityAddress) -> bool {
        self.delayed.contains_key(sender)
    }

    /// Whether any sender is held back.
    pub(crate) fn any_delayed(&self) -> bool {
        !self.delayed.is_empty()
    }

    /// One step passes for every delayed sender.
    pub(crate) fn tick(&mut self) {
        self.delayed.retain(|_, steps| {
            *steps -= 1;
            *steps > 0
        });
    }

    /// The crash: everything in memory is gone.
    pub(crate) fn forget(&mut self) {
        self.delivered.clear();
        self.delayed.clear();
    }
}

/// Tells already acknowledged, kept to arrive again late (bounded by
/// [`LATE_DUPLICATES_KEPT`]); the simulated network's memory, which a crash of the node does
/// not erase.
#[derive(Default)]
pub(crate) struct LateDuplicates {
    entries: VecDeque<(EntityAddress, OutboxEntry)>,
}

impl LateDuplicates {
    pub(crate) fn keep(&mut self, sender: &EntityAddress, entry: OutboxEntry) {
        if self.entries.len() == LATE_DUPLICATES_KEPT {
            self.entries.pop_front();
        }
        self.entries.push_back((sender.clone(), entry));
    }

    pub(crate) fn get(&self, index: usize) -> Option<&(EntityAddress, OutboxEntry)> {
        self.entries.get(index)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}
