//! A shard this node starts serving from its own rows (an assignment, or the restart of a node
//! that owned it) begins its lineage first: the state layer removes rows it holds for an
//! older generation — an ownership whose discard was lost in a crash, parts of a move that went
//! elsewhere — so the shard starts from exactly what its owner installed, or from empty, never
//! from stale rows. The shard's messages wait (in its allocation buffer) until that is durable.
//! Regions that share one store (`shard_states` unset) move no rows and skip this.

use std::sync::Arc;
use tokio::time::Instant;

use super::RegionTask;
use crate::handoff::ShardBuffer;
use crate::region::homes::{Home, RegisteredType};
use crate::region::{Internal, transfer};
use tessera_contract::{Allocation, MessageError, ShardKey};

impl RegionTask {
    /// Whether `key`'s rows are ready to serve at `allocation`'s generation. If not, starts
    /// making them so — the shard's messages wait meanwhile — and answers false; the region
    /// learns the allocation again once the lineage has begun.
    pub(super) fn lineage_ready(
        &mut self,
        key: &ShardKey,
        allocation: &Allocation,
        ty: &Arc<RegisteredType>,
    ) -> bool {
        let Some(states) = self.shared.shard_states.clone() else {
            return true;
        };
        if self.lineages.get(key) == Some(&allocation.generation) {
            return true;
        }
        if let Some(starting) = self.starting.get_mut(key) {
            if starting.generation < allocation.generation {
                *starting = allocation.clone();
            }
            return false;
        }
        {
            let Some(mut home) = ty.slot(key.shard) else {
                return true;
            };
            match &*home {
                // Served here already, or leaving: the rows are this lineage's.
                Home::Local { .. } | Home::HandingOff { .. } => return true,
                Home::Allocating { .. } => {}
                Home::Unknown | Home::Remote(_) => {
                    *home = Home::Allocating {
                        since: Instant::now(),
                        buffer: ShardBuffer::new(self.shared.config.allocation_buffer),
                    };
                }
            }
        }
        self.starting.insert(key.clone(), allocation.clone());
        let scope = transfer::scope(ty, key);
        let internal = self.internal.clone();
        let (key, generation) = (key.clone(), allocation.generation);
        tokio::spawn(async move {
            let begun = states
                .begin_lineage(scope, generation)
                .await
                .map_err(|error| error.to_string());
            let _ = internal.send(Internal::LineageBegun(key, begun)).await;
        });
        false
    }

    /// The lineage of `key` began (or could not): serve it, or fail what waits for it.
    pub(super) fn on_lineage_begun(&mut self, key: ShardKey, begun: Result<(), String>) {
        let Some(allocation) = self.starting.remove(&key) else {
            return;
        };
        match begun {
            Ok(()) => {
                self.lineages.insert(key.clone(), allocation.generation);
                self.learn(&key, allocation);
            }
            Err(error) => {
                tracing::warn!(%key, %error, "a shard's stale rows could not be cleared; not served");
                let error = MessageError::shard_unavailable(format!(
                    "shard {key} could not start on node {}: {error}",
                    self.shared.node
                ));
                self.settle_allocating(&key, &error);
            }
        }
    }
}
