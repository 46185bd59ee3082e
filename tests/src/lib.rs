//! Test support shared by the integration tests and benchmarks: the paths of the plugin
//! components (built by `build.rs` for `wasm32-wasip2`) and a small local node to run them in;
//! clusters of processes (`cluster`), the partition plane's cluster and ledger of
//! acknowledged counter values (`partition_plane`), a plane on a transport of its own
//! (`plane`), a TCP forwarder whose links a test cuts (`proxy`), a rogue peer that forges what
//! nodes send each other (`rogue`), a headless browser (`browser`) and the TypeScript example
//! entity, built through npm (`typescript`).

include!(concat!(env!("OUT_DIR"), "/plugins.rs"));

pub mod browser;
pub mod cluster;
pub mod partition_plane;
pub mod plane;
pub mod processes;
pub mod proxy;
pub mod rogue;
pub mod typescript;

use serde_json::Value as Json;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tessera_contract::{EntityAddress, ErrorKind, MessageError, TypeKey};
use tessera_entity::{Entities, EntityConfig, EntityParts, TypeBinding, TypeTable};
use tessera_host::node::NodeConfig;
use tessera_runtime::{InstanceLimits, Plugin, Runtime, RuntimeConfig};
use tessera_state::{GroupCommitConfig, LocalState, StateStore};

/// One engine for the whole test binary, with its compiled plugins cached on disk next to the
/// test build, so tests neither recompile nor fill the address space with pools.
pub fn shared_runtime() -> Arc<Runtime> {
    static RUNTIME: OnceLock<Arc<Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let config = RuntimeConfig {
                instances_max: 2_000,
                compiled_cache_dir: Some(compiled_cache_dir()),
                ..RuntimeConfig::default()
            };
            Arc::new(Runtime::new(config).expect("the test engine starts"))
        })
        .clone()
}

/// The compiled plugin at `path`, loaded once per test binary.
pub fn plugin(path: &str) -> Arc<Plugin> {
    static PLUGINS: OnceLock<Mutex<HashMap<String, Arc<Plugin>>>> = OnceLock::new();
    let plugins = PLUGINS.get_or_init(Default::default);
    let mut plugins = plugins.lock().unwrap_or_else(|p| p.into_inner());
    plugins
        .entry(path.to_string())
        .or_insert_with(|| {
            let bytes = std::fs::read(path).expect("the plugin was built by build.rs");
            shared_runtime().load(&bytes).expect("the plugin loads")
        })
        .clone()
}

/// A node's entity stack (no sharding) over a data directory.
pub struct TestNode {
    /// The state backend (tables and group committer).
    pub state: Arc<LocalState>,
    /// The type table.
    pub types: Arc<TypeTable>,
    /// The live entities.
    pub entities: Entities,
}

/// The tenant test entities live in.
pub const TENANT: &str = "test";

impl TestNode {
    /// A node over `data_dir` with default entity settings.
    pub fn new(data_dir: &Path) -> Self {
        Self::with_config(data_dir, EntityConfig::default())
    }

    /// A node over `data_dir` with `config`.
    pub fn with_config(data_dir: &Path, config: EntityConfig) -> Self {
        let node = Self::paused(data_dir, config);
        node.entities.start_messaging();
        node
    }

    /// A node whose committed tells and reminders wait in the store until
    /// `entities.start_messaging()` is called.
    pub fn paused(data_dir: &Path, config: EntityConfig) -> Self {
        let store = StateStore::open(&data_dir.join("tessera.redb")).expect("the store opens");
        let state = Arc::new(LocalState::new(store, GroupCommitConfig::default()));
        let types = Arc::new(TypeTable::default());
        let entities = Entities::standalone(EntityParts {
            runtime: shared_runtime(),
            state: state.clone(),
            types: types.clone(),
            remember: None,
            config,
        });
        TestNode {
            state,
            types,
            entities,
        }
    }

