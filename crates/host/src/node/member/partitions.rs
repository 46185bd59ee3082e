//! The partition plane's groups on this node: a voter of each partition the catalog places
//! here, started when its placement is applied (frames that came first were parked by the
//! mesh's group router and go to it in order), each with its journal under
//! `<data dir>/partitions/` and the partition machine (`tessera_state::partition`), ticking and
//! electing primaries over the mesh like the metadata plane's group, its voters in an order
//! every node derives alike from the replica set ([`group_voters`]).
//!
//! A group is one epoch of a partition: the placement's replica set, numbered
//! ([`PartitionReplicas::epoch`]). A placement that changes the set starts the next epoch's
//! group on its replicas, and this node carries out its part of the move (`moves`): it seals
//! the epoch it leaves, fills the new group from its sealed copy if it is in both, and drops
//! the old group once the coordinator settled the move. Each partition's newest group here that
//! is not still filling is held in the node's [`RoutedState`]: the entities of its partition
//! are read from this replica and committed through the group.

mod moves;

use super::mesh::Mesh;
use super::partition_map::PartitionMap;
use crate::node::{ClusterConfig, NodeConfig, NodeError};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tessera_consensus::group::{
    GROUP_INBOUND_MAX, Group, GroupConfig, GroupObserver, GroupStatus, ObserverFuture,
};
use tessera_metadata::{
    MetadataPlane, PartitionReplicas, PlaneStatus, group_voters, partition_group,
};
use tessera_sharding::{CoordinatorCommand, PRIMARY_REPORT_INTERVAL, Switchboard};
use tessera_state::partition::{
    PARTITION_TICK_FACTOR, PARTITION_TIMEOUTS, PartitionApplied, PartitionMachine,
    PartitionReplica, PartitionState, Phase, RoutedState,
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
    /// The group's epoch: its replica set's number (a move starts the next).
    pub epoch: u64,
    /// The voters its group runs with, in their replica order ([`group_voters`] of the
    /// placement it started under).
    pub replicas: Vec<String>,
    /// The placement generation it started under.
    pub generation: u64,
    /// `serving`; `filling` (a move's new group taking its state) or `sealed` (the group a
    /// move leaves, kept until the move settles).
    pub phase: &'static str,
    /// The group as this replica sees it: view, commit, primary, contact.
    pub status: GroupStatus,
}

/// Whether the catalog read through `plane` gives every allocated shard of a partition
/// (as `map` places shards) to one of some nodes.
fn shards_followed(
    plane: Weak<dyn MetadataPlane>,
    map: Arc<PartitionMap>,
) -> moves::ShardsFollowed {
    Arc::new(move |partition, nodes| {
        let plane = plane.upgrade()?;
        let table = plane.store().shard_table().ok()?;
        Some(
            table
                .iter()
                .filter(|(key, _)| map.of_shard(key) == Some(partition))
                .all(|(_, allocation)| nodes.contains(&allocation.node)),
        )
    })
}

/// How long a group runs here before this node, its preferred primary, asks for the primary's
/// role back: time to catch up after a restart.
const PRIMARY_RECLAIM_AFTER: Duration = Duration::from_secs(10);

/// How long after asking for the primary's role this node asks again, if it still does not
/// lead.
const PRIMARY_RECLAIM_EVERY: Duration = Duration::from_secs(30);

/// How long a group whose epoch is over keeps running here once its move settled (sealed,
/// refusing every entity op) before it stops and its files go: operations already on their way
/// to it are answered — refused as sealed, and followed to the next epoch where it runs here —
/// instead of cut off.
const RETIRE_GRACE: Duration = Duration::from_secs(5);

/// A running partition group: one epoch of a partition.
struct Running {
    /// Its voters, in their order ([`group_voters`]): the first is the preferred primary.
    replicas: Vec<String>,
    generation: u64,
    group: Arc<Group>,
    /// The replica the entity layer reads and commits through.
    state: Arc<PartitionState>,
    /// When this node may next ask for the primary's role, if it is the preferred primary.
    reclaim_at: Instant,
    /// This node's part of a move from this group (or, when nothing can fill it, to it),
    /// once started.
    leaving: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(leaving) = &self.leaving {
            leaving.abort();
        }
    }
}

