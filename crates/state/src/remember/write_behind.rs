//! The write-behind queue between the message path and the remember store. Records are queued
//! without waiting (a bounded channel); one task drains them, batching many into one
//! [`RememberStore::apply`] (a group commit). Failures follow the [`FailurePolicy`]: always an
//! event on the feed, and under fail-closed the shard is marked failed so its messages fail
//! fast. A flush marker rides the same queue, so `flush` waits for everything queued before it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::{FailurePolicy, RememberConfig, RememberEvent, RememberOp, RememberOperation};
use crate::backend::RememberStore;
use crate::error::StoreError;
use tessera_contract::{ShardKey, TypeKey};

/// Records per store transaction. Bounds the time one commit holds the writer and the memory
/// a batch takes; a longer queue is committed in several transactions.
pub const WRITE_BATCH_RECORDS_MAX: usize = 16_384;

/// The ids of one shard as the store has them once everything queued before is committed.
pub type Listing = oneshot::Receiver<Result<Vec<String>, StoreError>>;

enum QueueItem {
    Op(RememberOp),
    Flush(oneshot::Sender<Result<(), StoreError>>),
    List(ShardKey, oneshot::Sender<Result<Vec<String>, StoreError>>),
}

/// Shards failed by a store error under fail-closed, with the reason.
type FailedShards = Arc<Mutex<HashMap<ShardKey, String>>>;

/// Policy, event feed, failed shards and store: what both the queue side and the writer task
/// need to report a failure.
struct Reporter {
    policy: FailurePolicy,
    events: broadcast::Sender<RememberEvent>,
    failed: FailedShards,
    store: Arc<dyn RememberStore>,
    stats: RememberStats,
    /// Set once a shard is failed; shards stay failed until the region restarts.
    any_failed: std::sync::atomic::AtomicBool,
}

/// Counters of the write-behind queue.
#[derive(Debug, Default)]
pub struct RememberStats {
    /// Records committed to the store.
    pub committed: AtomicU64,
    /// Records in batches the store failed.
    pub failed: AtomicU64,
    /// Records refused because the queue was full or the writer had stopped.
    pub dropped: AtomicU64,
}

impl Reporter {
    fn report(
        &self,
        operation: RememberOperation,
        op: Option<&RememberOp>,
        key: Option<&ShardKey>,
        message: String,
    ) {
        let id = op.map(RememberOp::id);
        let shard_key = key
            .cloned()
            .or_else(|| id.map(|id| ShardKey::new(id.type_key.clone(), id.shard)));
        tracing::warn!(?operation, shard = ?shard_key, %message, "remember-entities failure");
        if self.policy == FailurePolicy::FailClosed
            && let Some(shard_key) = &shard_key
        {
            let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            failed
                .entry(shard_key.clone())
                .or_insert_with(|| message.clone());
            self.any_failed.store(true, Ordering::Relaxed);
        }
        let _ = self.events.send(RememberEvent::StoreFailed {
            type_key: shard_key.as_ref().map(|key| key.type_key.clone()),
            shard: shard_key.as_ref().map(|key| key.shard),
            id: id.map(|id| id.id.clone()),
            operation,
            policy: self.policy,
            message,
        });
    }
}

/// The remember side of a region: the queue into the writer task, plus policy, event feed and
/// failed shards. Clones share; the writer task stops once every clone is dropped, after
/// committing what is queued.
#[derive(Clone)]
pub struct RememberWriter {
    queue: mpsc::Sender<QueueItem>,
    queue_capacity: usize,
    reporter: Arc<Reporter>,
}

impl std::fmt::Debug for RememberWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RememberWriter")
            .field("queue_capacity", &self.queue_capacity)
            .field("policy", &self.reporter.policy)
            .finish_non_exhaustive()
    }
}

