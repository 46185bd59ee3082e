//! The commit path: the narrow [`StateCommit`] trait the entity layer writes through, the
//! [`GroupCommitter`] that batches many messages into one durable transaction, and the
//! [`DirectCommitter`] (one transaction per message) it is measured against.

use super::store::{StateStore, StoreError};
use super::write_set::WriteSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Why a write set was not made durable. The message that produced it fails; nothing of it is
/// visible.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommitError {
    /// The storage engine failed the transaction.
    #[error("commit failed: {0}")]
    Storage(String),
    /// The committer has shut down.
    #[error("the committer is shut down")]
    Closed,
}

impl From<StoreError> for CommitError {
    fn from(error: StoreError) -> Self {
        CommitError::Storage(error.to_string())
    }
}

/// A pending commit; resolves once the writes are durable (or failed).
pub type CommitFuture = Pin<Box<dyn Future<Output = Result<(), CommitError>> + Send>>;

/// Makes a message's write set durable. The entity layer sends a reply only after the future
/// resolves `Ok`. Today: a local group commit; later: a replicated partition commit.
pub trait StateCommit: Send + Sync + 'static {
    /// Commits `writes` atomically.
    fn commit(&self, writes: WriteSet) -> CommitFuture;
}

/// Tuning of the [`GroupCommitter`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroupCommitConfig {
    /// Write sets waiting for the writer; a full queue makes committers wait (backpressure).
    pub queue_capacity: usize,
    /// The most write sets folded into one transaction.
    pub batch_write_sets_max: usize,
    /// The most payload bytes folded into one transaction.
    pub batch_bytes_max: usize,
    /// How long the writer lingers for more write sets when a batch is not full. Zero batches
    /// only what queued while the previous transaction was syncing.
    pub batch_wait_us: u64,
}

impl Default for GroupCommitConfig {
    fn default() -> Self {
        GroupCommitConfig {
            queue_capacity: 16_384,
            batch_write_sets_max: 4_096,
            batch_bytes_max: 16 * 1024 * 1024,
            batch_wait_us: 0,
        }
    }
}

/// Counters of the group committer.
#[derive(Debug, Default)]
pub struct GroupCommitStats {
    /// Durable transactions committed.
    pub transactions: AtomicU64,
    /// Write sets committed in them.
    pub write_sets: AtomicU64,
    /// Transactions that failed.
    pub failures: AtomicU64,
}

struct PendingCommit {
    writes: WriteSet,
    done: oneshot::Sender<Result<(), CommitError>>,
}

