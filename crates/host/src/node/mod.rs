//! A node: every layer built in one pass over one data directory (`build`, with its settings in
//! `config`), and the operations the API and CLI offer — tenants and tokens (`tenants`),
//! deploys, rollbacks and deletes (`deploy`), backups and restores (`backup`), what the dashboard shows (`overview`), messages to entities and inspection
//! (`messages`), listing a type's entities across the cluster (`listing`), metrics (`metrics`, `metric_families`, and the HTTP edge's counters in `edge`).
//! Catalog changes go through the metadata plane; its one observer (`catalog`) updates what
//! the layers below run, so live entities switch version at their next message boundary.
//!
//! Two parts have folders of their own: how client messages reach entities cheaply
//! (`sending`: [`EntityRef`], the routes kept per sender thread, the tenants' rate buckets),
//! and this node as a member of a cluster (`member`: the mesh, joining and leaving, the
//! shard lease, the coordinator's seat, the cluster view).

mod backup;
mod build;
mod catalog;
mod config;
mod deploy;
mod edge;
mod error;
mod listing;
mod member;
mod messages;
mod metric_families;
mod metrics;
mod overview;
mod sending;
mod tenants;

pub use backup::{BACKUP_FRAMES_QUEUED_MAX, BackupFrame, RESTORE_SEQUENCE_LEAP};
pub use config::{
    API_CONNECTIONS_MAX_LIMIT, API_TIMEOUT_MS_LIMIT, ApiLimits, ClusterConfig, NodeConfig,
};
pub use deploy::TypeReplicas;
pub use edge::{EdgeCounters, EdgeSnapshot};
pub use error::NodeError;
pub use listing::{
    ENTITY_LIST_LIMIT_DEFAULT, ENTITY_LIST_LIMIT_MAX, EntityPage, ListAnswer, ListRequest,
};
pub use member::joining::MemberAction;
pub use member::partitions::PartitionHere;
pub use member::peer_message::PeerMessage;
pub use member::readiness::{READY_CONTACT_AGE_MS_MAX, Readiness};
pub use member::view::{ClusterStatus, MemberView};
pub use messages::{ENTITY_ENTRIES_MAX, TypeStatus};
pub use metrics::METRICS_CONTENT_TYPE;
pub use overview::{
    NodeOverview, OVERVIEW_PEER_TIMEOUT, Overview, ShardMove, TypeOverview, Unanswered,
};
pub use sending::entity_ref::EntityRef;
pub use sending::rate::RateLimiter;
pub use sending::routes::{SENDER_ROUTES_PER_THREAD, SENDER_ROUTES_PER_THREAD_LIMIT};
pub use tenants::{Principal, token_hash};

use catalog::NodeCatalog;
use std::sync::Arc;
use tessera_entity::Entities;
use tessera_metadata::MetadataPlane;
use tessera_runtime::Runtime;
use tessera_sharding::{Membership, RegionHandle};
use tessera_state::LocalState;
use tessera_state::remember::RememberWriter;

/// A running node.
pub struct Node {
    config: NodeConfig,
    admin_token_sha256: String,
    runtime: Arc<Runtime>,
    state: Arc<LocalState>,
    catalog: Arc<NodeCatalog>,
    plane: Arc<dyn MetadataPlane>,
    entities: Entities,
    region: RegionHandle,
    /// Where the shard coordinator runs: always here, or (in a cluster) on the metadata
    /// primary.
    _seat: member::seat::CoordinatorSeat,
    /// The connections to the other nodes of the cluster, if this node is in one.
    mesh: Option<Arc<member::mesh::Mesh>>,
    /// The partition plane's groups this node runs, if it is in a cluster.
    partitions: Option<Arc<member::partitions::PartitionGroups>>,
    /// Which partition each entity and shard lives in (the plane on).
    partition_map: Arc<member::partition_map::PartitionMap>,
    /// The membership view the coordinator follows; the catalog updates it through a weak
    /// handle, so dropping the node ends the coordinator.
    membership: Arc<Membership>,
    remember: RememberWriter,
    /// Reads this node's pages of entity ids, for the API and for peers.
    listing: Arc<listing::EntityListing>,
    deploy_lock: tokio::sync::Mutex<()>,
    rate: RateLimiter,
    /// Each thread's resolved routes for its messages by address.
    sender_routes: sending::routes::SenderRoutes,
    quota_rejections: metrics::QuotaRejections,
    edge: EdgeCounters,
}

impl Node {
    /// The configuration the node runs with.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The node's entities (for embedding and tests).
    pub fn entities(&self) -> &Entities {
        &self.entities
    }

    /// The node's sharding region (for embedding and benchmarks).
    pub fn region(&self) -> &RegionHandle {
        &self.region
    }

    /// The counters of the HTTP edge, which the api bumps and `/metrics` reads.
    pub fn edge_counters(&self) -> &EdgeCounters {
        &self.edge
    }

    /// The address this node's cluster listener is bound to (`None` outside a cluster).
    pub fn cluster_addr(&self) -> Option<std::net::SocketAddr> {
        self.mesh.as_ref().map(|mesh| mesh.local_addr())
    }

    /// The node's wasm runtime.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The partition groups this node runs, each as its replica here sees it (empty outside a
    /// cluster, and while the partition plane is off).
    pub fn partitions_here(&self) -> Vec<PartitionHere> {
        self.partitions
            .as_ref()
            .map(|partitions| partitions.here())
            .unwrap_or_default()
    }
}
