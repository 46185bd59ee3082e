//! The trace context of tells and reminders between their commit and their delivery. They wait
//! in durable tables the context is not written to (telemetry is not worth a write per tell),
//! so it is kept here, in memory and bounded: a tell or reminder delivered after the node
//! restarted, after its shard moved, or after [`TRACE_LINKS_MAX`] newer ones, starts a trace
//! of its own.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use tessera_contract::{EntityAddress, TraceContext};

/// Tells and reminders whose trace context a node keeps until they are delivered; past it the
/// oldest is forgotten.
pub const TRACE_LINKS_MAX: usize = 65_536;

/// What a link belongs to: a sender's tell by outbox sequence number, or an entity's reminder
/// by timer id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum LinkKey {
    Tell(EntityAddress, u64),
    Reminder(EntityAddress, u64),
}

/// The contexts, and their keys in the order they were kept (some may be gone already).
#[derive(Default)]
struct Held {
    contexts: HashMap<LinkKey, TraceContext>,
    order: VecDeque<LinkKey>,
}

/// The trace links of one node.
#[derive(Default)]
pub(crate) struct TraceLinks {
    held: Mutex<Held>,
}

impl TraceLinks {
    /// Keeps `context` for `key`, forgetting the oldest link past [`TRACE_LINKS_MAX`].
    pub(crate) fn keep(&self, key: LinkKey, context: TraceContext) {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if held.contexts.insert(key.clone(), context).is_none() {
            held.order.push_back(key);
        }
        while held.contexts.len() > TRACE_LINKS_MAX || held.order.len() > 2 * TRACE_LINKS_MAX {
            let Some(oldest) = held.order.pop_front() else {
                break;
            };
            held.contexts.remove(&oldest);
        }
    }

    /// The context kept for `key`, if any.
    pub(crate) fn get(&self, key: &LinkKey) -> Option<TraceContext> {
        let held = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        held.contexts.get(key).copied()
    }

    /// Forgets `key` (delivered). Its place in the order goes when it comes up.
    pub(crate) fn forget(&self, key: &LinkKey) {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        held.contexts.remove(key);
        if held.contexts.is_empty() {
            held.order.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(n: u8) -> TraceContext {
        TraceContext {
            trace_id: [n.max(1); 16],
            span_id: [n.max(1); 8],
            sampled: true,
        }
    }

    #[test]
    fn links_are_kept_until_delivered_and_bounded() {
        let links = TraceLinks::default();
        let entity = EntityAddress::new("acme", "cart", "c1");
        let tell = LinkKey::Tell(entity.clone(), 1);
        let reminder = LinkKey::Reminder(entity.clone(), 1);
        links.keep(tell.clone(), context(1));
        links.keep(reminder.clone(), context(2));
        assert_eq!(links.get(&tell), Some(context(1)));
        assert_eq!(links.get(&reminder), Some(context(2)));
        links.forget(&tell);
        assert_eq!(links.get(&tell), None);
        for seq in 0..(TRACE_LINKS_MAX as u64 + 10) {
            links.keep(LinkKey::Tell(entity.clone(), 100 + seq), context(3));
        }
        let held = links.held.lock().expect("links");
        assert_eq!(held.contexts.len(), TRACE_LINKS_MAX);
        assert!(held.order.len() <= 2 * TRACE_LINKS_MAX);
        drop(held);
        assert_eq!(links.get(&reminder), None, "the oldest link was forgotten");
        let newest = LinkKey::Tell(entity, 100 + TRACE_LINKS_MAX as u64 + 9);
        assert_eq!(links.get(&newest), Some(context(3)));
    }
}