/// Folds the write sets of many messages into one durable redb transaction, on a writer
/// thread of its own, and releases each message once its transaction is durable.
///
/// ```
/// use tessera_host::envelope::EntityAddress;
/// use tessera_host::state::{GroupCommitConfig, GroupCommitter, StateCommit, StateStore, WriteSet};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let dir = tempfile::tempdir().unwrap();
/// let store = StateStore::open(&dir.path().join("tessera.redb")).unwrap();
/// let committer = GroupCommitter::start(store.clone(), GroupCommitConfig::default());
/// let entity = EntityAddress::new("t", "counter", "c1");
/// let mut writes = WriteSet::new(entity.clone());
/// writes.put("value", vec![1]);
/// committer.commit(writes).await.unwrap();
/// assert_eq!(store.get(&entity, "value").unwrap(), Some(vec![1]));
/// # });
/// ```
pub struct GroupCommitter {
    queue: mpsc::Sender<PendingCommit>,
    stats: Arc<GroupCommitStats>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl GroupCommitter {
    /// Starts the writer thread over `store`.
    pub fn start(store: StateStore, config: GroupCommitConfig) -> Self {
        let (queue, receiver) = mpsc::channel(config.queue_capacity.max(1));
        let stats = Arc::new(GroupCommitStats::default());
        let writer_stats = stats.clone();
        let writer = std::thread::Builder::new()
            .name("tessera-group-commit".into())
            .spawn(move || run_writer(store, config, receiver, writer_stats))
            .expect("invariant: the OS can start the group-commit writer thread");
        GroupCommitter {
            queue,
            stats,
            writer: Some(writer),
        }
    }

    /// The committer's counters.
    pub fn stats(&self) -> &Arc<GroupCommitStats> {
        &self.stats
    }
}

impl Drop for GroupCommitter {
    /// Closes the queue and waits for the writer to commit what is queued and release the
    /// database, so a node can reopen it right after.
    fn drop(&mut self) {
        let (closed, _) = mpsc::channel(1);
        drop(std::mem::replace(&mut self.queue, closed));
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl StateCommit for GroupCommitter {
    fn commit(&self, writes: WriteSet) -> CommitFuture {
        let queue = self.queue.clone();
        Box::pin(async move {
            let (done, outcome) = oneshot::channel();
            queue
                .send(PendingCommit { writes, done })
                .await
                .map_err(|_| CommitError::Closed)?;
            outcome.await.map_err(|_| CommitError::Closed)?
        })
    }
}

fn run_writer(
    store: StateStore,
    config: GroupCommitConfig,
    mut receiver: mpsc::Receiver<PendingCommit>,
    stats: Arc<GroupCommitStats>,
) {
    let batch_wait = Duration::from_micros(config.batch_wait_us);
    while let Some(first) = receiver.blocking_recv() {
        let mut bytes = first.writes.payload_bytes();
        let mut batch = vec![first];
        fill_batch(&mut receiver, &mut batch, &mut bytes, &config);
        if !batch_wait.is_zero() && batch.len() < config.batch_write_sets_max {
            std::thread::sleep(batch_wait);
            fill_batch(&mut receiver, &mut batch, &mut bytes, &config);
        }
        let outcome = commit_batch(&store, &batch);
        match &outcome {
            Ok(()) => {
                stats.transactions.fetch_add(1, Ordering::Relaxed);
                stats
                    .write_sets
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            Err(error) => {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(%error, write_sets = batch.len(), "group commit failed");
            }
        }
        for pending in batch {
            let _ = pending.done.send(outcome.clone());
        }
    }
}

fn fill_batch(
    receiver: &mut mpsc::Receiver<PendingCommit>,
    batch: &mut Vec<PendingCommit>,
    bytes: &mut usize,
    config: &GroupCommitConfig,
) {
    while batch.len() < config.batch_write_sets_max && *bytes < config.batch_bytes_max {
        match receiver.try_recv() {
            Ok(pending) => {
                *bytes += pending.writes.payload_bytes();
                batch.push(pending);
            }
            Err(_) => break,
        }
    }
}

fn commit_batch(store: &StateStore, batch: &[PendingCommit]) -> Result<(), CommitError> {
    let transaction = store
        .database()
        .begin_write()
        .map_err(|e| CommitError::Storage(e.to_string()))?;
    StateStore::apply_all(&transaction, batch.iter().map(|pending| &pending.writes))?;
    transaction
        .commit()
        .map_err(|e| CommitError::Storage(e.to_string()))
}

/// One durable transaction per message, on the blocking pool: the baseline the group
/// committer is judged against, and a simple choice for tools.
#[derive(Clone)]
pub struct DirectCommitter {
    store: StateStore,
}

impl DirectCommitter {
    /// A committer over `store`.
    pub fn new(store: StateStore) -> Self {
        DirectCommitter { store }
    }
}

impl StateCommit for DirectCommitter {
    fn commit(&self, writes: WriteSet) -> CommitFuture {
        let store = self.store.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || store.commit_one(&writes))
                .await
                .map_err(|_| CommitError::Closed)?
                .map_err(CommitError::from)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::EntityAddress;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_commits_share_transactions_and_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(&dir.path().join("db.redb")).unwrap();
        let committer = Arc::new(GroupCommitter::start(
            store.clone(),
            GroupCommitConfig::default(),
        ));
        let mut tasks = Vec::new();
        for index in 0..500 {
            let committer = committer.clone();
            tasks.push(tokio::spawn(async move {
                let mut writes = WriteSet::new(EntityAddress::new("t", "c", format!("e{index}")));
                writes.put("value", vec![index as u8]);
                committer.commit(writes).await
            }));
        }
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        for index in 0..500 {
            let entity = EntityAddress::new("t", "c", format!("e{index}"));
            assert_eq!(
                store.get(&entity, "value").unwrap(),
                Some(vec![index as u8])
            );
        }
        let stats = committer.stats();
        assert_eq!(stats.write_sets.load(Ordering::Relaxed), 500);
        assert!(
            stats.transactions.load(Ordering::Relaxed) < 500,
            "500 concurrent commits must share transactions"
        );
    }

    #[test]
    fn deletes_and_versions_are_applied() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(&dir.path().join("db.redb")).unwrap();
        let entity = EntityAddress::new("t", "c", "e");
        let mut writes = WriteSet::new(entity.clone());
        writes.put("a", vec![1]);
        writes.put("b", vec![2]);
        writes.set_version(3);
        store.commit_one(&writes).unwrap();
        let mut writes = WriteSet::new(entity.clone());
        writes.delete("a");
        store.commit_one(&writes).unwrap();
        assert_eq!(
            store.entries(&entity).unwrap(),
            vec![("b".to_string(), vec![2])]
        );
        assert_eq!(store.version(&entity).unwrap(), Some(3));
        let other = EntityAddress::new("t", "c", "e2");
        assert_eq!(store.entries(&other).unwrap(), vec![]);
        assert_eq!(store.version(&other).unwrap(), None);
    }
}
