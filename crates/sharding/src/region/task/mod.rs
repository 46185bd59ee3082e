//! The region task: everything that is not the local fast path. It asks the coordinator for
//! unknown shards and settles their buffers when the answer comes, forwards envelopes for
//! remote shards (through its [`Forwarder`]), takes envelopes forwarded by peers, hands shards
//! off when the coordinator moves them, and times out allocations and asks that waited too
//! long.

use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::Instant;

mod committed;
mod handoff;
mod lineage;

use super::forward::Forwarder;
use super::homes::{Home, RegisteredType};
use super::route::{Caller, Routed, fail_all, not_registered, refuse, route_in_slot};
use super::transfer::{self, Transfers};
use super::{Internal, Request, Shared, recovery};
use crate::handoff::{Buffered, BufferedBody, ReplyRoute, ShardBuffer};
use crate::link::{
    CoordinatorCommand, FORWARD_BATCH_MAX, LOST_OWNER_GRACE, LinkMessage, WireBody, WireEnvelope,
};
use tessera_contract::{Allocation, MessageError, NodeId, Reply, ShardKey, TypeKey};

/// How long an allocation request waits for its answer before it is asked again.
const ALLOCATION_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

pub(crate) struct RegionTask {
    shared: Arc<Shared>,
    link_inbox: mpsc::Sender<LinkMessage>,
    internal: mpsc::Sender<Internal>,
    recovery: Option<recovery::Recovery>,
    /// Shards whose slot waits for the coordinator, and when it was last asked.
    allocating: HashMap<ShardKey, Instant>,
    forwarder: Forwarder,
    transfers: Transfers,
    /// Allocations naming this node that its catalog has not applied yet (`committed`).
    unconfirmed: HashMap<ShardKey, Allocation>,
    /// Shards whose lineage is beginning here, with the allocation to serve once it has
    /// (`lineage`); at most one per shard of a registered type.
    starting: HashMap<ShardKey, Allocation>,
    /// The generation each shard's lineage began at here, in this process (`lineage`).
    lineages: HashMap<ShardKey, u64>,
}

impl RegionTask {
    pub(crate) fn spawn(shared: Arc<Shared>, requests: mpsc::Receiver<Request>) {
        let capacity = shared.config.command_buffer;
        let (link_inbox, links) = mpsc::channel(capacity);
        let (internal, internal_receiver) = mpsc::channel(capacity);
        shared
            .switchboard
            .connect_region(shared.node.clone(), link_inbox.clone());
        let recovery = recovery::Recovery::start(&shared, internal.clone());
        let task = RegionTask {
            shared,
            link_inbox,
            internal,
            recovery,
            allocating: HashMap::new(),
            forwarder: Forwarder::new(),
            transfers: Transfers::default(),
            unconfirmed: HashMap::new(),
            starting: HashMap::new(),
            lineages: HashMap::new(),
        };
        tokio::spawn(task.run(requests, links, internal_receiver));
    }

    async fn run(
        mut self,
        mut requests: mpsc::Receiver<Request>,
        mut links: mpsc::Receiver<LinkMessage>,
        mut internal: mpsc::Receiver<Internal>,
    ) {
        let mut tick = tokio::time::interval(self.shared.config.coordinator_tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown_reply = None;
        'serve: loop {
            // Biased: peer messages first, so that anything a peer sent before a handoff
            // finished is buffered and drained with it rather than chasing it later.
            tokio::select! {
                biased;
                Some(message) = links.recv() => self.on_link(message),
                request = requests.recv() => {
                    // Requests that are ready join the same forwarding batches.
                    let mut next = request;
                    let mut handled = 0;
                    loop {
                        match next.take() {
                            Some(Request::Shutdown(reply)) => {
                                shutdown_reply = Some(reply);
                                break 'serve;
                            }
                            None => break 'serve,
                            Some(request) => self.on_request(request),
                        }
                        handled += 1;
                        if handled == FORWARD_BATCH_MAX {
                            break;
                        }
                        match requests.try_recv() {
                            Ok(request) => next = Some(request),
                            Err(_) => break,
                        }
                    }
                },
                Some(message) = internal.recv() => self.on_internal(message),
                _ = tick.tick() => self.on_tick(),
            }
            // What queued for forwarding while handling this goes out now, one batch per peer.
            self.forwarder.flush(&self.shared);
        }
        self.forwarder.flush(&self.shared);
        self.shared
            .switchboard
            .disconnect_region_if(&self.shared.node, &self.link_inbox);
        if let Some(writer) = &self.shared.remember
            && let Err(error) = writer.flush().await
        {
            tracing::warn!(%error, "remember flush at region shutdown failed");
        }
        if let Some(reply) = shutdown_reply {
            let _ = reply.send(());
        }
    }

