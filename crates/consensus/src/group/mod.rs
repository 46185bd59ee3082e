//! One VSR group run over a network: the task that drives a voter's [`Replica`] (or a
//! non-voting member's [`Learner`]) in real time, for any [`GroupMachine`]. It ticks the
//! replica, carries its messages through a [`GroupOutbox`], takes operations submitted on this
//! node to the primary ([`Group::submit`]), routes the primary's replies back to the node that
//! submitted, and hands what the state machine applied to a [`GroupObserver`], in order, on
//! every member. Every frame names its [`GroupId`], so one connection between two nodes
//! carries the frames of every group they share.
//!
//! The metadata plane runs its catalog as one such group (`tessera-metadata`); a voter
//! (`voter`) keeps a [`FileJournal`], a follower (`follower`) keeps nothing and rebuilds its
//! state from the voters at every start. This node's operations go through its client sessions
//! (`session`): one in flight per session (`GroupConfig::sessions`), each answered once this
//! node has applied it too, so a caller reads its own write on the node it wrote through.
//!
//! [`Replica`]: crate::replica::Replica
//! [`Learner`]: crate::learner::Learner
//! [`FileJournal`]: crate::durable::FileJournal
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use tessera_consensus::group::{
//!     Group, GroupConfig, GroupFrame, GroupId, GroupMachine, GroupObserver, GroupOutbox,
//!     ObserverFuture,
//! };
//! use tessera_consensus::state_machine::{
//!     KeyValue, KeyValueOperation, KeyValueResult, RestoreError, StateMachine,
//! };
//!
//! /// A key-value store that tells its observer each operation it applied.
//! #[derive(Default)]
//! struct Recorded { store: KeyValue, applied: Vec<Vec<u8>> }
//! impl StateMachine for Recorded {
//!     fn apply(&mut self, operation: &[u8]) -> Vec<u8> {
//!         self.applied.push(operation.to_vec());
//!         self.store.apply(operation)
//!     }
//!     fn snapshot(&self) -> Vec<u8> { self.store.snapshot() }
//!     fn restore(&mut self, snapshot: &[u8]) -> Result<(), RestoreError> {
//!         self.store.restore(snapshot)
//!     }
//! }
//! impl GroupMachine for Recorded {
//!     type Applied = Vec<u8>;
//!     fn reset(&mut self) -> Result<(), RestoreError> { *self = Recorded::default(); Ok(()) }
//!     fn take_applied(&mut self) -> Vec<Vec<u8>> { std::mem::take(&mut self.applied) }
//!     fn fault(&self) -> Option<&str> { None }
//! }
//! struct Count(Mutex<usize>);
//! impl GroupObserver<Vec<u8>> for Count {
//!     fn applied<'a>(&'a self, _: &'a Vec<u8>) -> ObserverFuture<'a> {
//!         *self.0.lock().unwrap() += 1;
//!         Box::pin(async {})
//!     }
//! }
//! /// A group of one voter sends nothing.
//! struct Nowhere;
//! impl GroupOutbox for Nowhere {
//!     fn send(&self, _: &str, _: GroupFrame) {}
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let config = GroupConfig::new(GroupId(7), vec!["n1".into()], "n1".into());
//! let observer = Arc::new(Count(Mutex::new(0)));
//! let (_to_group, inbound) = tokio::sync::mpsc::channel(16);
//! let group = Group::start_voter(
//!     config,
//!     &dir.path().join("n1.journal"),
//!     Recorded::default(),
//!     observer.clone(),
//!     Arc::new(Nowhere),
//!     inbound,
//! )
//! .unwrap();
//! let put = KeyValueOperation::Put { key: 1, value: 10 }.encode();
//! let result = group.submit(put).await.unwrap();
//! assert_eq!(KeyValueResult::decode(&result), KeyValueResult::Value(None));
//! assert_eq!(*observer.0.lock().unwrap(), 1);
//! # });
//! ```

mod follower;
mod frame;
mod router;
mod session;
mod ticker;
mod voter;

#[cfg(test)]
mod tests;

pub use follower::FOLLOW_TICKS;
pub use frame::{GroupFrame, GroupId, GroupMessage};
pub use router::{
    GroupRouter, PARKED_BYTES_MAX, PARKED_FRAMES_PER_GROUP_MAX, PARKED_GROUPS_MAX, RouterStats,
};
pub use session::{SESSION_TICK, SESSIONS_PER_NODE_MAX};

use crate::config::{Config, Timeouts};
use crate::learner::Learner;
use crate::message::ReplyError;
use crate::state_machine::{RestoreError, StateMachine};
use session::{ClientSessions, Submission};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// Operations submitted on this node waiting for the driver; past it [`Group::submit`]
/// answers [`SubmitError::Busy`].
pub const SUBMISSIONS_MAX: usize = 256;

/// The longest a submitted operation waits to commit and apply here.
pub const SUBMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Frames from other nodes waiting for a group's driver ([`GroupInbound`]); past it the
/// node that receives them drops them (the protocol resends what matters).
pub const GROUP_INBOUND_MAX: usize = 4096;

/// The most operation bytes a voter sends a non-voting member in one batch of entries (one
/// entry is sent whatever its size).
pub const FOLLOW_BATCH_BYTES: usize = 16 << 20;

/// A state machine a group can run: deterministic ([`StateMachine`]), and telling its owner
/// what each operation changed.
pub trait GroupMachine: StateMachine + Send + 'static {
    /// What the observer hears of one applied operation (or restored state).
    type Applied: Send + Sync + 'static;

    /// Empties the state. A member rebuilds it at every start: a voter from its journal, a
    /// follower from the voters.
    fn reset(&mut self) -> Result<(), RestoreError>;

    /// Prepares a voter's restart from its journal, before the replica restores the journal's
    /// checkpoint (if it holds one); [`GroupMachine::restarted`] follows once the replica is
    /// open. Empties the state ([`GroupMachine::reset`]) by default; a machine whose restore
    /// replaces its whole state anyway may leave that to `restarted`, for when no checkpoint
    /// was restored.
    fn restarting(&mut self) -> Result<(), RestoreError> {
        self.reset()
    }

    /// After a voter's replica opened on its journal (see [`GroupMachine::restarting`]).
    /// Nothing by default.
    fn restarted(&mut self) -> Result<(), RestoreError> {
        Ok(())
    }

    /// Takes what was applied since the last call, in order.
    fn take_applied(&mut self) -> Vec<Self::Applied>;

    /// A failure that made this replica's state unlike the others' (a storage error): the
    /// group stops on this node rather than go on with a state no other member has.
    fn fault(&self) -> Option<&str>;
}