impl RememberWriter {
    /// Starts the writer task over `store`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::Arc;
    /// use tessera_contract::TypeKey;
    /// use tessera_state::RememberStore;
    /// use tessera_state::remember::{
    ///     RememberConfig, RememberOp, RememberWriter, RememberedId, memory::MemoryStore,
    /// };
    /// let store = MemoryStore::default();
    /// let writer = RememberWriter::start(Arc::new(store.clone()), &RememberConfig::default());
    /// let id = RememberedId { type_key: TypeKey::new("t", "e"), shard: 1, id: "x".into() };
    /// writer.record(RememberOp::Started(id.clone()));
    /// writer.flush().await.unwrap();
    /// assert_eq!(store.list_ids(&id.type_key, 1).unwrap(), vec!["x".to_string()]);
    /// # }
    /// ```
    pub fn start(store: Arc<dyn RememberStore>, config: &RememberConfig) -> Self {
        let (queue, receiver) = mpsc::channel(config.queue_capacity.max(1));
        let (events, _) = broadcast::channel(config.event_buffer.max(1));
        let reporter = Arc::new(Reporter {
            policy: config.failure_policy,
            events,
            failed: Arc::default(),
            store,
            stats: RememberStats::default(),
            any_failed: Default::default(),
        });
        let task = WriterTask {
            reporter: Arc::clone(&reporter),
            first_error: None,
        };
        tokio::spawn(task.run(receiver));
        RememberWriter {
            queue,
            queue_capacity: config.queue_capacity,
            reporter,
        }
    }

    /// The store behind the queue (for recovery reads).
    pub fn store(&self) -> Arc<dyn RememberStore> {
        Arc::clone(&self.reporter.store)
    }

    /// The failure policy in force.
    pub fn policy(&self) -> FailurePolicy {
        self.reporter.policy
    }

    /// Subscribes to the event feed.
    pub fn subscribe(&self) -> broadcast::Receiver<RememberEvent> {
        self.reporter.events.subscribe()
    }

    /// Queues `op` without waiting. A full queue is a failure handled by the policy.
    pub fn record(&self, op: RememberOp) {
        let (message, item) = match self.queue.try_send(QueueItem::Op(op)) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(item)) => (
                format!("write-behind queue full ({} records)", self.queue_capacity),
                item,
            ),
            Err(mpsc::error::TrySendError::Closed(item)) => {
                ("write-behind writer stopped".to_string(), item)
            }
        };
        self.reporter.stats.dropped.fetch_add(1, Ordering::Relaxed);
        if let QueueItem::Op(op) = item {
            self.reporter
                .report(RememberOperation::Enqueue, Some(&op), None, message);
        }
    }

    /// The queue's counters.
    pub fn stats(&self) -> &RememberStats {
        &self.reporter.stats
    }

    /// Waits until everything queued before this call is durable. Returns the first store
    /// error met since the previous flush, if any.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let (reply, receiver) = oneshot::channel();
        self.queue
            .send(QueueItem::Flush(reply))
            .await
            .map_err(|_| StoreError::Closed)?;
        receiver.await.map_err(|_| StoreError::Closed)?
    }

    /// The remembered ids of `key` as of now: the listing reflects every record queued before
    /// this call and none queued after, so a shard acquired now restarts only the entities
    /// remembered before it was acquired. Without waiting; `Err` when the queue is full.
    pub fn list_queued_before(&self, key: ShardKey) -> Result<Listing, StoreError> {
        let (reply, listing) = oneshot::channel();
        self.queue
            .try_send(QueueItem::List(key, reply))
            .map_err(|error| match error {
                mpsc::error::TrySendError::Full(_) => StoreError::Io(format!(
                    "write-behind queue full ({} records)",
                    self.queue_capacity
                )),
                mpsc::error::TrySendError::Closed(_) => StoreError::Closed,
            })?;
        Ok(listing)
    }

    /// Whether any shard is failed (fail-closed only): a cheap check before
    /// [`failure_of`](Self::failure_of) on the message path.
    pub fn has_failed_shards(&self) -> bool {
        self.reporter.any_failed.load(Ordering::Relaxed)
    }

    /// Why `key` is failed (fail-closed only), if it is.
    pub fn failure_of(&self, key: &ShardKey) -> Option<String> {
        let failed = self
            .reporter
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        failed.get(key).cloned()
    }

    /// Reports a shard-scoped failure met outside the queue (recovery reads): an event
    /// always, a failed shard under fail-closed.
    pub fn report(&self, operation: RememberOperation, key: &ShardKey, message: String) {
        self.reporter.report(operation, None, Some(key), message);
    }

    /// Reports a failure that concerns a whole type (listing its shards): an event only, since
    /// no shard can be blamed.
    pub fn report_type(&self, operation: RememberOperation, type_key: &TypeKey, message: String) {
        tracing::warn!(?operation, %type_key, %message, "remember-entities failure");
        let _ = self.reporter.events.send(RememberEvent::StoreFailed {
            type_key: Some(type_key.clone()),
            shard: None,
            id: None,
            operation,
            policy: self.reporter.policy,
            message,
        });
    }
}

