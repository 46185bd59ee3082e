//! The state backend of a single node: one redb database, read directly, written only by the
//! [`GroupCommitter`]'s thread. It implements both seams of the layer, [`EntityState`] and
//! [`RememberStore`], so entity writes and remembered ids share one writer and one fsync.

use super::backend::{
    CommitFuture, EntityMeta, EntityState, RememberStore, ShardParts, ShardStates,
};
use super::commit::{GroupCommitConfig, GroupCommitStats, GroupCommitter, Work};
use super::error::{CommitError, StoreError};
use super::messaging::{DueReminder, OutboxEntry, Receipt, Reminder, Sequences};
use super::remember::RememberOp;
use super::shard_transfer::{ShardExport, ShardPart, ShardScope};
use super::tables::StateStore;
use super::write_set::WriteSet;
use redb::ReadableDatabase;
use std::sync::Arc;
use tessera_contract::{EntityAddress, ShardId, TypeKey};

/// How a [`LocalState`] makes writes durable.
enum Writer {
    /// Many messages per transaction (the default).
    Group(GroupCommitter),
    /// One transaction per message on the blocking pool: the baseline group commit is judged
    /// against.
    PerMessage,
}

/// Entity state and remembered ids over one redb database.
///
/// ```
/// use tessera_contract::EntityAddress;
/// use tessera_state::{EntityState, GroupCommitConfig, LocalState, StateStore, WriteSet};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let dir = tempfile::tempdir().unwrap();
/// let store = StateStore::open(&dir.path().join("tessera.redb")).unwrap();
/// let state = LocalState::new(store, GroupCommitConfig::default());
/// let entity = EntityAddress::new("t", "counter", "c1");
/// let mut writes = WriteSet::new(entity.clone());
/// writes.put("value", vec![1]);
/// state.commit(writes).await.unwrap();
/// assert_eq!(state.get(&entity, "value").unwrap(), Some(vec![1]));
/// # });
/// ```
pub struct LocalState {
    store: StateStore,
    writer: Writer,
}

impl LocalState {
    /// A group-committing backend over `store`.
    pub fn new(store: StateStore, config: GroupCommitConfig) -> Self {
        let committer = GroupCommitter::start(store.clone(), config);
        LocalState {
            store,
            writer: Writer::Group(committer),
        }
    }

    /// A backend that commits each message in its own durable transaction (benchmark
    /// baseline; never what a node runs).
    pub fn unbatched(store: StateStore) -> Self {
        LocalState {
            store,
            writer: Writer::PerMessage,
        }
    }

    /// The tables and reads under this backend.
    pub fn store(&self) -> &StateStore {
        &self.store
    }

    /// The group committer's counters (`None` for an unbatched backend).
    pub fn commit_stats(&self) -> Option<&Arc<GroupCommitStats>> {
        match &self.writer {
            Writer::Group(committer) => Some(committer.stats()),
            Writer::PerMessage => None,
        }
    }

    fn write(&self, work: Work) -> CommitFuture {
        match &self.writer {
            Writer::Group(committer) => Box::pin(committer.submit(work)),
            Writer::PerMessage => {
                let store = self.store.clone();
                Box::pin(async move {
                    tokio::task::spawn_blocking(move || commit_alone(&store, &work))
                        .await
                        .map_err(|_| CommitError::Closed)?
                })
            }
        }
    }
}

fn commit_alone(store: &StateStore, work: &Work) -> Result<(), CommitError> {
    match work {
        Work::Writes(writes) => store.commit_one(writes).map_err(CommitError::from),
        other => {
            let transaction = store
                .database()
                .begin_write()
                .map_err(|e| CommitError::Storage(e.to_string()))?;
            if let Work::Remember(ops) = other {
                super::tables::apply_remember_ops(&transaction, ops.iter())?;
            }
            super::commit::apply_shard_work(&transaction, other)?;
            transaction
                .commit()
                .map_err(|e| CommitError::Storage(e.to_string()))
        }
    }
}

impl EntityState for LocalState {
    fn get(&self, entity: &EntityAddress, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.store.get(entity, key)
    }

    fn meta(&self, entity: &EntityAddress) -> Result<EntityMeta, StoreError> {
        self.store.meta(entity)
    }

    fn entries(
        &self,
        entity: &EntityAddress,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.store.entries(entity, limit)
    }

    fn commit(&self, writes: WriteSet) -> CommitFuture {
        self.write(Work::Writes(writes))
    }

    fn sequences(&self, entity: &EntityAddress) -> Result<Sequences, StoreError> {
        self.store.sequences(entity)
    }

