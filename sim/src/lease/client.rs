//! The clients: they send messages with unique ids to shards through any machine, and resend
//! each one (through a machine picked again at random) until some node acknowledges it. A
//! client never resends an id it has seen acknowledged.

use std::collections::BTreeSet;

use super::message::{Endpoint, Message};
use crate::rng::SimRng;

/// Client messages one run creates at most; also bounds every shard's set of applied ids.
pub const CLIENT_MESSAGES_MAX: usize = 5_000;

/// Sends (first sends and retries) per client tick: bounds the burst after a long outage.
const SENDS_PER_TICK_MAX: usize = 64;

/// How long a client waits for an acknowledgement before resending (plus jitter).
const RETRY_AFTER_MS: u64 = 400;

/// Every client message of a run.
#[derive(Debug)]
pub struct Clients {
    machines: usize,
    shards: usize,
    shard_of: Vec<usize>,
    acknowledged: Vec<bool>,
    unacknowledged: usize,
    /// `(due_ms, id)` of every message to send; acknowledged ones are skipped when due.
    due: BTreeSet<(u64, u64)>,
}

impl Clients {
    /// No messages yet.
    pub fn new(machines: usize, shards: usize) -> Clients {
        Clients {
            machines,
            shards,
            shard_of: Vec::new(),
            acknowledged: Vec::new(),
            unacknowledged: 0,
            due: BTreeSet::new(),
        }
    }

    /// Maybe creates a message (when `creating`), then sends what is due. Returns the sends
    /// and how many messages were new.
    pub fn tick(
        &mut self,
        real_ms: u64,
        rng: &mut SimRng,
        creating: bool,
    ) -> (Vec<(Endpoint, Message)>, u64) {
        let mut created = 0;
        if creating && self.shard_of.len() < CLIENT_MESSAGES_MAX && rng.percent(50) {
            let id = self.shard_of.len() as u64;
            self.shard_of.push(rng.index(self.shards));
            self.acknowledged.push(false);
            self.unacknowledged += 1;
            self.due.insert((real_ms, id));
            created = 1;
        }
        let mut sends = Vec::new();
        while sends.len() < SENDS_PER_TICK_MAX {
            let Some(&(due_ms, id)) = self.due.first() else {
                break;
            };
            if due_ms > real_ms {
                break;
            }
            self.due.remove(&(due_ms, id));
            let waiting = self.acknowledged.get(id as usize) == Some(&false);
            let Some(&shard) = self.shard_of.get(id as usize).filter(|_| waiting) else {
                continue;
            };
            let machine = rng.index(self.machines);
            sends.push((
                Endpoint::Machine(machine),
                Message::Request { id, shard, hops: 0 },
            ));
            let next_ms = real_ms + RETRY_AFTER_MS + rng.below(RETRY_AFTER_MS);
            self.due.insert((next_ms, id));
        }
        (sends, created)
    }

    /// An acknowledgement for `id` arrived: stop resending it.
    pub fn acknowledged(&mut self, id: u64) {
        let Some(done) = self.acknowledged.get_mut(id as usize) else {
            return;
        };
        if !*done {
            *done = true;
            self.unacknowledged -= 1;
        }
    }

    /// How many messages still wait, and one of them.
    pub fn unacknowledged(&self) -> (usize, Option<u64>) {
        let example = self.acknowledged.iter().position(|done| !done);
        (self.unacknowledged, example.map(|id| id as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acknowledged_messages_are_never_resent() {
        let mut clients = Clients::new(3, 4);
        let mut rng = SimRng::new(9);
        let mut real_ms = 0;
        while clients.unacknowledged().0 == 0 {
            real_ms += 10;
            clients.tick(real_ms, &mut rng, true);
        }
        let (_, Some(id)) = clients.unacknowledged() else {
            panic!("one message is waiting");
        };
        clients.acknowledged(id);
        let (sends, _) = clients.tick(real_ms + 10_000, &mut rng, false);
        assert!(sends.is_empty());
        assert_eq!(clients.unacknowledged(), (0, None));
    }
}
