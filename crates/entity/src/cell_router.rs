//! An entity layer with no sharding layer above it ([`Entities::standalone`], for tools, tests
//! and benchmarks), and the way its guest messages leave: `CellRouter` sends an entity's ask
//! straight to this node's cells, every entity in shard 0.

use super::cell_table::CellTable;
use super::core::{Core, EntityParts};
use super::directory::Entities;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tessera_contract::{BoxFuture, EntityAddress, MessageError, MessageMeta, Reply, Router};
use tessera_runtime::{Clock, SystemClock};

/// Routes guest messages straight to the cells of this node (a directory without sharding).
struct CellRouter {
    core: Weak<Core>,
    cells: Weak<CellTable>,
}

impl Entities {
    /// A directory whose entities reach only each other, on this node, with no sharding in
    /// between (tools, tests, benchmarks). Every entity is in shard 0.
    pub fn standalone(parts: EntityParts) -> Self {
        Self::standalone_with_clock(parts, Arc::new(SystemClock))
    }

    /// [`standalone`](Self::standalone) on `clock` instead of the system's: reminders fall due
    /// and guests read `now-ms` in its time (a simulation's virtual clock).
    ///
    /// ```no_run
    /// # fn demo(parts: tessera_entity::EntityParts) {
    /// use std::sync::Arc;
    /// use tessera_runtime::Clock;
    /// struct Frozen;
    /// impl Clock for Frozen {
    ///     fn now_ms(&self) -> u64 { 1_000_000 }
    /// }
    /// let entities = tessera_entity::Entities::standalone_with_clock(parts, Arc::new(Frozen));
    /// # }
    /// ```
    pub fn standalone_with_clock(parts: EntityParts, clock: Arc<dyn Clock>) -> Self {
        let cells = Arc::new(CellTable::for_parts(&parts));
        let core = Arc::new_cyclic(|core: &Weak<Core>| {
            let router = CellRouter {
                core: core.clone(),
                cells: Arc::downgrade(&cells),
            };
            Core::new(parts, Arc::new(router), cells.clone(), clock)
        });
        Entities { core, cells }
    }
}

impl CellRouter {
    fn entities(&self) -> Result<Entities, MessageError> {
        self.core
            .upgrade()
            .zip(self.cells.upgrade())
            .map(|(core, cells)| Entities { core, cells })
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
