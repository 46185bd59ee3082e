//! One life of the simulated node ([`Node`]): a single-threaded Tokio runtime, the state backend
//! over the simulated disk and the entity layer on the virtual clock, with every loaded
//! component bound. A crash drops it whole — the runtime first, which drops every cell's task
//! and instance without `deactivate`, as a killed process would — and a restart builds the next
//! life over the same disk.

use super::clock::VirtualClock;
use super::disk::MemoryDisk;
use super::error::SimError;
use super::{TENANT, Testkit};
use std::sync::Arc;
use tessera_contract::TypeKey;
use tessera_entity::{Entities, EntityConfig, EntityParts, TypeBinding, TypeTable};
use tessera_runtime::InstanceLimits;
use tessera_state::{GroupCommitConfig, LocalState, StateStore};

/// Messages one simulated entity's mailbox holds.
const SIM_MAILBOX_CAPACITY: usize = 1024;

/// A running life of the simulated node; [`stop`](Node::stop) ends it.
pub(crate) struct Node {
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) entities: Entities,
}

impl Node {
    /// Starts a life over `disk`, reading time from `clock`.
    pub(crate) fn start(
        kit: &Testkit,
        disk: &MemoryDisk,
        clock: &VirtualClock,
    ) -> Result<Node, SimError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|error| SimError::Start(error.to_string()))?;
        let database = disk
            .open()
            .map_err(|error| SimError::Start(error.to_string()))?;
        let store = StateStore::from_database(Arc::new(database))
            .map_err(|error| SimError::Start(error.to_string()))?;
        let state = Arc::new(LocalState::new(store, GroupCommitConfig::default()));
        let types = Arc::new(TypeTable::default());
        for (entity_type, plugin) in kit.components.iter() {
            types.bind(
                TypeKey::new(TENANT, entity_type.as_str()),
                TypeBinding {
                    plugin: plugin.clone(),
                    version: 1,
                    limits: InstanceLimits::default(),
                    passivate_idle: None,
                    mailbox_capacity: SIM_MAILBOX_CAPACITY,
                    tenant_live_entities_max: None,
                    remember: false,
                },
            );
        }
        let parts = EntityParts {
            runtime: kit.runtime.clone(),
            state,
            types,
            remember: None,
            config: EntityConfig::default(),
        };
        let entities = Entities::standalone_with_clock(parts, Arc::new(clock.clone()));
        Ok(Node { runtime, entities })
    }

    /// Ends this life as a crash does: the cells' tasks go with the runtime, mid-wait, and
    /// their instances back to the engine's pool; nothing runs in them.
    pub(crate) fn stop(self) {
        let Node { runtime, entities } = self;
        drop(runtime);
        entities.forget_all();
    }
}
