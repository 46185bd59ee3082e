//! Building a node in one pass: database, state, catalog, runtime, entities and region (built
//! together, the region handing the entities their router), the catalog observer, the metadata
//! plane, membership and the coordinator's seat — each part constructed once with everything
//! it needs, nothing wired afterwards. A cluster node also starts its mesh first (the
//! switchboard's way to other nodes) and runs the replicated plane over it.

use super::catalog::{BLOB_GARBAGE_EVERY, MemberFollowers, NodeCatalog, PluginSources};
use super::listing::EntityListing;
use super::member::blob_transfer::BlobTransfer;
use super::member::joining;
use super::member::layout;
use super::member::mesh::Mesh;
use super::member::partition_map::PartitionMap;
use super::member::partitions::PartitionGroups;
use super::member::queries;
use super::member::seat::{CoordinatorSeat, SeatParts};
use super::{EdgeCounters, Node, NodeConfig, NodeError, RateLimiter, token_hash};
use std::sync::Arc;
use tessera_cluster::handshake::ShardLayout;
use tessera_entity::{Entities, EntityParts, TypeTable};
use tessera_metadata::{BlobStore, LocalPlane, MetadataStore};
use tessera_runtime::{Runtime, RuntimeConfig};
use tessera_sharding::lease::{LeaseConfig, NodeLease};
use tessera_sharding::{LocalEntities, Membership, Region, RegionParts, ShardMoves, Switchboard};
use tessera_state::partition::{RoutedRemember, RoutedState};
use tessera_state::remember::RememberWriter;
use tessera_state::{EntityState, LocalState, RememberStore, ShardStates, StateStore};

