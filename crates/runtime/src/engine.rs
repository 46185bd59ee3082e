//! The process's one wasmtime engine: how it is configured (pooling allocator, epoch
//! interruption, async), its epoch clock, compiling plugins (checked against the entity world
//! before anything is cached) and instantiating them for an entity.

use super::bindings::{Entity, EntityPre, v1};
use super::cache::CompiledCache;
use super::config::RuntimeConfig;
use super::guest_log::{GuestOutput, LogBudget};
use super::guest_pool::{GuestPool, Weight};
use super::host::{HostState, HostTrap};
use super::instance::{Bindings, EntityInstance};
use super::limits::{InstanceLimits, MemoryLimiter};
use super::message_scope::MessageScope;
use super::plugin::{LoadError, PLUGIN_BYTES_MAX, Plugin, Pre};
use super::retire::Retirement;
use super::slots::InstanceSlots;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tessera_contract::{BoxFuture, EntityAddress, ErrorKind, MessageError, Router};
use tessera_state::EntityState;
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
/// What an instance reaches outside itself: the entity's durable state, the router for its
/// `ask`s, and the bytes it holds now.
pub struct EntityContext {
    /// Where `get` reads from.
    pub state: Arc<dyn EntityState>,
    /// Where `ask` goes.
    pub router: Arc<dyn Router>,
    /// The entity's committed state bytes.
    pub entity_state_bytes: u64,
    /// The highest timer id the entity ever committed; `schedule` continues after it.
    pub last_timer: u64,
    /// Set by the instance's owner when it shuts down: a running guest call traps at its next
    /// epoch tick (`unavailable`; nothing it did is committed). Shared by every instance of
    /// the owner, so one store of `true` stops them all.
    pub interrupt: Arc<AtomicBool>,
    /// What the guest's `now-ms` reads: the node's [`SystemClock`](super::SystemClock), or a
    /// simulation's virtual clock.
    pub clock: Arc<dyn super::Clock>,
}

