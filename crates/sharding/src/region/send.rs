//! Sending through a region: a sender's `tell`, `ask`, `passivate` and `read_state` resolve the
//! type and shard, route under the shard's slot lock (delivering to a local entity — possibly
//! running its message on the sender's task —, buffering while the shard is allocated or handed
//! off), and hand the region task only what it must do: ask the coordinator, forward to a peer.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::batch::too_large_to_forward;
use super::homes::{self, RegisteredType};
use super::route::{Caller, Routed, fail_all, not_registered, refuse, route_in_slot, stopped};
use super::state_read;
use super::{RegionHandle, Request};
use crate::handoff::{Buffered, BufferedBody, ReplyRoute};
use tessera_contract::{
    BoxFuture, EntityAddress, ErrorKind, MessageError, MessageMeta, Reply, ShardId, ShardKey,
};

impl RegionHandle {
    /// The registered type of `address` and the shard it maps to.
    pub(super) fn resolve(
        &self,
        address: &EntityAddress,
    ) -> Result<(Arc<RegisteredType>, ShardId), MessageError> {
        let Some(ty) = self.shared.homes.get(&address.tenant, &address.entity_type) else {
            let error = not_registered(&address.type_key());
            self.shared.stats.count_refused(error.kind, false);
            return Err(error);
        };
        let shard = ty.extractor.shard_of(&address.id);
        if shard >= ty.num_shards() {
            return Err(MessageError::new(
                ErrorKind::Internal,
                format!(
                    "the shard extractor of {} mapped {:?} to shard {shard}, outside 0..{}",
                    ty.key,
                    address.id,
                    ty.num_shards()
                ),
            ));
        }
        Ok((ty, shard))
    }

    /// Routes `item` from the sender: straight to a local mailbox or a waiting buffer under
    /// the shard's lock; through the region task only for a new allocation or a remote shard.
    pub(super) async fn dispatch(
        &self,
        ty: &RegisteredType,
        item: Buffered,
        caller: Caller,
    ) -> Result<(), MessageError> {
        // Bound first, not matched on: a match's scrutinee would live across the await.
        let Some(item) = self.dispatch_here(ty, item, caller)? else {
            return Ok(());
        };
        self.submit(item).await
    }

    /// The part of [`dispatch`](Self::dispatch) that never waits: routes `item` under the
    /// shard's lock (running it here when it is claimed for this sender, asking for an
    /// allocation when the shard has no home yet) and gives it back only when it must go to
    /// the region task, for a remote shard. Kept out of the senders' futures, so that a
    /// message that does not wait does not pay for the size of one that does: every sender's
    /// future carries its callee's, and is built and moved per message. A tell's future went
    /// from 1,744 to under 256 bytes (`Node::tell`'s from 1,928 to 312 in release); a test in
    /// `tests/routing.rs` holds it there.
    pub(super) fn dispatch_here(
        &self,
        ty: &RegisteredType,
        item: Buffered,
        caller: Caller,
    ) -> Result<Option<Buffered>, MessageError> {
        let routed = {
            let mut home = ty
                .slot(item.shard)
                .expect("invariant: resolve() checked the shard is in range");
            route_in_slot(&self.shared, ty, &mut home, item, caller)?
        };
        match routed {
            Routed::Done => Ok(None),
            Routed::RunHere(run) => {
                run.run();
                Ok(None)
            }
            Routed::Allocate(key) => self.request_allocation(ty, key).map(|()| None),
            Routed::Remote(item, _) => Ok(Some(item)),
        }
    }

    /// Tells the region task to ask the coordinator for `key`; if it cannot take the request,
    /// what waits for the shard fails now.
    fn request_allocation(&self, ty: &RegisteredType, key: ShardKey) -> Result<(), MessageError> {
        let shard = key.shard;
        match self.shared.requests.try_send(Request::Allocate(key)) {
            Ok(()) => Ok(()),
            Err(_) => {
                let error = MessageError::unavailable("the region inbox is full; retry later");
                if let Some(mut home) = ty.slot(shard)
                    && let homes::Home::Allocating { buffer, .. } = &mut *home
                {
                    fail_all(&self.shared, buffer, &error);
                    *home = homes::Home::Unknown;
                }
                Err(error)
            }
        }
    }

