//! One node's part of moving a partition to a new replica set (the next epoch; the steps and
//! why they are safe are in `tessera_state::partition`'s `moving`, and `docs/partitions.md`,
//! "Moves"). The replica of both epochs first in the new group's order leads the move: it
//! takes the old group's primary role if a node that is no replica of the new epoch leads it
//! (the partition's shards follow that role, so they are served where the new group runs too,
//! and their commits follow the partition there), seals the epoch being left, fills the new
//! group from its own sealed copy and opens it. The other replicas of both epochs stand by
//! and do the same if the new group has not opened after a while (two fillers at once are
//! harmless: an open group takes no more fills). A replica of the old epoch only keeps its group running: it
//! counts for the seal. When every replica before was removed, nothing can fill the new
//! group: its replicas open it empty. Each step is tried again, less and less often, until it
//! is done or the move is dropped with its group.

use std::sync::Arc;
use std::time::Duration;
use tessera_consensus::group::Group;
use tessera_sharding::PRIMARY_REPORT_INTERVAL;
use tessera_state::partition::{FillSource, PartitionState, Phase, RoutedState};

/// The first wait before a step is tried again (a view change, no quorum yet).
const RETRY_FIRST: Duration = Duration::from_millis(200);

/// The longest wait between tries.
const RETRY_MAX: Duration = Duration::from_secs(5);

/// How long the move's leader waits, at most, for the old group's primary role and the
/// partition's shards to be on replicas of the new epoch before it seals anyway (the seal is
/// safe whoever serves; only asks on a node leaving the partition are refused meanwhile).
const HANDOVER_SETTLE_MAX: Duration = Duration::from_secs(10);

/// How often it reads the shard table again while it waits.
const HANDOVER_POLL: Duration = PRIMARY_REPORT_INTERVAL;

/// Whether the committed shard table gives every allocated shard of a partition to one of some
/// nodes: `(partition, nodes)` → answer, `None` when the catalog cannot be read (the node is
/// going).
pub(super) type ShardsFollowed = Arc<dyn Fn(u32, &[String]) -> Option<bool> + Send + Sync>;

/// How long the replicas of both epochs that do not lead a move wait for the one that does
/// to open the new group before they seal and fill it themselves (it may be down).
const STAND_BY: Duration = Duration::from_secs(10);

/// This node's part of one partition's move.
pub(super) struct Move {
    pub(super) partition: u32,
    /// This node's replica of the epoch being left and its group, if it has one.
    pub(super) old: Option<(Arc<PartitionState>, Arc<Group>)>,
    /// This node's replica of the new epoch and its group, if it is one.
    pub(super) new: Option<(Arc<PartitionState>, Arc<Group>)>,
    /// The new epoch's replicas.
    pub(super) replicas: Vec<String>,
    /// This node.
    pub(super) node: String,
    /// The node that leads the move: it takes the new group's primary role (and the old one's
    /// from a node leaving), seals and fills at once. The other replicas of both epochs do it
    /// only if the new group has not opened after [`STAND_BY`].
    pub(super) leader: String,
    /// Where the entity layer reads and commits: pointed at the new group once it is open.
    pub(super) routed: Arc<RoutedState>,
    /// Whether the catalog gives the partition's shards to a node.
    pub(super) shards_followed: ShardsFollowed,
}

impl Move {
    fn leads_the_move(&self) -> bool {
        self.leader == self.node
    }

    pub(super) async fn run(self) {
        let partition = self.partition;
        let Some((new, new_group)) = &self.new else {
            return;
        };
        let source = match &self.old {
            Some((old, group)) => {
                if !self.leads_the_move() && self.opened_by_another(new).await {
                    self.routed.hold(partition, new.clone());
                    return;
                }
                // Sealed, the old group serves nothing: not before the new one can take over.
                self.lead_new_group(new, new_group).await;
                self.hand_over(group).await;
                retry(partition, "sealing the epoch it leaves", || old.seal()).await;
                tracing::info!(partition, "the partition's epoch being left is sealed");
                FillSource::sealed(old)
            }
            None => match FillSource::empty() {
                Ok(empty) => {
                    tracing::warn!(
                        partition,
                        "every replica of the partition's epoch before was removed: its new group opens empty"
                    );
                    empty
                }
                Err(error) => {
                    tracing::error!(partition, %error, "an empty partition could not be made");
                    return;
                }
            },
        };
        retry(partition, "filling the new epoch's group", || {
            new.fill(&source)
        })
        .await;
        // Open, and applied here (a fill answers once this replica applied it).
        self.routed.hold(partition, new.clone());
        tracing::info!(partition, "the partition's new group is filled and open");
    }

