//! The event queue: what happens next, in real time. Events at the same millisecond run in the
//! order they were scheduled, so a run depends only on its seed. Network messages in flight are
//! bounded; past the bound a message is dropped (counted), which the protocol must survive like
//! any loss.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::message::{Endpoint, Message};

/// Messages in flight at once. A run sends a few per millisecond at most, so this is only hit
/// by a runaway retry loop — which the drop count then shows.
pub const MESSAGES_IN_FLIGHT_MAX: usize = 50_000;

/// Something that happens at an instant of real time.
#[derive(Debug)]
pub enum Event {
    /// A message arrives.
    Deliver {
        from: Endpoint,
        to: Endpoint,
        message: Message,
    },
    /// A machine's process looks at its clock (renewals, joins, leave requests).
    NodeTick { machine: usize },
    /// The coordinator instance looks at the log.
    CoordinatorTick,
    /// A new coordinator instance starts (failover).
    CoordinatorStart,
    /// Clients send new messages and retry unacknowledged ones.
    ClientTick,
    /// Faults may strike.
    FaultTick,
    /// Every fault heals; from here on only liveness is at stake.
    Heal,
}

struct Scheduled {
    at_ms: u64,
    sequence: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at_ms, self.sequence) == (other.at_ms, other.sequence)
    }
}

impl Eq for Scheduled {}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scheduled {
    /// Reversed, so the max-heap pops the earliest event first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at_ms, other.sequence).cmp(&(self.at_ms, self.sequence))
    }
}

/// Pending events, earliest first.
#[derive(Default)]
pub struct EventQueue {
    heap: BinaryHeap<Scheduled>,
    scheduled: u64,
    messages_in_flight: usize,
}

impl EventQueue {
    /// Schedules `event` at `at_ms`. Returns false (and drops it) if it is a message and
    /// [`MESSAGES_IN_FLIGHT_MAX`] are in flight already.
    pub fn schedule(&mut self, at_ms: u64, event: Event) -> bool {
        if matches!(event, Event::Deliver { .. }) {
            if self.messages_in_flight >= MESSAGES_IN_FLIGHT_MAX {
                return false;
            }
            self.messages_in_flight += 1;
        }
        self.scheduled += 1;
        self.heap.push(Scheduled {
            at_ms,
            sequence: self.scheduled,
            event,
        });
        true
    }

    /// The next event and its time.
    pub fn pop(&mut self) -> Option<(u64, Event)> {
        let next = self.heap.pop()?;
        if matches!(next.event, Event::Deliver { .. }) {
            self.messages_in_flight -= 1;
        }
        Some((next.at_ms, next.event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_pop_in_time_then_schedule_order() {
        let mut queue = EventQueue::default();
        queue.schedule(5, Event::ClientTick);
        queue.schedule(1, Event::FaultTick);
        queue.schedule(5, Event::Heal);
        let order: Vec<u64> = std::iter::from_fn(|| queue.pop().map(|(at, _)| at)).collect();
        assert_eq!(order, vec![1, 5, 5]);
        queue.schedule(5, Event::ClientTick);
        queue.schedule(5, Event::Heal);
        assert!(matches!(queue.pop(), Some((5, Event::ClientTick))));
    }
}
