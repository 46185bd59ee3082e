//! How a node becomes, and stops being, a member: the checks on its data directory, the start
//! of its side of the metadata plane (a voter's replica or a non-voting member's follower),
//! the join (`JoinMember`, then `Up`) retried until a quorum answers, and the graceful leave
//! of a non-voting member (`Leaving`, its entities stopped, `Exiting`, `Removed`).

use super::blob_transfer::BlobTransfer;
use super::dispatch::DispatchParts;
use super::mesh::{Mesh, plane_queue};
use super::peer_message::PeerMessage;
use super::queries::Asked;
use crate::node::catalog::NodeCatalog;
use crate::node::{ClusterConfig, Node, NodeConfig, NodeError};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_cluster::Inbound;
use tessera_metadata::replicated::{PlaneConfig, PlaneError, ReplicatedPlane};
use tessera_metadata::{
    Applied, Command, METADATA_GROUP, MemberRecord, MemberState, MetadataError, MetadataPlane,
    MetadataStore, PlaneStatus,
};
use tessera_sharding::Switchboard;
use tessera_sharding::lease::NodeLease;
use tokio::sync::{mpsc, watch};

/// How long a cluster node waits between tries to join while no quorum answers.
const JOIN_RETRY: Duration = Duration::from_millis(250);

