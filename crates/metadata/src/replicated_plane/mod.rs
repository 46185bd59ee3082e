//! The metadata plane of a cluster: the catalog replicated by Viewstamped Replication among the
//! configured voters over the cluster transport. Each voter runs a [`Replica`] over a file journal
//! with the catalog ([`CatalogMachine`](crate::CatalogMachine)) as its state machine,
//! driven by one task (`driver`) that ticks it, carries its messages and tells the node's
//! observer of every command it applies, in order, on every voter.
//!
//! A command submitted on any voter is sent to all voters; only the primary orders it, and its
//! reply comes back to the submitting node, which answers once its own catalog has applied the
//! command too (so a caller reads its own write on the node it wrote through). Reads come from
//! the local catalog and trail the primary by the commands in flight.
//!
//! [`Replica`]: tessera_consensus::replica::Replica

mod dedicated;
mod driver;
mod follower;
mod session;
mod wire;

#[cfg(test)]
mod tests;

pub use dedicated::dedicated_transport;
pub use follower::FOLLOW_TICKS;
pub use wire::PlaneMessage;

use crate::{
    Applied, CatalogObserver, Command, MetadataError, MetadataPlane, MetadataStore, PlaneStatus,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tessera_consensus::config::Config;
use tessera_contract::BoxFuture;
use tokio::sync::{mpsc, oneshot, watch};

/// Submissions waiting for the driver; past it `submit` answers `unavailable`.
pub const SUBMISSIONS_MAX: usize = 256;

/// The longest a submission waits for its command to commit and apply here.
pub const SUBMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a voter's messages to other nodes go: the node's cluster transport, which carries
/// them with everything else the node sends. Sending never waits; a message that cannot be
/// queued is dropped (and counted by the transport): the protocol resends what matters.
pub trait PlaneOutbox: Send + Sync + 'static {
    /// Queues `message` for node `to`.
    fn send(&self, to: &str, message: PlaneMessage);
}

/// Plane messages received from other nodes, with the sender's authenticated node id.
pub type PlaneInbound = mpsc::Receiver<(String, PlaneMessage)>;

/// Plane messages from other nodes waiting for the driver; past it they are dropped.
pub const PLANE_INBOUND_MAX: usize = 4096;

/// The most operation bytes a voter sends a non-voting member in one batch of entries (one
/// entry is sent whatever its size; the mesh's frame bound holds the largest deploy).
pub const FOLLOW_BATCH_BYTES: usize = 16 << 20;

/// How a voter of the metadata plane runs.
#[derive(Clone, Debug)]
pub struct PlaneConfig {
    /// Every voter's node id, in replica order (the same list on every voter).
    pub voters: Vec<String>,
    /// This node's id (one of `voters`).
    pub node: String,
    /// The journal file.
    pub journal: PathBuf,
    /// Real time per protocol tick (the replica's timeouts count ticks).
    pub tick: Duration,
    /// Ops between checkpoints; `None` keeps the consensus default. Small values make the
    /// log a short window (tests use them to force state transfer).
    pub checkpoint_interval_ops: Option<u64>,
}

/// This node's side of the cluster's metadata plane: a voter's replica
/// ([`ReplicatedPlane::start`]) or a non-voting member's follower ([`ReplicatedPlane::follow`]),
/// either way one driver task behind the same handle.
pub struct ReplicatedPlane {
    store: MetadataStore,
    submissions: mpsc::Sender<session::Submission>,
    status: watch::Receiver<PlaneStatus>,
    driver: tokio::task::JoinHandle<()>,
}

/// Why the plane could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlaneError {
    /// The configuration is unusable.
    #[error("metadata plane: {0}")]
    Config(String),
    /// The journal could not be opened or recovered.
    #[error("metadata plane journal: {0}")]
    Journal(String),
}

impl ReplicatedPlane {
    /// Starts this voter: opens (or, on first start, creates) its journal, rebuilds the catalog
    /// from it and starts driving the replica, sending through `outbox` (which must reach
    /// every other voter) and receiving from `inbound`.
    pub fn start(
        config: PlaneConfig,
        store: MetadataStore,
        observer: Arc<dyn CatalogObserver>,
        outbox: Arc<dyn PlaneOutbox>,
        inbound: PlaneInbound,
    ) -> Result<ReplicatedPlane, PlaneError> {
        let index = config
            .voters
            .iter()
            .position(|voter| *voter == config.node)
            .ok_or_else(|| PlaneError::Config(format!("{} is not a voter", config.node)))?;
        let replica_count = u8::try_from(config.voters.len())
            .map_err(|_| PlaneError::Config("too many voters".into()))?;
        let mut replica_config = Config::new(replica_count, index as u8);
        if let Some(interval) = config.checkpoint_interval_ops {
            replica_config.checkpoint_interval_ops = interval;
        }
        replica_config
            .validate()
            .map_err(|error| PlaneError::Config(error.to_string()))?;
        let replica = driver::open_replica(replica_config, &config.journal, store.clone())?;
        let (submissions, submitted) = mpsc::channel(SUBMISSIONS_MAX);
        let (status_sender, status) = watch::channel(PlaneStatus {
            voters: config.voters.clone(),
            ..PlaneStatus::default()
        });
        let driver = driver::Driver::new(
            config,
            replica,
            observer,
            outbox,
            inbound,
            submitted,
            status_sender,
        );
        Ok(ReplicatedPlane {
            store,
            submissions,
            status,
            driver: tokio::spawn(driver.run()),
        })
    }
}

/// Hands `command` to a driver's submission queue and waits for its answer, at most
/// [`SUBMIT_TIMEOUT`].
fn submit_to(
    submissions: mpsc::Sender<session::Submission>,
    command: Command,
) -> BoxFuture<'static, Result<Applied, MetadataError>> {
    Box::pin(async move {
        let (answer, answered) = oneshot::channel();
        let submission = session::Submission { command, answer };
        submissions.try_send(submission).map_err(|_| {
            MetadataError::Unavailable("too many catalog commands in flight".into())
        })?;
        match tokio::time::timeout(SUBMIT_TIMEOUT, answered).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(MetadataError::Unavailable(
                "the metadata plane stopped".into(),
            )),
            Err(_) => Err(MetadataError::Unavailable(format!(
                "no quorum committed the command within {SUBMIT_TIMEOUT:?}"
            ))),
        }
    })
}

impl ReplicatedPlane {
    /// Starts this node as a non-voting member of the plane: it empties its catalog, then
    /// rebuilds it from the voters of `config` (which must not name this node) and follows
    /// them (see `follower`).
    pub fn follow(
        config: PlaneConfig,
        store: MetadataStore,
        observer: Arc<dyn CatalogObserver>,
        outbox: Arc<dyn PlaneOutbox>,
        inbound: PlaneInbound,
    ) -> Result<ReplicatedPlane, PlaneError> {
        follower::start_follower(config, store, observer, outbox, inbound)
    }

    /// Follows this node's view of the plane: every change of view, commit or primary.
    pub fn watch_status(&self) -> watch::Receiver<PlaneStatus> {
        self.status.clone()
    }
}

impl Drop for ReplicatedPlane {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl MetadataPlane for ReplicatedPlane {
    fn submit(&self, command: Command) -> BoxFuture<'static, Result<Applied, MetadataError>> {
        submit_to(self.submissions.clone(), command)
    }

    fn store(&self) -> &MetadataStore {
        &self.store
    }

    fn status(&self) -> PlaneStatus {
        self.status.borrow().clone()
    }
}
