//! The partition plane's groups on this node: a voter of each partition the catalog places
//! here, started when its placement is applied (frames that came first were parked by the
//! mesh's group router and go to it in order), each with its journal under
//! `<data dir>/partitions/` and the partition machine (`tessera_state::partition`), ticking and
//! electing primaries over the mesh like the metadata plane's group, its voters in an order
//! every node derives alike from the replica set ([`group_voters`]).
//!
//! Each running group is held in the node's [`RoutedState`]: the entities of its partition are
//! read from this replica and committed through the group. A group keeps the replicas it
//! started with — a placement that changes them, or drops this node, is shown beside the
//! running set ([`PartitionHere`]) until moves (VSR reconfiguration) are built.

use super::mesh::Mesh;
use crate::node::{ClusterConfig, NodeConfig, NodeError};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tessera_consensus::group::{
    GROUP_INBOUND_MAX, Group, GroupConfig, GroupObserver, GroupStatus, ObserverFuture,
};
use tessera_contract::EntityAddress;
use tessera_metadata::{MetadataPlane, PlaneStatus, group_voters, partition_group};
use tessera_sharding::{
    CoordinatorCommand, FnvExtractor, PRIMARY_REPORT_INTERVAL, ShardExtractor, Switchboard,
};
use tessera_state::partition::{
    PartitionApplied, PartitionMachine, PartitionOf, PartitionReplica, PartitionState, RoutedState,
};
use tokio::sync::{mpsc, watch};

/// How often the placement is read again when no catalog commit woke the task (a commit
/// wakes it at once).
const PLACEMENT_RECHECK: Duration = Duration::from_secs(1);

/// Client sessions a partition's member opens: this node's operations in flight at once in
/// one group. A primary batches the requests that wait behind its full pipeline of prepares
/// (one journal fsync for the batch), which 8 sessions never fill: with 32, the partition
/// plane's throughput bench commits 2 writes an op and R = 3 reaches 82 % of R = 1's
/// commits/s, against 46 % with 8 (`docs/partitions.md`, "Benchmarks").
const PARTITION_SESSIONS: usize = 32;

/// One partition's group as this node runs it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PartitionHere {
    /// The partition.
    pub partition: u32,
    /// The voters its group runs with, in their replica order ([`group_voters`] of the
    /// placement it started under).
    pub replicas: Vec<String>,
    /// The placement generation it started under.
    pub generation: u64,
    /// The committed placement, when it names other nodes than `replicas` (empty: the
    /// partition is no longer placed): a move not applied, as moves are not built yet.
    pub placed: Option<Vec<String>>,
    /// The group as this replica sees it: view, commit, primary, contact.
    pub status: GroupStatus,
}

/// Which partition an entity lives in, with the partition plane on (`count` partitions):
/// its shard's (the node's shard function over `num_shards`) modulo `count`; `None` with the
/// plane off. Every node must agree on both numbers, as they must on `num_shards` alone.
pub(in crate::node) fn partition_of(num_shards: u32, count: u32) -> PartitionOf {
    let shards = FnvExtractor::new(num_shards);
    Arc::new(move |entity: &EntityAddress| (count > 0).then(|| shards.shard_of(&entity.id) % count))
}

/// Whether two replica lists name the same nodes.
fn same_set(left: &[String], right: &[String]) -> bool {
    let left: std::collections::BTreeSet<&String> = left.iter().collect();
    let right: std::collections::BTreeSet<&String> = right.iter().collect();
    left == right
}

/// How long a group runs here before this node, its preferred primary, asks for the primary's
/// role back: time to catch up after a restart.
const PRIMARY_RECLAIM_AFTER: Duration = Duration::from_secs(10);

/// How long after asking for the primary's role this node asks again, if it still does not
/// lead.
const PRIMARY_RECLAIM_EVERY: Duration = Duration::from_secs(30);

/// A running partition group.
struct Running {
    /// Its voters, in their order ([`group_voters`]): the first is the preferred primary.
    replicas: Vec<String>,
    generation: u64,
    placed: Option<Vec<String>>,
    group: Arc<Group>,
    /// When this node may next ask for the primary's role, if it is the preferred primary.
    reclaim_at: Instant,
}

/// The partition groups this node runs.
pub(in crate::node) struct PartitionGroups {
    node: String,
    dir: PathBuf,
    tick: Duration,
    checkpoint_interval_ops: Option<u64>,
    mesh: Arc<Mesh>,
    /// Where the entity layer reads and commits: told of each group as it starts and stops.
    routed: Arc<RoutedState>,
    running: Mutex<BTreeMap<u32, Running>>,
}

