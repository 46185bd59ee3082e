//! [`CellRouter`]: the way guest messages leave an entity layer with no sharding layer above it
//! ([`Entities::standalone`], for tools, tests and benchmarks): an entity's ask goes straight
//! to this node's cells, every entity in shard 0.

use super::core::Core;
use super::directory::Entities;
use crate::contract::{BoxFuture, EntityAddress, MessageError, MessageMeta, Reply, Router};
use std::sync::Weak;
use std::time::Duration;

/// Routes guest messages straight to the cells of this node (a directory without sharding).
pub(super) struct CellRouter(Weak<Core>);

impl CellRouter {
    pub(super) fn new(core: Weak<Core>) -> Self {
        CellRouter(core)
    }

    fn entities(&self) -> Result<Entities, MessageError> {
        self.0
            .upgrade()
            .map(|core| Entities { core })
            .ok_or_else(|| MessageError::unavailable("the node is shutting down"))
    }
}

impl Router for CellRouter {
    fn ask(
        &self,
        to: EntityAddress,
        payload: Vec<u8>,
        meta: MessageMeta,
        timeout: Duration,
    ) -> BoxFuture<'static, Reply> {
        let entities = self.entities();
        Box::pin(async move { entities?.ask_with(to, 0, payload, meta, timeout).await })
    }
}
