//! How a running entity reaches other entities. The runtime calls a [`Router`] for a guest's
//! `ask`, and the entity layer's delivery service calls it for every outbox tell and due
//! reminder; the sharding layer implements it (the region routes to the entity's home, on this
//! node or another), so a message enters the sharding layer exactly once.

use super::address::{EntityAddress, ShardId};
use super::envelope::{MessageMeta, Reply};
use super::error::{ErrorKind, MessageError};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A boxed future a trait object can return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Routes messages made by entities to their target entity.
pub trait Router: Send + Sync + 'static {
    /// Sends `payload` to `to` with `meta` (origin, call chain) and waits for the reply, at most
    /// `timeout`. For a message with an origin the reply is the receiver's acknowledgement of
    /// its own commit.
    fn ask(
        &self,
        to: EntityAddress,
        payload: Vec<u8>,
        meta: MessageMeta,
        timeout: Duration,
    ) -> BoxFuture<'static, Reply>;

    /// Whether this node may still serve `to` (in `shard`): asked before a message's writes
    /// commit and again before its reply leaves, so a node that lost its lease or its shard
    /// while the message waited or ran (a stalled process, a move) neither keeps its writes
    /// nor answers from them. The default — a host without shards — always may.
    fn may_serve(&self, to: &EntityAddress, shard: ShardId) -> Result<(), MessageError> {
        let _ = (to, shard);
        Ok(())
    }

    /// Whether this node may still answer from state it only read: its lease, without the
    /// shard lookup of [`Router::may_serve`] (asked on every read, on the hot path). A shard
    /// moves away from a live node only by a handoff, whose messages already in mailboxes may
    /// finish here, or after its lease must have run out. The default always may.
    fn holds_lease(&self) -> Result<(), MessageError> {
        Ok(())
    }

    /// Whether this node serves `entity` now, for the outbox sweep, which scans every row on
    /// the node: the outbox of an entity served elsewhere is stale here and is not sent. A sharded host that has not resolved the entity's shard
    /// since it started asks for it (so a restarted node delivers what it owns once its shards
    /// are its own again) and answers false meanwhile. The default — a host without shards —
    /// serves everything.
    fn serves_here(&self, entity: &EntityAddress) -> bool {
        let _ = entity;
        true
    }

    /// Where the outbox sequence of an entity with no tells in its state starts. A receiver
    /// drops a sender's tells up to the highest sequence it committed, so a sender whose state
    /// was lost and starts again (a new lineage of its shard) must number its tells above
    /// everything its former life sent: a sharded host starts each lineage at
    /// [`sequence_base`] of the shard's generation, which the catalog only ever raises. The
    /// default — a host without shards, whose entities' state is never declared lost — is 0.
    fn sequence_base(&self, sender: &EntityAddress, shard: ShardId) -> u64 {
        let _ = (sender, shard);
        0
    }
}

/// Tells a sender's life may send, at most, before its sequences reach the next generation's
/// base: 2^32.
pub const SEQUENCES_PER_GENERATION_LOG2: u32 = 32;

/// The first outbox sequence of a sender whose state starts afresh in a shard at
/// `generation`: above every sequence of a life begun at an earlier generation, as long as
/// that life sent fewer than 2^32 tells.
///
/// ```
/// use tessera_contract::sequence_base;
/// assert!(sequence_base(2) > sequence_base(1) + 1_000_000);
/// assert_eq!(sequence_base(0), 0);
/// ```
pub fn sequence_base(generation: u64) -> u64 {
    generation
        .min(u64::from(u32::MAX))
        .saturating_mul(1 << SEQUENCES_PER_GENERATION_LOG2)
}

/// A router that reaches nobody: for tools that run one entity alone (`tessera invoke`).
///
/// ```
/// use std::time::Duration;
/// use tessera_contract::{EntityAddress, MessageMeta, NoRoutes, Router};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let to = EntityAddress::new("t", "b", "2");
/// let reply = NoRoutes.ask(to, vec![], MessageMeta::default(), Duration::from_secs(1));
/// assert!(reply.await.is_err());
/// # });
/// ```
pub struct NoRoutes;

impl Router for NoRoutes {
    fn ask(
        &self,
        to: EntityAddress,
        _payload: Vec<u8>,
        _meta: MessageMeta,
        _timeout: Duration,
    ) -> BoxFuture<'static, Reply> {
        let error = MessageError::new(
            ErrorKind::Unavailable,
            format!("{to} is not reachable: this entity runs alone"),
        );
        Box::pin(async move { Err(error) })
    }
}