/// A partition's group: `(partition, epoch)`.
type GroupKey = (u32, u64);

/// The partition groups this node runs.
pub(in crate::node) struct PartitionGroups {
    node: String,
    dir: PathBuf,
    tick: Duration,
    checkpoint_interval_ops: Option<u64>,
    mesh: Arc<Mesh>,
    /// Where the entity layer reads and commits: pointed at each partition's newest group here
    /// that is not filling (`route`), and released when its last stops.
    routed: Arc<RoutedState>,
    running: Mutex<BTreeMap<GroupKey, Running>>,
    /// Whether the catalog gives a partition's shards to a node (a move waits for it).
    shards_followed: moves::ShardsFollowed,
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
    /// through `switchboard`. Entities are read and committed through `routed`, whose
    /// partitions `map` says.
    pub(in crate::node) fn start(
        config: &NodeConfig,
        cluster: &ClusterConfig,
        mesh: Arc<Mesh>,
        (routed, map): (Arc<RoutedState>, Arc<PartitionMap>),
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
            tick: Duration::from_millis(cluster.tick_ms) * PARTITION_TICK_FACTOR,
            checkpoint_interval_ops: cluster.checkpoint_interval_ops,
            mesh,
            routed,
            running: Mutex::default(),
            shards_followed: shards_followed(plane.clone(), map),
        });
        tokio::spawn(follow_placement(Arc::downgrade(&groups), plane, status));
        if config.sharding.partitions.count() > 0 {
            tokio::spawn(report_primaries(Arc::downgrade(&groups), switchboard));
        }
        Ok(groups)
    }

    /// This node's partition groups and how each sees itself.
    pub(in crate::node) fn here(&self) -> Vec<PartitionHere> {
        self.lock()
            .iter()
            .map(|((partition, epoch), running)| PartitionHere {
                partition: *partition,
                epoch: *epoch,
                replicas: running.replicas.clone(),
                generation: running.generation,
                phase: match running.state.phase() {
                    Ok(Phase::Serving) => "serving",
                    Ok(Phase::Filling) => "filling",
                    Ok(Phase::Sealed) => "sealed",
                    Err(_) => "unreadable",
                },
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
            if running.replicas.first() != Some(&self.node)
                || now < running.reclaim_at
                || running.state.phase() != Ok(Phase::Serving)
            {
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

    /// The serving groups this node leads: `(partition, epoch, view)`.
    fn led(&self) -> Vec<(u32, u64, u64)> {
        self.lock()
            .iter()
            .filter_map(|((partition, epoch), running)| {
                let status = running.group.status();
                let leads = status.primary.as_deref() == Some(self.node.as_str());
                (leads && running.state.phase() == Ok(Phase::Serving)).then_some((
                    *partition,
                    *epoch,
                    status.view,
                ))
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<GroupKey, Running>> {
        self.running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Brings the groups here in line with the committed placement: starts the current
    /// epoch's group of each partition placed here; keeps (or, after a restart, starts again
    /// from its files) the group of the epoch a move leaves while the move has not settled,
    /// and carries out this node's part of it (`moves`); drops a group once a later epoch's
    /// move settled. A group whose partition the placement no longer names, or names at an
    /// older epoch, is left as it is: a failure detector's verdict while this node was
    /// stalled must not take a voter away from a group that counts on it.
    fn reconcile(&self, placement: &BTreeMap<u32, PartitionReplicas>) {
        let mut running = self.lock();
        for (partition, placed) in placement {
            let current = (*partition, placed.epoch);
            if placed.replicas.contains(&self.node) && !running.contains_key(&current) {
                self.run_group(&mut running, current, &placed.replicas, placed.generation);
            }
            let moving = placed.epoch > 0 && !placed.previous.is_empty();
            let leaving = (*partition, placed.epoch.wrapping_sub(1));
            if moving
                && placed.previous.contains(&self.node)
                && !running.contains_key(&leaving)
                && self.journal(leaving).exists()
            {
                // Restarted mid-move: the sealed copy may be what fills the new group.
                self.run_group(&mut running, leaving, &placed.previous, placed.generation);
            }
            if moving {
                self.carry_out_move(&mut running, *partition, placed);
            }
        }
        let retired: Vec<GroupKey> = running
            .keys()
            .filter(|(partition, epoch)| {
                placement.get(partition).is_some_and(|placed| {
                    let settled_past = *epoch + 1 == placed.epoch && placed.previous.is_empty();
                    settled_past || *epoch + 1 < placed.epoch
                })
            })
            .copied()
            .collect();
        for key in retired {
            if let Some(gone) = running.remove(&key) {
                self.retire(key, gone);
            }
        }
    }

    /// Starts this node's part of `partition`'s move to `placed` (once): see `moves`.
    fn carry_out_move(
        &self,
        running: &mut BTreeMap<GroupKey, Running>,
        partition: u32,
        placed: &PartitionReplicas,
    ) {
        let new = running
            .get(&(partition, placed.epoch))
            .map(|running| (running.state.clone(), running.group.clone()));
        let here_before = placed.previous.contains(&self.node);
        let filled_by_none = !placed
            .previous
            .iter()
            .any(|node| placed.replicas.contains(node));
        let old_key = (partition, placed.epoch - 1);
        // The replica of both epochs first in the new group's order leads the move (`moves`).
        let voters = group_voters(partition, &placed.replicas);
        let leader = voters
            .iter()
            .find(|node| placed.previous.contains(node))
            .cloned()
            .unwrap_or_default();
        let job = |old: Option<&Running>, new| moves::Move {
            partition,
            old: old.map(|old| (old.state.clone(), old.group.clone())),
            new,
            replicas: placed.replicas.clone(),
            node: self.node.clone(),
            leader: leader.clone(),
            routed: self.routed.clone(),
            shards_followed: self.shards_followed.clone(),
        };
        if let Some(old) = running.get(&old_key) {
            if old.leaving.is_none() {
                let task = tokio::spawn(job(Some(old), new).run());
                if let Some(old) = running.get_mut(&old_key) {
                    old.leaving = Some(task);
                }
            }
        } else if filled_by_none && !here_before {
            // Every replica before was removed: nothing can fill the new group, which opens
            // empty (what they held is lost with them, as their removal said).
            let key = (partition, placed.epoch);
            if running
                .get(&key)
                .is_some_and(|group| group.leaving.is_none())
            {
                let task = tokio::spawn(job(None, new).run());
                if let Some(group) = running.get_mut(&key) {
                    group.leaving = Some(task);
                }
            }
        }
    }

    /// Points the entity layer at the newest group of `partition` here that serves — or, if
    /// none does yet, the newest. A move's new group is read only once it is open: an
    /// instance built from the old group's copy reads on from that copy (sealed, so final)
    /// until then, never from a half-filled one whose stamps would match once it opened.
    fn route(&self, running: &BTreeMap<GroupKey, Running>, partition: u32) {
        let groups: Vec<&Running> = running
            .range((partition, 0)..=(partition, u64::MAX))
            .map(|(_, group)| group)
            .rev()
            .collect();
        let serving = groups
            .iter()
            .find(|group| group.state.phase() != Ok(Phase::Filling));
        if let Some(group) = serving.or(groups.first()) {
            self.routed.hold(partition, group.state.clone());
        }
    }

    /// Stops a group whose epoch is over here — after [`RETIRE_GRACE`] — and removes its
    /// files; the entity layer stops going through it at once.
    fn retire(&self, key: GroupKey, gone: Running) {
        let (partition, epoch) = key;
        if self
            .routed
            .state_of(partition)
            .is_some_and(|held| Arc::ptr_eq(&held, &gone.state))
        {
            self.routed.release(partition);
        }
        let files = [self.journal(key), self.database(key)];
        let mesh = self.mesh.clone();
        tokio::spawn(async move {
            tokio::time::sleep(RETIRE_GRACE).await;
            drop(gone);
            mesh.groups.remove(partition_group(partition, epoch));
            for path in files {
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                    Err(error) => {
                        tracing::warn!(partition, epoch, path = %path.display(), %error, "a moved partition's old file was not removed");
                    }
                }
            }
            tracing::info!(
                partition,
                epoch,
                "this node's replica of a partition's past epoch was dropped: its move settled"
            );
        });
    }

    /// The journal of a partition's group: epoch 0's under the name it had before moves.
    fn journal(&self, (partition, epoch): GroupKey) -> PathBuf {
        match epoch {
            0 => self.dir.join(format!("p{partition}.journal")),
            _ => self.dir.join(format!("p{partition}e{epoch}.journal")),
        }
    }

    /// The partition machine's database of a partition's group.
    fn database(&self, (partition, epoch): GroupKey) -> PathBuf {
        match epoch {
            0 => self.dir.join(format!("p{partition}.redb")),
            _ => self.dir.join(format!("p{partition}e{epoch}.redb")),
        }
    }

    /// Starts the group `key` among `replicas` and records it in `running`; the newest epoch
    /// of its partition here is the one the entity layer goes through.
    fn run_group(
        &self,
        running: &mut BTreeMap<GroupKey, Running>,
        key: GroupKey,
        replicas: &[String],
        generation: u64,
    ) {
        let (partition, epoch) = key;
        match self.start_group(key, replicas) {
            Ok((group, state)) => {
                running.insert(
                    key,
                    Running {
                        replicas: group_voters(partition, replicas),
                        generation,
                        group,
                        state,
                        reclaim_at: Instant::now() + PRIMARY_RECLAIM_AFTER,
                        leaving: None,
                    },
                );
                // An operation a sealed epoch refuses goes on to the next one here.
                let state = |epoch| running.get(&(partition, epoch)).map(|r| r.state.clone());
                let before = epoch.checked_sub(1).and_then(state);
                if let (Some(before), Some(this)) = (before, state(epoch)) {
                    before.succeeded_by(this);
                }
                if let (Some(this), Some(after)) = (state(epoch), state(epoch + 1)) {
                    this.succeeded_by(after);
                }
                self.route(running, partition);
            }
            Err(error) => {
                tracing::error!(partition, epoch, %error, "this node's replica of the partition did not start");
            }
        }
    }

    fn start_group(
        &self,
        key: GroupKey,
        replicas: &[String],
    ) -> Result<(Arc<Group>, Arc<PartitionState>), String> {
        let (partition, epoch) = key;
        let group = partition_group(partition, epoch);
        let voters = group_voters(partition, replicas);
        let config = GroupConfig {
            tick: self.tick,
            checkpoint_interval_ops: self.checkpoint_interval_ops,
            sessions: PARTITION_SESSIONS,
            timeouts: PARTITION_TIMEOUTS,
            ..GroupConfig::new(group, voters.clone(), self.node.clone())
        };
        let (queue, inbound) = mpsc::channel(GROUP_INBOUND_MAX);
        let mut machine =
            PartitionMachine::open(&self.database(key)).map_err(|error| error.to_string())?;
        if epoch > 0 {
            // A move's new group: it serves once a sealed copy filled it.
            machine = machine.filling().map_err(|error| error.to_string())?;
        }
        let store = machine.store().clone();
        let started = Group::start_voter(
            config,
            &self.journal(key),
            PartitionReplica::new(machine),
            Arc::new(Unobserved),
            self.mesh.clone(),
            inbound,
        )
        .map_err(|error| error.to_string())?;
        let started = Arc::new(started);
        let served = Arc::new(PartitionState::new(store, started.clone()));
        self.mesh.groups.materialise(group, queue);
        tracing::info!(
            partition,
            epoch,
            ?voters,
            "this node's replica of the partition started"
        );
        Ok((started, served))
    }
}

/// Reads the committed placement at every catalog commit (and every [`PLACEMENT_RECHECK`])
/// and reconciles the running groups with it, until the node is gone.
async fn follow_placement(
    groups: Weak<PartitionGroups>,
    plane: Weak<dyn MetadataPlane>,
    mut status: watch::Receiver<PlaneStatus>,
) {
    let mut last: Option<BTreeMap<u32, PartitionReplicas>> = None;
    loop {
        let (Some(groups), Some(plane)) = (groups.upgrade(), plane.upgrade()) else {
            return;
        };
        match plane.store().partitions() {
            Ok(placement) => {
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
