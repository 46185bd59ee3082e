//! [`EntityRoute`]: a sender's resolved route to one entity, for a sender that keeps sending
//! to the same entity (Akka's `EntityRef`). The type's registration and the entity's shard are
//! resolved once, and once the entity is live here the route holds its cell, so a tell or an
//! ask to an idle local entity costs one shard-slot lock and the cell's claim: no hashing of
//! the address, no directory lookup, no copy of the address. Every seed semantic stays the
//! shard slot's: a message for a shard being allocated or handed off is buffered, one for a
//! remote shard is forwarded, and a busy entity's message is queued behind the others — all
//! through the same path as [`RegionHandle::tell`]. A route whose type was re-registered or
//! removed resolves it again; one whose cell left (passivated, stopped, evicted) looks it up
//! again.

use std::sync::Arc;
use std::time::Duration;

use super::RegionHandle;
use super::homes::{Home, RegisteredType};
use super::route::{Caller, local_refusal};
use super::send;
use crate::handoff::{Buffered, BufferedBody, ReplyRoute};
use crate::local::LocalCell;
use tessera_contract::{EntityAddress, Envelope, MessageError, MessageMeta, Reply, ShardId};
use tessera_entity::ClaimedRun;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The reply to an ask run on the sender's task ([`EntityRoute::ask_here`]), on its way.
pub struct PendingReply {
    receiver: oneshot::Receiver<Reply>,
    deadline: Instant,
    timeout: Duration,
}

impl PendingReply {
    /// The reply, or a timeout at the ask's deadline.
    pub async fn wait(self) -> Reply {
        send::await_reply(self.receiver, self.deadline, self.timeout).await
    }
}

/// A resolved route to one entity ([`RegionHandle::route_to`]). Sending takes `&mut self`: a
/// route is one sender's; clone the address into another route for another sender.
pub struct EntityRoute {
    region: RegionHandle,
    address: EntityAddress,
    ty: Arc<RegisteredType>,
    shard: ShardId,
    /// The entity's cell, once it is live on this node.
    cell: Option<Box<dyn LocalCell>>,
}

impl std::fmt::Debug for EntityRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntityRoute")
            .field("address", &self.address)
            .field("shard", &self.shard)
            .field("holds_cell", &self.cell.is_some())
            .finish()
    }
}

impl RegionHandle {
    /// A route to `address`, resolved now: an error if its type is not registered here.
    ///
    /// See [`Region::start`](super::Region::start) for a complete setup.
    pub fn route_to(&self, address: EntityAddress) -> Result<EntityRoute, MessageError> {
        let (ty, shard) = self.resolve(&address)?;
        Ok(EntityRoute {
            region: self.clone(),
            address,
            ty,
            shard,
            cell: None,
        })
    }
}

impl EntityRoute {
    /// The entity this route sends to.
    pub fn address(&self) -> &EntityAddress {
        &self.address
    }

    /// The shard the entity is in.
    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// Sends a one-way message, as [`RegionHandle::tell`] does (same errors, same order with
    /// everything else this sender sends to the entity).
    pub async fn tell(&mut self, payload: Vec<u8>) -> Result<(), MessageError> {
        match self.tell_here(payload)? {
            None => Ok(()),
            // Boxed: the region's future stays out of the code and size of a send on the sender's task.
            Some(payload) => Box::pin(self.tell_through_region(payload)).await,
        }
    }

    /// Runs the tell on this task when the entity's cell is idle here (`None`);
    /// gives the payload back otherwise, not sent, to go through the region
    /// ([`RegionHandle::tell`], then [`sent_by_region`](Self::sent_by_region)). An error
    /// (the type is no longer registered) means it was not sent either.
    pub fn tell_here(&mut self, payload: Vec<u8>) -> Result<Option<Vec<u8>>, MessageError> {
        if self.ty.is_retired() {
            self.resolve_again()?;
        }
        match self.run_on_cell(Envelope::tell(payload)) {
            Ok(run) => {
                run.run();
                Ok(None)
            }
            Err(envelope) => Ok(Some(envelope.payload)),
        }
    }

    /// Through the region (buffered while the shard moves, or to the mailbox).
    async fn tell_through_region(&mut self, payload: Vec<u8>) -> Result<(), MessageError> {
        self.drop_cell_if_gone();
        let item = Buffered {
            address: self.address.clone(),
            shard: self.shard,
            hops: 0,
            body: BufferedBody::Message {
                payload,
                meta: MessageMeta::default(),
                reply: ReplyRoute::None,
            },
        };
        let sent = self
            .region
            .dispatch(&self.ty, item, Caller::WaitingHere)
            .await;
        if sent.is_ok() {
            self.hold_cell();
        }
        sent
    }