/// Checks that the data directory may start as a node of `cluster`: one that was a node of
/// another cluster, or holds a single node's catalog (which the cluster's catalog would
/// replace), is refused with the reason rather than silently emptied. A voter whose journal is
/// gone starts forgetful: it recovers what it promised from the other voters before it votes
/// (`Replica::start_empty`), as on a new disk.
pub(in crate::node) fn check_data_dir(
    config: &NodeConfig,
    cluster: &ClusterConfig,
    metadata: &MetadataStore,
) -> Result<(), NodeError> {
    let marker = cluster_marker(config);
    let journal = metadata_journal(config);
    let voter = cluster.voters.contains(&config.node_id);
    let data_dir = config.data_dir.display();
    match std::fs::read_to_string(&marker) {
        Ok(id) if id.trim() != cluster.id => Err(NodeError::Config(format!(
            "{data_dir} belongs to cluster {}, not {}",
            id.trim(),
            cluster.id
        ))),
        Ok(_) if voter && !journal.exists() => {
            tracing::warn!(
                data_dir = %data_dir,
                journal = %journal.display(),
                "this voter's metadata journal is gone: it recovers from the other voters and \
                 votes in nothing until then"
            );
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(_) if metadata.applied_commands()? > 0 => Err(NodeError::Config(format!(
            "{data_dir} holds a single node's catalog: a node of cluster {} starts from an \
             empty data directory and takes its catalog from the cluster",
            cluster.id
        ))),
        Err(_) => Ok(()),
    }
}

/// Names the cluster this data directory belongs to (once its plane has started).
fn write_cluster_marker(config: &NodeConfig, cluster: &ClusterConfig) -> Result<(), NodeError> {
    std::fs::write(cluster_marker(config), &cluster.id).map_err(|source| NodeError::DataDir {
        path: cluster_marker(config),
        source,
    })
}

fn cluster_marker(config: &NodeConfig) -> PathBuf {
    config.data_dir.join("cluster")
}

fn metadata_journal(config: &NodeConfig) -> PathBuf {
    config.data_dir.join("metadata.journal")
}

/// What peers send this node: the transport's inbound messages, and the queue their queries
/// wait in for the node to answer them (`queries.rs`).
pub(in crate::node) struct Received {
    pub(in crate::node) inbound: Inbound<PeerMessage>,
    pub(in crate::node) queries: mpsc::Sender<Asked>,
}

/// Starts this node's side of the metadata plane over the mesh — a voter's replica, or a
/// non-voting member's follower — and the task that hands every received frame to the plane,
/// the region or the coordinator.
pub(in crate::node) fn start_plane(
    config: &NodeConfig,
    cluster: &ClusterConfig,
    metadata: MetadataStore,
    catalog: &Arc<NodeCatalog>,
    mesh: &Arc<Mesh>,
    received: Received,
    switchboard: &Arc<Switchboard>,
) -> Result<(Arc<dyn MetadataPlane>, watch::Receiver<PlaneStatus>), NodeError> {
    let blobs: Arc<BlobTransfer> = catalog.sources.transfer.clone().ok_or_else(|| {
        NodeError::Config("a cluster node moves plugin blobs over its mesh".into())
    })?;
    let (to_plane, plane_inbound) = plane_queue();
    let catalog_as_applied = metadata.clone();
    let plane_config = PlaneConfig {
        voters: cluster.voters.clone(),
        node: config.node_id.clone(),
        journal: metadata_journal(config),
        tick: Duration::from_millis(cluster.tick_ms),
        checkpoint_interval_ops: cluster.checkpoint_interval_ops,
    };
    let refused = |error: PlaneError| NodeError::Config(format!("metadata plane: {error}"));
    let start = if cluster.voters.contains(&config.node_id) {
        ReplicatedPlane::start
    } else {
        ReplicatedPlane::follow
    };
    let plane = start(
        plane_config,
        metadata,
        catalog.clone(),
        mesh.clone(),
        plane_inbound,
    )
    .map_err(refused)?;
    let status = plane.watch_status();
    let started: (Arc<dyn MetadataPlane>, _) = (Arc::new(plane), status);
    write_cluster_marker(config, cluster)?;
    mesh.groups.materialise(METADATA_GROUP, to_plane);
    let parts = DispatchParts {
        switchboard: Arc::downgrade(switchboard),
        catalog: catalog_as_applied,
        status: started.1.clone(),
        blobs,
        queries: received.queries,
    };
    tokio::spawn(mesh.clone().dispatch(received.inbound, parts));
    tokio::spawn(mesh.clone().send_progress(started.1.clone()));
    Ok(started)
}

/// Makes this node an up member of the catalog: joins (or, restarted, refreshes its
/// addresses) and promotes itself. A cluster node retries while no quorum answers, up to
/// its join timeout (the other voters may still be starting).
pub(in crate::node) async fn join_as_member(
    config: &NodeConfig,
    plane: &dyn MetadataPlane,
    lease: Option<&NodeLease>,
    catalog: &NodeCatalog,
) -> Result<(), NodeError> {
    let now_ms = crate::node::tenants::now_ms();
    let join = Command::JoinMember {
        node: config.node_id.clone(),
        cluster_address: config
            .cluster
            .as_ref()
            .map(|cluster| cluster.advertised().to_string())
            .unwrap_or_default(),
        api_address: config.http.to_string(),
        roles: advertised_roles(config),
        joined_ms: now_ms,
    };
    let joined = submit_patiently(config, plane, join).await?;
    if let Some(lease) = lease {
        // A lease before `Up`: the coordinator may give this node shards the moment `Up`
        // commits, and it must be able to serve them then.
        let deadline = Instant::now() + join_timeout(config);
        while let Err(error) = super::lease::renew(&config.node_id, plane, lease).await {
            if Instant::now() >= deadline {
                return Err(NodeError::Config(format!(
                    "no lease on this node's shards within the join timeout: {error}"
                )));
            }
            tokio::time::sleep(JOIN_RETRY).await;
        }
    }
    if let Applied::Member(member) = joined
        && member.state == MemberState::Joining
    {
        wait_for_plugins(catalog).await;
        let up = Command::SetMemberState {
            node: config.node_id.clone(),
            state: MemberState::Up,
            updated_ms: now_ms,
        };
        submit_patiently(config, plane, up).await?;
    }
    Ok(())
}

/// How long a joining node waits for the plugins of the types it was told of before it goes
/// up (and may be given shards); past it, it goes up anyway and fetches on.
const PLUGINS_BEFORE_UP_WAIT_MAX: Duration = Duration::from_secs(30);

/// Waits (bounded) until this node holds the plugin of every deployed type's active version,
/// so the shards it is given once up do not answer `unavailable` while it fetches them.
async fn wait_for_plugins(catalog: &NodeCatalog) {
    let deadline = Instant::now() + PLUGINS_BEFORE_UP_WAIT_MAX;
    while catalog.plugins_fetching() > 0 {
        if Instant::now() >= deadline {
            tracing::warn!(
                types = catalog.plugins_fetching(),
                "going up before every plugin arrived; their types answer unavailable until then"
            );
            return;
        }
        tokio::time::sleep(PLUGIN_POLL).await;
    }
}

/// How often a joining node looks again whether its plugins arrived.
const PLUGIN_POLL: Duration = Duration::from_millis(50);

fn join_timeout(config: &NodeConfig) -> Duration {
    config.cluster.as_ref().map_or(Duration::ZERO, |cluster| {
        Duration::from_millis(cluster.join_timeout_ms)
    })
}

/// The roles this node advertises: the cluster section's, or (a single node, or a cluster
/// section without roles) the sharding role constraint, so a node always qualifies for the
/// shards it is configured to host.
fn advertised_roles(config: &NodeConfig) -> std::collections::BTreeSet<String> {
    match &config.cluster {
        Some(cluster) if !cluster.roles.is_empty() => cluster.roles.iter().cloned().collect(),
        _ => config.sharding.role_constraint.iter().cloned().collect(),
    }
}

/// Submits `command`; in a cluster, tries again while the plane answers `Unavailable`, until
/// the join timeout.
async fn submit_patiently(
    config: &NodeConfig,
    plane: &dyn MetadataPlane,
    command: Command,
) -> Result<Applied, NodeError> {
    let Some(cluster) = &config.cluster else {
        return Ok(plane.submit(command).await?);
    };
    let deadline = Instant::now() + Duration::from_millis(cluster.join_timeout_ms);
    loop {
        match plane.submit(command.clone()).await {
            Err(MetadataError::Unavailable(reason)) if Instant::now() < deadline => {
                tracing::info!(%reason, "waiting for the cluster's voters to join");
                tokio::time::sleep(JOIN_RETRY).await;
            }
            Err(MetadataError::Unavailable(reason)) => {
                return Err(NodeError::Config(format!(
                    "could not join cluster {} within {} ms: {reason}",
                    cluster.id, cluster.join_timeout_ms
                )));
            }
            result => return Ok(result?),
        }
    }
}

/// How long a leaving node keeps forwarding after its last handoff was announced: envelopes
/// routed to it just before are passed on, not lost with the process.
pub const LEAVE_LINGER: Duration = Duration::from_millis(500);

/// What an operator may do to another member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberAction {
    /// Declares it down (it crashed, or is cut off): it owns no new shards, its lease renewals
    /// are refused, and the shards it owns wait for it (answered `shard_unavailable`). Its
    /// next join is refused until it is removed.
    Down,
    /// Removes a down or exiting member from the catalog, declaring the state of the shards it
    /// owns lost: once its lease has run out they restart empty on other nodes. It may join
    /// again later as a new member.
    Remove,
    /// Brings a leaving member back up (its leave could not hand its shards off): it serves
    /// what it still owns and may own new shards again.
    Up,
}

