//! Raw wasmtime paths over the same engine and components, with none of the entity layer's
//! bookkeeping: the baselines the runtime's benchmarks are judged against. Not for production
//! use.

use super::bindings::Entity;
use super::engine::Runtime;
use super::guest_log::LogBudget;
use super::host::HostState;
use super::limits::{InstanceLimits, MemoryLimiter};
use super::message_scope::MessageScope;
use super::plugin::Plugin;
use crate::contract::{EntityAddress, NoRoutes};
use crate::state::EntityState;
use std::sync::Arc;
use wasmtime::Store;
use wasmtime_wasi::WasiCtxBuilder;

/// A bare instance: a store with default data, instantiated straight from the `InstancePre`.
pub struct RawInstance {
    store: Store<HostState>,
    bindings: Entity,
}

impl RawInstance {
    /// `InstancePre::instantiate_async` of `plugin` in a fresh store, nothing else.
    pub async fn instantiate(
        runtime: &Runtime,
        plugin: &Arc<Plugin>,
        state: Arc<dyn EntityState>,
    ) -> anyhow::Result<Self> {
        let data = HostState {
            wasi: WasiCtxBuilder::new().build(),
            table: Default::default(),
            limiter: MemoryLimiter {
                memory_bytes_max: usize::MAX,
                memory_limit_hit: false,
            },
            address: EntityAddress::new("baseline", "raw", "raw"),
            state,
            router: Arc::new(NoRoutes),
            limits: InstanceLimits::default(),
            log_budget: Arc::new(LogBudget::default()),
            message: MessageScope::default(),
            ticks_limit: u64::MAX,
            next_timer: 0,
            entity_state_bytes: 0,
            committed_sizes: Default::default(),
            ask_clock: Default::default(),
            interrupted: Default::default(),
        };
        let mut store = Store::new(runtime.engine(), data);
        store.set_epoch_deadline(u64::MAX / 2);
        let instance = plugin
            .pre
            .instance_pre()
            .instantiate_async(&mut store)
            .await?;
        let bindings = Entity::new(&mut store, &instance)?;
        Ok(RawInstance { store, bindings })
    }

    /// A typed call of `handle`, with a write set so the guest may read and write.
    pub async fn handle(&mut self, payload: &[u8]) -> anyhow::Result<Vec<u8>> {
        self.store.data_mut().message.in_message = true;
        let reply = self
            .bindings
            .tessera_entity_handler()
            .call_handle(&mut self.store, payload)
            .await?;
        reply.map_err(|error| anyhow::anyhow!("{error:?}"))
    }
}
