//! A node's entity state once the partition plane serves: each entity read and committed where
//! it lives — through its partition's group ([`PartitionState`]) when its shard belongs to a
//! partition, in the node's local store otherwise. The caller names the partition of an entity
//! (the state layer does not know the shard function) and tells which partitions this node
//! holds a replica of as their groups start and stop. An entity of a partition this node holds
//! no replica of is refused, never read from or written to the local store: its state is in
//! the partition, and a local copy would split it.
//!
//! The node-wide scans (outbox senders, due reminders) merge the local store's and every
//! replica's, in the order each store keeps; the entity layer then skips the entities it does
//! not serve, as it does for its local rows.

use super::served::PartitionState;
use crate::backend::{CommitFuture, EntityMeta, EntityState};
use crate::error::{CommitError, StoreError};
use crate::messaging::{DueReminder, OutboxEntry, Receipt, Reminder, Sequences};
use crate::tables::StateStore;
use crate::write_set::WriteSet;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use tessera_contract::EntityAddress;

/// Which partition an entity lives in; `None`: in the node's local store.
pub type PartitionOf = Arc<dyn Fn(&EntityAddress) -> Option<u32> + Send + Sync>;

/// Where an entity's state is on this node.
enum Route<'a> {
    Local(&'a dyn EntityState),
    Partition(Arc<PartitionState>),
    /// Its partition has no replica here.
    Missing(u32),
}

/// The node's entity state across its local store and the partitions it holds replicas of.
///
/// ```
/// use std::sync::Arc;
/// use tessera_contract::EntityAddress;
/// use tessera_state::partition::RoutedState;
/// use tessera_state::{EntityState, GroupCommitConfig, LocalState, StateStore};
///
/// let dir = tempfile::tempdir().unwrap();
/// let store = StateStore::open(&dir.path().join("tessera.redb")).unwrap();
/// let local = Arc::new(LocalState::new(store, GroupCommitConfig::default()));
/// // Counters live in partition 0; everything else locally.
/// let routed = RoutedState::new(
///     local,
///     Arc::new(|entity: &EntityAddress| (entity.entity_type == "counter").then_some(0)),
/// );
/// let echo = EntityAddress::new("t", "echo", "e1");
/// assert_eq!(routed.get(&echo, "k").unwrap(), None);
/// // No replica of partition 0 here: refused, not read from the local store.
/// assert!(routed.get(&EntityAddress::new("t", "counter", "c1"), "value").is_err());
/// ```
pub struct RoutedState {
    local: Arc<dyn EntityState>,
    partition_of: PartitionOf,
    replicas: RwLock<BTreeMap<u32, Arc<PartitionState>>>,
}

impl RoutedState {
    /// Routes over `local`, with `partition_of` naming each entity's partition.
    pub fn new(local: Arc<dyn EntityState>, partition_of: PartitionOf) -> Self {
        RoutedState {
            local,
            partition_of,
            replicas: RwLock::default(),
        }
    }

    /// This node holds a replica of `partition` now, served through `state`.
    pub fn hold(&self, partition: u32, state: Arc<PartitionState>) {
        self.write().insert(partition, state);
    }

    /// This node no longer holds a replica of `partition`.
    pub fn release(&self, partition: u32) {
        self.write().remove(&partition);
    }

    /// The partitions this node holds replicas of.
    pub fn held(&self) -> Vec<u32> {
        self.read().keys().copied().collect()
    }

    /// This node's replica of `partition` as the entity layer uses it, if it holds one.
    pub fn state_of(&self, partition: u32) -> Option<Arc<PartitionState>> {
        self.read().get(&partition).cloned()
    }

    /// The tables of this node's replica of `partition`, if it holds one.
    pub fn store_of(&self, partition: u32) -> Option<StateStore> {
        self.read()
            .get(&partition)
            .map(|state| state.store().clone())
    }

