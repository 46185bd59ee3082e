//! What a node does with shards. The serving rule: a node serves shard S (applies and
//! acknowledges a message for it) only if (a) the newest entry it learned for S names it the
//! owner, (b) it holds S's state installed for that entry's generation and is not handing it
//! off, and (c) its lease is valid on its own clock. A handoff stops serving at once, sends the
//! state (with the ids applied to it) to the new owner, and drops the copy only once the new
//! owner answered; a new owner installs a transfer, or starts fresh state when the table says
//! the old state was declared lost. Every step is idempotent, so retries and duplicates are
//! harmless, and a transfer older than what the node knows is answered but never installed.

use std::collections::BTreeSet;
use std::rc::Rc;

use super::{AppliedAck, Node, Outbox, Slot};
use crate::lease::client::CLIENT_MESSAGES_MAX;
use crate::lease::message::{Endpoint, Message, ReplyKind, ShardState};
use crate::lease::options::Canary;
use crate::lease::table::{Entry, MemberId, Start};

/// Times a request is forwarded between nodes before it is dropped (the client retries).
/// Generations only grow, so a correct route needs at most two hops.
pub const FORWARD_HOPS_MAX: u8 = 2;

impl Node {
    /// Whether this node serves `shard` at real time `real_ms` — the serving rule.
    pub fn serves(&self, shard: usize, real_ms: u64) -> bool {
        let Some(process) = self.process.as_ref() else {
            return false;
        };
        let lease_ok = self.canary == Some(Canary::IgnoreLease)
            || process.lease.is_valid(self.clock.local_ms(real_ms));
        let Some(entry) = process.view.get(shard).copied().flatten() else {
            return false;
        };
        lease_ok
            && entry.owner == self.durable.member
            && self.durable.slots.get(&shard).is_some_and(|slot| {
                slot.handing_off.is_none() && slot.generation == entry.generation
            })
    }

    /// Learns `entries` (keeping the newest per shard) and acts on what they say.
    pub(super) fn learn(&mut self, entries: &[Entry], out: &mut Outbox) {
        for (shard, entry) in entries.iter().enumerate() {
            let Some(process) = self.process.as_mut() else {
                return;
            };
            let Some(known) = process.view.get_mut(shard) else {
                continue;
            };
            if known.is_none_or(|known| entry.is_newer_than(&known)) {
                *known = Some(*entry);
            }
            if let Some(latest) = *known {
                self.act_on(shard, latest, out);
            }
        }
    }

    /// Brings this node's copy of `shard` in line with `entry`. Runs on every table learned,
    /// so it also retries reports the log may not have received.
    fn act_on(&mut self, shard: usize, entry: Entry, out: &mut Outbox) {
        let member = self.durable.member;
        let moving_away = entry.start == Start::HandOff { from: member } && !entry.settled;
        if moving_away && entry.owner != member {
            self.begin_handoff(shard, entry.generation, entry.owner, out);
        }
        let retired = self.durable.retired.get(&shard).copied().unwrap_or(0);
        let superseded =
            self.durable
                .slots
                .get(&shard)
                .is_some_and(|slot| match slot.handing_off {
                    Some((_, generation)) => entry.generation > generation,
                    None => entry.generation > slot.generation && entry.owner != member,
                });
        if superseded {
            self.durable.slots.remove(&shard);
        }
        let known_generation = self.known_generation(shard).max(retired);
        if entry.owner == member && known_generation < entry.generation {
            let starts_fresh = entry.start == Start::Fresh;
            if starts_fresh || self.canary == Some(Canary::ServeBeforeInstall) {
                let slot = Slot {
                    generation: entry.generation,
                    lineage: entry.lineage,
                    applied: BTreeSet::new(),
                    handing_off: None,
                };
                self.durable.slots.insert(shard, slot);
            }
        }
        self.report_installed(shard, entry, out);
    }

    /// The highest generation this node's copy of `shard` stands for, 0 if it holds none.
    fn known_generation(&self, shard: usize) -> u64 {
        self.durable.slots.get(&shard).map_or(0, |slot| {
            slot.handing_off.map_or(slot.generation, |(_, generation)| {
                generation.max(slot.generation)
            })
        })
    }

    /// Tells the log this node holds `shard` for `entry`, while the entry is not settled.
    fn report_installed(&self, shard: usize, entry: Entry, out: &mut Outbox) {
        let member = self.durable.member;
        let holds =
            self.durable.slots.get(&shard).is_some_and(|slot| {
                slot.handing_off.is_none() && slot.generation == entry.generation
            });
        if entry.owner == member && !entry.settled && holds {
            let generation = entry.generation;
            out.send(
                Endpoint::Log,
                Message::Installed {
                    member,
                    shard,
                    generation,
                },
            );
        }
    }

