//! In-memory remember stores for tests and development: [`MemoryStore`] keeps the ids in a
//! map, and [`FaultyStore`] wraps any store and fails every operation after a given number, to
//! exercise the failure policies.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::RememberOp;
use crate::backend::{CommitFuture, RememberStore};
use crate::error::{CommitError, StoreError};
use tessera_contract::{ShardId, TypeKey};

type ShardIds = BTreeMap<(TypeKey, ShardId), BTreeSet<String>>;

/// Remembered ids in process memory. Clones share the same map.
///
/// ```
/// use tessera_state::{RememberStore, remember::memory::MemoryStore};
/// use tessera_contract::TypeKey;
/// assert!(MemoryStore::default().list_shards(&TypeKey::new("t", "e")).unwrap().is_empty());
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    ids: Arc<Mutex<ShardIds>>,
}

impl MemoryStore {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, ShardIds>, StoreError> {
        self.ids
            .lock()
            .map_err(|_| StoreError::Io("memory store poisoned by a panicking writer".into()))
    }
}

impl MemoryStore {
    fn apply_now(&self, batch: &[RememberOp]) -> Result<(), StoreError> {
        let mut ids = self.lock()?;
        for op in batch {
            let id = op.id();
            let key = (id.type_key.clone(), id.shard);
            match op {
                RememberOp::Started(_) => {
                    ids.entry(key).or_default().insert(id.id.clone());
                }
                RememberOp::Forgotten(_) => {
                    if let Some(set) = ids.get_mut(&key) {
                        set.remove(&id.id);
                        if set.is_empty() {
                            ids.remove(&key);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl RememberStore for MemoryStore {
    fn apply(&self, batch: Vec<RememberOp>) -> CommitFuture {
        let outcome = self.apply_now(&batch).map_err(CommitError::from);
        Box::pin(async move { outcome })
    }

    fn list_shards(&self, type_key: &TypeKey) -> Result<Vec<ShardId>, StoreError> {
        let ids = self.lock()?;
        Ok(ids
            .keys()
            .filter(|(key, _)| key == type_key)
            .map(|(_, shard)| *shard)
            .collect())
    }

    fn list_ids(&self, type_key: &TypeKey, shard: ShardId) -> Result<Vec<String>, StoreError> {
        let ids = self.lock()?;
        Ok(ids
            .get(&(type_key.clone(), shard))
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default())
    }
}

/// Wraps a store and fails every operation once `healthy_operations` have succeeded.
///
/// ```
/// use tessera_state::RememberStore;
/// use tessera_state::remember::memory::{FaultyStore, MemoryStore};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store = FaultyStore::new(MemoryStore::default(), 1);
/// assert!(store.apply(vec![]).await.is_ok());
/// assert!(store.apply(vec![]).await.is_err());
/// # });
/// ```
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: S,
    healthy_operations: u64,
    operations: AtomicU64,
}

impl<S: RememberStore> FaultyStore<S> {
    /// Fails from operation `healthy_operations + 1` on.
    pub fn new(inner: S, healthy_operations: u64) -> Self {
        FaultyStore {
            inner,
            healthy_operations,
            operations: AtomicU64::new(0),
        }
    }

    fn check(&self) -> Result<(), StoreError> {
        let count = self.operations.fetch_add(1, Ordering::SeqCst) + 1;
        if count > self.healthy_operations {
            return Err(StoreError::Io(format!(
                "injected fault on operation {count} (healthy for {})",
                self.healthy_operations
            )));
        }
        Ok(())
    }
}

impl<S: RememberStore> RememberStore for FaultyStore<S> {
    fn apply(&self, batch: Vec<RememberOp>) -> CommitFuture {
        match self.check() {
            Ok(()) => self.inner.apply(batch),
            Err(error) => Box::pin(async move { Err(CommitError::from(error)) }),
        }
    }

    fn list_shards(&self, type_key: &TypeKey) -> Result<Vec<ShardId>, StoreError> {
        self.check()?;
        self.inner.list_shards(type_key)
    }

    fn list_ids(&self, type_key: &TypeKey, shard: ShardId) -> Result<Vec<String>, StoreError> {
        self.check()?;
        self.inner.list_ids(type_key, shard)
    }
}
