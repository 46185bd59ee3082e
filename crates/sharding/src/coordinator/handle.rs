//! The handle to the coordinator task: commands and the admin queries.

use tokio::sync::oneshot;

use super::{CoordinatorError, CoordinatorHandle, CoordinatorQuery};
use crate::link::{CoordinatorCommand, Switchboard};
use crate::rebalance::RebalanceRound;
use std::collections::BTreeSet;
use tessera_contract::{AllocationTable, ShardKey};

impl CoordinatorHandle {
    /// Detaches the coordinator from `switchboard`, so that the task ends once every handle
    /// is dropped (this node stopped being the one that runs it).
    pub fn disconnect(&self, switchboard: &Switchboard) {
        switchboard.disconnect_coordinator_if(&self.commands);
    }

    /// Sends a command, waiting for room in the inbox.
    pub async fn command(&self, command: CoordinatorCommand) -> Result<(), CoordinatorError> {
        self.commands
            .send(command)
            .await
            .map_err(|_| CoordinatorError::Stopped)
    }

    async fn query<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> CoordinatorQuery,
    ) -> Result<T, CoordinatorError> {
        let (reply, receiver) = oneshot::channel();
        self.queries
            .send(make(reply))
            .await
            .map_err(|_| CoordinatorError::Stopped)?;
        receiver.await.map_err(|_| CoordinatorError::Stopped)
    }

    /// The allocation table.
    pub async fn allocation_table(&self) -> Result<AllocationTable, CoordinatorError> {
        self.query(CoordinatorQuery::Table).await
    }

    /// The kept rebalance rounds, oldest first.
    pub async fn rebalance_rounds(&self) -> Result<Vec<RebalanceRound>, CoordinatorError> {
        self.query(CoordinatorQuery::Rounds).await
    }

    /// Shards with a handoff in progress.
    pub async fn moving_shards(&self) -> Result<BTreeSet<ShardKey>, CoordinatorError> {
        self.query(CoordinatorQuery::Moving).await
    }
}
