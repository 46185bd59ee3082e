//! The adapters that connect the layers without making a lower one import a higher one: the
//! entity layer seen by a region ([`LocalEntities`]), the region seen by entities (their
//! [`Router`] and [`Lifecycle`] listener).

use crate::entity::{Entities, Lifecycle};
use crate::envelope::{EntityAddress, Envelope, MessageError, Reply, TypeKey};
use crate::runtime::Router;
use crate::sharding::local::BoxFuture;
use crate::sharding::{FnvExtractor, LocalEntities, RegionHandle, ShardExtractor, ShardId};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// The node's entities, as its region sees them.
pub(crate) struct RegionEntities {
    pub(crate) entities: Entities,
    pub(crate) extractor: Arc<FnvExtractor>,
}

impl RegionEntities {
    fn in_shard(
        &self,
        type_key: &TypeKey,
        shard: ShardId,
    ) -> impl Fn(&EntityAddress) -> bool + use<> {
        let type_key = type_key.clone();
        let extractor = self.extractor.clone();
        move |address: &EntityAddress| {
            address.type_key() == type_key && extractor.shard_of(&address.id) == shard
        }
    }
}

impl LocalEntities for RegionEntities {
    fn deliver(&self, to: EntityAddress, _shard: ShardId, envelope: Envelope) {
        self.entities.deliver(to, envelope);
    }

    fn start(&self, to: EntityAddress, _shard: ShardId) {
        if let Err(error) = self.entities.start(to.clone()) {
            tracing::warn!(entity = %to, %error, "could not respawn a remembered entity");
        }
    }

    fn passivate(&self, to: &EntityAddress) {
        if let Err(error) = self.entities.passivate(to) {
            tracing::warn!(entity = %to, %error, "could not passivate");
        }
    }

    fn stop_shard(&self, type_key: &TypeKey, shard: ShardId) -> BoxFuture {
        let entities = self.entities.clone();
        let in_shard = self.in_shard(type_key, shard);
        Box::pin(async move { entities.stop_where(in_shard).await })
    }

    fn live_in_shard(&self, type_key: &TypeKey, shard: ShardId) -> usize {
        self.entities
            .live_where(self.in_shard(type_key, shard))
            .len()
    }
}

/// Guest `tell`/`ask` go through the region, so they reach an entity wherever it lives.
pub(crate) struct RegionRouter(pub(crate) RegionHandle);

impl Router for RegionRouter {
    fn tell(
        &self,
        _from: &EntityAddress,
        to: EntityAddress,
        payload: Vec<u8>,
    ) -> Result<(), MessageError> {
        self.0.try_tell(to, payload)
    }

    fn ask(
        &self,
        _from: &EntityAddress,
        to: EntityAddress,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Reply> + Send>> {
        let region = self.0.clone();
        Box::pin(async move { region.ask(to, payload, Some(timeout)).await })
    }
}

/// Entity starts and passivations feed the region's remember-entities.
pub(crate) struct RegionLifecycle(pub(crate) RegionHandle);

impl Lifecycle for RegionLifecycle {
    fn started(&self, entity: &EntityAddress) {
        self.0.entity_started(entity);
    }

    fn passivated(&self, entity: &EntityAddress) {
        self.0.entity_passivated(entity);
    }
}