/// The future an observer returns.
pub type ObserverFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Hears of everything the state machine applied, in order, on every member.
pub trait GroupObserver<A>: Send + Sync + 'static {
    /// Called once per applied operation, before the node that submitted it hears back.
    fn applied<'a>(&'a self, applied: &'a A) -> ObserverFuture<'a>;
}

/// Where a member's frames to other nodes go (the node's cluster transport, which carries
/// them with everything else the node sends). Sending never waits; a frame that cannot be
/// queued is dropped (and counted by the transport): the protocol resends what matters.
pub trait GroupOutbox: Send + Sync + 'static {
    /// Queues `frame` for node `to`.
    fn send(&self, to: &str, frame: GroupFrame);
}

/// Frames of this group received from other nodes, with the sender's authenticated node id
/// (bounded by [`GROUP_INBOUND_MAX`] where the node makes the queue).
pub type GroupInbound = mpsc::Receiver<(String, GroupFrame)>;

/// How one member of a group runs.
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// The group, named on every frame.
    pub group: GroupId,
    /// Every voter's node id, in replica order (the same list on every member).
    pub voters: Vec<String>,
    /// This node's id.
    pub node: String,
    /// Real time per protocol tick (the replica's timeouts count ticks). A node's client
    /// sessions measure their waits in real time whatever the tick ([`SESSION_TICK`]).
    pub tick: Duration,
    /// The replica's protocol timers, in ticks; the default suits a 10 ms tick. A longer
    /// tick with fewer ticks per timeout keeps the timers' real length and wakes the group
    /// less often (the partition plane's groups, of which a node runs dozens).
    pub timeouts: Timeouts,
    /// Ops between checkpoints; `None` keeps the consensus default. Small values make the
    /// log a short window (tests use them to force state transfer).
    pub checkpoint_interval_ops: Option<u64>,
    /// Operations this node may have in flight at once (one client session each; 1 to
    /// [`SESSIONS_PER_NODE_MAX`]). The metadata plane keeps one; a partition's primary, which
    /// commits many entities' writes at once, more.
    pub sessions: usize,
}

