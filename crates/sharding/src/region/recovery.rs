//! Remember-entities recovery: when a remembered type is registered, the shards that hold
//! remembered ids are listed and resolved; when this region acquires such a shard, its
//! remembered entities are started again — paced by `recovery_rate_per_second` so recovery
//! never bursts ahead of live traffic, and only while the region still owns the shard.

use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::mpsc;

use super::{Internal, Shared};
use tessera_contract::{ShardKey, TypeKey};
use tessera_state::remember::{Listing, RememberOperation, RememberWriter};

/// How often recovery hands out its budget of starts. The per-second rate from config is
/// spread over these slices.
pub const RECOVERY_PACING_INTERVAL: Duration = Duration::from_millis(10);

/// The recovery side of a region: a paced task that restarts remembered entities.
pub(crate) struct Recovery {
    writer: RememberWriter,
    shards: mpsc::Sender<(ShardKey, Listing)>,
    internal: mpsc::Sender<Internal>,
    queue_capacity: usize,
}

impl Recovery {
    /// Starts the pacing task, if the region remembers entities at all.
    pub(crate) fn start(shared: &Arc<Shared>, internal: mpsc::Sender<Internal>) -> Option<Self> {
        let writer = shared.remember.clone()?;
        let queue_capacity = shared.config.command_buffer;
        let (shards, receiver) = mpsc::channel(queue_capacity);
        tokio::spawn(run(Arc::downgrade(shared), writer.clone(), receiver));
        Some(Recovery {
            writer,
            shards,
            internal,
            queue_capacity,
        })
    }

    /// Lists the shards of `type_key` that hold remembered ids (off the task); the region task
    /// gets them back as [`Internal::RememberedShards`].
    pub(crate) fn list_shards(&self, type_key: TypeKey) {
        let writer = self.writer.clone();
        let internal = self.internal.clone();
        tokio::spawn(async move {
            let store = writer.store();
            let listed_type = type_key.clone();
            let listed = tokio::task::spawn_blocking(move || store.list_shards(&listed_type)).await;
            match listed {
                Ok(Ok(shards)) => {
                    let _ = internal
                        .send(Internal::RememberedShards(type_key, shards))
                        .await;
                }
                Ok(Err(error)) => {
                    writer.report_type(RememberOperation::Recover, &type_key, error.to_string())
                }
                Err(join) => {
                    writer.report_type(RememberOperation::Recover, &type_key, join.to_string())
                }
            }
        });
    }

    /// Queues the entities of `key` remembered up to now for a paced restart. Call it before
    /// the shard delivers locally, so only entities remembered before it was acquired restart.
    pub(crate) fn recover_shard(&self, key: ShardKey) {
        let listing = match self.writer.list_queued_before(key.clone()) {
            Ok(listing) => listing,
            Err(error) => {
                let message = format!("cannot list remembered ids: {error}");
                self.writer
                    .report(RememberOperation::Recover, &key, message);
                return;
            }
        };
        if self.shards.try_send((key.clone(), listing)).is_err() {
            let message = format!("recovery queue full ({} shards)", self.queue_capacity);
            self.writer
                .report(RememberOperation::Recover, &key, message);
        }
    }
}

async fn run(
    shared: Weak<Shared>,
    writer: RememberWriter,
    mut shards: mpsc::Receiver<(ShardKey, Listing)>,
) {
    let Some(rate) = shared
        .upgrade()
        .map(|shared| shared.config.recovery_rate_per_second)
    else {
        return;
    };
    let slices_per_second = (1000 / RECOVERY_PACING_INTERVAL.as_millis()).max(1) as u32;
    let per_slice = rate.div_ceil(slices_per_second).max(1) as usize;
    let mut pacing = tokio::time::interval(RECOVERY_PACING_INTERVAL);
    pacing.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while let Some((key, listing)) = shards.recv().await {
        let ids = match listing.await {
            Ok(Ok(ids)) => ids,
            Ok(Err(error)) => {
                writer.report(RememberOperation::Recover, &key, error.to_string());
                continue;
            }
            Err(_) => {
                writer.report(
                    RememberOperation::Recover,
                    &key,
                    "the writer stopped".into(),
                );
                continue;
            }
        };
        for chunk in ids.chunks(per_slice) {
            pacing.tick().await;
            let Some(shared) = shared.upgrade() else {
                return;
            };
            if !shared.owns(&key) {
                break;
            }
            for id in chunk {
                shared
                    .local
                    .start(key.type_key.entity(id.clone()), key.shard);
            }
        }
    }
}
