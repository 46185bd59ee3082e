//! The region as the [`Router`] of its node's entities: a guest's `ask` and the entity layer's
//! outbox and reminder deliveries enter the sharding layer here, once, and are routed like any
//! other message. The router holds the region weakly, so the entity layer and the region that
//! owns it do not keep each other alive.

use std::sync::{Arc, Weak};

use crate::lease::NodeLease;
use std::time::Duration;

use super::{RegionHandle, Shared, route::stopped};
use tessera_contract::{
    BoxFuture, EntityAddress, MessageError, MessageMeta, Reply, Router, ShardId,
};

pub(crate) struct RegionRouter {
    region: Weak<Shared>,
    /// The region's lease, held here too: a read's check is one load, with no reference
    /// count touched on the hot path.
    lease: Arc<NodeLease>,
}

impl RegionRouter {
    pub(crate) fn new(region: Weak<Shared>, lease: Arc<NodeLease>) -> Self {
        RegionRouter { region, lease }
    }

    fn region(&self) -> Result<RegionHandle, MessageError> {
        self.region
            .upgrade()
            .map(RegionHandle::from_shared)
            .ok_or_else(stopped)
    }
}

impl Router for RegionRouter {
    fn ask(
        &self,
        to: EntityAddress,
        payload: Vec<u8>,
        meta: MessageMeta,
        timeout: Duration,
    ) -> BoxFuture<'static, Reply> {
        let region = self.region();
        Box::pin(async move { region?.ask_with(to, payload, meta, Some(timeout)).await })
    }

    /// This node may serve `to` while its lease is valid and the shard is its own (or being
    /// handed off: the messages already in mailboxes finish here).
    fn may_serve(&self, to: &EntityAddress, shard: ShardId) -> Result<(), MessageError> {
        let shared = self.region.upgrade().ok_or_else(stopped)?;
        shared.may_serve(to, shard)
    }

    fn holds_lease(&self) -> Result<(), MessageError> {
        if self.lease.is_valid_now() {
            return Ok(());
        }
        Err(super::lost_lease())
    }

    fn serves_here(&self, entity: &EntityAddress) -> bool {
        self.region
            .upgrade()
            .is_some_and(|shared| shared.serves_here(entity))
    }

    /// The base of the shard's generation here (0 if this region does not serve it).
    fn sequence_base(&self, sender: &EntityAddress, shard: ShardId) -> u64 {
        self.region
            .upgrade()
            .and_then(|shared| shared.serving_generation(sender, shard))
            .map_or(0, tessera_contract::sequence_base)
    }
}
