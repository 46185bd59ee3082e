//! The entity types this node can run and the plugin version each is bound to right now.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tessera_contract::TypeKey;
use tessera_runtime::{InstanceLimits, Plugin};

/// How one entity type runs: its active plugin version and the limits its tenant gets.
#[derive(Clone)]
pub struct TypeBinding {
    /// The compiled plugin of the active version.
    pub plugin: Arc<Plugin>,
    /// The active version number (from 1 per type).
    pub version: u32,
    /// Per-instance and per-message limits.
    pub limits: InstanceLimits,
    /// Passivate an entity after this long without a message.
    pub passivate_idle: Option<Duration>,
    /// Capacity of each entity's mailbox.
    pub mailbox_capacity: usize,
    /// The most live entities the type's tenant may have on this node.
    pub tenant_live_entities_max: Option<usize>,
    /// Whether started entities are remembered and restarted after a restart or a move.
    pub remember: bool,
}

/// The types a node can run: `(tenant, type) -> binding`. Readers see a binding change at
/// their next message boundary.
///
/// ```no_run
/// # fn binding() -> tessera_entity::TypeBinding { unimplemented!() }
/// use tessera_entity::TypeTable;
/// use tessera_contract::TypeKey;
/// let types = TypeTable::default();
/// types.bind(TypeKey::new("acme", "counter"), binding());
/// assert!(types.get(&TypeKey::new("acme", "counter")).is_some());
/// ```
#[derive(Default)]
pub struct TypeTable {
    bindings: RwLock<HashMap<TypeKey, Arc<TypeBinding>>>,
    /// Bumped by every change, so a cell can keep its binding until the table changes.
    generation: AtomicU64,
}

impl TypeTable {
    /// Binds (or rebinds) a type.
    pub fn bind(&self, key: TypeKey, binding: TypeBinding) {
        self.write().insert(key, Arc::new(binding));
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Removes a type; its live entities stop at their next message.
    pub fn unbind(&self, key: &TypeKey) -> bool {
        let removed = self.write().remove(key).is_some();
        self.generation.fetch_add(1, Ordering::Release);
        removed
    }

    /// A number that changes whenever a binding does.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current binding of a type.
    pub fn get(&self, key: &TypeKey) -> Option<Arc<TypeBinding>> {
        self.bindings
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(key)
            .cloned()
    }

    /// Every bound type.
    pub fn keys(&self) -> Vec<TypeKey> {
        self.bindings
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<TypeKey, Arc<TypeBinding>>> {
        self.bindings
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
