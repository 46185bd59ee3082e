//! The entity types this node can run and the plugin version each is bound to right now.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tessera_contract::{ErrorKind, MessageError, TypeKey};
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
/// use tessera_contract::{ErrorKind, MessageError, TypeKey};
/// let types = TypeTable::default();
/// types.bind(TypeKey::new("acme", "counter"), binding());
/// assert!(types.get(&TypeKey::new("acme", "counter")).is_some());
/// ```
#[derive(Default)]
pub struct TypeTable {
    bindings: RwLock<HashMap<TypeKey, Arc<TypeBinding>>>,
    /// Types whose active version's plugin this node is still fetching: unbound, but their
    /// messages are answered `unavailable` (retry) rather than `entity_type_not_registered`.
    /// Bounded by the catalog's types.
    fetching: RwLock<HashSet<TypeKey>>,
    /// Bumped by every change, so a cell can keep its binding until the table changes.
    generation: AtomicU64,
}

impl TypeTable {
    /// Binds (or rebinds) a type.
    pub fn bind(&self, key: TypeKey, binding: TypeBinding) {
        self.fetching_mut().remove(&key);
        self.write().insert(key, Arc::new(binding));
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Removes a type; its live entities stop at their next message.
    pub fn unbind(&self, key: &TypeKey) -> bool {
        self.fetching_mut().remove(key);
        let removed = self.write().remove(key).is_some();
        self.generation.fetch_add(1, Ordering::Release);
        removed
    }

    /// Unbinds a type whose active version's plugin this node does not hold yet: until it is
    /// bound again its messages fail with a retryable `unavailable` (see [`TypeTable::unbound`]).
    pub fn unbind_fetching(&self, key: &TypeKey) {
        self.write().remove(key);
        self.fetching_mut().insert(key.clone());
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The error of a message to `key` when it has no binding: `unavailable` while its plugin
    /// is being fetched, `entity_type_not_registered` otherwise (`what` names the entity).
    ///
    /// ```
    /// use tessera_contract::{ErrorKind, TypeKey};
    /// let types = tessera_entity::TypeTable::default();
    /// let key = TypeKey::new("acme", "counter");
    /// assert_eq!(types.unbound(&key, "acme/counter/1").kind, ErrorKind::EntityTypeNotRegistered);
    /// types.unbind_fetching(&key);
    /// assert_eq!(types.unbound(&key, "acme/counter/1").kind, ErrorKind::Unavailable);
    /// ```
    pub fn unbound(&self, key: &TypeKey, what: &str) -> MessageError {
        let fetching = self
            .fetching
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(key);
        if fetching {
            MessageError::unavailable(format!(
                "the plugin of entity type {key} is still being fetched by this node; retry \
                 shortly ({what})"
            ))
        } else {
            MessageError::new(
                ErrorKind::EntityTypeNotRegistered,
                format!(
                    "entity type {} is not deployed in tenant {}",
                    key.entity_type, key.tenant
                ),
            )
        }
    }

    /// How many types wait for their plugin ([`TypeTable::unbind_fetching`]).
    pub fn fetching(&self) -> usize {
        self.fetching
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }

    fn fetching_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashSet<TypeKey>> {
        self.fetching
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
