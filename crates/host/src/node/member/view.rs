//! The operators' view of the cluster from this node: every committed member with its state,
//! roles and the shards it owns, and where the metadata plane is (view, commit number,
//! primary, voters). `GET /v1/cluster`, `tessera cluster status` and `/metrics` read it.

use crate::node::metric_families::{Kind, Sample, Snapshot};
use crate::node::{Node, NodeError};
use serde::Serialize;
use std::collections::BTreeMap;
use tessera_metadata::{Command, MemberRecord, MemberState};

/// One member as the cluster view shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemberView {
    /// The committed record.
    #[serde(flatten)]
    pub record: MemberRecord,
    /// Shards the committed allocation table gives it.
    pub shards: u64,
    /// Catalog commands it has applied, as it last told the answering node (reported every
    /// second; the answering node's own for itself; none before a member first reported).
    pub commit: Option<u64>,
    /// How many commands it trails the most advanced member known here.
    pub lag: Option<u64>,
    /// Whether the answering node trusts it now: false while the phi accrual failure detector
    /// suspects it (its progress reports stopped for longer than their rhythm explains) or its
    /// connection has been down longer than the peer-down grace (3 s), as the coordinator's
    /// view on this node has it (brought in step every 500 ms). Observed, not committed: the
    /// member's state does not change by it, but an unreachable member is given no new shards.
    pub reachable: bool,
}

/// The cluster as this node sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClusterStatus {
    /// The node answering.
    pub node: String,
    /// Every member, by node id.
    pub members: Vec<MemberView>,
    /// The nodes that vote on catalog commands.
    pub voters: Vec<String>,
    /// The node ordering catalog commands now, if known.
    pub primary: Option<String>,
    /// The metadata plane's view number.
    pub view: u64,
    /// Catalog commands this node has applied.
    pub commit: u64,
    /// How old this node's word on `primary` and `view` is: milliseconds since it last knew
    /// itself part of a working metadata plane (as primary, acknowledged by a quorum; as a
    /// backup, heard from its primary). `None` while it knows none (a view change), and for a
    /// single node (which orders its own commands, so its word is always current).
    pub contact_age_ms: Option<u64>,
    /// The partition plane's placement as committed (`docs/partitions.md`): empty while
    /// `sharding.partitions.count` is 0. The plane's groups do not run yet, so a partition has
    /// a preferred primary, not a view or a commit number.
    pub partitions: Vec<PartitionView>,
}

/// One partition's committed placement, and its group as this node's replica sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionView {
    /// The partition.
    pub partition: u32,
    /// Its replicas, the preferred primary first.
    pub replicas: Vec<String>,
    /// The placement's generation.
    pub generation: u64,
    /// The replica set's epoch (a move starts the next).
    pub epoch: u64,
    /// The replicas a move to this epoch leaves, until it settles (empty: no move under way).
    pub moving_from: Vec<String>,
    /// Its current epoch's group as this node's replica sees it — primary, view, commit, and where this node
    /// is the primary each replica's lag; `None` where this node holds no replica of it.
    pub group: Option<tessera_consensus::group::GroupStatus>,
}