    /// The tables of every replica this node holds (for reads that span entities).
    pub fn held_stores(&self) -> Vec<StateStore> {
        self.read()
            .values()
            .map(|state| state.store().clone())
            .collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<u32, Arc<PartitionState>>> {
        // A poisoned lock only means a panic elsewhere held it: the map itself is whole.
        self.replicas
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<u32, Arc<PartitionState>>> {
        self.replicas
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn route(&self, entity: &EntityAddress) -> Route<'_> {
        match (self.partition_of)(entity) {
            None => Route::Local(self.local.as_ref()),
            Some(partition) => match self.read().get(&partition) {
                Some(state) => Route::Partition(state.clone()),
                None => Route::Missing(partition),
            },
        }
    }

    /// Where `entity` lives: `None` in the local store, else its partition and this node's
    /// replica of it (`None`: no replica here).
    pub(super) fn replica_for(
        &self,
        entity: &EntityAddress,
    ) -> Option<(u32, Option<Arc<PartitionState>>)> {
        let partition = (self.partition_of)(entity)?;
        Some((partition, self.read().get(&partition).cloned()))
    }

    /// Every store to scan: the local one, then each replica's.
    fn stores(&self) -> Vec<Arc<dyn EntityState>> {
        let mut stores: Vec<Arc<dyn EntityState>> = vec![self.local.clone()];
        for state in self.read().values() {
            stores.push(state.clone());
        }
        stores
    }
}

pub(super) fn missing(partition: u32) -> String {
    format!("partition {partition} has no replica on this node")
}

/// Runs `read` where `entity` lives.
fn read_at<T>(
    routed: &RoutedState,
    entity: &EntityAddress,
    read: impl FnOnce(&dyn EntityState) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    match routed.route(entity) {
        Route::Local(local) => read(local),
        Route::Partition(state) => read(state.as_ref()),
        Route::Missing(partition) => Err(StoreError::Unavailable(missing(partition))),
    }
}

/// Runs `commit` where `entity` lives.
fn commit_at(
    routed: &RoutedState,
    entity: &EntityAddress,
    commit: impl FnOnce(&dyn EntityState) -> CommitFuture,
) -> CommitFuture {
    match routed.route(entity) {
        Route::Local(local) => commit(local),
        Route::Partition(state) => commit(state.as_ref()),
        Route::Missing(partition) => {
            let error = CommitError::Unavailable(missing(partition));
            Box::pin(std::future::ready(Err(error)))
        }
    }
}

impl EntityState for RoutedState {
    fn get(&self, entity: &EntityAddress, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        read_at(self, entity, |state| state.get(entity, key))
    }

    fn meta(&self, entity: &EntityAddress) -> Result<EntityMeta, StoreError> {
        read_at(self, entity, |state| state.meta(entity))
    }

    fn entries(
        &self,
        entity: &EntityAddress,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        read_at(self, entity, |state| state.entries(entity, limit))
    }

    fn commit(&self, writes: WriteSet) -> CommitFuture {
        let entity = writes.entity().clone();
        commit_at(self, &entity, move |state| state.commit(writes))
    }

    fn orders_reads(&self, entity: &EntityAddress) -> bool {
        !matches!(self.route(entity), Route::Local(_))
    }

    fn barrier(&self, entity: &EntityAddress, read: u64) -> CommitFuture {
        commit_at(self, entity, |state| state.barrier(entity, read))
    }

    fn sequences(&self, entity: &EntityAddress) -> Result<Sequences, StoreError> {
        read_at(self, entity, |state| state.sequences(entity))
    }

    fn is_duplicate(
        &self,
        receiver: &EntityAddress,
        receipt: &Receipt,
    ) -> Result<bool, StoreError> {
        read_at(self, receiver, |state| {
            state.is_duplicate(receiver, receipt)
        })
    }

    fn outbox(&self, sender: &EntityAddress, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        read_at(self, sender, |state| state.outbox(sender, limit))
    }

    fn outbox_senders(
        &self,
        after: Option<&EntityAddress>,
        limit: usize,
    ) -> Result<Vec<EntityAddress>, StoreError> {
        let mut senders = Vec::new();
        for store in self.stores() {
            senders.extend(store.outbox_senders(after, limit)?);
        }
        senders.sort();
        senders.dedup();
        senders.truncate(limit);
        Ok(senders)
    }

    fn due_reminders(
        &self,
        until_ms: u64,
        after: Option<&DueReminder>,
        limit: usize,
    ) -> Result<Vec<DueReminder>, StoreError> {
        let mut due = Vec::new();
        for store in self.stores() {
            due.extend(store.due_reminders(until_ms, after, limit)?);
        }
        due.sort_by(|left, right| {
            (left.due_ms, &left.entity, left.timer).cmp(&(right.due_ms, &right.entity, right.timer))
        });
        due.truncate(limit);
        Ok(due)
    }

    fn next_due(&self) -> Result<Option<u64>, StoreError> {
        let mut next: Option<u64> = None;
        for store in self.stores() {
            if let Some(due) = store.next_due()? {
                next = Some(next.map_or(due, |held| held.min(due)));
            }
        }
        Ok(next)
    }

    fn pending_messages(&self) -> Result<(u64, u64), StoreError> {
        let (mut outbox, mut reminders) = (0, 0);
        for store in self.stores() {
            let (entries, held) = store.pending_messages()?;
            outbox += entries;
            reminders += held;
        }
        Ok((outbox, reminders))
    }

    fn reminder(&self, entity: &EntityAddress, timer: u64) -> Result<Option<Reminder>, StoreError> {
        read_at(self, entity, |state| state.reminder(entity, timer))
    }
}
