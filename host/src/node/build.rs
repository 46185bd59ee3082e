//! Building a node in one pass: database, state, catalog, runtime, entities and region (built
//! together, the region handing the entities their router), the catalog observer, the metadata
//! plane, membership and the coordinator — each part constructed once with everything it
//! needs, nothing wired afterwards.

use super::catalog::NodeCatalog;
use super::{EdgeCounters, Node, NodeConfig, NodeError, RateLimiter, token_hash};
use crate::entity::{Entities, EntityParts, TypeTable};
use crate::metadata::{Applied, Command, LocalPlane, MemberState, MetadataPlane, MetadataStore};
use crate::runtime::{Runtime, RuntimeConfig};
use crate::sharding::{Coordinator, LocalEntities, Membership, Region, RegionParts, Switchboard};
use crate::state::remember::RememberWriter;
use crate::state::{LocalState, StateStore};
use std::sync::Arc;

impl Node {
    /// Opens the node's data directory, loads its tenants and types and makes it ready to
    /// serve. `admin_token` must be set (from config or the environment).
    pub async fn open(config: NodeConfig) -> Result<Arc<Node>, NodeError> {
        config.validate().map_err(NodeError::Config)?;
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
            .map_err(|error| crate::state::StoreError::Open(error.to_string()))?;
        let database = Arc::new(database);
        let store = StateStore::from_database(database.clone())?;
        let state = Arc::new(LocalState::new(store, config.commit.clone()));
        let metadata = MetadataStore::open(database)?;
        let runtime = Arc::new(open_runtime(&config)?);
        let remember = RememberWriter::start(state.clone(), &config.sharding.remember);
        let types = Arc::new(TypeTable::default());
        let mut entity_config = config.entities.clone();
        if entity_config.active_entities_max.is_none() {
            entity_config.active_entities_max = config.sharding.max_active_entities;
        }
        let entity_parts = EntityParts {
            runtime: runtime.clone(),
            state: state.clone(),
            types: types.clone(),
            remember: Some(remember.clone()),
            config: entity_config,
        };
        let switchboard = Arc::new(Switchboard::new());
        let region_parts = RegionParts {
            node: config.node_id.clone(),
            config: config.sharding.clone(),
            switchboard: switchboard.clone(),
            remember: Some(remember.clone()),
        };
        let (region, entities) = Region::start(region_parts, |router| {
            let entities = Entities::new(entity_parts, router);
            (
                Arc::new(entities.clone()) as Arc<dyn LocalEntities>,
                entities,
            )
        })?;
        let membership = Arc::new(Membership::new());
        let catalog = Arc::new(NodeCatalog::new(
            metadata.clone(),
            runtime.clone(),
            types,
            region.clone(),
            entities.clone(),
            Arc::downgrade(&membership),
            &config,
        ));
        let plane: Arc<dyn MetadataPlane> = Arc::new(LocalPlane::new(metadata, catalog.clone()));
        // A restarted node is an up member already: the coordinator must see it from its first
        // request on (remembered entities ask for their shards as soon as types are bound).
        catalog.show_members()?;
        let coordinator = Coordinator::start(
            config.sharding.clone(),
            membership.subscribe(),
            switchboard,
            plane.clone(),
        )?;
        catalog.load().await?;
        join_as_member(&config, plane.as_ref()).await?;
        // Only now is every deployed type bound: outboxes and reminders left by the last run
        // would otherwise meet "type not registered" and be given up.
        entities.start_messaging();
        Ok(Arc::new(Node {
            admin_token_sha256: token_hash(&admin_token),
            config,
            runtime,
            state,
            catalog,
            plane,
            entities,
            region,
            coordinator,
            _membership: membership,
            remember,
            deploy_lock: tokio::sync::Mutex::new(()),
            rate: RateLimiter::default(),
            quota_rejections: Default::default(),
            edge: EdgeCounters::default(),
        }))
    }
}

/// Makes this node an up member of the catalog: joins (or, restarted, refreshes its
/// addresses) and, being the only voter of a single-node plane, promotes itself.
async fn join_as_member(config: &NodeConfig, plane: &dyn MetadataPlane) -> Result<(), NodeError> {
    let now_ms = super::tenants::now_ms();
    let join = Command::JoinMember {
        node: config.node_id.clone(),
        cluster_address: String::new(),
        api_address: config.http.to_string(),
        roles: config.sharding.role_constraint.iter().cloned().collect(),
        joined_ms: now_ms,
    };
    if let Applied::Member(member) = plane.submit(join).await?
        && member.state == MemberState::Joining
    {
        let up = Command::SetMemberState {
            node: config.node_id.clone(),
            state: MemberState::Up,
            updated_ms: now_ms,
        };
        plane.submit(up).await?;
    }
    Ok(())
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