impl GroupConfig {
    /// A member `node` of `group` among `voters`, ticking every 10 ms.
    pub fn new(group: GroupId, voters: Vec<String>, node: String) -> GroupConfig {
        GroupConfig {
            group,
            voters,
            node,
            tick: SESSION_TICK,
            timeouts: Timeouts::default(),
            checkpoint_interval_ops: None,
            sessions: 1,
        }
    }
}

/// A group as one member sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GroupStatus {
    /// The consensus view (0 for a plane without consensus).
    pub view: u64,
    /// Operations this node has applied: its commit number.
    pub commit: u64,
    /// The node that orders operations now; `None` while this member knows of none (and for
    /// a plane without consensus, which orders its own).
    pub primary: Option<String>,
    /// The nodes that vote on operations (empty for a plane without consensus).
    pub voters: Vec<String>,
    /// A primary's view of its backups: per voter, in `voters`' order, how many ops of the
    /// primary's log it has not acknowledged — `None` for one that acknowledged nothing in
    /// this view yet (a group that has been idle since its last view change). Empty on any
    /// other member.
    pub lag: Vec<Option<u64>>,
    /// Checkpoints this voter took since it started (0 without consensus).
    pub checkpoints_taken: u64,
    /// Checkpoints this node installed since it started: from a peer by state transfer, or
    /// (a follower) from a voter because the entries it lacked were trimmed.
    pub states_installed: u64,
    /// Whether this voter is fetching a checkpoint from a peer now (state transfer).
    pub fetching_state: bool,
    /// How old what this member knows is: milliseconds since it last knew itself part of a
    /// working group (a primary: acknowledged by a quorum; a backup: heard its primary; a
    /// follower: heard a voter). `None` while it knows of no working group (a view change)
    /// and for a plane without consensus. Filled in by [`Group::status`]; the values a
    /// [`Group::watch_status`] receiver sees leave it `None`, so an ageing status does not
    /// wake them.
    pub contact_age_ms: Option<u64>,
}

/// When a member last knew itself part of a working group, shared by its driver (which
/// records it every tick) and [`Group::status`] (which reports its age).
#[derive(Debug)]
pub(super) struct Contact {
    started: std::time::Instant,
    /// Milliseconds after `started` of the last contact; [`Contact::NEVER`] before any.
    last_ms: std::sync::atomic::AtomicU64,
}

impl Contact {
    const NEVER: u64 = u64::MAX;

    pub(super) fn new() -> Arc<Contact> {
        Arc::new(Contact {
            started: std::time::Instant::now(),
            last_ms: std::sync::atomic::AtomicU64::new(Contact::NEVER),
        })
    }

    /// Records a contact `ago` before now (`None`: out of contact, nothing changes).
    pub(super) fn record(&self, ago: Option<Duration>) {
        let Some(ago) = ago else {
            return;
        };
        let at = self.started.elapsed().saturating_sub(ago).as_millis() as u64;
        self.last_ms.store(at, std::sync::atomic::Ordering::Relaxed);
    }

    /// Forgets the last contact (a view change began).
    pub(super) fn lose(&self) {
        self.last_ms
            .store(Contact::NEVER, std::sync::atomic::Ordering::Relaxed);
    }