/// The process's wasmtime engine, linker and compiled-plugin cache.
///
/// ```no_run
/// use tessera_runtime::{Runtime, RuntimeConfig};
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
    /// Instances alive now, and the bell rung when one is dropped.
    instances: Arc<InstanceSlots>,
    /// Where CPU-heavy guest calls are finished, off the I/O workers.
    guest_pool: GuestPool,
    /// Where instances whose memory grew large are dropped, off the I/O workers.
    retirement: Retirement,
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
        v1::Entity::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)?;
        let cache = match &config.compiled_cache_dir {
            Some(directory) => Some(CompiledCache::new(directory.clone(), &engine)?),
            None => None,
        };
        let guest_threads = match config.guest_threads {
            // One core's worth is always left to I/O and short calls.
            0 => std::thread::available_parallelism()
                .map_or(1, |cores| cores.get().saturating_sub(1))
                .max(1),
            threads => threads,
        };
        let guest_pool =
            GuestPool::new(guest_threads, Duration::from_millis(config.epoch_tick_ms))?;
        let epoch_ticker_stop = Arc::new(AtomicBool::new(false));
        start_epoch_ticker(&engine, config.epoch_tick_ms, epoch_ticker_stop.clone())?;
        Ok(Runtime {
            engine,
            linker,
            cache,
            config,
            epoch_ticker_stop,
            compilations: AtomicU64::new(0),
            instances: Arc::default(),
            guest_pool,
            retirement: Retirement::start()?,
        })
    }

    /// Runs one guest call (an [`EntityInstance`] method, with the instance moved into `call`
    /// and handed back in its output). With `start_here` it runs on the caller's thread, where
    /// most calls finish, until its polls have taken one epoch tick of CPU; the rest runs on
    /// the guest pool, off the threads that serve I/O. Without, it goes to the pool at once.
    /// Says whether the call was heavy, so the caller can send an entity whose calls are
    /// heavy straight to the pool next time. An error when the call was lost (whatever it
    /// owned is dropped).
    pub async fn run_call<T: Send + 'static>(
        &self,
        call: BoxFuture<'static, T>,
        start_here: bool,
    ) -> Result<(T, Weight), MessageError> {
        self.guest_pool.run(call, start_here).await
    }

    /// [`run_call`](Self::run_call) with `start_here`, for a call whose first poll the caller
    /// made itself (that poll is not timed: a call finishing in it ran less than an epoch
    /// tick); its later polls are timed here, and a heavy call moves to the guest pool.
    pub async fn run_polled_call<T: Send + 'static>(
        &self,
        call: BoxFuture<'static, T>,
    ) -> Result<(T, Weight), MessageError> {
        self.guest_pool.run_polled(call).await
    }

    /// The process's engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine configuration this runtime was built with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// Entity instances alive now (each holds one slot of the pool).
    pub fn live_instances(&self) -> u64 {
        self.instances.live()
    }

    /// Instances dropped off the I/O workers so far, on the retiring thread (their memory had
    /// grown large: see `retire.rs`).
    pub fn retired_instances(&self) -> u64 {
        self.retirement.retired()
    }

    /// Whether every slot of the instance pool is taken.
    pub fn pool_is_full(&self) -> bool {
        self.live_instances() >= u64::from(self.config.instances_max)
    }

    /// Resolves when an instance is dropped (a slot may be free). Register before checking.
    pub fn instance_freed(&self) -> tokio::sync::futures::Notified<'_> {
        self.instances.freed()
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
        self.load_hashed(bytes, hex::encode(Sha256::digest(bytes)))
    }

    /// [`load`](Self::load) for a caller that already hashed the bytes (hex SHA-256): a
    /// [`check`](Self::check) and a [`persist`](Self::persist).
    pub fn load_hashed(
        &self,
        bytes: &[u8],
        content_hash: String,
    ) -> Result<Arc<Plugin>, LoadError> {
        let plugin = self.check(bytes, content_hash)?;
        self.persist(&plugin);
        Ok(plugin)
    }

    /// Compiles `bytes` (or reads the disk cache) and links the component against the entity
    /// world, without writing anything: a refused upload leaves nothing behind.
    pub fn check(&self, bytes: &[u8], content_hash: String) -> Result<Arc<Plugin>, LoadError> {
        if bytes.len() > PLUGIN_BYTES_MAX {
            return Err(LoadError::TooLarge(bytes.len()));
        }
        let cached = self
            .cache
            .as_ref()
            .and_then(|c| c.load(&self.engine, &content_hash));
        let component = match cached {
            Some(component) => component,
            None => self.compile(bytes)?,
        };
        let pre = self.prepare(&component)?;
        Ok(Arc::new(Plugin::new(content_hash, pre)))
    }

    /// Writes `plugin`'s compiled artifact to the disk cache (if there is one and it lacks
    /// it), so a restart does not recompile. A failure is logged: the cache is an optimisation.
    pub fn persist(&self, plugin: &Plugin) {
        let Some(cache) = &self.cache else {
            return;
        };
        if cache.contains(plugin.content_hash()) {
            return;
        }
        let component = plugin.component();
        if let Err(error) = cache.store(plugin.content_hash(), component) {
            tracing::warn!(%error, "could not cache a compiled plugin");
        }
    }

    /// Links `component` against the host and binds it to the contract version whose
    /// handler it exports (0.2.0, else 0.1.0): fails unless it implements one of them.
    fn prepare(&self, component: &Component) -> Result<Pre, LoadError> {
        let instance_pre = self
            .linker
            .instantiate_pre(component)
            .map_err(|error| LoadError::WrongWorld(format!("{error:#}")))?;
        match EntityPre::new(instance_pre.clone()) {
            Ok(pre) => Ok(Pre::V2(pre)),
            Err(v2_error) => v1::EntityPre::new(instance_pre)
                .map(Pre::V1)
                .map_err(|_| LoadError::WrongWorld(format!("{v2_error:#}"))),
        }
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
    /// not activated yet. `entity_state_bytes` is what the entity holds now (from its
    /// [`EntityMeta`](tessera_state::EntityMeta)), the base of its state quota.
    pub async fn instantiate(
        &self,
        plugin: &Arc<Plugin>,
        address: EntityAddress,
        limits: InstanceLimits,
        entity: EntityContext,
    ) -> Result<EntityInstance, MessageError> {
        let EntityContext {
            state,
            router,
            entity_state_bytes,
            last_timer,
            interrupt,
            clock,
        } = entity;
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
                memory_bytes_peak: 0,
            },
            address,
            state,
            router,
            limits,
            log_budget,
            message: MessageScope::default(),
            ticks_limit,
            next_timer: last_timer,
            entity_state_bytes,
            committed_sizes: Default::default(),
            ask_clock: Default::default(),
            interrupted: interrupt,
            clock,
        };
        let mut store = Store::new(&self.engine, data);
        store.limiter(|state| &mut state.limiter);
        store.epoch_deadline_callback(|mut context| {
            let state = context.data_mut();
            state.message.ticks_used += 1;
            if state.interrupted.load(Ordering::Relaxed) {
                return Err(HostTrap::Interrupted.into());
            }
            if state.message.ticks_used >= state.ticks_limit {
                return Err(HostTrap::Deadline(state.limits.message_deadline_ms).into());
            }
            let gate = state
                .message
                .gate
                .as_ref()
                .filter(|_| state.message.in_message);
            if let Some(wait) = gate.and_then(|gate| gate.preempt()) {
                // Waiting for a slot is not running: the wall-clock bound does not count it.
                let clock = state.ask_clock.clone();
                let paused = async move {
                    clock.begin_wait();
                    let started = std::time::Instant::now();
                    wait.await;
                    clock.end_wait(started.elapsed());
                };
                return Ok(wasmtime::UpdateDeadline::YieldCustom(1, Box::pin(paused)));
            }
            Ok(wasmtime::UpdateDeadline::Yield(1))
        });
        store.set_epoch_deadline(1);
        let instantiated = match &plugin.pre {
            Pre::V2(pre) => pre.instantiate_async(&mut store).await.map(Bindings::V2),
            Pre::V1(pre) => pre.instantiate_async(&mut store).await.map(Bindings::V1),
        };
        let bindings = instantiated.map_err(|error| {
            if store.data().limiter.memory_limit_hit {
                MessageError::new(
                    ErrorKind::MemoryLimit,
                    format!("the instance needs more than {memory_bytes_max} bytes of memory"),
                )
            } else if error
                .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                .is_some()
            {
                MessageError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "every one of the {} instance slots is taken; retry later",
                        self.config.instances_max
                    ),
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
            self.instances.take(),
            self.retirement.clone(),
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