/// Tells the coordinator, every [`PRIMARY_REPORT_INTERVAL`], which partitions' groups this
/// node leads (their shards follow their primaries), until the node is gone. The report is
/// sent even when it leads none: it is also how the coordinator knows the node is alive.
async fn report_primaries(groups: Weak<PartitionGroups>, switchboard: Arc<Switchboard>) {
    let mut interval = tokio::time::interval(PRIMARY_REPORT_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(groups) = groups.upgrade() else {
            return;
        };
        let led = groups.led();
        groups.reclaim_preferred();
        let node = groups.node.clone();
        drop(groups);
        // The coordinator may be moving (a metadata view change): the next report gets there.
        let _ =
            switchboard.send_to_coordinator(CoordinatorCommand::PartitionPrimaries { node, led });
    }
}

/// Nothing observes a partition's applied writes: the entity layer reads the replica's tables
/// when it needs them.
struct Unobserved;

impl GroupObserver<PartitionApplied> for Unobserved {
    fn applied<'a>(&'a self, _: &'a PartitionApplied) -> ObserverFuture<'a> {
        Box::pin(async {})
    }
}

impl PartitionGroups {
    /// Starts following the placement through `plane` (re-read at every catalog commit
    /// `status` shows, and every [`PLACEMENT_RECHECK`]) and, when the plane serves
    /// (`partitions.count` above 0), reporting the groups this node leads to the coordinator
    /// through `switchboard`.
    pub(in crate::node) fn start(
        config: &NodeConfig,
        cluster: &ClusterConfig,
        mesh: Arc<Mesh>,
        routed: Arc<RoutedState>,
        plane: Weak<dyn MetadataPlane>,
        status: watch::Receiver<PlaneStatus>,
        switchboard: Arc<Switchboard>,
    ) -> Result<Arc<PartitionGroups>, NodeError> {
        let dir = config.data_dir.join("partitions");
        std::fs::create_dir_all(&dir).map_err(|source| NodeError::DataDir {
            path: dir.clone(),
            source,
        })?;
        let groups = Arc::new(PartitionGroups {
            node: config.node_id.clone(),
            dir,
            tick: Duration::from_millis(cluster.tick_ms),
            checkpoint_interval_ops: cluster.checkpoint_interval_ops,
            mesh,
            routed,
            running: Mutex::default(),
        });
        tokio::spawn(follow_placement(Arc::downgrade(&groups), plane, status));
        if config.sharding.partitions.count > 0 {
            tokio::spawn(report_primaries(Arc::downgrade(&groups), switchboard));
        }
        Ok(groups)
    }

    /// This node's partition groups and how each sees itself.
    pub(in crate::node) fn here(&self) -> Vec<PartitionHere> {
        self.lock()
            .iter()
            .map(|(partition, running)| PartitionHere {
                partition: *partition,
                replicas: running.replicas.clone(),
                generation: running.generation,
                placed: running.placed.clone(),
                status: running.group.status(),
            })
            .collect()
    }

    /// This node's replica of `partition`, to commit through, if it runs one.
    pub(in crate::node) fn replica_state(
        &self,
        partition: u32,
    ) -> Option<Arc<tessera_state::partition::PartitionState>> {
        self.routed.state_of(partition)
    }

    /// The tables of this node's replica of `partition`, if it runs one.
    pub(in crate::node) fn replica_store(
        &self,
        partition: u32,
    ) -> Option<tessera_state::StateStore> {
        self.routed.store_of(partition)
    }

    /// Asks for the primary's role in the groups whose preferred primary (first voter) this
    /// node is and which another node leads — at most every [`PRIMARY_RECLAIM_EVERY`], and
    /// [`PRIMARY_RECLAIM_AFTER`] after the group started here. So primaries, and with them the
    /// partitions' shards, spread over the nodes again once a node that failed is back: a
    /// view change elects a successor when a primary dies, and nothing else moves it back.
    fn reclaim_preferred(&self) {
        let now = Instant::now();
        for running in self.lock().values_mut() {
            if running.replicas.first() != Some(&self.node) || now < running.reclaim_at {
                continue;
            }
            let status = running.group.status();
            let led_elsewhere = status
                .primary
                .as_ref()
                .is_some_and(|primary| *primary != self.node);
            if led_elsewhere && status.contact_age_ms.is_some() {
                running.group.take_primary();
                running.reclaim_at = now + PRIMARY_RECLAIM_EVERY;
            }
        }
    }

