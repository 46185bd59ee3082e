//! The process's engine and the plugins compiled on it.

use super::bindings::{Entity, EntityPre};
use super::cache::CompiledCache;
use super::config::RuntimeConfig;
use super::guest_log::{GuestOutput, LogBudget};
use super::host::{HostState, HostTrap, MessageScope};
use super::instance::EntityInstance;
use super::limits::{InstanceLimits, MemoryLimiter};
use super::router::Router;
use crate::envelope::{EntityAddress, ErrorKind, MessageError};
use crate::state::StateStore;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi::WasiCtxBuilder;

/// Core instances a Rust `wasm32-wasip2` component needs (its module, the WASI adapter and
/// the component model's shim modules), with headroom.
const CORE_INSTANCES_PER_COMPONENT_MAX: u32 = 16;
/// Linear memories one component may define.
const MEMORIES_PER_COMPONENT_MAX: u32 = 2;
/// Tables one component may define.
const TABLES_PER_COMPONENT_MAX: u32 = 8;
/// The largest plugin the runtime compiles, so an upload cannot exhaust the compiler.
pub const PLUGIN_BYTES_MAX: usize = 64 << 20;

/// Why a plugin could not be loaded. Nothing changes when this is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The bytes are larger than [`PLUGIN_BYTES_MAX`].
    #[error("the plugin is {0} bytes, over the limit of {PLUGIN_BYTES_MAX}")]
    TooLarge(usize),
    /// The bytes are not a WebAssembly component (a core module, or not wasm at all).
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    /// The component does not implement the `tessera:entity/entity` world.
    #[error("the component does not implement the tessera:entity/entity@0.1.0 world: {0}")]
    WrongWorld(String),
}

/// A compiled plugin version, ready to instantiate.
pub struct Plugin {
    content_hash: String,
    pub(crate) pre: EntityPre<HostState>,
}

impl Plugin {
    /// Hex SHA-256 of the component bytes.
    pub fn content_hash(&self) -> &str {
        &self.content_hash
    }
}

/// The process's wasmtime engine, linker and compiled-plugin cache.
///
/// ```no_run
/// use tessera_host::runtime::{Runtime, RuntimeConfig};
/// let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
/// let plugin = runtime.load(&std::fs::read("counter.wasm").unwrap()).unwrap();
/// println!("{}", plugin.content_hash());
/// ```
pub struct Runtime {
    engine: Engine,
    linker: Linker<HostState>,
    cache: Option<CompiledCache>,
    config: RuntimeConfig,
    epoch_ticker_stop: Arc<AtomicBool>,
    compilations: AtomicU64,
}

