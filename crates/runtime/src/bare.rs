//! A store's data with nothing of the entity layer around it: the seam the benchmarks' raw
//! wasmtime baseline (`benches/src/baseline.rs`) is built on, so that its calls cross the same
//! host imports an entity's do. Never what a node runs.

use super::guest_log::LogBudget;
use super::host::HostState;
use super::limits::{InstanceLimits, MemoryLimiter};
use super::message_scope::MessageScope;
use std::sync::Arc;
use tessera_contract::{EntityAddress, NoRoutes};
use tessera_state::EntityState;

impl HostState {
    /// The data of a store that runs a plugin bare: no routes, no memory cap or deadline, no
    /// log budget.
    #[doc(hidden)]
    pub fn bare(address: EntityAddress, state: Arc<dyn EntityState>) -> HostState {
        HostState {
            wasi: wasmtime_wasi::WasiCtxBuilder::new().build(),
            table: Default::default(),
            limiter: MemoryLimiter {
                memory_bytes_max: usize::MAX,
                memory_limit_hit: false,
                memory_bytes_peak: 0,
            },
            address,
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
            clock: Arc::new(super::SystemClock),
        }
    }

    /// Lets a bare store's guest read and write state, as a message does.
    #[doc(hidden)]
    pub fn begin_bare_message(&mut self) {
        self.message.in_message = true;
    }
}