    /// The partitions whose groups this node leads, with the view it leads each in.
    fn led(&self) -> Vec<(u32, u64)> {
        self.lock()
            .iter()
            .filter_map(|(partition, running)| {
                let status = running.group.status();
                (status.primary.as_deref() == Some(self.node.as_str()))
                    .then_some((*partition, status.view))
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Running>> {
        self.running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts the groups of partitions placed here and notes placements that would change a
    /// running group's replicas. A running group is never stopped by the placement: until
    /// moves (VSR reconfiguration) are built its voters are fixed, and a placement that drops
    /// this node — a failure detector's verdict while it was stalled, say — must not take a
    /// voter away from a group that still counts on it. A node that leaves for good stops
    /// its groups with its process.
    fn reconcile(&self, placement: &BTreeMap<u32, (Vec<String>, u64)>) {
        let mut running = self.lock();
        for (partition, here) in running.iter_mut() {
            let placed = placement.get(partition).map(|(replicas, _)| replicas);
            let moved = match placed {
                Some(replicas) if same_set(replicas, &here.replicas) => None,
                Some(replicas) => Some(replicas.clone()),
                None => Some(Vec::new()),
            };
            if moved.is_some() && here.placed != moved {
                tracing::warn!(
                    partition,
                    running = ?here.replicas,
                    placed = ?moved,
                    "the placement moves this partition's replicas; moves are not built yet, \
                     so its group keeps its replicas"
                );
            }
            here.placed = moved;
        }
        for (partition, (replicas, generation)) in placement {
            if !replicas.contains(&self.node) || running.contains_key(partition) {
                continue;
            }
            let voters = group_voters(*partition, replicas);
            match self.start_group(*partition, &voters) {
                Ok(group) => {
                    running.insert(
                        *partition,
                        Running {
                            replicas: voters,
                            generation: *generation,
                            placed: None,
                            group,
                            reclaim_at: Instant::now() + PRIMARY_RECLAIM_AFTER,
                        },
                    );
                }
                Err(error) => {
                    tracing::error!(partition, %error, "this node's replica of the partition did not start");
                }
            }
        }
    }

    fn start_group(&self, partition: u32, replicas: &[String]) -> Result<Arc<Group>, String> {
        let group = partition_group(partition);
        let voters = group_voters(partition, replicas);
        let config = GroupConfig {
            tick: self.tick,
            checkpoint_interval_ops: self.checkpoint_interval_ops,
            sessions: PARTITION_SESSIONS,
            ..GroupConfig::new(group, voters.clone(), self.node.clone())
        };
        let (queue, inbound) = mpsc::channel(GROUP_INBOUND_MAX);
        let journal = self.dir.join(format!("p{partition}.journal"));
        let machine = PartitionMachine::create(&self.dir.join(format!("p{partition}.redb")))
            .map_err(|error| error.to_string())?;
        let store = machine.store().clone();
        let started = Group::start_voter(
            config,
            &journal,
            PartitionReplica::new(machine),
            Arc::new(Unobserved),
            self.mesh.clone(),
            inbound,
        )
        .map_err(|error| error.to_string())?;
        let started = Arc::new(started);
        let served = PartitionState::new(store, started.clone());
        self.routed.hold(partition, Arc::new(served));
        self.mesh.groups.materialise(group, queue);
        tracing::info!(
            partition,
            ?voters,
            "this node's replica of the partition started"
        );
        Ok(started)
    }
}

/// Reads the committed placement at every catalog commit (and every [`PLACEMENT_RECHECK`])
/// and reconciles the running groups with it, until the node is gone.
async fn follow_placement(
    groups: Weak<PartitionGroups>,
    plane: Weak<dyn MetadataPlane>,
    mut status: watch::Receiver<PlaneStatus>,
) {
    let mut last: Option<BTreeMap<u32, (Vec<String>, u64)>> = None;
    loop {
        let (Some(groups), Some(plane)) = (groups.upgrade(), plane.upgrade()) else {
            return;
        };
        match plane.store().partitions() {
            Ok(placed) => {
                let placement: BTreeMap<u32, (Vec<String>, u64)> = placed
                    .into_iter()
                    .map(|(partition, placed)| (partition, (placed.replicas, placed.generation)))
                    .collect();
                if last.as_ref() != Some(&placement) {
                    groups.reconcile(&placement);
                    last = Some(placement);
                }
            }
            Err(error) => tracing::warn!(%error, "reading the partition placement failed"),
        }
        drop((groups, plane));
        if let Ok(Err(_)) = tokio::time::timeout(PLACEMENT_RECHECK, status.changed()).await {
            // The plane's status is gone with it; the node is going too.
            tokio::time::sleep(PLACEMENT_RECHECK).await;
        }
    }
}