impl Node {
    /// The cluster as this node sees it: committed members and the metadata plane's progress.
    /// Read from the local catalog, so it may trail the primary by the commands in flight.
    pub async fn cluster_status(&self) -> Result<ClusterStatus, NodeError> {
        let table = self.plane.store().shard_table()?;
        let mut shards: BTreeMap<String, u64> = BTreeMap::new();
        for allocation in table.values() {
            *shards.entry(allocation.node.clone()).or_default() += 1;
        }
        let unreachable = self
            .mesh
            .as_ref()
            .map(|mesh| mesh.unreachable())
            .unwrap_or_default();
        // For members that may own shards, the view the coordinator allocates by.
        let view = self.membership.snapshot();
        let reachable = |node: &str| match view.members().find(|member| member.node == node) {
            Some(member) => member.reachable,
            None => !unreachable.iter().any(|peer| peer == node),
        };
        let plane = self.plane.status();
        let mut progress = self
            .mesh
            .as_ref()
            .map(|mesh| mesh.progress())
            .unwrap_or_default();
        progress.insert(self.config.node_id.clone(), plane.commit);
        let newest = progress.values().copied().max().unwrap_or(0);
        let members = self
            .plane
            .store()
            .members()?
            .into_iter()
            .map(|record| {
                let commit = progress.get(&record.node).copied();
                MemberView {
                    shards: shards.get(&record.node).copied().unwrap_or(0),
                    reachable: reachable(&record.node),
                    commit,
                    lag: commit.map(|commit| newest.saturating_sub(commit)),
                    record,
                }
            })
            .collect();
        // A single node's plane has no voters: the node orders its own commands.
        let (voters, primary) = if plane.voters.is_empty() {
            let this = self.config.node_id.clone();
            (vec![this.clone()], Some(this))
        } else {
            (plane.voters, plane.primary)
        };
        let mut groups: BTreeMap<(u32, u64), _> = self
            .partitions_here()
            .into_iter()
            .map(|here| ((here.partition, here.epoch), here.status))
            .collect();
        let partitions = self
            .plane
            .store()
            .partitions()?
            .into_iter()
            .map(|(partition, placed)| PartitionView {
                partition,
                replicas: placed.replicas,
                generation: placed.generation,
                epoch: placed.epoch,
                moving_from: placed.previous,
                group: groups.remove(&(partition, placed.epoch)),
            })
            .collect();
        Ok(ClusterStatus {
            partitions,
            node: self.config.node_id.clone(),
            members,
            voters,
            primary,
            view: plane.view,
            commit: plane.commit,
            contact_age_ms: plane.contact_age_ms,
        })
    }
}

impl Node {
    /// Makes the next catalog read on this node linearizable: in a cluster, a barrier command
    /// commits through the primary and is applied here before this returns, so a read after
    /// it sees every write acknowledged before the call. A single node's catalog is
    /// linearizable already.
    pub async fn sync_catalog(&self) -> Result<(), NodeError> {
        if self.config.cluster.is_some() {
            self.plane.submit(Command::Barrier).await?;
        }
        Ok(())
    }
}

impl Node {
    /// Members by state and the metadata plane's progress, for `/metrics`.
    pub(in crate::node) fn snapshot_cluster(&self, snapshot: &mut Snapshot) {
        match self.plane.store().members() {
            Ok(members) => {
                let by_state = snapshot.family(
                    "tessera_cluster_members",
                    "Committed cluster members, by life-cycle state.",
                    Kind::Gauge,
                );
                for state in MemberState::ALL {
                    let count = members
                        .iter()
                        .filter(|member| member.state == state)
                        .count();
                    by_state.push(Sample::gauge(
                        vec![("state", state.as_str().to_string())],
                        count as i64,
                    ));
                }
            }
            Err(error) => tracing::warn!(%error, "members could not be read for metrics"),
        }
        let plane = self.plane.status();
        snapshot
            .family(
                "tessera_metadata_commit",
                "Catalog commands this node has applied (its commit number).",
                Kind::Gauge,
            )
            .push(Sample::gauge(Vec::new(), plane.commit as i64));
        snapshot
            .family(
                "tessera_metadata_view",
                "The metadata plane's consensus view (0 on a single node).",
                Kind::Gauge,
            )
            .push(Sample::gauge(Vec::new(), plane.view as i64));
        snapshot
            .family(
                "tessera_metadata_checkpoints",
                "Metadata-plane checkpoints this voter took since it started.",
                Kind::Counter,
            )
            .push(Sample::counter(Vec::new(), plane.checkpoints_taken));
        snapshot
            .family(
                "tessera_metadata_states_installed",
                "Checkpoints this node installed since it started (state transfer, or a \
                 follower's catch-up past the voters' trimmed log).",
                Kind::Counter,
            )
            .push(Sample::counter(Vec::new(), plane.states_installed));
        if let Some(mesh) = &self.mesh {
            let newest = mesh.progress().into_values().max().unwrap_or(0);
            snapshot
                .family(
                    "tessera_metadata_lag",
                    "Catalog commands this node trails the most advanced peer it hears from.",
                    Kind::Gauge,
                )
                .push(Sample::gauge(
                    Vec::new(),
                    newest.saturating_sub(plane.commit) as i64,
                ));
            snapshot
                .family(
                    "tessera_cluster_unreachable_members",
                    "Members this node cannot reach now (disconnected past the peer-down grace).",
                    Kind::Gauge,
                )
                .push(Sample::gauge(Vec::new(), mesh.unreachable().len() as i64));
            mesh.snapshot(snapshot);
        }
        self.snapshot_partitions(snapshot);
    }