    /// Deploys `plugin_path` as `entity_type` (version `version`) with `limits`.
    pub fn deploy(
        &self,
        entity_type: &str,
        plugin_path: &str,
        version: u32,
        limits: InstanceLimits,
    ) {
        self.deploy_with(entity_type, plugin_path, version, limits, None);
    }

    /// Like [`deploy`](Self::deploy) with an idle-passivation timeout.
    pub fn deploy_with(
        &self,
        entity_type: &str,
        plugin_path: &str,
        version: u32,
        limits: InstanceLimits,
        passivate_idle: Option<Duration>,
    ) {
        bind_type(
            &self.types,
            entity_type,
            plugin_path,
            version,
            limits,
            passivate_idle,
        );
    }

    /// Asks entity `entity_type/id` with a JSON message and decodes the JSON reply.
    pub async fn ask(
        &self,
        entity_type: &str,
        id: &str,
        message: Json,
    ) -> Result<Json, MessageError> {
        ask_json(&self.entities, entity_type, id, message).await
    }

    /// The store under this node's state backend.
    pub fn store(&self) -> &StateStore {
        self.state.store()
    }
}

/// Asks entity `entity_type/id` of [`TENANT`] on `entities` with a JSON message (20 s at
/// most) and decodes the JSON reply.
pub async fn ask_json(
    entities: &Entities,
    entity_type: &str,
    id: &str,
    message: Json,
) -> Result<Json, MessageError> {
    let reply = entities
        .ask(
            address(entity_type, id),
            0,
            to_msgpack(&message),
            Duration::from_secs(20),
        )
        .await?;
    from_msgpack(&reply).map_err(|error| MessageError::new(ErrorKind::Failed, error))
}

/// An entity layer's parts over a new store in `dir`, with `types` and `config`.
pub fn entity_parts(dir: &Path, types: &Arc<TypeTable>, config: EntityConfig) -> EntityParts {
    let store = StateStore::open(&dir.join("tessera.redb")).expect("the store opens");
    EntityParts {
        runtime: shared_runtime(),
        state: Arc::new(LocalState::new(store, GroupCommitConfig::default())),
        types: types.clone(),
        remember: None,
        config,
    }
}

/// Binds `plugin_path` as `entity_type` of [`TENANT`] (version `version`) in `types`.
pub fn bind_type(
    types: &TypeTable,
    entity_type: &str,
    plugin_path: &str,
    version: u32,
    limits: InstanceLimits,
    passivate_idle: Option<Duration>,
) {
    types.bind(
        TypeKey::new(TENANT, entity_type),
        TypeBinding {
            plugin: plugin(plugin_path),
            version,
            limits,
            passivate_idle,
            mailbox_capacity: 1024,
            tenant_live_entities_max: None,
            remember: false,
        },
    );
}

/// A standalone entity layer over a new store in `dir`, on `runtime` (a test's own) with
/// `types` and the default configuration.
pub fn standalone_entities(dir: &Path, runtime: &Arc<Runtime>, types: Arc<TypeTable>) -> Entities {
    let store = StateStore::open(&dir.join("tessera.redb")).expect("the store opens");
    Entities::standalone(EntityParts {
        runtime: runtime.clone(),
        state: Arc::new(LocalState::new(store, GroupCommitConfig::default())),
        types,
        remember: None,
        config: EntityConfig::default(),
    })
}

/// Binds the plugin at `plugin_path`, loaded by `runtime` (a runtime of the test's own), as
/// `entity_type` of `tenant` (version 1, mailboxes of 64, no idle passivation) with `limits`.
pub fn bind_on_runtime(
    types: &TypeTable,
    runtime: &Runtime,
    (tenant, entity_type): (&str, &str),
    plugin_path: &str,
    limits: InstanceLimits,
) {
    let bytes = std::fs::read(plugin_path).expect("the plugin was built by build.rs");
    types.bind(
        TypeKey::new(tenant, entity_type),
        TypeBinding {
            plugin: runtime.load(&bytes).expect("the plugin loads"),
            version: 1,
            limits,
            passivate_idle: None,
            mailbox_capacity: 64,
            tenant_live_entities_max: None,
            remember: false,
        },
    );
}

