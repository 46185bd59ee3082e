//! A compiled plugin version ([`Plugin`]), why loading one can fail ([`LoadError`]), and the
//! bounded in-memory [`PluginCache`] of compiled plugins by content hash.

use super::bindings::EntityPre;
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
    /// The component does not implement the `tessera:entity/entity` world.
    #[error("the component does not implement the tessera:entity/entity@0.1.0 world: {0}")]
    WrongWorld(String),
    /// The compiling task failed (a panic in the compiler).
    #[error("the plugin could not be compiled: {0}")]
    Compiler(String),
}

/// A compiled plugin version, ready to instantiate.
pub struct Plugin {
    content_hash: String,
    pub(crate) pre: EntityPre<HostState>,
}

impl Plugin {
    pub(crate) fn new(content_hash: String, pre: EntityPre<HostState>) -> Self {
        Plugin { content_hash, pre }
    }

    /// The plugin's pre-linked instance, for the benchmarks' raw baseline
    /// ([`HostState::bare`]).
    #[doc(hidden)]
    pub fn bindings_pre(&self) -> &EntityPre<HostState> {
        &self.pre
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