impl Node {
    /// Opens the node's data directory, loads its tenants and types and makes it ready to
    /// serve. `admin_token` must be set (from config or the environment).
    pub async fn open(mut config: NodeConfig) -> Result<Arc<Node>, NodeError> {
        config.validate().map_err(NodeError::Config)?;
        if let Some(cluster) = &config.cluster {
            // Each node keeps its shards' state: shards move with it, by handoff.
            config.sharding.moves = ShardMoves::OwnerHoldsState(LeaseConfig::default());
            config.sharding.partitions.voters = Some(cluster.voters.len());
        }
        // The partition plane serves by default in a cluster and is off on a single node.
        config.sharding.partitions.resolve(config.cluster.is_some());
        let admin_token = config.admin_token.clone().ok_or_else(|| {
            NodeError::Config(
                "no admin token: set admin_token in the config or TESSERA_ADMIN_TOKEN".into(),
            )
        })?;
        std::fs::create_dir_all(&config.data_dir).map_err(|source| NodeError::DataDir {
            path: config.data_dir.clone(),
            source,
        })?;
        let database = redb::Database::create(config.data_dir.join("tessera.redb"))
            .map_err(|error| tessera_state::StoreError::Open(error.to_string()))?;
        let database = Arc::new(database);
        let store = StateStore::from_database(database.clone())?;
        let state = Arc::new(LocalState::new(store.clone(), config.commit.clone()));
        // With the partition plane on, an entity of a partitioned shard is read and committed
        // through its partition's group (the groups are held in `routed` as they start).
        let partitions_count = config.sharding.partitions.count();
        let metadata = MetadataStore::open(database.clone())?;
        let partition_map = PartitionMap::new(
            config.sharding.num_shards,
            partitions_count,
            metadata.clone(),
        );
        let routed = Arc::new(RoutedState::new(
            state.clone(),
            partition_map.partition_of(),
        ));
        let plane_serves = config.cluster.is_some() && partitions_count > 0;
        let entity_state: Arc<dyn EntityState> = if plane_serves {
            routed.clone()
        } else {
            state.clone()
        };
        // Remembered ids of partitioned entities are replicated with their partitions, so the
        // next owner of a shard finds them whichever node it is.
        let remember_store: Arc<dyn RememberStore> = if plane_serves {
            Arc::new(RoutedRemember::new(state.clone(), routed.clone()))
        } else {
            state.clone()
        };
        let listing = EntityListing::new(
            store,
            routed.clone(),
            metadata.clone(),
            config.cluster.is_some().then(|| config.node_id.clone()),
            config.sharding.num_shards,
        );
        let blobs = BlobStore::open(database)?;
        let runtime = Arc::new(open_runtime(&config)?);
        let remember = RememberWriter::start(remember_store, &config.sharding.remember);
        let types = Arc::new(TypeTable::default());
        let mut entity_config = config.entities.clone();
        if entity_config.active_entities_max.is_none() {
            entity_config.active_entities_max = config.sharding.max_active_entities;
        }
        let entity_parts = EntityParts {
            runtime: runtime.clone(),
            state: entity_state,
            types: types.clone(),
            remember: Some(remember.clone()),
            config: entity_config,
        };
        let switchboard = Arc::new(Switchboard::new());
        // Peers' queries wait here until the node is built to answer them.
        let (queries_to_answer, queries) = queries::queue();
        let mesh = match &config.cluster {
            Some(cluster) => {
                joining::check_data_dir(&config, cluster, &metadata)?;
                layout::check_layout(&config.data_dir, &config.sharding.partitions)?;
                let layout = ShardLayout {
                    shards: config.sharding.num_shards,
                    partitions: partitions_count,
                };
                let (mesh, inbound) = Mesh::start(&config.node_id, cluster, layout).await?;
                switchboard.set_remote(mesh.clone());
                Some((mesh, inbound))
            }
            None => None,
        };
        let lease = config
            .cluster
            .is_some()
            .then(|| Arc::new(NodeLease::new(LeaseConfig::default())));
        let region_parts = RegionParts {
            node: config.node_id.clone(),
            config: config.sharding.clone(),
            switchboard: switchboard.clone(),
            remember: Some(remember.clone()),
            shard_states: config
                .cluster
                .is_some()
                .then(|| state.clone() as Arc<dyn ShardStates>),
            lease: lease.clone(),
            catalog: Some(metadata.clone()),
        };
        let (region, entities) = Region::start(region_parts, |router| {
            let entities = Entities::new(entity_parts, router);
            (
                Arc::new(entities.clone()) as Arc<dyn LocalEntities>,
                entities,
            )
        })?;
        let membership = Arc::new(Membership::new());
        let transfer = mesh.as_ref().map(|(mesh, _)| {
            Arc::new(BlobTransfer::new(
                mesh.clone(),
                blobs.clone(),
                metadata.clone(),
            ))
        });
        let sources = PluginSources { blobs, transfer };
        let catalog = Arc::new_cyclic(|this| {
            NodeCatalog::new(
                this.clone(),
                metadata.clone(),
                sources,
                runtime.clone(),
                types,
                region.clone(),
                entities.clone(),
                MemberFollowers {
                    membership: Arc::downgrade(&membership),
                    mesh: mesh.as_ref().map(|(mesh, _)| mesh.clone()),
                },
                &config,
            )
        });
        tokio::spawn(collect_blobs(Arc::downgrade(&catalog)));
        // A restarted node is an up member already: the coordinator must see it from its first
        // request on (remembered entities ask for their shards as soon as types are bound).
        let seat_parts = SeatParts {
            node: config.node_id.clone(),
            config: config.sharding.clone(),
            members: membership.subscribe(),
            switchboard: switchboard.clone(),
            plane: Arc::new(LocalPlane::new(metadata.clone(), catalog.clone())),
        };
        let (plane, seat, member) = match (mesh, &config.cluster) {
            (Some((mesh, inbound)), Some(cluster)) => {
                let received = joining::Received {
                    inbound,
                    queries: queries_to_answer,
                };
                let started = joining::start_plane(
                    &config,
                    cluster,
                    metadata,
                    &catalog,
                    &mesh,
                    received,
                    &switchboard,
                )?;
                catalog.show_members()?;
                let (plane, status) = started;
                let partitions = PartitionGroups::start(
                    &config,
                    cluster,
                    mesh.clone(),
                    (routed, partition_map.clone()),
                    Arc::downgrade(&plane),
                    status.clone(),
                    switchboard.clone(),
                )?;
                let parts = SeatParts {
                    plane: plane.clone(),
                    ..seat_parts
                };
                let seat = CoordinatorSeat::following(parts, status, mesh.clone());
                tokio::spawn(mesh.clone().show_reachability(Arc::downgrade(&membership)));
                (plane, seat, Some((mesh, partitions)))
            }
            _ => {
                catalog.show_members()?;
                let plane = seat_parts.plane.clone();
                (plane, CoordinatorSeat::always(seat_parts)?, None)
            }
        };
        let (mesh, partitions) = member.unzip();
        catalog.load().await?;
        joining::join_as_member(&config, plane.as_ref(), lease.as_deref(), &catalog).await?;
        if let Some(lease) = lease {
            super::member::lease::keep(
                config.node_id.clone(),
                Arc::downgrade(&plane),
                lease,
                LeaseConfig::default(),
            );
        }
        // Only now is every deployed type bound: outboxes and reminders left by the last run
        // would otherwise meet "type not registered" and be given up.
        entities.start_messaging();
        let sender_routes =
            super::sending::routes::SenderRoutes::new(config.sender_routes_per_thread);
        let node = Arc::new(Node {
            admin_token_sha256: token_hash(&admin_token),
            config,
            runtime,
            state,
            catalog,
            plane,
            entities,
            region,
            _seat: seat,
            mesh,
            partitions,
            partition_map,
            membership,
            remember,
            listing,
            deploy_lock: tokio::sync::Mutex::new(()),
            rate: RateLimiter::default(),
            sender_routes,
            quota_rejections: Default::default(),
            edge: EdgeCounters::default(),
        });
        tokio::spawn(queries::answer_queries(Arc::downgrade(&node), queries));
        Ok(node)
    }
}

/// Collects unused plugin blobs every [`BLOB_GARBAGE_EVERY`] until the node is gone.
async fn collect_blobs(catalog: std::sync::Weak<NodeCatalog>) {
    let mut every = tokio::time::interval(BLOB_GARBAGE_EVERY);
    every.tick().await; // the first tick is at once: the catalog may still be rebuilding
    loop {
        every.tick().await;
        let Some(catalog) = catalog.upgrade() else {
            return;
        };
        catalog.collect_blobs().await;
    }
}

/// The engine, with the compiled-plugin cache in the data directory unless the config names
/// one (tests share one).
fn open_runtime(config: &NodeConfig) -> Result<Runtime, NodeError> {
    let runtime_config = RuntimeConfig {
        compiled_cache_dir: Some(
            config
                .runtime
                .compiled_cache_dir
                .clone()
                .unwrap_or_else(|| config.data_dir.join("compiled")),
        ),
        ..config.runtime.clone()
    };
    Runtime::new(runtime_config).map_err(|error| NodeError::Engine(format!("{error:#}")))
}