    /// The partition groups this node runs: how many, how many it leads, and how many know of
    /// no working group now (a view change, or cut off).
    fn snapshot_partitions(&self, snapshot: &mut Snapshot) {
        let groups = self.partitions_here();
        let leading = groups
            .iter()
            .filter(|group| group.status.primary.as_deref() == Some(&self.config.node_id))
            .count();
        let out_of_contact = groups
            .iter()
            .filter(|group| {
                group
                    .status
                    .contact_age_ms
                    .is_none_or(|age| age > PARTITION_CONTACT_STALE_MS)
            })
            .count();
        // Groups here in a move: a new epoch still filling, or the epoch a move leaves.
        let moving = groups
            .iter()
            .filter(|group| group.phase != "serving")
            .count();
        let fetching = groups
            .iter()
            .filter(|group| group.status.fetching_state)
            .count();
        let installed: u64 = groups
            .iter()
            .map(|group| group.status.states_installed)
            .sum();
        // The most ops any replica of a group this node leads has not acknowledged (unknown
        // lags, of replicas that acknowledged nothing since a view change, are left out).
        let lag_max = groups
            .iter()
            .flat_map(|group| group.status.lag.iter().flatten())
            .max()
            .copied()
            .unwrap_or(0);
        for (name, help, value) in [
            (
                "tessera_partition_groups",
                "Partition groups this node runs a replica of.",
                groups.len() as u64,
            ),
            (
                "tessera_partition_groups_leading",
                "Partition groups whose primary is this node.",
                leading as u64,
            ),
            (
                "tessera_partition_groups_out_of_contact",
                "Partition groups whose replica here knows of no working group (a view change \
                 under way, or cut off for more than a second).",
                out_of_contact as u64,
            ),
            (
                "tessera_partition_groups_moving",
                "Partition groups this node runs that are in a move: a new epoch's group still \
                 taking its state, or the sealed group of the epoch a move leaves.",
                moving as u64,
            ),
            (
                "tessera_partition_groups_fetching_state",
                "Partition groups whose replica here is fetching a checkpoint from a peer (a \
                 state transfer in parts: it lost its disk, or fell behind what the peers' logs \
                 hold).",
                fetching as u64,
            ),
            (
                "tessera_partition_states_installed",
                "Checkpoints the partition groups running here installed from peers since they \
                 started.",
                installed,
            ),
            (
                "tessera_partition_replica_lag_max",
                "The most ops a replica of a partition group this node leads has not acknowledged.",
                lag_max,
            ),
        ] {
            snapshot
                .family(name, help, Kind::Gauge)
                .push(Sample::gauge(Vec::new(), value as i64));
        }
    }
}

/// How old a partition replica's last contact with its group may be before the metrics count
/// it out of contact (a primary hears its backups, and they it, every few ticks).
const PARTITION_CONTACT_STALE_MS: u64 = 1_000;