    /// Takes the new group's primary role and waits until every one of its replicas has
    /// acknowledged an op in this view — the new group is whole — before the old one is
    /// sealed. A group starting for the first time forms only once every replica answered once
    /// (`Replica::start_empty`: an empty replica cannot tell a new group from a lost disk
    /// otherwise), and one that loses its primary while a replica still recovers cannot change
    /// its view: sealing the old group before would leave the partition answering nothing. Once
    /// every replica is in the view, the new group survives the loss of any minority of them.
    /// So a replica of the new set that is down holds the move, and the old group serves on.
    async fn lead_new_group(&self, new: &PartitionState, group: &Group) {
        loop {
            let status = group.status();
            let leader_leads = status.primary.as_deref() == Some(self.leader.as_str())
                && status.contact_age_ms.is_some();
            if status.primary.as_deref() != Some(self.node.as_str()) {
                // A standby leaves the role to the move's leader while that one has it.
                if self.leads_the_move() || !leader_leads {
                    group.take_primary();
                }
            } else {
                // An op for the backups to acknowledge: an open of nothing commits and
                // changes nothing while the group fills.
                let _ = new.probe().await;
                let status = group.status();
                let whole = status.lag.len() == status.voters.len()
                    && status.lag.iter().all(Option::is_some);
                if whole && status.primary.as_deref() == Some(self.node.as_str()) {
                    return;
                }
            }
            tokio::time::sleep(WHOLE_POLL).await;
        }
    }

    /// Waits up to [`STAND_BY`] for the new group to open (by the replica leading the move);
    /// whether it did.
    async fn opened_by_another(&self, new: &PartitionState) -> bool {
        let deadline = tokio::time::Instant::now() + STAND_BY;
        while tokio::time::Instant::now() < deadline {
            if new.phase() == Ok(Phase::Serving) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// Before the seal: has the old group's primary role, and the partition's shards that
    /// follow it, on replicas of the new epoch — asking for the role if a node with no replica
    /// of it has it — for up to [`HANDOVER_SETTLE_MAX`], then seals anyway, saying so. A node
    /// with no replica of the new epoch that still serves the shards after the seal would
    /// have its commits refused ("the partition moved to another replica set"): a fixed wait
    /// of three primary reports here, and then a wait only when this node took the role, each
    /// once let that happen on a loaded machine. The catalog hands a shard off (its old owner
    /// stops its entities first) before it names the new owner.
    async fn hand_over(&self, group: &Group) {
        let deadline = tokio::time::Instant::now() + HANDOVER_SETTLE_MAX;
        loop {
            let leaving = group
                .status()
                .primary
                .is_some_and(|primary| !self.replicas.contains(&primary));
            if leaving {
                group.take_primary();
            }
            match (self.shards_followed)(self.partition, &self.replicas) {
                // The catalog is gone: so is the node.
                None => return,
                Some(true) if !leaving => return,
                _ if tokio::time::Instant::now() >= deadline => {
                    tracing::warn!(
                        partition = self.partition,
                        leaving,
                        "the old group's primary role or the partition's shards did not move to the new replicas in time: sealing anyway"
                    );
                    return;
                }
                _ => tokio::time::sleep(HANDOVER_POLL).await,
            }
        }
    }
}

/// How often a move looks again whether the new group is whole.
const WHOLE_POLL: Duration = Duration::from_millis(100);

/// Runs `step` until it succeeds, waiting longer after each failure (up to [`RETRY_MAX`]).
async fn retry<F, T>(partition: u32, what: &str, mut step: impl FnMut() -> F)
where
    F: std::future::Future<Output = Result<T, tessera_state::CommitError>>,
{
    let mut wait = RETRY_FIRST;
    loop {
        match step().await {
            Ok(_) => return,
            Err(error) => {
                tracing::debug!(partition, what, %error, "a step of the partition's move is tried again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_MAX);
            }
        }
    }
}
