//! The metadata plane of a cluster: the catalog replicated by Viewstamped Replication among the
//! configured voters, as one VSR group ([`Group`], group [`METADATA_GROUP`]) whose state machine
//! is the [`CatalogMachine`]. A voter keeps a journal; a non-voting member follows the voters
//! and rebuilds its catalog from them at every start. Every voter and member tells the node's
//! [`CatalogObserver`] of every command it applies, in order.
//!
//! The node sends the plane's frames over its mesh, with everything else it sends; the tests
//! and benchmarks give a plane a transport of its own (`tests/src/plane.rs`).
//!
//! A command submitted on any node is sent to all voters; only the primary orders it, and its
//! reply comes back to the submitting node, which answers once its own catalog has applied the
//! command too (so a caller reads its own write on the node it wrote through). Reads come from
//! the local catalog and trail the primary by the commands in flight.
//!
//! [`Group`]: tessera_consensus::group::Group

use crate::{
    Applied, CatalogMachine, CatalogObserver, Command, MetadataError, MetadataPlane, MetadataStore,
    PlaneStatus,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tessera_consensus::group::{
    Group, GroupConfig, GroupError, GroupId, GroupInbound, GroupObserver, GroupOutbox,
    ObserverFuture, SUBMIT_TIMEOUT, SubmitError,
};
use tessera_contract::BoxFuture;
use tokio::sync::watch;

/// The metadata plane's group: the id on its frames.
pub const METADATA_GROUP: GroupId = GroupId(0);

/// How this node takes part in the metadata plane.
#[derive(Clone, Debug)]
pub struct PlaneConfig {
    /// Every voter's node id, in replica order (the same list on every node).
    pub voters: Vec<String>,
    /// This node's id (one of `voters` for a voter).
    pub node: String,
    /// A voter's journal file.
    pub journal: PathBuf,
    /// Real time per protocol tick (the replica's timeouts count ticks).
    pub tick: Duration,
    /// Ops between checkpoints; `None` keeps the consensus default. Small values make the
    /// log a short window (tests use them to force state transfer).
    pub checkpoint_interval_ops: Option<u64>,
}

impl PlaneConfig {
    fn group(&self) -> GroupConfig {
        GroupConfig {
            group: METADATA_GROUP,
            voters: self.voters.clone(),
            node: self.node.clone(),
            tick: self.tick,
            checkpoint_interval_ops: self.checkpoint_interval_ops,
            // The catalog's commands are few and ordered by their callers: one at a time.
            sessions: 1,
            ..GroupConfig::new(METADATA_GROUP, self.voters.clone(), self.node.clone())
        }
    }
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

impl From<GroupError> for PlaneError {
    fn from(error: GroupError) -> PlaneError {
        match error {
            GroupError::Config(why) => PlaneError::Config(why),
            GroupError::Journal(why) => PlaneError::Journal(why),
            other => PlaneError::Config(other.to_string()),
        }
    }
}

/// Hands what the catalog group applied to the node's catalog observer.
struct Observe(Arc<dyn CatalogObserver>);

impl GroupObserver<Applied> for Observe {
    fn applied<'a>(&'a self, applied: &'a Applied) -> ObserverFuture<'a> {
        self.0.applied(applied)
    }
}

/// This node's side of the cluster's metadata plane: a voter ([`ReplicatedPlane::start`]) or
/// a non-voting member's follower ([`ReplicatedPlane::follow`]), either way one group driver
/// behind the same handle.
pub struct ReplicatedPlane {
    store: MetadataStore,
    group: Group,
}

impl ReplicatedPlane {
    /// Starts this voter: opens (or, on first start, creates) its journal, rebuilds the catalog
    /// from it and starts driving the replica, sending through `outbox` (which must reach
    /// every other voter) and receiving from `inbound`.
    pub fn start(
        config: PlaneConfig,
        store: MetadataStore,
        observer: Arc<dyn CatalogObserver>,
        outbox: Arc<dyn GroupOutbox>,
        inbound: GroupInbound,
    ) -> Result<ReplicatedPlane, PlaneError> {
        let group = Group::start_voter(
            config.group(),
            &config.journal,
            CatalogMachine::new(store.clone()),
            Arc::new(Observe(observer)),
            outbox,
            inbound,
        )?;
        Ok(ReplicatedPlane { store, group })
    }

    /// Starts this node as a non-voting member of the plane: it empties its catalog, then
    /// rebuilds it from the voters of `config` (which must not name this node) and follows
    /// them.
    pub fn follow(
        config: PlaneConfig,
        store: MetadataStore,
        observer: Arc<dyn CatalogObserver>,
        outbox: Arc<dyn GroupOutbox>,
        inbound: GroupInbound,
    ) -> Result<ReplicatedPlane, PlaneError> {
        let group = Group::start_follower(
            config.group(),
            CatalogMachine::new(store.clone()),
            Arc::new(Observe(observer)),
            outbox,
            inbound,
        )?;
        Ok(ReplicatedPlane { store, group })
    }

    /// Follows this node's view of the plane: every change of view, commit or primary.
    pub fn watch_status(&self) -> watch::Receiver<PlaneStatus> {
        self.group.watch_status()
    }
}

/// What a submission that has no result means for a catalog command.
fn unavailable(error: SubmitError) -> MetadataError {
    let why = match error {
        SubmitError::Busy => "too many catalog commands in flight".to_string(),
        SubmitError::Stopped | SubmitError::NotRunning => "the metadata plane stopped".to_string(),
        SubmitError::TimedOut(_) => {
            format!("no quorum committed the command within {SUBMIT_TIMEOUT:?}")
        }
        SubmitError::SessionEvicted(_) => "this node's catalog session was evicted; the command \
                                           may or may not have applied: read the catalog \
                                           before retrying"
            .to_string(),
        SubmitError::NoAnswer => "no answer from the primary".to_string(),
        other => other.to_string(),
    };
    MetadataError::Unavailable(why)
}

impl MetadataPlane for ReplicatedPlane {
    fn submit(&self, command: Command) -> BoxFuture<'static, Result<Applied, MetadataError>> {
        let submitted = self.group.submit(CatalogMachine::encode_command(&command));
        Box::pin(async move {
            let result = submitted.await.map_err(unavailable)?;
            CatalogMachine::decode_result(&result)
        })
    }

    fn store(&self) -> &MetadataStore {
        &self.store
    }

    fn status(&self) -> PlaneStatus {
        self.group.status()
    }
}