    /// One request from a handle (not `Shutdown`, which ends the loop).
    fn on_request(&mut self, request: Request) {
        match request {
            Request::Allocate(key) => self.request_allocation(key),
            Request::Route {
                item,
                accepted: Some(accepted),
            } => {
                let _ = accepted.send(self.route(item, Caller::Waiting));
            }
            Request::Route {
                item,
                accepted: None,
            } => {
                // Refusals are counted (and a passivation's loss logged) by `route`.
                let _ = self.route(item, Caller::Absent);
            }
            Request::Committed { assigned, moved } => self.on_committed(assigned, moved),
            Request::CatalogRestored => self.on_catalog_restored(),
            Request::RecoverType(type_key) => {
                if let Some(recovery) = &self.recovery {
                    recovery.list_shards(type_key);
                }
            }
            Request::Shutdown(reply) => {
                let _ = reply.send(());
            }
        }
    }

    fn registered(&self, type_key: &TypeKey) -> Option<Arc<RegisteredType>> {
        self.shared.homes.get_key(type_key)
    }

    /// Routes one envelope from the task: like the fast path, but forwarding and allocation
    /// requests happen here and now.
    fn route(&mut self, item: Buffered, caller: Caller) -> Result<(), MessageError> {
        let Some(ty) = self.registered(&item.address.type_key()) else {
            let error = not_registered(&item.address.type_key());
            refuse(&self.shared, item, error.clone(), caller);
            return Err(error);
        };
        let routed = {
            let Some(mut home) = ty.slot(item.shard) else {
                let error = MessageError::unavailable(format!(
                    "shard {} is outside the {} shards of its type",
                    item.shard,
                    ty.num_shards()
                ));
                refuse(&self.shared, item, error.clone(), caller);
                return Err(error);
            };
            route_in_slot(&self.shared, &ty, &mut home, item, caller)?
        };
        match routed {
            Routed::Done => Ok(()),
            // Only a sender's own call routes with `Caller::WaitingHere`; should a run come
            // back here all the same, it must still run to completion.
            Routed::RunHere(run) => {
                tokio::spawn(async move { run.run() });
                Ok(())
            }
            Routed::Allocate(key) => {
                self.request_allocation(key);
                Ok(())
            }
            Routed::Remote(item, allocation) => {
                self.forwarder
                    .forward(&self.shared, item, allocation, caller)
            }
        }
    }

    /// Asks the coordinator where `key` lives. If it cannot be asked now (it is moving to a
    /// new metadata primary), or its answer is lost, the question is asked again every
    /// [`ALLOCATION_RETRY`] until the request timeout fails what waits.
    fn request_allocation(&mut self, key: ShardKey) {
        let command = CoordinatorCommand::Allocate {
            key: key.clone(),
            requester: self.shared.node.clone(),
        };
        if let Err(error) = self.shared.switchboard.send_to_coordinator(command) {
            tracing::debug!(%key, %error, "allocation request not sent; retrying");
        }
        self.allocating.insert(key, Instant::now());
    }

    /// Fails what waits for `key`'s allocation and forgets the attempt.
    fn settle_allocating(&mut self, key: &ShardKey, error: &MessageError) {
        self.allocating.remove(key);
        let Some(ty) = self.registered(&key.type_key) else {
            return;
        };
        if let Some(mut home) = ty.slot(key.shard)
            && let Home::Allocating { buffer, .. } = &mut *home
        {
            fail_all(&self.shared, buffer, error);
            *home = Home::Unknown;
        }
    }

