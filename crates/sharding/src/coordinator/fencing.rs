//! How the coordinator is fenced: it takes the catalog's seat for its epoch before it reads
//! the committed table (so it reads everything committed before it), and every decision it
//! commits carries that epoch and the generation it read for each shard, so the catalog
//! refuses it once a later coordinator is seated or the shard moved (a deposed coordinator
//! then stops; one that read a stale table reads it again).

use std::collections::BTreeSet;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Coordinator, Handoff};
use crate::link::CoordinatorCommand;
use tessera_contract::{Allocation, NodeId, ShardKey};
use tessera_metadata::{Applied, Command, MetadataError, ShardAssignment, ShardMove};

impl Coordinator {
    /// Takes the seat for this coordinator's epoch, retrying while the plane cannot commit,
    /// then reads the committed table and handoffs; `None` if a later coordinator is seated or
    /// every handle went away meanwhile.
    pub(super) async fn take_seat(
        mut self,
        commands: &mpsc::Receiver<CoordinatorCommand>,
    ) -> Option<Coordinator> {
        let retry = self.config.request_timeout;
        loop {
            if commands.is_closed() {
                return None;
            }
            let seated = self
                .plane
                .submit(Command::SeatCoordinator { epoch: self.epoch })
                .await;
            let read = match seated {
                Ok(_) => self.read_committed(),
                Err(error @ MetadataError::StaleCoordinator { .. }) => {
                    tracing::info!(%error, "a later coordinator holds the seat; this one ends");
                    return None;
                }
                Err(error) => Err(error),
            };
            match read {
                Ok(()) => return Some(self),
                Err(error) => {
                    tracing::warn!(epoch = self.epoch, %error, "the coordinator could not take its seat; retrying");
                    tokio::time::sleep(retry).await;
                }
            }
        }
    }

    /// Replaces what this coordinator knows of shards with the committed table and handoffs.
    pub(super) fn read_committed(&mut self) -> Result<(), MetadataError> {
        let table = self.plane.store().shard_table()?;
        // Handoffs a previous coordinator started: their losing regions are told again soon.
        let told = Instant::now()
            .checked_sub(self.config.request_timeout * 4)
            .unwrap_or_else(Instant::now);
        self.handoffs = self
            .plane
            .store()
            .shard_handoffs()?
            .into_iter()
            .filter_map(|(key, from)| {
                let to = table.get(&key)?.clone();
                let handoff = Handoff {
                    from,
                    to,
                    waiting: BTreeSet::new(),
                    told,
                    completed: false,
                };
                Some((key, handoff))
            })
            .collect();
        self.table = table;
        Ok(())
    }
    /// The generation this coordinator knows `key` at (`None`: unallocated).
    fn known_generation(&self, key: &ShardKey) -> Option<u64> {
        self.table.get(key).map(|allocation| allocation.generation)
    }

    /// Commits `assignments` (`(shard, new owner)`) to the catalog, fenced by this
    /// coordinator's epoch and the generations it knows; the committed allocations, or why not.
    pub(super) async fn commit(
        &mut self,
        assignments: Vec<(ShardKey, NodeId)>,
    ) -> Result<Vec<(ShardKey, Allocation)>, MetadataError> {
        let assignments = assignments
            .into_iter()
            .map(|(key, to)| ShardAssignment {
                expected: self.known_generation(&key),
                key,
                to,
            })
            .collect();
        let epoch = self.epoch;
        self.decide(Command::AssignShards { epoch, assignments })
            .await
    }

    /// Commits `moves` (`(shard, losing owner, new owner)`) as handoffs, fenced like
    /// [`Coordinator::commit`].
    pub(super) async fn commit_moves(
        &mut self,
        moves: Vec<(ShardKey, NodeId, NodeId)>,
    ) -> Result<Vec<(ShardKey, Allocation)>, MetadataError> {
        let moves = moves
            .into_iter()
            .map(|(key, from, to)| ShardMove {
                // A shard this coordinator does not know cannot move: generation 0 is never
                // committed, so the catalog refuses it.
                expected: self.known_generation(&key).unwrap_or(0),
                key,
                from,
                to,
            })
            .collect();
        let epoch = self.epoch;
        self.decide(Command::MoveShards { epoch, moves }).await
    }

    /// Submits a shard decision. Refused because a later coordinator holds the seat: this one
    /// is deposed and stops. Refused because a shard moved without this coordinator knowing:
    /// it reads the committed table again.
    async fn decide(
        &mut self,
        command: Command,
    ) -> Result<Vec<(ShardKey, Allocation)>, MetadataError> {
        match self.plane.submit(command).await {
            Ok(Applied::ShardsAssigned(assigned) | Applied::ShardsMoved(assigned)) => Ok(assigned),
            Ok(other) => Err(MetadataError::Storage(format!(
                "a shard decision applied as {other:?}"
            ))),
            Err(error @ MetadataError::StaleCoordinator { .. }) => {
                tracing::warn!(epoch = self.epoch, %error, "this coordinator was deposed; it stops");
                self.deposed = true;
                Err(error)
            }
            Err(error @ MetadataError::ShardMoved { .. }) => {
                tracing::warn!(%error, "the coordinator's table was stale; reading it again");
                if let Err(read) = self.read_committed() {
                    tracing::warn!(error = %read, "the committed shard table could not be read");
                }
                Err(error)
            }
            Err(error) => Err(error),
        }
    }
}