    fn age_ms(&self) -> Option<u64> {
        let last = self.last_ms.load(std::sync::atomic::Ordering::Relaxed);
        (last != Contact::NEVER)
            .then(|| (self.started.elapsed().as_millis() as u64).saturating_sub(last))
    }
}

/// Why a member could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// The configuration is unusable.
    #[error("{0}")]
    Config(String),
    /// The journal could not be opened or recovered.
    #[error("journal: {0}")]
    Journal(String),
}

/// Why a submitted operation has no result. Except for [`SubmitError::Busy`] and
/// [`SubmitError::NotRunning`], the operation may or may not have applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    /// [`SUBMISSIONS_MAX`] operations were already waiting; nothing was sent.
    #[error("too many operations in flight")]
    Busy,
    /// The group's driver is not running on this node (it was stopped); nothing was sent.
    #[error("the group does not run on this node")]
    NotRunning,
    /// The group's driver stopped on this node.
    #[error("the group stopped on this node")]
    Stopped,
    /// No quorum committed the operation within [`SUBMIT_TIMEOUT`].
    #[error("no quorum committed the operation within {0:?}")]
    TimedOut(Duration),
    /// This node's session was evicted from the group's client table, so a retry cannot be
    /// told from a new operation: read the state before retrying.
    #[error("this node's session was evicted: {0}")]
    SessionEvicted(ReplyError),
    /// The primary's answer never came (this node's driver gave up on it).
    #[error("no answer from the primary")]
    NoAnswer,
}

/// This node's member of one group: a voter ([`Group::start_voter`]) or a non-voting
/// follower ([`Group::start_follower`]), either way one driver task behind the same handle.
/// Dropping it stops the task.
pub struct Group {
    submissions: mpsc::Sender<Submission>,
    status: watch::Receiver<GroupStatus>,
    contact: Arc<Contact>,
    /// Set by [`Group::take_primary`]; a voter's driver acts on it at its next tick.
    take_primary: Arc<AtomicBool>,
    driver: tokio::task::JoinHandle<()>,
}

impl Group {
    /// Starts this node as a voter: opens (or, on first start, creates) its journal at
    /// `journal`, rebuilds `machine` from it (emptied first) and drives the
    /// replica, sending through `outbox` (which must reach every other voter) and receiving
    /// from `inbound`. Must be called within a Tokio runtime.
    pub fn start_voter<M: GroupMachine>(
        config: GroupConfig,
        journal: &Path,
        machine: M,
        observer: Arc<dyn GroupObserver<M::Applied>>,
        outbox: Arc<dyn GroupOutbox>,
        inbound: GroupInbound,
    ) -> Result<Group, GroupError> {
        let index = config
            .voters
            .iter()
            .position(|voter| *voter == config.node)
            .ok_or_else(|| GroupError::Config(format!("{} is not a voter", config.node)))?;
        let replica_count = u8::try_from(config.voters.len())
            .map_err(|_| GroupError::Config("too many voters".into()))?;
        let mut replica_config = Config::new(replica_count, index as u8);
        if let Some(interval) = config.checkpoint_interval_ops {
            replica_config.checkpoint_interval_ops = interval;
        }
        replica_config.timeouts = config.timeouts;
        replica_config
            .validate()
            .map_err(|error| GroupError::Config(error.to_string()))?;
        let replica = voter::open_replica(replica_config, journal, machine)?;
        let (submissions, submitted) = mpsc::channel(SUBMISSIONS_MAX);
        let (status_sender, status) = watch::channel(Group::initial_status(&config));
        let contact = Contact::new();
        let take_primary = Arc::new(AtomicBool::new(false));
        let driver = voter::VoterDriver {
            contact: contact.clone(),
            take_primary: take_primary.clone(),
            session: ClientSessions::new(config.group, &config.node, config.sessions),
            config,
            replica,
            observer,
            outbox,
            inbound,
            submitted,
            status: status_sender,
            origins: BTreeMap::new(),
            tick: 0,
        };
        Ok(Group {
            submissions,
            status,
            contact,
            take_primary,
            driver: tokio::spawn(driver.run()),
        })
    }