/// A JSON value as MessagePack, through the host's codec.
pub fn to_msgpack(json: &Json) -> Vec<u8> {
    let text = serde_json::to_vec(json).expect("a JSON value serializes");
    tessera_codec::json_to_msgpack(&text).expect("serde_json writes valid JSON")
}

/// MessagePack bytes as a JSON value, through the host's codec.
pub fn from_msgpack(bytes: &[u8]) -> Result<Json, String> {
    let text = tessera_codec::msgpack_to_json(bytes).map_err(|error| error.to_string())?;
    serde_json::from_slice(&text).map_err(|error| error.to_string())
}

/// The address of a test entity.
pub fn address(entity_type: &str, id: &str) -> EntityAddress {
    EntityAddress::new(TENANT, entity_type, id)
}

/// Where tests and benchmarks keep compiled plugins, shared across runs and data directories.
pub fn compiled_cache_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("tessera-test-compiled")
}

/// A node configuration over `data_dir` with `admin_token`, a pool of `instances_max`
/// instances and the shared compiled-plugin cache.
pub fn node_config(data_dir: &Path, admin_token: &str, instances_max: u32) -> NodeConfig {
    NodeConfig {
        data_dir: data_dir.to_path_buf(),
        admin_token: Some(admin_token.into()),
        runtime: RuntimeConfig {
            instances_max,
            compiled_cache_dir: Some(compiled_cache_dir()),
            ..RuntimeConfig::default()
        },
        ..NodeConfig::default()
    }
}

/// The default quotas with a message rate that never binds: for a tenant whose senders send as
/// fast as they can.
pub fn unbound_rate() -> tessera_metadata::Quotas {
    tessera_metadata::Quotas {
        messages_per_second: 100_000_000,
        messages_burst: 100_000_000,
        ..Default::default()
    }
}

/// Opens a node with `config`, with tenant `bench` (a message rate that never binds) and
/// `counter` deployed to it: the node of the local-messaging benchmarks.
pub async fn counter_bench_node(config: NodeConfig) -> Arc<tessera_host::node::Node> {
    use tessera_metadata::TypeOptions;
    let node = tessera_host::node::Node::open(config)
        .await
        .expect("node opens");
    node.create_tenant("bench", Some(unbound_rate()))
        .await
        .expect("tenant");
    let bytes = std::fs::read(COUNTER).expect("plugin built");
    node.deploy("bench", "counter", bytes, TypeOptions::default())
        .await
        .expect("deploy");
    node
}

/// The process's resident memory in bytes, from `/proc/self/statm` (Linux), for the memory
/// benchmarks.
pub fn resident_bytes() -> u64 {
    const PAGE_BYTES: u64 = 4096;
    let statm = std::fs::read_to_string("/proc/self/statm").expect("linux /proc");
    let resident_pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .expect("statm has a resident field");
    resident_pages * PAGE_BYTES
}

/// Tells `payload` to `to` through `node`, yielding and trying again while the entity's
/// mailbox is full; panics on any other error.
pub async fn tell_until_taken(node: &tessera_host::node::Node, to: &EntityAddress, payload: &[u8]) {
    use tessera_host::node::NodeError;
    loop {
        match node.tell(to, payload.to_vec()).await {
            Ok(()) => return,
            Err(NodeError::Message(error)) if error.kind == ErrorKind::MailboxFull => {
                tokio::task::yield_now().await
            }
            Err(error) => panic!("tell failed: {error}"),
        }
    }
}