impl Node {
    /// Moves member `node` down or removes it: one committed `SetMemberState`. A step the
    /// member's life cycle does not allow (removing an up member, say) is refused.
    pub async fn act_on_member(
        &self,
        node: &str,
        action: MemberAction,
    ) -> Result<MemberRecord, NodeError> {
        let state = match action {
            MemberAction::Down => MemberState::Down,
            MemberAction::Remove => MemberState::Removed,
            MemberAction::Up => MemberState::Up,
        };
        let command = Command::SetMemberState {
            node: node.to_string(),
            state,
            updated_ms: crate::node::tenants::now_ms(),
        };
        match self.plane.submit(command).await? {
            Applied::Member(member) => {
                tracing::info!(%node, ?state, "member state set by an operator");
                Ok(member)
            }
            other => Err(NodeError::Catalog(MetadataError::Storage(format!(
                "a member command applied as {other:?}"
            )))),
        }
    }

    /// Leaves the cluster gracefully, if this node is a non-voting member: `Leaving` (no new
    /// shards come to it, and the coordinator hands every shard it owns to another node, state
    /// and buffered messages with it), then — once it holds no shard — its entities stopped,
    /// `Exiting`, `Removed`. A leave never removes a member that still owns state: when the
    /// handoffs do not finish within `cluster.leave_timeout_ms` (no other member may take the
    /// shards, or the target is cut off), the member stays `leaving` and this answers
    /// [`NodeError::LeaveIncomplete`] saying what it still holds; restarting it goes on
    /// leaving, and `tessera cluster up` brings it back. A voter stays a member (the voters are
    /// configuration) and a single node has no cluster to leave: for them this does nothing.
    pub async fn leave(&self) -> Result<(), NodeError> {
        let Some(cluster) = &self.config.cluster else {
            return Ok(());
        };
        if cluster.voters.contains(&self.config.node_id) {
            return Ok(());
        }
        let timeout = Duration::from_millis(cluster.leave_timeout_ms);
        for state in [
            MemberState::Leaving,
            MemberState::Exiting,
            MemberState::Removed,
        ] {
            if state == MemberState::Exiting {
                self.wait_for_handoffs(timeout).await?;
                self.entities.stop_all().await;
            }
            let step = Command::SetMemberState {
                node: self.config.node_id.clone(),
                state,
                updated_ms: crate::node::tenants::now_ms(),
            };
            self.plane.submit(step).await?;
            tracing::info!(node = %self.config.node_id, ?state, "leaving the cluster");
        }
        Ok(())
    }

    /// Waits until the committed table gives this node no shard, its region holds none and no
    /// partition's placement names it (as a replica, or a move away from it not settled);
    /// [`NodeError::LeaveIncomplete`] after `timeout`.
    async fn wait_for_handoffs(&self, timeout: Duration) -> Result<(), NodeError> {
        let deadline = Instant::now() + timeout;
        loop {
            let table = self.plane.store().shard_table()?;
            let owned = table
                .values()
                .filter(|allocation| allocation.node == self.config.node_id)
                .count();
            let held = self.region.held_shards();
            let handing_off = self
                .plane
                .store()
                .shard_handoffs()?
                .values()
                .filter(|from| **from == self.config.node_id)
                .count();
            // Its partition replicas move away first (with the plane serving): until a move
            // settled, its replica of the epoch left may still count for the seal.
            let replicas = self
                .plane
                .store()
                .partitions()?
                .values()
                .filter(|placed| {
                    let node = &self.config.node_id;
                    placed.replicas.contains(node) || placed.previous.contains(node)
                })
                .count();
            if owned == 0 && held == 0 && handing_off == 0 && replicas == 0 {
                // Every move is committed complete and announced; envelopes other regions
                // routed here before they heard are still forwarded for a moment.
                tokio::time::sleep(LEAVE_LINGER).await;
                return Ok(());
            }
            if Instant::now() >= deadline {
                let error = NodeError::LeaveIncomplete {
                    owned,
                    held,
                    replicas,
                    waited_ms: timeout.as_millis() as u64,
                };
                tracing::warn!(node = %self.config.node_id, %error, "the leave stops short: the member stays leaving");
                return Err(error);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