    fn is_duplicate(
        &self,
        receiver: &EntityAddress,
        receipt: &Receipt,
    ) -> Result<bool, StoreError> {
        self.store.is_duplicate(receiver, receipt)
    }

    fn outbox(&self, sender: &EntityAddress, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        self.store.outbox(sender, limit)
    }

    fn outbox_senders(
        &self,
        after: Option<&EntityAddress>,
        limit: usize,
    ) -> Result<Vec<EntityAddress>, StoreError> {
        self.store.outbox_senders(after, limit)
    }

    fn due_reminders(
        &self,
        until_ms: u64,
        after: Option<&DueReminder>,
        limit: usize,
    ) -> Result<Vec<DueReminder>, StoreError> {
        self.store.due_reminders(until_ms, after, limit)
    }

    fn next_due(&self) -> Result<Option<u64>, StoreError> {
        self.store.next_due()
    }

    fn pending_messages(&self) -> Result<(u64, u64), StoreError> {
        self.store.pending_messages()
    }

    fn reminder(&self, entity: &EntityAddress, timer: u64) -> Result<Option<Reminder>, StoreError> {
        self.store.reminder(entity, timer)
    }
}

impl LocalState {
    /// The shard's state as parts cut on demand from a snapshot taken now
    /// ([`ShardStates::export`]).
    pub fn export_snapshot(&self, scope: &ShardScope) -> Result<ShardExport, StoreError> {
        export_shard(&self.store, scope)
    }
}

/// `scope`'s shard in `store` (a node's own tables, or a partition replica's) as parts cut on
/// demand from a snapshot taken now.
///
/// ```
/// use std::sync::Arc;
/// use tessera_contract::TypeKey;
/// use tessera_state::{ShardScope, StateStore, export_shard};
/// let dir = tempfile::tempdir().unwrap();
/// let store = StateStore::open(&dir.path().join("s.redb")).unwrap();
/// let scope = ShardScope {
///     type_key: TypeKey::new("acme", "counter"),
///     shard: 0,
///     contains: Arc::new(|_: &str| true),
/// };
/// let parts: Vec<_> = export_shard(&store, &scope).unwrap().collect();
/// assert_eq!(parts.len(), 1, "an empty shard is one last, empty part");
/// ```
pub fn export_shard(store: &StateStore, scope: &ShardScope) -> Result<ShardExport, StoreError> {
    let transaction = store.database().begin_read().map_err(StoreError::io)?;
    Ok(ShardExport::new(transaction, scope.clone()))
}

impl ShardStates for LocalState {
    fn export(&self, scope: &ShardScope) -> Result<ShardParts, StoreError> {
        Ok(Box::new(self.export_snapshot(scope)?))
    }

    fn install(&self, scope: ShardScope, generation: u64, part: ShardPart) -> CommitFuture {
        if let Err(error) = part.check(&scope) {
            return Box::pin(async move { Err(CommitError::from(error)) });
        }
        self.write(Work::InstallShard(scope, generation, Box::new(part)))
    }

    fn discard(&self, scope: ShardScope) -> CommitFuture {
        self.write(Work::DiscardShard(scope))
    }

    fn begin_lineage(&self, scope: ShardScope, generation: u64) -> CommitFuture {
        self.write(Work::BeginLineage(scope, generation))
    }
}

impl RememberStore for LocalState {
    fn apply(&self, batch: Vec<RememberOp>) -> CommitFuture {
        self.write(Work::Remember(batch))
    }

    fn list_shards(&self, type_key: &TypeKey) -> Result<Vec<ShardId>, StoreError> {
        self.store.remembered_shards(type_key)
    }

    fn list_ids(&self, type_key: &TypeKey, shard: ShardId) -> Result<Vec<String>, StoreError> {
        self.store.remembered_ids(type_key, shard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remember::RememberedId;

    #[tokio::test]
    async fn entity_writes_and_remembered_ids_share_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(&dir.path().join("db.redb")).unwrap();
        let state = LocalState::new(store, GroupCommitConfig::default());
        let entity = EntityAddress::new("t", "c", "e");
        let mut writes = WriteSet::new(entity.clone());
        writes.put("k", vec![1]);
        let id = RememberedId::new(&entity, 4);
        let (committed, remembered) = tokio::join!(
            state.commit(writes),
            state.apply(vec![RememberOp::Started(id)])
        );
        committed.unwrap();
        remembered.unwrap();
        assert_eq!(state.list_ids(&entity.type_key(), 4).unwrap(), vec!["e"]);
        let stats = state.commit_stats().unwrap();
        use std::sync::atomic::Ordering;
        assert_eq!(stats.write_sets.load(Ordering::Relaxed), 1);
        assert_eq!(stats.remember_ops.load(Ordering::Relaxed), 1);
    }
}