/// Tells `payload` `tells_per_entity` times to each of `targets` through `node` (yielding
/// while a mailbox is full: that is backpressure), then asks each once, all asks in flight
/// together — the round's completion barrier: an ask returns after every earlier tell from
/// this sender to its entity. For the throughput benchmarks.
pub async fn tell_round(
    node: &tessera_host::node::Node,
    targets: &[EntityAddress],
    payload: &[u8],
    tells_per_entity: usize,
) {
    for _ in 0..tells_per_entity {
        for to in targets {
            tell_until_taken(node, to, payload).await;
        }
    }
    barrier(
        targets
            .iter()
            .map(|to| node.ask(to, payload.to_vec(), Duration::from_secs(30))),
    )
    .await;
}

/// A round's completion barrier: awaits `asks` together; panics if one fails.
async fn barrier<Asked>(asks: impl IntoIterator<Item = Asked>)
where
    Asked: std::future::Future<Output = Result<Vec<u8>, tessera_host::node::NodeError>>,
{
    for answer in futures::future::join_all(asks).await {
        answer.expect("barrier ask");
    }
}

/// [`tell_until_taken`] through a reusable handle
/// ([`EntityRef`](tessera_host::node::EntityRef)).
pub async fn tell_ref_until_taken(target: &mut tessera_host::node::EntityRef, payload: &[u8]) {
    use tessera_host::node::NodeError;
    loop {
        match target.tell(payload.to_vec()).await {
            Ok(()) => return,
            Err(NodeError::Message(error)) if error.kind == ErrorKind::MailboxFull => {
                tokio::task::yield_now().await
            }
            Err(error) => panic!("tell failed: {error}"),
        }
    }
}

/// Tells through `tell` until the tenant's message rate refuses one, and returns how many were
/// taken; panics if more than `burst` were, or if a tell fails for another reason.
pub async fn tells_until_over_rate(
    burst: i64,
    mut tell: impl AsyncFnMut() -> Result<(), tessera_host::node::NodeError>,
) -> i64 {
    use tessera_host::node::NodeError;
    let mut taken = 0;
    loop {
        match tell().await {
            Ok(()) => taken += 1,
            Err(NodeError::Message(error)) if error.kind == ErrorKind::QuotaExceeded => {
                return taken;
            }
            Err(error) => panic!("a tell failed otherwise than over the rate: {error}"),
        }
        assert!(taken <= burst, "the burst of {burst} let more through");
    }
}

/// [`tell_round`] by address through a sender-local map from each target's address to its
/// reusable handle ([`EntityRef`](tessera_host::node::EntityRef)), looked up by the borrowed
/// address for every message, as [`Node::tell`](tessera_host::node::Node::tell) borrows it.
/// Finding the entity by its address and then sending as a handle does is the least any send
/// by address can do: the benchmarks set it beside [`tell_round`] as that path's floor.
/// `handles` holds one handle per target, which the closing asks go through.
pub async fn tell_round_looked_up<S: std::hash::BuildHasher>(
    handles: &mut HashMap<EntityAddress, tessera_host::node::EntityRef, S>,
    targets: &[EntityAddress],
    payload: &[u8],
    tells_per_entity: usize,
) {
    assert_eq!(handles.len(), targets.len(), "one handle per target");
    for _ in 0..tells_per_entity {
        for to in targets {
            let target = handles.get_mut(to).expect("a handle for every target");
            tell_ref_until_taken(target, payload).await;
        }
    }
    barrier(
        handles
            .values_mut()
            .map(|target| target.ask(payload.to_vec(), Duration::from_secs(30))),
    )
    .await;
}

/// [`tell_round`] through reusable handles ([`EntityRef`](tessera_host::node::EntityRef)), one
/// per target: the same tells and the same closing asks.
pub async fn tell_round_refs(
    targets: &mut [tessera_host::node::EntityRef],
    payload: &[u8],
    tells_per_entity: usize,
) {
    for _ in 0..tells_per_entity {
        for target in targets.iter_mut() {
            tell_ref_until_taken(target, payload).await;
        }
    }
    barrier(
        targets
            .iter_mut()
            .map(|target| target.ask(payload.to_vec(), Duration::from_secs(30))),
    )
    .await;
}
