//! The seam between a region and the entities of its own node: [`LocalEntities`], which the
//! entity layer's [`Entities`] implements (here, in the layer above it) and tests replace with
//! a fake. The region hands every local delivery the shard it computed, so the entity layer
//! never recomputes it, and reads an entity's committed state through it when this node owns
//! the entity's shard.

use std::sync::Arc;
use tessera_contract::{
    BoxFuture, EntityAddress, Envelope, ErrorKind, MessageError, ShardId, TypeKey,
};
use tessera_entity::{ClaimedRun, Entities, LiveCell, Refused};

/// What a region needs from the entities living on its own node.
///
/// Every method is called with the region's shard lock or task in hand and must not block:
/// queue the work and return.
///
/// ```
/// use tessera_contract::{BoxFuture, EntityAddress, Envelope, ShardId, TypeKey};
/// use tessera_entity::Refused;
/// use tessera_sharding::LocalEntities;
///
/// /// Answers every ask with its own payload and keeps nothing alive.
/// struct Echo;
/// impl LocalEntities for Echo {
///     fn deliver(&self, _to: EntityAddress, _shard: ShardId, envelope: Envelope) -> Result<(), Refused> {
///         let payload = envelope.payload.clone();
///         envelope.answer(Ok(payload));
///         Ok(())
///     }
///     fn start(&self, _to: EntityAddress, _shard: ShardId) {}
///     fn passivate(&self, _to: &EntityAddress) {}
///     fn stop_shard(&self, _type_key: &TypeKey, _shard: ShardId) -> BoxFuture<'static, ()> {
///         Box::pin(async {})
///     }
///     fn live_in_shard(&self, _type_key: &TypeKey, _shard: ShardId) -> usize { 0 }
/// }
/// ```
pub trait LocalEntities: Send + Sync + 'static {
    /// Hands `envelope` to entity `to` of shard `shard`, starting it on its first message. A
    /// refusal (mailbox full, unknown type, quota) gives the envelope back with the reason.
    /// Calls for one entity arrive in the order its messages must run.
    fn deliver(&self, to: EntityAddress, shard: ShardId, envelope: Envelope)
    -> Result<(), Refused>;
    /// [`deliver`](Self::deliver) for a sender that can run the message on its own task: the
    /// entity layer may hand back the message claimed for the sender instead of queueing it
    /// (the local fast path), which the region runs after its locks are released. By default,
    /// always queued.
    fn deliver_here(
        &self,
        to: EntityAddress,
        shard: ShardId,
        envelope: Envelope,
    ) -> Result<Option<ClaimedRun<'static>>, Refused> {
        self.deliver(to, shard, envelope).map(|()| None)
    }
    /// A direct handle on the live entity `to`, for a sender that keeps sending to it (an
    /// [`EntityRoute`](crate::EntityRoute)); `None` if it is not live. By default,
    /// never: every message goes through [`deliver_here`](Self::deliver_here).
    fn live_cell(&self, _to: &EntityAddress) -> Option<Box<dyn LocalCell>> {
        None
    }
    /// Starts entity `to` without a message (remember-entities recovery). A no-op if live.
    fn start(&self, to: EntityAddress, shard: ShardId);
    /// Passivates one entity after the messages already in its mailbox.
    fn passivate(&self, to: &EntityAddress);
    /// Stops every live entity of `type_key` in `shard` (handoff); resolves when all are
    /// stopped. They are not forgotten: a handed-off entity stays remembered.
    fn stop_shard(&self, type_key: &TypeKey, shard: ShardId) -> BoxFuture<'static, ()>;
    /// Live entities of `type_key` in `shard`.
    fn live_in_shard(&self, type_key: &TypeKey, shard: ShardId) -> usize;
    /// Reads up to `entries_max` committed keys and values of entity `to`, in key order, off
    /// the caller's task (this node owns its shard). By default an entity layer keeps no
    /// state, and every entity's is empty.
    fn read_state(&self, _to: EntityAddress, _entries_max: usize) -> BoxFuture<'static, StateRead> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// An entity's committed keys and values in key order, or why they could not be read.
pub type StateRead = Result<Vec<(String, Vec<u8>)>, MessageError>;

/// A sender's direct handle on one live local entity ([`LocalEntities::live_cell`]).
pub trait LocalCell: Send + Sync + 'static {
    /// Whether the entity is still live; once false, get a new handle.
    fn is_live(&self) -> bool;
    /// `envelope` claimed to run on the caller's task, when the entity is idle and ready (as
    /// in [`LocalEntities::deliver_here`]); the envelope back otherwise, to be delivered
    /// through [`LocalEntities::deliver_here`], which queues it in order.
    fn run_here(&self, envelope: Envelope) -> Result<ClaimedRun<'_>, Envelope>;
}

impl LocalCell for LiveCell {
    fn is_live(&self) -> bool {
        LiveCell::is_live(self)
    }

    fn run_here(&self, envelope: Envelope) -> Result<ClaimedRun<'_>, Envelope> {
        LiveCell::run_here(self, envelope)
    }
}

impl LocalEntities for Entities {
    fn deliver(
        &self,
        to: EntityAddress,
        shard: ShardId,
        envelope: Envelope,
    ) -> Result<(), Refused> {
        Entities::deliver(self, to, shard, envelope)
    }

    fn deliver_here(
        &self,
        to: EntityAddress,
        shard: ShardId,
        envelope: Envelope,
    ) -> Result<Option<ClaimedRun<'static>>, Refused> {
        Entities::deliver_here(self, to, shard, envelope)
    }

    fn live_cell(&self, to: &EntityAddress) -> Option<Box<dyn LocalCell>> {
        Entities::live_cell(self, to).map(|cell| Box::new(cell) as Box<dyn LocalCell>)
    }

    fn start(&self, to: EntityAddress, shard: ShardId) {
        if let Err(error) = Entities::start(self, to.clone(), shard) {
            tracing::warn!(entity = %to, %error, "could not respawn a remembered entity");
        }
    }

    fn passivate(&self, to: &EntityAddress) {
        if let Err(error) = Entities::passivate(self, to) {
            tracing::warn!(entity = %to, %error, "could not passivate");
        }
    }

    fn stop_shard(&self, type_key: &TypeKey, shard: ShardId) -> BoxFuture<'static, ()> {
        Entities::stop_shard(self, type_key, shard)
    }

    fn live_in_shard(&self, type_key: &TypeKey, shard: ShardId) -> usize {
        Entities::live_in_shard(self, type_key, shard)
    }

    fn read_state(&self, to: EntityAddress, entries_max: usize) -> BoxFuture<'static, StateRead> {
        let state = Arc::clone(self.state());
        Box::pin(async move {
            // A read of many keys may take a while: not on a worker that serves messages.
            let read = tokio::task::spawn_blocking(move || {
                state.entries(&to, entries_max).map_err(|error| {
                    MessageError::new(
                        ErrorKind::Internal,
                        format!("reading the state of {to} failed: {error}"),
                    )
                })
            });
            read.await.unwrap_or_else(|error| {
                Err(MessageError::new(
                    ErrorKind::Internal,
                    format!("the state read stopped: {error}"),
                ))
            })
        })
    }
}
