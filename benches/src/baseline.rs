//! Raw wasmtime paths over the same engine and components, with none of the entity layer's
//! bookkeeping: the baselines the runtime's benchmarks are judged against. The store's data is
//! the runtime's own ([`HostState::bare`]), so a raw call crosses the same host imports an
//! entity's does.

use std::sync::Arc;
use tessera_contract::EntityAddress;
use tessera_runtime::{EntityBindings, EntitySender, HostState, Plugin, Runtime};
use tessera_state::EntityState;
use wasmtime::Store;

/// A bare instance: a store with default data, instantiated straight from the `InstancePre`.
pub struct RawInstance {
    store: Store<HostState>,
    bindings: EntityBindings,
}

impl RawInstance {
    /// `InstancePre::instantiate_async` of `plugin` in a fresh store, nothing else.
    pub async fn instantiate(
        runtime: &Runtime,
        plugin: &Arc<Plugin>,
        state: Arc<dyn EntityState>,
    ) -> anyhow::Result<Self> {
        let data = HostState::bare(EntityAddress::new("baseline", "raw", "raw"), state);
        let mut store = Store::new(runtime.engine(), data);
        store.set_epoch_deadline(u64::MAX / 2);
        let pre = plugin
            .bindings_pre()
            .ok_or_else(|| anyhow::anyhow!("the baseline runs 0.2.0 components"))?;
        let instance = pre.instance_pre().instantiate_async(&mut store).await?;
        let bindings = EntityBindings::new(&mut store, &instance)?;
        Ok(RawInstance { store, bindings })
    }

    /// A typed call of `handle`, with a write set so the guest may read and write.
    pub async fn handle(&mut self, payload: &[u8]) -> anyhow::Result<Vec<u8>> {
        self.store.data_mut().begin_bare_message();
        let reply = self
            .bindings
            .tessera_entity_handler()
            .call_handle(&mut self.store, payload, &EntitySender::Client)
            .await?;
        reply.map_err(|error| anyhow::anyhow!("{error:?}"))
    }
}