    /// Starts this node as a non-voting follower of the voters of `config` (which must not
    /// name this node): it empties `machine`, applies to it what they committed, and follows
    /// them (see `follower`). Must be called within a Tokio runtime.
    pub fn start_follower<M: GroupMachine>(
        config: GroupConfig,
        machine: M,
        observer: Arc<dyn GroupObserver<M::Applied>>,
        outbox: Arc<dyn GroupOutbox>,
        inbound: GroupInbound,
    ) -> Result<Group, GroupError> {
        if config.voters.contains(&config.node) {
            return Err(GroupError::Config(format!(
                "{} is a voter, not a follower",
                config.node
            )));
        }
        if config.voters.is_empty() {
            return Err(GroupError::Config("a follower needs voters".into()));
        }
        let mut machine = machine;
        machine
            .reset()
            .map_err(|error| GroupError::Journal(error.to_string()))?;
        let (submissions, submitted) = mpsc::channel(SUBMISSIONS_MAX);
        let (status_sender, status) = watch::channel(Group::initial_status(&config));
        let contact = Contact::new();
        let driver = follower::FollowerDriver {
            contact: contact.clone(),
            session: ClientSessions::new(config.group, &config.node, config.sessions),
            config,
            learner: Learner::new(machine),
            observer,
            outbox,
            inbound,
            submitted,
            status: status_sender,
            tick: 0,
            installed: 0,
            view: None,
            asked_tick: 0,
            answered: true,
            target: 0,
        };
        Ok(Group {
            submissions,
            status,
            contact,
            take_primary: Arc::new(AtomicBool::new(false)),
            driver: tokio::spawn(driver.run()),
        })
    }

    fn initial_status(config: &GroupConfig) -> GroupStatus {
        GroupStatus {
            voters: config.voters.clone(),
            ..GroupStatus::default()
        }
    }

    /// Submits `operation` and waits, at most [`SUBMIT_TIMEOUT`], for the state machine's
    /// result, answered once the operation has committed and this node has applied it too.
    pub fn submit(
        &self,
        operation: Vec<u8>,
    ) -> impl Future<Output = Result<Vec<u8>, SubmitError>> + Send + 'static {
        let submissions = self.submissions.clone();
        async move {
            let (answer, answered) = oneshot::channel();
            let submission = Submission { operation, answer };
            submissions
                .try_send(submission)
                .map_err(|error| match error {
                    mpsc::error::TrySendError::Full(_) => SubmitError::Busy,
                    mpsc::error::TrySendError::Closed(_) => SubmitError::NotRunning,
                })?;
            match tokio::time::timeout(SUBMIT_TIMEOUT, answered).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(_)) => Err(SubmitError::Stopped),
                Err(_) => Err(SubmitError::TimedOut(SUBMIT_TIMEOUT)),
            }
        }
    }

    /// Asks for the primary's role for this voter (a leadership transfer, see
    /// [`Replica::take_primary`](crate::replica::Replica::take_primary)), at the driver's next
    /// tick; nothing for a non-voting member, a primary, or a voter not caught up.
    pub fn take_primary(&self) {
        self.take_primary.store(true, Ordering::Relaxed);
    }

    /// Where the group is now, as this node sees it.
    pub fn status(&self) -> GroupStatus {
        GroupStatus {
            contact_age_ms: self.contact.age_ms(),
            ..self.status.borrow().clone()
        }
    }

    /// Follows this node's view of the group: every change of view, commit or primary.
    pub fn watch_status(&self) -> watch::Receiver<GroupStatus> {
        self.status.clone()
    }
}

impl Group {
    /// Stops the group's driver and waits until it is gone, and its machine with it (dropping
    /// the handle stops it too, but later): a machine holding a file is closed when this
    /// returns.
    pub async fn stop(mut self) {
        self.driver.abort();
        let _ = (&mut self.driver).await;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.driver.abort();
    }
}
