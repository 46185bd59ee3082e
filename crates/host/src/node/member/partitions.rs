//! The partition plane's groups on this node: a voter of each partition the catalog places
//! here, started when its placement is applied (frames that came first were parked by the
//! mesh's group router and go to it in order), each with its journal under
//! `<data dir>/partitions/` and the partition machine (`tessera_state::partition`), ticking and
//! electing primaries over the mesh like the metadata plane's group. A partition placed away
//! from this node stops here (its journal stays: a later placement back starts from it).
//!
//! Each running group is held in the node's [`RoutedState`]: the entities of its partition are
//! read from this replica and committed through the group. A group keeps the replicas it
//! started with — a placement that changes them is shown beside the running set
//! ([`PartitionHere`]) until moves (VSR reconfiguration) are built.

use super::mesh::Mesh;
use crate::node::{ClusterConfig, NodeConfig, NodeError};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tessera_consensus::group::{
    GROUP_INBOUND_MAX, Group, GroupConfig, GroupObserver, GroupStatus, ObserverFuture,
};
use tessera_contract::EntityAddress;
use tessera_metadata::{MetadataPlane, PlaneStatus, group_voters, partition_group};
use tessera_sharding::{FnvExtractor, ShardExtractor};
use tessera_state::partition::{
    PartitionApplied, PartitionMachine, PartitionOf, PartitionReplica, PartitionState, RoutedState,
};
use tokio::sync::{mpsc, watch};

/// How often the placement is read again when no catalog commit woke the task (a commit
/// wakes it at once).
const PLACEMENT_RECHECK: Duration = Duration::from_secs(1);

/// Client sessions a partition's member opens: operations of this node in flight at once,
/// once entity writes go through the group.
const PARTITION_SESSIONS: usize = 8;

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
    /// The committed placement, when it differs from `replicas` (a move not applied: moves
    /// are not built yet).
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

/// A running partition group.
struct Running {
    replicas: Vec<String>,
    generation: u64,
    placed: Option<Vec<String>>,
    group: Arc<Group>,
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
    /// `status` shows, and every [`PLACEMENT_RECHECK`]).
    pub(in crate::node) fn start(
        config: &NodeConfig,
        cluster: &ClusterConfig,
        mesh: Arc<Mesh>,
        routed: Arc<RoutedState>,
        plane: Weak<dyn MetadataPlane>,
        status: watch::Receiver<PlaneStatus>,
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

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Running>> {
        self.running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts the groups of partitions placed here, stops those placed away, and notes
    /// placements that would move a running group's replicas.
    fn reconcile(&self, placement: &BTreeMap<u32, (Vec<String>, u64)>) {
        let mut running = self.lock();
        let gone: Vec<u32> = running
            .keys()
            .filter(|partition| {
                placement
                    .get(partition)
                    .is_none_or(|(replicas, _)| !replicas.contains(&self.node))
            })
            .copied()
            .collect();
        for partition in gone {
            self.routed.release(partition);
            running.remove(&partition);
            self.mesh.groups.remove(partition_group(partition));
            tracing::info!(
                partition,
                "this node's replica of the partition stopped: placed away"
            );
        }
        for (partition, (replicas, generation)) in placement {
            if !replicas.contains(&self.node) {
                continue;
            }
            if let Some(here) = running.get_mut(partition) {
                let moved =
                    (here.replicas != group_voters(*partition, replicas)).then(|| replicas.clone());
                if moved.is_some() && here.placed != moved {
                    tracing::warn!(
                        partition,
                        running = ?here.replicas,
                        placed = ?replicas,
                        "the placement moves this partition's replicas; moves are not built yet, \
                         so its group keeps its replicas"
                    );
                }
                here.placed = moved;
                continue;
            }
            match self.start_group(*partition, replicas) {
                Ok(group) => {
                    running.insert(
                        *partition,
                        Running {
                            replicas: group_voters(*partition, replicas),
                            generation: *generation,
                            placed: None,
                            group,
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