    fn on_link(&mut self, message: LinkMessage) {
        match message {
            LinkMessage::Deliver {
                from,
                batch,
                envelopes,
            } => self.on_batch(from, batch, envelopes),
            LinkMessage::Delivered { refused, .. } => {
                self.forwarder.on_delivered(&self.shared, &refused);
            }
            LinkMessage::AskReply { request_id, reply } => {
                self.forwarder.answer(request_id, Reply::from(reply));
            }
            LinkMessage::Allocated { key, allocation } => self.learn(&key, allocation),
            LinkMessage::AllocationFailed {
                key,
                reason,
                state_unavailable,
            } => {
                let message = format!("shard {key} has no home: {reason}");
                let error = if state_unavailable {
                    MessageError::shard_unavailable(message)
                } else {
                    MessageError::unavailable(message)
                };
                self.settle_allocating(&key, &error);
            }
            LinkMessage::HandOff { key, to } => self.begin_handoff(key, to),
            LinkMessage::ShardState {
                key,
                generation,
                from,
                part,
            } => {
                let ty = self.registered(&key.type_key);
                transfer::receive(&self.shared, ty, key, generation, from, part);
            }
            LinkMessage::ShardStateInstalled {
                key,
                generation,
                index,
                error,
            } => {
                self.transfers.on_installed(&key, generation, index, error);
            }
        }
    }

    /// Routes a peer's batch in order and answers it with the envelopes refused.
    fn on_batch(&mut self, from: NodeId, batch: u64, envelopes: Vec<WireEnvelope>) {
        let count = envelopes.len();
        let mut refused = Vec::new();
        for (index, envelope) in envelopes.into_iter().enumerate() {
            if let Err(error) = self.on_forwarded(envelope) {
                refused.push((index as u32, error));
            }
        }
        let result = LinkMessage::Delivered {
            batch,
            accepted: (count - refused.len()) as u32,
            refused,
        };
        if let Err(error) = self.shared.switchboard.send_to_region(&from, result) {
            tracing::debug!(%from, %error, "batch result not sent");
        }
    }

    fn on_forwarded(&mut self, envelope: WireEnvelope) -> Result<(), MessageError> {
        let WireEnvelope {
            address,
            key,
            allocation,
            hops,
            body,
        } = envelope;
        self.learn(&key, allocation);
        let body = match body {
            WireBody::Passivate => BufferedBody::Passivate,
            WireBody::Message {
                payload,
                meta,
                reply_to,
            } => BufferedBody::Message {
                payload,
                meta,
                reply: reply_to.map_or(ReplyRoute::None, ReplyRoute::Remote),
            },
            WireBody::ReadState { reply_to } => BufferedBody::ReadState {
                reply: ReplyRoute::Remote(reply_to),
            },
        };
        let item = Buffered {
            address,
            shard: key.shard,
            hops,
            body,
        };
        if self.registered(&key.type_key).is_none() {
            // The sender knows the type: this node's catalog is behind (it has not yet applied
            // or compiled the deploy). Retryable, unlike a type that exists nowhere.
            let error = MessageError::unavailable(format!(
                "entity type {} is not bound on node {} yet (its catalog is catching up); retry",
                key.type_key, self.shared.node
            ));
            refuse(&self.shared, item, error.clone(), Caller::Absent);
            return Err(error);
        }
        // A refusal is answered to the asker by `route` already.
        self.route(item, Caller::Absent)
    }

    /// Records where `key` lives (unless this region knows a newer allocation or is handing
    /// the shard off), drains whatever waited for the answer, in order, and starts recovery if
    /// the shard just became this node's.
    fn learn(&mut self, key: &ShardKey, allocation: Allocation) {
        let Some(ty) = self.registered(&key.type_key) else {
            return;
        };
        self.abandon_if_settled(key);
        let ours = allocation.node == self.shared.node;
        let news = ty.slot(key.shard).is_some_and(|home| {
            home.known_generation()
                .is_none_or(|known| known < allocation.generation)
        });
        if ours && news {
            // This node serves the shard only on what its catalog committed.
            match self.confirm(key, &allocation) {
                committed::Confirmation::Committed => {
                    self.unconfirmed.remove(key);
                }
                committed::Confirmation::Lagging => {
                    self.park(key, allocation);
                    return;
                }
                committed::Confirmation::Superseded(committed) => {
                    self.unconfirmed.remove(key);
                    return self.learn(key, committed);
                }
            }
            if !self.lineage_ready(key, &allocation, &ty) {
                return;
            }
        }
        let mut forwards = Vec::new();
        let was_local = {
            let Some(mut home) = ty.slot(key.shard) else {
                return;
            };
            if matches!(*home, Home::HandingOff { .. })
                || home
                    .known_generation()
                    .is_some_and(|known| known >= allocation.generation)
            {
                return;
            }
            let was_local = matches!(*home, Home::Local { .. });
            if ours && !was_local {
                // Before anything is delivered here: recovery restarts only what was
                // remembered before this acquisition.
                self.on_acquired(key, &ty);
            }
            let next = if ours {
                Home::Local {
                    generation: allocation.generation,
                }
            } else {
                Home::Remote(allocation)
            };
            if let Home::Allocating { mut buffer, .. } = std::mem::replace(&mut *home, next) {
                for item in buffer.drain().collect::<Vec<_>>() {
                    if let Ok(Routed::Remote(item, to)) =
                        route_in_slot(&self.shared, &ty, &mut home, item, Caller::Absent)
                    {
                        forwards.push((item, to));
                    }
                }
            }
            was_local
        };
        self.allocating.remove(key);
        for (item, to) in forwards {
            let _ = self
                .forwarder
                .forward(&self.shared, item, to, Caller::Absent);
        }
        if was_local && !ours {
            // Moved away without a handoff (this node was thought gone): stop what runs here.
            let stopping = self.shared.local.stop_shard(&key.type_key, key.shard);
            tokio::spawn(stopping);
        }
    }