impl Runtime {
    /// Builds the engine (pooling allocator, epoch interruption, async) and starts its epoch
    /// clock.
    pub fn new(config: RuntimeConfig) -> anyhow::Result<Self> {
        config.validate().map_err(anyhow::Error::msg)?;
        let engine = Engine::new(&engine_config(&config))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        Entity::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)?;
        let cache = match &config.compiled_cache_dir {
            Some(directory) => Some(CompiledCache::new(directory.clone(), &engine)?),
            None => None,
        };
        let epoch_ticker_stop = Arc::new(AtomicBool::new(false));
        start_epoch_ticker(&engine, config.epoch_tick_ms, epoch_ticker_stop.clone())?;
        Ok(Runtime {
            engine,
            linker,
            cache,
            config,
            epoch_ticker_stop,
            compilations: AtomicU64::new(0),
        })
    }

    /// The process's engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine configuration this runtime was built with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// How many components this runtime compiled (cache hits do not count).
    pub fn compilations(&self) -> u64 {
        self.compilations.load(Ordering::Relaxed)
    }

    /// Whether a compiled artifact for `content_hash` is in the disk cache.
    pub fn is_cached(&self, content_hash: &str) -> bool {
        self.cache
            .as_ref()
            .is_some_and(|cache| cache.contains(content_hash))
    }

    /// Validates and compiles a component (or loads it from the disk cache), and prepares its
    /// instantiation. CPU-heavy on a cache miss: call it from a blocking context.
    pub fn load(&self, bytes: &[u8]) -> Result<Arc<Plugin>, LoadError> {
        if bytes.len() > PLUGIN_BYTES_MAX {
            return Err(LoadError::TooLarge(bytes.len()));
        }
        let content_hash = hex::encode(Sha256::digest(bytes));
        let component = match self
            .cache
            .as_ref()
            .and_then(|c| c.load(&self.engine, &content_hash))
        {
            Some(component) => component,
            None => {
                let component = self.compile(bytes)?;
                if let Some(cache) = &self.cache
                    && let Err(error) = cache.store(&content_hash, &component)
                {
                    tracing::warn!(%error, "could not cache a compiled plugin");
                }
                component
            }
        };
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|error| LoadError::WrongWorld(format!("{error:#}")))?;
        let pre = EntityPre::new(instance_pre)
            .map_err(|error| LoadError::WrongWorld(format!("{error:#}")))?;
        Ok(Arc::new(Plugin { content_hash, pre }))
    }

    fn compile(&self, bytes: &[u8]) -> Result<Component, LoadError> {
        if !is_component(bytes) {
            let what = if bytes.starts_with(b"\0asm") {
                "a core WebAssembly module; build it for wasm32-wasip2 to get a component"
            } else {
                "the bytes do not start with the wasm magic number"
            };
            return Err(LoadError::NotAComponent(what.into()));
        }
        self.compilations.fetch_add(1, Ordering::Relaxed);
        Component::new(&self.engine, bytes)
            .map_err(|error| LoadError::NotAComponent(format!("{error:#}")))
    }

    /// Instantiates `plugin` for `address` in a fresh store with `limits`. The instance is
    /// not activated yet.
    pub async fn instantiate(
        &self,
        plugin: &Arc<Plugin>,
        address: EntityAddress,
        limits: InstanceLimits,
        state: StateStore,
        router: Arc<dyn Router>,
    ) -> Result<EntityInstance, MessageError> {
        let entity_state_bytes = state
            .state_bytes(&address)
            .map_err(|error| MessageError::new(ErrorKind::Internal, error.to_string()))?
            as u64;
        let log_budget = Arc::new(LogBudget::default());
        let entity_name: Arc<str> = address.to_string().into();
        let wasi = WasiCtxBuilder::new()
            .stdout(GuestOutput {
                entity: entity_name.clone(),
                stream: "stdout",
                budget: log_budget.clone(),
            })
            .stderr(GuestOutput {
                entity: entity_name,
                stream: "stderr",
                budget: log_budget.clone(),
            })
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let ticks_limit = limits
            .message_deadline_ms
            .div_ceil(self.config.epoch_tick_ms)
            .max(1);
        let memory_bytes_max = limits.memory_bytes_max.min(self.config.memory_bytes_max);
        let data = HostState {
            wasi,
            table: Default::default(),
            limiter: MemoryLimiter {
                memory_bytes_max,
                memory_limit_hit: false,
            },
            address,
            state,
            router,
            limits,
            log_budget,
            message: MessageScope::default(),
            ticks_limit,
            next_timer: 0,
            entity_state_bytes,
            committed_sizes: Default::default(),
        };
        let mut store = Store::new(&self.engine, data);
        store.limiter(|state| &mut state.limiter);
        store.epoch_deadline_callback(|mut context| {
            let state = context.data_mut();
            state.message.ticks_used += 1;
            if state.message.ticks_used >= state.ticks_limit {
                return Err(HostTrap::Deadline(state.limits.message_deadline_ms).into());
            }
            Ok(wasmtime::UpdateDeadline::Yield(1))
        });
        store.set_epoch_deadline(1);
        let bindings = plugin
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(|error| {
                if store.data().limiter.memory_limit_hit {
                    MessageError::new(
                        ErrorKind::MemoryLimit,
                        format!("the instance needs more than {memory_bytes_max} bytes of memory"),
                    )
                } else {
                    MessageError::new(ErrorKind::Instantiation, format!("{error:#}"))
                }
            })?;
        Ok(EntityInstance::new(
            store,
            bindings,
            plugin.clone(),
            self.config.guest_log_lines_per_message,
        ))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.epoch_ticker_stop.store(true, Ordering::Relaxed);
    }
}

fn engine_config(config: &RuntimeConfig) -> Config {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(config.instances_max)
        .total_core_instances(config.instances_max.saturating_mul(4))
        .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT_MAX)
        .total_memories(
            config
                .instances_max
                .saturating_mul(MEMORIES_PER_COMPONENT_MAX),
        )
        .max_memories_per_component(MEMORIES_PER_COMPONENT_MAX)
        .total_tables(
            config
                .instances_max
                .saturating_mul(TABLES_PER_COMPONENT_MAX),
        )
        .max_tables_per_component(TABLES_PER_COMPONENT_MAX)
        .total_stacks(config.instances_max)
        .max_memory_size(config.memory_bytes_max);
    let mut engine = Config::new();
    engine
        .epoch_interruption(true)
        .memory_init_cow(true)
        .memory_reservation(config.memory_reservation_bytes)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    engine
}

fn start_epoch_ticker(engine: &Engine, tick_ms: u64, stop: Arc<AtomicBool>) -> std::io::Result<()> {
    let engine = engine.weak();
    std::thread::Builder::new()
        .name("tessera-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(tick_ms));
                match engine.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => return,
                }
            }
        })?;
    Ok(())
}

/// A component starts with the wasm magic and the component-model layer bytes.
fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[6..8] == [0x01, 0x00]
}