    /// Sends a message and waits for the reply, as [`RegionHandle::ask`] does (same errors,
    /// same order with everything else this sender sends to the entity). To an idle entity
    /// live here it runs on the caller's task, as a tell does.
    pub async fn ask(&mut self, payload: Vec<u8>, timeout: Option<Duration>) -> Reply {
        let payload = match self.ask_here(payload, timeout)? {
            Ok(pending) => return pending.wait().await,
            Err(payload) => payload,
        };
        let timeout = timeout.unwrap_or(self.region.shared.config.request_timeout);
        self.drop_cell_if_gone();
        let reply = self
            .region
            .ask(self.address.clone(), payload, Some(timeout))
            .await;
        if reply.is_ok() {
            self.hold_cell();
        }
        reply
    }

    /// Runs an ask on this task when the entity's cell is idle here, and gives back its reply
    /// on the way; gives the payload back otherwise, not sent, to go through the region
    /// ([`RegionHandle::ask`], then [`sent_by_region`](Self::sent_by_region)). An
    /// error (the type is no longer registered) means it was not sent either.
    pub fn ask_here(
        &mut self,
        payload: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Result<PendingReply, Vec<u8>>, MessageError> {
        if self.ty.is_retired() {
            self.resolve_again()?;
        }
        let timeout = timeout.unwrap_or(self.region.shared.config.request_timeout);
        let deadline = Instant::now() + timeout;
        let (port, receiver) = oneshot::channel();
        let envelope = Envelope {
            payload,
            meta: MessageMeta {
                deadline: Some(deadline.into_std()),
                ..MessageMeta::default()
            },
            reply: Some(port),
        };
        match self.run_on_cell(envelope) {
            Ok(run) => {
                run.run();
                Ok(Ok(PendingReply {
                    receiver,
                    deadline,
                    timeout,
                }))
            }
            Err(envelope) => Ok(Err(envelope.payload)),
        }
    }

    /// After a message this route gave back went through the region
    /// ([`RegionHandle::tell`]) and was taken: let go of the cell if it left, and hold the
    /// entity's cell for the next message if it is live on this node now.
    pub fn sent_by_region(&mut self) {
        self.drop_cell_if_gone();
        self.hold_cell();
    }

    /// Whether the route holds the cell of an entity live on this node.
    pub fn holds_live_cell(&self) -> bool {
        self.cell.as_ref().is_some_and(|cell| cell.is_live())
    }

    /// After a message went through the region and was taken: hold the entity's cell for the next
    /// message, if it is live on this node now.
    fn hold_cell(&mut self) {
        if !self.cell.as_ref().is_some_and(|cell| cell.is_live()) && self.is_at_home_here() {
            self.cell = self.region.shared.local.live_cell(&self.address);
        }
    }

    /// Tries the fast path: under the shard's slot lock, with the shard at home here and the
    /// held cell idle and ready, the message's run. Gives the envelope back otherwise.
    fn run_on_cell(&mut self, envelope: Envelope) -> Result<ClaimedRun<'_>, Envelope> {
        let Some(cell) = &self.cell else {
            return Err(envelope);
        };
        let home = self
            .ty
            .slot(self.shard)
            .expect("invariant: the route's shard was resolved in the type's range");
        let shared = &self.region.shared;
        if !matches!(*home, Home::Local { .. })
            || local_refusal(shared, &self.ty, self.shard).is_some()
        {
            return Err(envelope);
        }
        let run = cell.run_here(envelope);
        drop(home);
        run
    }

    /// After the fast path gave a message back: let go of the held cell if it has left.
    fn drop_cell_if_gone(&mut self) {
        if self.cell.as_ref().is_some_and(|cell| !cell.is_live()) {
            self.cell = None;
        }
    }

    /// Whether the entity's shard lives on this node now.
    fn is_at_home_here(&self) -> bool {
        self.ty
            .slot(self.shard)
            .is_some_and(|home| matches!(*home, Home::Local { .. }))
    }

    /// Looks the type up again after its registration changed.
    fn resolve_again(&mut self) -> Result<(), MessageError> {
        let (ty, shard) = self.region.resolve(&self.address)?;
        self.ty = ty;
        self.shard = shard;
        self.cell = None;
        Ok(())
    }
}
