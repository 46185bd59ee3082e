//! The region task's side of a handoff: the coordinator moved a shard away, so its entities
//! stop, its state goes to the new owner part by part ([`transfer`](super::super::transfer)),
//! and only then is what waited drained to the new owner, in order, the move reported
//! complete, and this node's copy discarded. A new target (the first went away) starts over.

use super::RegionTask;
use crate::handoff::ShardBuffer;
use crate::link::CoordinatorCommand;
use crate::region::Internal;
use crate::region::homes::Home;
use crate::region::route::{Caller, Routed, route_in_slot};
use crate::region::transfer;
use tessera_contract::{Allocation, ShardKey};

impl RegionTask {
    pub(super) fn begin_handoff(&mut self, key: ShardKey, to: Allocation) {
        let Some(ty) = self.registered(&key.type_key) else {
            self.complete_handoff(key, to.generation);
            return;
        };
        {
            let Some(mut home) = ty.slot(key.shard) else {
                return;
            };
            if let Home::Remote(known) = &*home
                && known.generation >= to.generation
            {
                // Handed off already; the completion was lost on its way. Say it again.
                drop(home);
                self.complete_handoff(key, to.generation);
                return;
            }
            if let Home::HandingOff { to: current, .. } = &mut *home {
                // The coordinator chose another target (the first one went away), or sent the
                // same move again: start over toward the newest target.
                if to.generation <= current.generation {
                    return;
                }
                *current = to.clone();
                drop(home);
                self.transfers.cancel(&key);
                if to.node == self.shared.node {
                    self.finish_handoff(key);
                } else {
                    let _ = self.internal.try_send(Internal::HandoffStopped(key));
                }
                return;
            }
            let buffer = match std::mem::take(&mut *home) {
                // Envelopes that waited for an allocation came first; keep them first.
                Home::Allocating { buffer, .. } => buffer,
                _ => ShardBuffer::new(self.shared.config.allocation_buffer),
            };
            *home = Home::HandingOff { to, buffer };
        }
        self.allocating.remove(&key);
        let stopping = self.shared.local.stop_shard(&key.type_key, key.shard);
        let internal = self.internal.clone();
        let drain_delay = self.shared.config.handoff_drain_delay;
        tokio::spawn(async move {
            stopping.await;
            if !drain_delay.is_zero() {
                tokio::time::sleep(drain_delay).await;
            }
            let _ = internal.send(Internal::HandoffStopped(key)).await;
        });
    }

    /// The shard's entities stopped: send its state to the new owner, or (state shared by
    /// every region, or the shard stays here) finish at once.
    pub(super) fn on_handoff_stopped(&mut self, key: ShardKey) {
        let Some(ty) = self.registered(&key.type_key) else {
            return;
        };
        let to = {
            let Some(home) = ty.slot(key.shard) else {
                return;
            };
            match &*home {
                Home::HandingOff { to, .. } => to.clone(),
                _ => return,
            }
        };
        if self.shared.shard_states.is_none() || to.node == self.shared.node {
            self.finish_handoff(key);
        } else if !self.transfers.is_sending(&key) {
            let internal = self.internal.clone();
            self.transfers.start(&self.shared, &ty, key, to, internal);
        }
    }

    pub(super) fn finish_handoff(&mut self, key: ShardKey) {
        let Some(ty) = self.registered(&key.type_key) else {
            return;
        };
        let (to, forwards) = {
            let Some(mut home) = ty.slot(key.shard) else {
                return;
            };
            let Home::HandingOff { to, mut buffer } = std::mem::take(&mut *home) else {
                return;
            };
            *home = if to.node == self.shared.node {
                Home::Local {
                    generation: to.generation,
                }
            } else {
                Home::Remote(to.clone())
            };
            let mut forwards = Vec::new();
            for item in buffer.drain().collect::<Vec<_>>() {
                if let Ok(Routed::Remote(item, next)) =
                    route_in_slot(&self.shared, &ty, &mut home, item, Caller::Absent)
                {
                    forwards.push((item, next));
                }
            }
            (to, forwards)
        };
        for (item, next) in forwards {
            let _ = self
                .forwarder
                .forward(&self.shared, item, next, Caller::Absent);
        }
        self.complete_handoff(key.clone(), to.generation);
        if let (Some(states), false) = (&self.shared.shard_states, to.node == self.shared.node)
            && let Some(ty) = self.registered(&key.type_key)
        {
            // The new owner holds every part: this copy goes. Should this fail or the node
            // stop first, the stale rows are cleared when the shard comes back here.
            let discarding = states.discard(transfer::scope(&ty, &key));
            tokio::spawn(async move {
                if let Err(error) = discarding.await {
                    tracing::warn!(%key, %error, "handed-off shard state not discarded");
                }
            });
        }
    }

    /// A handoff this region is still sending whose move the committed catalog says is settled
    /// — the shard's allocation at the handoff's generation or later, and no handoff of it in
    /// flight from this node — was finished by the coordinator without this region: it took
    /// this node for gone (down, cut off, or silent; say a stalled process that read the
    /// handoff only when it woke), and the new owner will take no part of it. The transfer
    /// stops and what waited goes where the shard lives now: the shard waits as if
    /// allocating, for the committed allocation, which is returned. Nothing else is proof: a
    /// region may hear of the new allocation (a forwarded envelope names it) while its own
    /// handoff is still under way.
    pub(super) fn abandon_if_settled(&mut self, key: &ShardKey) -> Option<Allocation> {
        let ty = self.registered(&key.type_key)?;
        let mut home = ty.slot(key.shard)?;
        let Home::HandingOff { to, .. } = &*home else {
            return None;
        };
        let committed = self.handoff_settled(key, to.generation)?;
        let Home::HandingOff { buffer, .. } = std::mem::take(&mut *home) else {
            return None;
        };
        *home = Home::Allocating {
            since: tokio::time::Instant::now(),
            buffer,
        };
        drop(home);
        self.transfers.cancel(key);
        tracing::info!(%key, to = %committed.node, "a handoff settled without this node: abandoned");
        Some(committed)
    }

    /// Abandons the transfers whose handoffs the catalog says were settled without this
    /// region (see [`RegionTask::abandon_if_settled`]) and serves their shards where they
    /// live now.
    pub(super) fn abandon_settled_transfers(&mut self) {
        for key in self.transfers.sending() {
            if let Some(committed) = self.abandon_if_settled(&key) {
                self.learn(&key, committed);
            }
        }
    }

    pub(super) fn complete_handoff(&self, key: ShardKey, generation: u64) {
        let command = CoordinatorCommand::HandoffComplete {
            key: key.clone(),
            generation,
        };
        if let Err(error) = self.shared.switchboard.send_to_coordinator(command) {
            tracing::warn!(%key, %error, "handoff completion not delivered to the coordinator");
        }
    }
}