    /// Hands `item` to the region task (waiting at most `request_timeout` for room: that is
    /// the backpressure), which forwards it in order with everything else this sender handed
    /// it. An ask waits until it is routed, so a refusal comes back here; a one-way message
    /// does not wait — it is forwarded, in batches, as the task gets to it.
    fn submit(&self, item: Buffered) -> BoxFuture<'_, Result<(), MessageError>> {
        Box::pin(self.submit_unboxed(item))
    }

    /// [`submit`](Self::submit)'s work, boxed there: it waits, so its future is large. A
    /// message that could never be forwarded is refused here, so a tell hears of it too.
    async fn submit_unboxed(&self, item: Buffered) -> Result<(), MessageError> {
        if let Some(error) = too_large_to_forward(&item) {
            refuse(&self.shared, item, error.clone(), Caller::Waiting);
            return Err(error);
        }
        let one_way = item.body.is_one_way();
        let (accepted, receiver) = if one_way {
            (None, None)
        } else {
            let (accepted, receiver) = oneshot::channel();
            (Some(accepted), Some(receiver))
        };
        let wait = self.shared.config.request_timeout;
        let request = Request::Route { item, accepted };
        match tokio::time::timeout(wait, self.shared.requests.send(request)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(stopped()),
            Err(_) => {
                return Err(MessageError::unavailable(format!(
                    "region inbox stayed full for {} ms",
                    wait.as_millis()
                )));
            }
        }
        match receiver {
            Some(receiver) => receiver.await.map_err(|_| stopped())?,
            None => Ok(()),
        }
    }

    /// Sends a one-way message. Returns once it is in the entity's mailbox, buffered for its
    /// shard, forwarded, or — for an idle local entity — started on the caller's task (and
    /// finished, if it did not have to wait for anything); an error means it was not accepted
    /// (unregistered type, full mailbox or buffer, failed shard, a payload too large to be
    /// forwarded to its shard's remote owner, ...).
    ///
    /// See [`Region::start`](super::Region::start) for a complete setup.
    pub async fn tell(&self, address: EntityAddress, payload: Vec<u8>) -> Result<(), MessageError> {
        // Not through `tell_with`: a future inside a future would grow the one every tell
        // makes (`a_tell_future_stays_small`).
        let Some(item) = self.tell_here(address, payload, MessageMeta::default())? else {
            return Ok(());
        };
        self.submit(item).await
    }

    /// [`tell`](Self::tell) with the message's metadata (a client's trace context).
    pub async fn tell_with(
        &self,
        address: EntityAddress,
        payload: Vec<u8>,
        meta: MessageMeta,
    ) -> Result<(), MessageError> {
        // Bound first, not matched on: a match's scrutinee would live across the await.
        let Some(item) = self.tell_here(address, payload, meta)? else {
            return Ok(());
        };
        self.submit(item).await
    }

    /// [`tell`](Self::tell) up to the hand-off to the region task (see
    /// [`dispatch_here`](Self::dispatch_here)).
    fn tell_here(
        &self,
        address: EntityAddress,
        payload: Vec<u8>,
        meta: MessageMeta,
    ) -> Result<Option<Buffered>, MessageError> {
        let (ty, shard) = self.resolve(&address)?;
        let body = BufferedBody::Message {
            payload,
            meta,
            reply: ReplyRoute::None,
        };
        let item = Buffered {
            address,
            shard,
            hops: 0,
            body,
        };
        self.dispatch_here(&ty, item, Caller::WaitingHere)
    }

    /// Sends a message and waits for the reply until `timeout` (default: `request_timeout`).
    /// Like [`tell`](Self::tell), a message for an idle local entity may run on the caller's
    /// task.
    ///
    /// See [`Region::start`](super::Region::start) for a complete setup.
    pub async fn ask(
        &self,
        address: EntityAddress,
        payload: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Reply {
        let meta = MessageMeta::default();
        self.ask_routed(address, payload, meta, timeout, Caller::WaitingHere)
            .await
    }

    /// [`ask`](Self::ask) with the message's origin and call chain: how entities' asks, outbox
    /// deliveries, reminders and idempotent client tells travel. The message always goes
    /// through the entity's mailbox: an entity's ask must not run another entity inside its
    /// own guest call.
    pub async fn ask_with(
        &self,
        address: EntityAddress,
        payload: Vec<u8>,
        meta: MessageMeta,
        timeout: Option<Duration>,
    ) -> Reply {
        self.ask_routed(address, payload, meta, timeout, Caller::Waiting)
            .await
    }

    async fn ask_routed(
        &self,
        address: EntityAddress,
        payload: Vec<u8>,
        meta: MessageMeta,
        timeout: Option<Duration>,
        caller: Caller,
    ) -> Reply {
        let timeout = timeout.unwrap_or(self.shared.config.request_timeout);
        let deadline = Instant::now() + timeout;
        let (ty, shard) = self.resolve(&address)?;
        let (port, receiver) = oneshot::channel();
        let body = BufferedBody::Message {
            payload,
            meta,
            reply: ReplyRoute::Local { port, deadline },
        };
        let item = Buffered {
            address,
            shard,
            hops: 0,
            body,
        };
        self.request(ty, item, receiver, deadline, timeout, caller)
            .await
    }

    /// Routes `item` — an ask or a state read made here, whose answer comes on `receiver` —
    /// and waits for the answer until `deadline` (`timeout` after it was sent).
    pub(super) async fn request(
        &self,
        ty: Arc<RegisteredType>,
        item: Buffered,
        receiver: oneshot::Receiver<Reply>,
        deadline: Instant,
        timeout: Duration,
        caller: Caller,
    ) -> Reply {
        // Bound first: a scrutinee's temporaries would live across the awaits below.
        let forward = self.dispatch_here(&ty, item, caller)?;
        drop(ty);
        if let Some(item) = forward {
            match tokio::time::timeout_at(deadline, self.submit(item)).await {
                Ok(result) => result?,
                Err(_) => return Err(timed_out(timeout)),
            }
        }
        await_reply(receiver, deadline, timeout).await
    }

    /// The committed state of `address` as the owner of its shard holds it, whichever node
    /// that is (`state_read`): up to
    /// [`STATE_READ_ENTRIES_MAX`](crate::STATE_READ_ENTRIES_MAX) keys and their values, in key
    /// order (none for an entity that never wrote any). Fails as an ask to the entity would
    /// while its shard has no owner that can answer — `unavailable` or `shard_unavailable`, or
    /// `timeout` when no answer comes within `timeout` (by default `request_timeout`) — and
    /// with `reply_too_large` past [`STATE_READ_BYTES_MAX`](crate::STATE_READ_BYTES_MAX). A
    /// message still in the entity's mailbox, or not yet committed, is not in what it reads.
    ///
    /// See [`Region::start`](super::Region::start) for a complete setup.
    pub async fn read_state(
        &self,
        address: EntityAddress,
        timeout: Option<Duration>,
    ) -> Result<Vec<(String, Vec<u8>)>, MessageError> {
        let timeout = timeout.unwrap_or(self.shared.config.request_timeout);
        let deadline = Instant::now() + timeout;
        let (ty, shard) = self.resolve(&address)?;
        let (port, receiver) = oneshot::channel();
        let item = Buffered {
            address,
            shard,
            hops: 0,
            body: BufferedBody::ReadState {
                reply: ReplyRoute::Local { port, deadline },
            },
        };
        let answer = self
            .request(ty, item, receiver, deadline, timeout, Caller::Waiting)
            .await?;
        state_read::decode(&answer)
    }

    /// Asks the entity's owner to passivate it after the messages already sent to it.
    pub async fn passivate(&self, address: EntityAddress) -> Result<(), MessageError> {
        let (ty, shard) = self.resolve(&address)?;
        let item = Buffered {
            address,
            shard,
            hops: 0,
            body: BufferedBody::Passivate,
        };
        self.dispatch(&ty, item, Caller::Waiting).await
    }
}

/// Waits for an ask's reply on `receiver` until `deadline` (`timeout` after it was sent).
pub(super) async fn await_reply(
    receiver: oneshot::Receiver<Reply>,
    deadline: Instant,
    timeout: Duration,
) -> Reply {
    match tokio::time::timeout_at(deadline, receiver).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(_)) => Err(MessageError::unavailable(
            "the message was dropped without a reply",
        )),
        Err(_) => Err(timed_out(timeout)),
    }
}

/// An ask's error when no reply came within `timeout`.
fn timed_out(timeout: Duration) -> MessageError {
    MessageError::new(
        ErrorKind::Timeout,
        format!("no reply within {} ms", timeout.as_millis()),
    )
}