    fn on_acquired(&self, key: &ShardKey, ty: &RegisteredType) {
        if let (true, Some(recovery)) = (ty.remembers(), &self.recovery) {
            recovery.recover_shard(key.clone());
        }
    }

    fn on_internal(&mut self, message: Internal) {
        match message {
            Internal::HandoffStopped(key) => self.on_handoff_stopped(key),
            Internal::LineageBegun(key, begun) => self.on_lineage_begun(key, begun),
            Internal::Transferred(key, to) => {
                if self.transfers.finished(&key, &to) {
                    self.finish_handoff(key);
                }
            }
            Internal::RememberedShards(type_key, shards) => {
                let Some(ty) = self.registered(&type_key) else {
                    return;
                };
                for shard in shards {
                    let key = ShardKey::new(type_key.clone(), shard);
                    let unknown = {
                        let Some(mut home) = ty.slot(shard) else {
                            continue;
                        };
                        match &*home {
                            Home::Local { .. } => false,
                            Home::Unknown => {
                                *home = Home::Allocating {
                                    since: Instant::now(),
                                    buffer: ShardBuffer::new(self.shared.config.allocation_buffer),
                                };
                                true
                            }
                            _ => continue,
                        }
                    };
                    if unknown {
                        self.request_allocation(key);
                    } else {
                        self.on_acquired(&key, &ty);
                    }
                }
            }
        }
    }

    fn on_tick(&mut self) {
        self.shared.warnings.flush();
        let now = Instant::now();
        if !self.unconfirmed.is_empty() {
            self.recheck_unconfirmed();
        }
        self.forwarder.forget_expired(now);
        if self.forwarder.has_pending_asks() {
            let lost = self.shared.switchboard.regions_lost_for(LOST_OWNER_GRACE);
            let orphaned = self.forwarder.end_asks_to_lost(&lost);
            self.shared.stats.count_asks_orphaned(orphaned);
        }
        self.abandon_settled_transfers();
        let timeout = self.shared.config.request_timeout;
        let mut stale = Vec::new();
        let retry: Vec<ShardKey> = self
            .allocating
            .iter()
            .filter(|(_, asked)| now.duration_since(**asked) >= ALLOCATION_RETRY)
            .map(|(key, _)| key.clone())
            .collect();
        for key in retry {
            self.request_allocation(key);
        }
        for key in self.allocating.keys() {
            let Some(ty) = self.registered(&key.type_key) else {
                stale.push((key.clone(), None));
                continue;
            };
            let waited = ty.slot(key.shard).and_then(|home| match &*home {
                Home::Allocating { since, .. } => Some(now.duration_since(*since)),
                _ => None,
            });
            match waited {
                Some(waited) if waited < timeout => {}
                Some(_) => stale.push((key.clone(), Some(()))),
                None => stale.push((key.clone(), None)),
            }
        }
        for (key, timed_out) in stale {
            if timed_out.is_some() {
                let error = MessageError::unavailable(format!(
                    "no allocation for shard {key} within {} ms",
                    timeout.as_millis()
                ));
                self.settle_allocating(&key, &error);
            } else {
                self.allocating.remove(&key);
            }
        }
    }
}
