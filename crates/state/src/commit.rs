//! The one writer: a thread that folds the write sets of many messages, and the remembered-id
//! batches of the write-behind queue, into one durable redb transaction, then releases each
//! waiter. Never one fsync per message.

use super::error::CommitError;
use super::remember::RememberOp;
use super::shard_transfer::{self, ShardPart, ShardScope};
use super::tables::{StateStore, apply_remember_ops, apply_write_sets};
use super::write_set::WriteSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Tuning of the [`GroupCommitter`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroupCommitConfig {
    /// Items waiting for the writer; a full queue makes committers wait (backpressure).
    pub queue_capacity: usize,
    /// The most items (write sets or remembered-id batches) folded into one transaction.
    pub batch_write_sets_max: usize,
    /// The most payload bytes folded into one transaction.
    pub batch_bytes_max: usize,
    /// How long the writer lingers for more items when a batch is not full. Zero batches only
    /// what queued while the previous transaction was syncing.
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
    /// Remembered-id operations committed in them.
    pub remember_ops: AtomicU64,
    /// Transactions that failed.
    pub failures: AtomicU64,
    /// Shard parts installed and shards discarded (moves between nodes).
    pub shard_transfers: AtomicU64,
}

/// What one waiter hands the writer.
pub(crate) enum Work {
    Writes(WriteSet),
    Remember(Vec<RememberOp>),
    /// A part of a shard's state arriving from its previous owner.
    InstallShard(ShardScope, u64, Box<ShardPart>),
    /// A shard this node handed off: its rows go.
    DiscardShard(ShardScope),
    /// A shard this node starts serving at a generation: rows of an older lineage go.
    BeginLineage(ShardScope, u64),
}

impl Work {
    fn bytes(&self) -> usize {
        match self {
            Work::Writes(writes) => writes.commit_bytes(),
            Work::Remember(ops) => ops.iter().map(|op| op.id().id.len() + 16).sum(),
            Work::InstallShard(_, _, part) => part.bytes(),
            Work::DiscardShard(_) | Work::BeginLineage(..) => 0,
        }
    }
}

struct Pending {
    work: Work,
    done: oneshot::Sender<Result<(), CommitError>>,
}

/// The writer thread and the queue into it. Dropping it commits what is queued, then joins the
/// thread, so the database is released when the drop returns.
///
/// ```
/// use tessera_contract::EntityAddress;
/// use tessera_state::{GroupCommitConfig, GroupCommitter, StateStore, WriteSet};
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
    queue: mpsc::Sender<Pending>,
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

    /// Commits `writes`; resolves once they are durable.
    pub async fn commit(&self, writes: WriteSet) -> Result<(), CommitError> {
        submit(self.queue.clone(), Work::Writes(writes)).await
    }

    /// A future that commits `work` through this writer, detached from `self`.
    pub(crate) fn submit(
        &self,
        work: Work,
    ) -> impl std::future::Future<Output = Result<(), CommitError>> + Send + 'static {
        submit(self.queue.clone(), work)
    }
}

async fn submit(queue: mpsc::Sender<Pending>, work: Work) -> Result<(), CommitError> {
    let (done, outcome) = oneshot::channel();
    queue
        .send(Pending { work, done })
        .await
        .map_err(|_| CommitError::Closed)?;
    outcome.await.map_err(|_| CommitError::Closed)?
}

impl Drop for GroupCommitter {
    fn drop(&mut self) {
        let (closed, _) = mpsc::channel(1);
        drop(std::mem::replace(&mut self.queue, closed));
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn run_writer(
    store: StateStore,
    config: GroupCommitConfig,
    mut receiver: mpsc::Receiver<Pending>,
    stats: Arc<GroupCommitStats>,
) {
    let batch_wait = Duration::from_micros(config.batch_wait_us);
    while let Some(first) = receiver.blocking_recv() {
        let mut bytes = first.work.bytes();
        let mut batch = vec![first];
        fill_batch(&mut receiver, &mut batch, &mut bytes, &config);
        if !batch_wait.is_zero() && batch.len() < config.batch_write_sets_max {
            std::thread::sleep(batch_wait);
            fill_batch(&mut receiver, &mut batch, &mut bytes, &config);
        }
        let outcome = commit_batch(&store, &batch);
        match &outcome {
            Ok(()) => count(&stats, &batch),
            Err(error) => {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(%error, items = batch.len(), "group commit failed");
            }
        }
        for pending in batch {
            let _ = pending.done.send(outcome.clone());
        }
    }
}

fn count(stats: &GroupCommitStats, batch: &[Pending]) {
    stats.transactions.fetch_add(1, Ordering::Relaxed);
    for pending in batch {
        match &pending.work {
            Work::Writes(_) => stats.write_sets.fetch_add(1, Ordering::Relaxed),
            Work::Remember(ops) => stats
                .remember_ops
                .fetch_add(ops.len() as u64, Ordering::Relaxed),
            Work::InstallShard(..) | Work::DiscardShard(_) | Work::BeginLineage(..) => {
                stats.shard_transfers.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

fn fill_batch(
    receiver: &mut mpsc::Receiver<Pending>,
    batch: &mut Vec<Pending>,
    bytes: &mut usize,
    config: &GroupCommitConfig,
) {
    while batch.len() < config.batch_write_sets_max && *bytes < config.batch_bytes_max {
        match receiver.try_recv() {
            Ok(pending) => {
                *bytes += pending.work.bytes();
                batch.push(pending);
            }
            Err(_) => break,
        }
    }
}

fn commit_batch(store: &StateStore, batch: &[Pending]) -> Result<(), CommitError> {
    let transaction = store
        .database()
        .begin_write()
        .map_err(|e| CommitError::Storage(e.to_string()))?;
    let write_sets = batch.iter().filter_map(|pending| match &pending.work {
        Work::Writes(writes) => Some(writes),
        _ => None,
    });
    apply_write_sets(&transaction, write_sets, super::messaging::now_ms())?;
    let remember_ops = batch.iter().flat_map(|pending| match &pending.work {
        Work::Remember(ops) => ops.as_slice(),
        _ => &[],
    });
    apply_remember_ops(&transaction, remember_ops)?;
    // Last, so that a shard's rows are exactly the transferred ones after this transaction.
    for pending in batch {
        apply_shard_work(&transaction, &pending.work)?;
    }
    transaction
        .commit()
        .map_err(|e| CommitError::Storage(e.to_string()))
}

/// Applies a shard transfer step, if `work` is one.
pub(crate) fn apply_shard_work(
    transaction: &redb::WriteTransaction,
    work: &Work,
) -> Result<(), CommitError> {
    match work {
        Work::InstallShard(scope, generation, part) => {
            shard_transfer::install(transaction, scope, *generation, part)?
        }
        Work::DiscardShard(scope) => shard_transfer::discard(transaction, scope)?,
        Work::BeginLineage(scope, generation) => {
            shard_transfer::begin_lineage(transaction, scope, *generation)?
        }
        Work::Writes(_) | Work::Remember(_) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_contract::EntityAddress;

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
}
