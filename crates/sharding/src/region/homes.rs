//! The shard-home table senders read: per registered type, its sharding settings and one slot
//! per shard saying where the shard lives right now — here, on another node, being allocated or
//! being handed off (the last two with a bounded buffer). A sender locks only its shard's slot,
//! so a message for a shard this node owns goes straight to the entity's mailbox; the region
//! task takes the same lock to change a slot, which is what keeps buffered messages ahead of
//! later ones.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use tokio::time::Instant;

use crate::extractor::{FnvExtractor, ShardExtractor};
use crate::handoff::ShardBuffer;
use tessera_contract::{Allocation, ShardId, TypeKey};

/// How an entity type is sharded on this region.
#[derive(Clone, Debug)]
pub struct TypeSettings {
    /// Whether started entities are remembered and restarted.
    pub remember: bool,
    /// The shard function.
    pub extractor: Arc<dyn ShardExtractor>,
}

impl TypeSettings {
    /// The default settings: FNV-1a over `num_shards`, not remembered.
    ///
    /// ```
    /// use tessera_sharding::TypeSettings;
    /// let settings = TypeSettings::new(128).remembered();
    /// assert!(settings.remember);
    /// ```
    pub fn new(num_shards: u32) -> Self {
        TypeSettings {
            remember: false,
            extractor: Arc::new(FnvExtractor::new(num_shards)),
        }
    }

    /// The same settings with remember-entities on.
    pub fn remembered(mut self) -> Self {
        self.remember = true;
        self
    }

    /// The same settings with another shard function.
    pub fn with_extractor(mut self, extractor: Arc<dyn ShardExtractor>) -> Self {
        self.extractor = extractor;
        self
    }
}

/// Where one shard lives, as this region knows it.
#[derive(Debug, Default)]
pub(crate) enum Home {
    /// Never resolved; the first sender asks for an allocation.
    #[default]
    Unknown,
    /// An allocation request is in flight; messages wait, in order.
    Allocating { since: Instant, buffer: ShardBuffer },
    /// This node owns the shard.
    Local { generation: u64 },
    /// Another node owns it; messages go through the region task to it.
    Remote(Allocation),
    /// This node is handing the shard to `to`; messages wait until its entities stopped.
    HandingOff { to: Allocation, buffer: ShardBuffer },
}

impl Home {
    /// The allocation this region knows for the shard, as `(node, generation)`.
    pub(crate) fn known_generation(&self) -> Option<u64> {
        match self {
            Home::Local { generation } => Some(*generation),
            Home::Remote(allocation) => Some(allocation.generation),
            _ => None,
        }
    }
}

/// A registered type: settings plus the shard slots.
pub(crate) struct RegisteredType {
    pub(crate) key: TypeKey,
    pub(crate) extractor: Arc<dyn ShardExtractor>,
    remember: AtomicBool,
    /// Set once this registration is replaced or removed: a route that resolved it must
    /// resolve the type again.
    retired: AtomicBool,
    slots: Box<[Mutex<Home>]>,
}

impl RegisteredType {
    fn new(key: TypeKey, settings: TypeSettings) -> Self {
        let slots = (0..settings.extractor.num_shards())
            .map(|_| Mutex::new(Home::Unknown))
            .collect();
        RegisteredType {
            key,
            extractor: settings.extractor,
            remember: AtomicBool::new(settings.remember),
            retired: AtomicBool::new(false),
            slots,
        }
    }

    pub(crate) fn remembers(&self) -> bool {
        self.remember.load(Ordering::Relaxed)
    }

    /// Whether this registration was replaced or removed since it was looked up.
    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }

    /// The slot of `shard`, locked; `None` for a shard outside the type's range.
    pub(crate) fn slot(&self, shard: ShardId) -> Option<MutexGuard<'_, Home>> {
        let slot = self.slots.get(shard as usize)?;
        Some(slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Shards of the type.
    pub(crate) fn num_shards(&self) -> u32 {
        self.slots.len() as u32
    }
}

/// Every registered type, by tenant then type name (looked up without building a key).
#[derive(Default)]
pub(crate) struct Homes {
    types: RwLock<foldhash::HashMap<String, foldhash::HashMap<String, Arc<RegisteredType>>>>,
}

impl Homes {
    pub(crate) fn get(&self, tenant: &str, entity_type: &str) -> Option<Arc<RegisteredType>> {
        let types = self.types.read().unwrap_or_else(|p| p.into_inner());
        types.get(tenant)?.get(entity_type).cloned()
    }

    pub(crate) fn get_key(&self, key: &TypeKey) -> Option<Arc<RegisteredType>> {
        self.get(&key.tenant, &key.entity_type)
    }

    /// Registers `key`; a registration with the same shard count keeps the slots (where
    /// shards live and what waits) and updates only the remember flag. Returns the replaced
    /// registration when the shard count changed, so its waiting messages can be failed.
    pub(crate) fn register(
        &self,
        key: TypeKey,
        settings: TypeSettings,
    ) -> Option<Arc<RegisteredType>> {
        let mut types = self.types.write().unwrap_or_else(|p| p.into_inner());
        let tenant = types.entry(key.tenant.clone()).or_default();
        if let Some(existing) = tenant.get(&key.entity_type)
            && existing.num_shards() == settings.extractor.num_shards()
        {
            existing
                .remember
                .store(settings.remember, Ordering::Relaxed);
            return None;
        }
        let name = key.entity_type.clone();
        let replaced = tenant.insert(name, Arc::new(RegisteredType::new(key, settings)));
        if let Some(replaced) = &replaced {
            replaced.retire();
        }
        replaced
    }

    /// Every registered type.
    pub(crate) fn all(&self) -> Vec<Arc<RegisteredType>> {
        let types = self.types.read().unwrap_or_else(|p| p.into_inner());
        types
            .values()
            .flat_map(|by_name| by_name.values().cloned())
            .collect()
    }

    /// Unregisters `key`; returns the registration so its waiting messages can be failed.
    pub(crate) fn unregister(&self, key: &TypeKey) -> Option<Arc<RegisteredType>> {
        let mut types = self.types.write().unwrap_or_else(|p| p.into_inner());
        let tenant = types.get_mut(&key.tenant)?;
        let removed = tenant.remove(&key.entity_type);
        if let Some(removed) = &removed {
            removed.retire();
        }
        if tenant.is_empty() {
            types.remove(&key.tenant);
        }
        removed
    }
}
