//! A compiled plugin version ([`Plugin`]), why loading one can fail ([`LoadError`]), and the
//! bounded in-memory [`PluginCache`] of compiled plugins by content hash.

use super::bindings::{EntityPre, v1};
use super::host::HostState;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The largest plugin the runtime compiles, so an upload cannot exhaust the compiler.
pub const PLUGIN_BYTES_MAX: usize = 64 << 20;

/// Why a plugin could not be loaded. Nothing changes when this is returned: no cache entry on
/// disk or in memory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The bytes are larger than [`PLUGIN_BYTES_MAX`].
    #[error("the plugin is {0} bytes, over the limit of {PLUGIN_BYTES_MAX}")]
    TooLarge(usize),
    /// The bytes are not a WebAssembly component (a core module, or not wasm at all).
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    /// The component implements neither the `tessera:entity/entity@0.2.0` world nor the
    /// `@0.1.0` one.
    #[error(
        "the component implements neither the tessera:entity/entity@0.2.0 world nor @0.1.0: {0}"
    )]
    WrongWorld(String),
    /// The compiling task failed (a panic in the compiler).
    #[error("the plugin could not be compiled: {0}")]
    Compiler(String),
}

/// A plugin's pre-linked instance, by the contract version the component was built against.
pub(crate) enum Pre {
    /// `tessera:entity@0.2.0`: `activate` may migrate and fail, `handle` gets the sender.
    V2(EntityPre<HostState>),
    /// `tessera:entity@0.1.0`, run unchanged.
    V1(v1::EntityPre<HostState>),
}

/// A compiled plugin version, ready to instantiate.
pub struct Plugin {
    content_hash: String,
    pub(crate) pre: Pre,
}

impl Plugin {
    pub(crate) fn new(content_hash: String, pre: Pre) -> Self {
        Plugin { content_hash, pre }
    }

    /// The plugin's pre-linked instance, for the benchmarks' raw baseline
    /// ([`HostState::bare`]); `None` for a component built against the 0.1.0 contract.
    #[doc(hidden)]
    pub fn bindings_pre(&self) -> Option<&EntityPre<HostState>> {
        match &self.pre {
            Pre::V2(pre) => Some(pre),
            Pre::V1(_) => None,
        }
    }

    /// The version of the WIT contract the component was built against (`"0.2.0"` or
    /// `"0.1.0"`).
    pub fn contract_version(&self) -> &'static str {
        match &self.pre {
            Pre::V2(_) => "0.2.0",
            Pre::V1(_) => "0.1.0",
        }
    }

    pub(crate) fn component(&self) -> &wasmtime::component::Component {
        match &self.pre {
            Pre::V2(pre) => pre.instance_pre().component(),
            Pre::V1(pre) => pre.instance_pre().component(),
        }
    }

    /// Hex SHA-256 of the component bytes.
    pub fn content_hash(&self) -> &str {
        &self.content_hash
    }
}

/// The default number of compiled plugins a [`PluginCache`] keeps.
pub const PLUGIN_CACHE_ENTRIES_DEFAULT: usize = 256;

/// Compiled plugins by content hash, at most `capacity` of them; the least recently used one
/// leaves first. Plugins that types are bound to stay alive through their bindings anyway: the
/// cache only spares recompiling (or re-reading the disk cache) on redeploys and rollbacks.
///
/// ```
/// use tessera_runtime::PluginCache;
/// let cache = PluginCache::new(2);
/// assert!(cache.get("ab").is_none());
/// assert_eq!(cache.len(), 0);
/// ```
pub struct PluginCache {
    capacity: usize,
    entries: Mutex<CacheEntries>,
}

#[derive(Default)]
struct CacheEntries {
    plugins: HashMap<String, (Arc<Plugin>, u64)>,
    clock: u64,
}

impl PluginCache {
    /// An empty cache holding at most `capacity` plugins (at least one).
    pub fn new(capacity: usize) -> Self {
        PluginCache {
            capacity: capacity.max(1),
            entries: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheEntries> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached plugin for `content_hash`.
    pub fn get(&self, content_hash: &str) -> Option<Arc<Plugin>> {
        let mut entries = self.lock();
        entries.clock += 1;
        let clock = entries.clock;
        let (plugin, used) = entries.plugins.get_mut(content_hash)?;
        *used = clock;
        Some(plugin.clone())
    }

    /// Adds `plugin`, evicting the least recently used one past the capacity.
    pub fn insert(&self, plugin: Arc<Plugin>) {
        let mut entries = self.lock();
        entries.clock += 1;
        let clock = entries.clock;
        entries
            .plugins
            .insert(plugin.content_hash().to_string(), (plugin, clock));
        while entries.plugins.len() > self.capacity {
            let oldest = entries
                .plugins
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(hash, _)| hash.clone());
            match oldest {
                Some(hash) => entries.plugins.remove(&hash),
                None => break,
            };
        }
        debug_assert!(entries.plugins.len() <= self.capacity);
    }

    /// Plugins held.
    pub fn len(&self) -> usize {
        self.lock().plugins.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