struct WriterTask {
    reporter: Arc<Reporter>,
    first_error: Option<StoreError>,
}

impl WriterTask {
    async fn run(mut self, mut receiver: mpsc::Receiver<QueueItem>) {
        let mut batch = Vec::new();
        while let Some(first) = receiver.recv().await {
            let mut next = Some(first);
            // Gather whatever is already queued into one transaction (group commit).
            while let Some(item) = next.take() {
                match item {
                    QueueItem::Op(op) => batch.push(op),
                    QueueItem::Flush(reply) => {
                        self.commit(&mut batch).await;
                        let _ = reply.send(self.flush_result());
                    }
                    QueueItem::List(key, reply) => {
                        self.commit(&mut batch).await;
                        let store = Arc::clone(&self.reporter.store);
                        let listed = tokio::task::spawn_blocking(move || {
                            store.list_ids(&key.type_key, key.shard)
                        })
                        .await
                        .unwrap_or_else(|error| Err(StoreError::Io(error.to_string())));
                        let _ = reply.send(listed);
                    }
                }
                if batch.len() >= WRITE_BATCH_RECORDS_MAX {
                    self.commit(&mut batch).await;
                }
                next = receiver.try_recv().ok();
            }
            self.commit(&mut batch).await;
        }
    }

    async fn commit(&mut self, batch: &mut Vec<RememberOp>) {
        if batch.is_empty() {
            return;
        }
        let ops = std::mem::take(batch);
        // One event per shard of a failed batch, naming its first record: note them now, the
        // store takes the batch.
        let mut first_per_shard: BTreeMap<ShardKey, RememberOp> = BTreeMap::new();
        for op in &ops {
            let id = op.id();
            first_per_shard
                .entry(ShardKey::new(id.type_key.clone(), id.shard))
                .or_insert_with(|| op.clone());
        }
        let count = ops.len() as u64;
        match self.reporter.store.apply(ops).await {
            Ok(()) => {
                self.reporter
                    .stats
                    .committed
                    .fetch_add(count, Ordering::Relaxed);
            }
            Err(error) => {
                self.reporter
                    .stats
                    .failed
                    .fetch_add(count, Ordering::Relaxed);
                let error = StoreError::from(error);
                for op in first_per_shard.values() {
                    self.reporter
                        .report(operation_of(op), Some(op), None, error.to_string());
                }
                self.first_error.get_or_insert(error);
            }
        }
    }

    /// Everything queued before the flush marker is committed (each batch durably) by now:
    /// report the first failure since the previous flush.
    fn flush_result(&mut self) -> Result<(), StoreError> {
        match self.first_error.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

fn operation_of(op: &RememberOp) -> RememberOperation {
    match op {
        RememberOp::Started(_) => RememberOperation::RecordStarted,
        RememberOp::Forgotten(_) => RememberOperation::Forget,
    }
}