    /// The coordinator (or the table) moves `shard` to `target` at `generation`: stop serving
    /// and send the state; if the handoff completed already, say so again.
    pub(super) fn begin_handoff(
        &mut self,
        shard: usize,
        generation: u64,
        target: MemberId,
        out: &mut Outbox,
    ) {
        let member = self.durable.member;
        let retired = self.durable.retired.get(&shard).copied().unwrap_or(0);
        let Some(slot) = self.durable.slots.get_mut(&shard) else {
            if retired >= generation {
                out.send(
                    Endpoint::Log,
                    Message::HandOffDone {
                        member,
                        shard,
                        generation,
                    },
                );
            }
            return;
        };
        match slot.handing_off {
            None if slot.generation < generation => slot.handing_off = Some((target, generation)),
            Some(handing_off) if handing_off == (target, generation) => {}
            _ => return,
        }
        send_state(member, shard, slot, out);
    }

    /// Resends every state transfer still waiting for its answer.
    pub(super) fn resend_transfers(&self, out: &mut Outbox) {
        for (shard, slot) in &self.durable.slots {
            if slot.handing_off.is_some() {
                send_state(self.durable.member, *shard, slot, out);
            }
        }
    }

    /// A transfer arrived: install it unless this node knows of something newer; answer
    /// either way so the previous owner can drop its copy.
    pub(super) fn install_transfer(
        &mut self,
        source: MemberId,
        shard: usize,
        generation: u64,
        state: ShardState,
        out: &mut Outbox,
    ) {
        let Some(process) = self.process.as_ref() else {
            return;
        };
        let viewed = process.view.get(shard).copied().flatten();
        let retired = self.durable.retired.get(&shard).copied().unwrap_or(0);
        let newer_known = self.known_generation(shard) >= generation
            || retired >= generation
            || viewed.is_some_and(|entry| entry.generation > generation);
        if !newer_known {
            let slot = Slot {
                generation,
                lineage: state.lineage,
                applied: (*state.applied).clone(),
                handing_off: None,
            };
            self.durable.slots.insert(shard, slot);
        }
        let done = Message::TransferDone {
            source,
            shard,
            generation,
        };
        out.send(Endpoint::Machine(source.machine), done);
        if let Some(entry) = viewed {
            self.report_installed(shard, entry, out);
        }
    }

    /// The new owner no longer needs the transfer: drop the copy and report the handoff done.
    pub(super) fn finish_handoff(&mut self, shard: usize, generation: u64, out: &mut Outbox) {
        let member = self.durable.member;
        let handing_off = self
            .durable
            .slots
            .get(&shard)
            .and_then(|slot| slot.handing_off);
        if handing_off.is_some_and(|(_, to_generation)| to_generation == generation) {
            self.durable.slots.remove(&shard);
            let retired = self.durable.retired.entry(shard).or_insert(0);
            *retired = (*retired).max(generation);
        }
        if self
            .durable
            .retired
            .get(&shard)
            .is_some_and(|retired| *retired >= generation)
        {
            out.send(
                Endpoint::Log,
                Message::HandOffDone {
                    member,
                    shard,
                    generation,
                },
            );
        }
    }

    /// A client's message for `shard`: apply it if this node serves the shard, else forward it
    /// toward the owner this node knows, else drop it (the client retries).
    pub(super) fn request(
        &mut self,
        id: u64,
        shard: usize,
        hops: u8,
        real_ms: u64,
        out: &mut Outbox,
    ) {
        if self.serves(shard, real_ms) {
            let member = self.durable.member;
            let Some(slot) = self.durable.slots.get_mut(&shard) else {
                return;
            };
            let kind = if slot.applied.contains(&id) {
                ReplyKind::Duplicate
            } else if slot.applied.len() < CLIENT_MESSAGES_MAX {
                slot.applied.insert(id);
                out.applied.push(AppliedAck {
                    id,
                    shard,
                    lineage: slot.lineage,
                    member,
                });
                ReplyKind::Applied
            } else {
                return;
            };
            out.send(Endpoint::Client, Message::Reply { id, kind });
            return;
        }
        let owner = self
            .process
            .as_ref()
            .and_then(|process| process.view.get(shard).copied().flatten())
            .map(|entry| entry.owner.machine);
        if let Some(machine) =
            owner.filter(|machine| *machine != self.machine && hops < FORWARD_HOPS_MAX)
        {
            out.send(
                Endpoint::Machine(machine),
                Message::Request {
                    id,
                    shard,
                    hops: hops + 1,
                },
            );
        }
    }
}

/// Sends `slot`'s state to the target of its handoff.
fn send_state(member: MemberId, shard: usize, slot: &Slot, out: &mut Outbox) {
    let Some((target, generation)) = slot.handing_off else {
        return;
    };
    let state = ShardState {
        lineage: slot.lineage,
        applied: Rc::new(slot.applied.clone()),
    };
    let transfer = Message::StateTransfer {
        target,
        source: member,
        shard,
        generation,
        state,
    };
    out.send(Endpoint::Machine(target.machine), transfer);
}
