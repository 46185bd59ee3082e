//! The seam between a region and the entities of its own node. The entity layer implements
//! [`LocalEntities`]; the sharding layer never imports it. Lifecycle news flows back through
//! [`RegionHandle::entity_started`](crate::sharding::RegionHandle::entity_started) and
//! [`RegionHandle::entity_passivated`](crate::sharding::RegionHandle::entity_passivated).

use std::future::Future;
use std::pin::Pin;

use crate::envelope::{EntityAddress, Envelope, TypeKey};
use crate::sharding::extractor::ShardId;

/// A future the region can hold without knowing its type.
pub type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What a region needs from the entities living on its own node.
///
/// Every method is called from the region's task and must not block: queue the work and
/// return. The implementation learns an entity's shard from `stop_shard`/`live_in_shard`
/// arguments only; it records, per live entity, the shard the region named when it first
/// delivered to or started it (`shard` parameters below).
///
/// ```
/// use std::sync::Mutex;
/// use tessera_host::envelope::{EntityAddress, Envelope, TypeKey};
/// use tessera_host::sharding::{LocalEntities, ShardId, local::BoxFuture};
///
/// /// Answers every ask with its own payload and keeps nothing alive.
/// struct Echo;
/// impl LocalEntities for Echo {
///     fn deliver(&self, _to: EntityAddress, _shard: ShardId, envelope: Envelope) {
///         let payload = envelope.payload.clone();
///         envelope.answer(Ok(payload));
///     }
///     fn start(&self, _to: EntityAddress, _shard: ShardId) {}
///     fn passivate(&self, _to: &EntityAddress) {}
///     fn stop_shard(&self, _type_key: &TypeKey, _shard: ShardId) -> BoxFuture {
///         Box::pin(async {})
///     }
///     fn live_in_shard(&self, _type_key: &TypeKey, _shard: ShardId) -> usize { 0 }
/// }
/// ```
pub trait LocalEntities: Send + Sync + 'static {
    /// Hands `envelope` to entity `to` of shard `shard`, starting it on its first message.
    /// Failures (mailbox full, unknown type, ...) are answered on the envelope's reply port by
    /// the implementation. Calls for one entity arrive in the order its messages must run.
    fn deliver(&self, to: EntityAddress, shard: ShardId, envelope: Envelope);
    /// Starts entity `to` without a message (remember-entities recovery). A no-op if live.
    fn start(&self, to: EntityAddress, shard: ShardId);
    /// Passivates one entity after the messages already in its mailbox. The implementation
    /// then calls `RegionHandle::entity_passivated`.
    fn passivate(&self, to: &EntityAddress);
    /// Stops every live entity of `type_key` in `shard` (handoff); resolves when all are
    /// stopped. Must NOT report them as passivated: a handed-off entity stays remembered.
    fn stop_shard(&self, type_key: &TypeKey, shard: ShardId) -> BoxFuture;
    /// Live entities of `type_key` in `shard`.
    fn live_in_shard(&self, type_key: &TypeKey, shard: ShardId) -> usize;
}
