//! A node: every layer assembled over one data directory, and the operations the API and CLI
//! offer — tenants, deploys and rollbacks, messages to entities, inspection and metrics.
//!
//! Metadata changes go through [`MetadataStore::apply`] and are then reflected in the
//! [`TypeTable`] the entity layer reads, so live entities switch version at their next
//! message boundary.

mod config;
mod error;
mod rate;
mod wiring;

pub use config::{ApiLimits, NodeConfig};
pub use error::NodeError;
pub use rate::RateLimiter;

use crate::entity::{
    ACTIVATION_REASONS, COMMIT_BUCKETS_US, ERROR_KINDS, Entities, TypeBinding, TypeTable,
};
use crate::envelope::{EntityAddress, ErrorKind, MessageError, TypeKey};
use crate::metadata::{
    Applied, Command, MetadataStore, Quotas, Tenant, TypeOptions, TypeRecord, VersionRecord,
};
use crate::metrics::Metrics;
use crate::runtime::{InstanceLimits, Plugin, Runtime, RuntimeConfig};
use crate::sharding::remember::redb::RedbStore;
use crate::sharding::{
    Coordinator, CoordinatorHandle, FnvExtractor, Membership, Region, RegionHandle, RememberStore,
    Switchboard, TypeSettings,
};
use crate::state::{GroupCommitter, StateStore};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wiring::{RegionEntities, RegionLifecycle, RegionRouter};

/// Who a request comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// The node's administrator.
    Admin,
    /// A tenant, by name.
    Tenant(String),
}

/// The state of one entity type, for `tessera status`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TypeStatus {
    /// Type name.
    pub entity_type: String,
    /// The active version.
    pub active_version: u32,
    /// Versions deployed.
    pub versions: usize,
    /// Whether started entities are remembered.
    pub remember: bool,
    /// Live entities on this node.
    pub live_entities: usize,
    /// Remembered entities.
    pub remembered_entities: usize,
}

/// A running node.
pub struct Node {
    config: NodeConfig,
    admin_token_sha256: String,
    runtime: Arc<Runtime>,
    state: StateStore,
    metadata: MetadataStore,
    types: Arc<TypeTable>,
    entities: Entities,
    region: RegionHandle,
    coordinator: CoordinatorHandle,
    membership: Membership,
    remembered: Arc<RedbStore>,
    tenants: RwLock<HashMap<String, Tenant>>,
    plugins: Mutex<HashMap<String, Arc<Plugin>>>,
    deploy_lock: tokio::sync::Mutex<()>,
    rate: RateLimiter,
    metrics: Metrics,
}

/// Hex SHA-256 of a token.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

impl Node {
    /// Opens the node's data directory, loads its tenants and types and makes it ready to
    /// serve. `admin_token` must be set (from config or the environment).
    pub async fn open(config: NodeConfig) -> Result<Arc<Node>, NodeError> {
        config.validate().map_err(NodeError::BadRequest)?;
        let admin_token = config.admin_token.clone().ok_or_else(|| {
            NodeError::BadRequest(
                "no admin token: set admin_token in the config or TESSERA_ADMIN_TOKEN".into(),
            )
        })?;
        std::fs::create_dir_all(&config.data_dir).map_err(|error| {
            NodeError::Internal(format!(
                "cannot create {}: {error}",
                config.data_dir.display()
            ))
        })?;
        let database = redb::Database::create(config.data_dir.join("tessera.redb"))
            .map_err(|error| NodeError::Internal(format!("cannot open the database: {error}")))?;
        let database = Arc::new(database);
        let state = StateStore::from_database(database.clone())
            .map_err(|error| NodeError::Internal(error.to_string()))?;
        let metadata = MetadataStore::open(database)?;
        // An explicitly set cache dir wins (tests share one); else the cache lives with the data.
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
        let runtime = Arc::new(
            Runtime::new(runtime_config)
                .map_err(|error| NodeError::Internal(format!("{error:#}")))?,
        );
        let committer = Arc::new(GroupCommitter::start(state.clone(), config.commit.clone()));
        let types = Arc::new(TypeTable::default());
        let mut entity_config = config.entities.clone();
        if entity_config.active_entities_max.is_none() {
            entity_config.active_entities_max = config.sharding.max_active_entities;
        }
        let entities = Entities::new(
            runtime.clone(),
            state.clone(),
            committer,
            types.clone(),
            entity_config,
        );
        let remembered = Arc::new(
            RedbStore::new(state.database().clone())
                .map_err(|error| NodeError::Internal(error.to_string()))?,
        );
        let switchboard = Arc::new(Switchboard::new());
        let region = Region::start(
            config.node_id.clone(),
            config.sharding.clone(),
            Arc::new(RegionEntities {
                entities: entities.clone(),
                extractor: Arc::new(FnvExtractor::new(config.sharding.num_shards)),
            }),
            switchboard.clone(),
            Some(remembered.clone()),
        )
        .map_err(|error| NodeError::BadRequest(format!("sharding: {error}")))?;
        entities.set_router(Arc::new(RegionRouter(region.clone())));
        entities.set_lifecycle(Arc::new(RegionLifecycle(region.clone())));
        let membership = Membership::new();
        membership.join(
            config.node_id.clone(),
            config.sharding.role_constraint.clone(),
        );
        let coordinator =
            Coordinator::start(config.sharding.clone(), membership.subscribe(), switchboard)
                .map_err(|error| NodeError::BadRequest(format!("sharding: {error}")))?;
        let tenants = metadata
            .tenants()?
            .into_iter()
            .map(|tenant| (tenant.name.clone(), tenant))
            .collect();
        let node = Arc::new(Node {
            admin_token_sha256: token_hash(&admin_token),
            config,
            runtime,
            state,
            metadata,
            types,
            entities,
            region,
            coordinator,
            membership,
            remembered,
            tenants: RwLock::new(tenants),
            plugins: Mutex::new(HashMap::new()),
            deploy_lock: tokio::sync::Mutex::new(()),
            rate: RateLimiter::default(),
            metrics: Metrics::default(),
        });
        for record in node.metadata.entity_types(None)? {
            node.bind(&record).await?;
        }
        Ok(node)
    }

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

    /// The node's metric registry.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Who `token` belongs to.
    pub fn authenticate(&self, token: &str) -> Result<Principal, NodeError> {
        let hash = token_hash(token);
        if hash == self.admin_token_sha256 {
            return Ok(Principal::Admin);
        }
        match self.metadata.tenant_by_token_hash(&hash)? {
            Some(tenant) => Ok(Principal::Tenant(tenant.name)),
            None => Err(NodeError::Unauthorized),
        }
    }

    /// Creates a tenant; returns it with its token, which is not stored and never shown again.
    pub fn create_tenant(
        &self,
        name: &str,
        quotas: Option<Quotas>,
    ) -> Result<(Tenant, String), NodeError> {
        let token = format!("tsr_{}", hex::encode(rand::random::<[u8; 24]>()));
        let applied = self.metadata.apply(Command::CreateTenant {
            name: name.to_string(),
            token_sha256: token_hash(&token),
            quotas: quotas.unwrap_or_else(|| self.config.default_quotas.clone()),
            created_ms: now_ms(),
        })?;
        let Applied::Tenant(tenant) = applied else {
            return Err(NodeError::Internal(
                "CreateTenant applied as something else".into(),
            ));
        };
        self.tenants_mut()
            .insert(tenant.name.clone(), tenant.clone());
        tracing::info!(tenant = %tenant.name, "tenant created");
        Ok((tenant, token))
    }

    /// Every tenant.
    pub fn tenants(&self) -> Vec<Tenant> {
        let mut tenants: Vec<Tenant> = self.tenants_read().values().cloned().collect();
        tenants.sort_by(|a, b| a.name.cmp(&b.name));
        tenants
    }

    /// One tenant.
    pub fn tenant(&self, name: &str) -> Result<Tenant, NodeError> {
        self.tenants_read()
            .get(name)
            .cloned()
            .ok_or_else(|| NodeError::NotFound(format!("no tenant {name}")))
    }

    /// Replaces a tenant's quotas; running types pick them up for new activations.
    pub async fn update_quotas(&self, name: &str, quotas: Quotas) -> Result<Tenant, NodeError> {
        let applied = self.metadata.apply(Command::UpdateQuotas {
            name: name.to_string(),
            quotas,
        })?;
        let Applied::Tenant(tenant) = applied else {
            return Err(NodeError::Internal(
                "UpdateQuotas applied as something else".into(),
            ));
        };
        self.tenants_mut()
            .insert(tenant.name.clone(), tenant.clone());
        self.rate.reset(name);
        for record in self.metadata.entity_types(Some(name))? {
            self.bind(&record).await?;
        }
        Ok(tenant)
    }

    /// Validates, stores and activates a new version of `entity_type`. A bad upload changes
    /// nothing and the running version keeps serving.
    pub async fn deploy(
        &self,
        tenant: &str,
        entity_type: &str,
        bytes: Vec<u8>,
        options: TypeOptions,
    ) -> Result<VersionRecord, NodeError> {
        let quotas = self.tenant(tenant)?.quotas;
        crate::metadata::validate_name(entity_type)?;
        if bytes.len() > quotas.plugin_bytes_max {
            self.count_quota_rejection(tenant, entity_type, "plugin_size");
            return Err(NodeError::TooLarge(format!(
                "the plugin is {} bytes, over the tenant's limit of {}",
                bytes.len(),
                quotas.plugin_bytes_max
            )));
        }
        let _deploying = self.deploy_lock.lock().await;
        let plugin = self.compile(bytes.clone()).await?;
        let sha256 = plugin.content_hash().to_string();
        self.metadata.apply(Command::StorePlugin {
            sha256: sha256.clone(),
            bytes: bytes.clone(),
        })?;
        let applied = self.metadata.apply(Command::DeployVersion {
            tenant: tenant.to_string(),
            entity_type: entity_type.to_string(),
            sha256,
            size_bytes: bytes.len() as u64,
            options,
            deployed_ms: now_ms(),
        })?;
        let Applied::Type(record) = applied else {
            return Err(NodeError::Internal(
                "DeployVersion applied as something else".into(),
            ));
        };
        self.bind(&record).await?;
        let version = record
            .active()
            .cloned()
            .ok_or_else(|| NodeError::Internal("a deployed type has no active version".into()))?;
        tracing::info!(%tenant, %entity_type, version = version.version, "version deployed");
        Ok(version)
    }

    /// Makes `version` the active version of a type (rollback or roll forward).
    pub async fn set_active_version(
        &self,
        tenant: &str,
        entity_type: &str,
        version: u32,
    ) -> Result<TypeRecord, NodeError> {
        let _deploying = self.deploy_lock.lock().await;
        let applied = self.metadata.apply(Command::SetActiveVersion {
            tenant: tenant.to_string(),
            entity_type: entity_type.to_string(),
            version,
        })?;
        let Applied::Type(record) = applied else {
            return Err(NodeError::Internal(
                "SetActiveVersion applied as something else".into(),
            ));
        };
        self.bind(&record).await?;
        tracing::info!(%tenant, %entity_type, version, "active version set");
        Ok(record)
    }

    /// Deletes a type: its entities stop; their state stays in the store.
    pub async fn delete_type(&self, tenant: &str, entity_type: &str) -> Result<(), NodeError> {
        let _deploying = self.deploy_lock.lock().await;
        self.metadata.apply(Command::DeleteType {
            tenant: tenant.to_string(),
            entity_type: entity_type.to_string(),
        })?;
        let key = TypeKey::new(tenant, entity_type);
        self.types.unbind(&key);
        self.entities
            .stop_where(|address| address.type_key() == key)
            .await;
        Ok(())
    }

    /// The types of a tenant.
    pub fn types(&self, tenant: &str) -> Result<Vec<TypeRecord>, NodeError> {
        Ok(self.metadata.entity_types(Some(tenant))?)
    }

    /// One type of a tenant.
    pub fn entity_type(&self, tenant: &str, entity_type: &str) -> Result<TypeRecord, NodeError> {
        self.metadata
            .entity_type(tenant, entity_type)?
            .ok_or_else(|| {
                NodeError::NotFound(format!("no entity type {entity_type} in tenant {tenant}"))
            })
    }

    /// Sends a one-way message, after the tenant's rate quota admits it. Returns once the
    /// region has taken it.
    pub async fn tell(&self, to: EntityAddress, payload: Vec<u8>) -> Result<(), NodeError> {
        self.admit(&to)?;
        Ok(self.region.tell(to, payload).await?)
    }

    /// Sends a message and waits for its reply.
    pub async fn ask(
        &self,
        to: EntityAddress,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, NodeError> {
        self.admit(&to)?;
        Ok(self.region.ask(to, payload, Some(timeout)).await?)
    }

    /// Passivates an entity after its queued messages.
    pub async fn passivate(&self, entity: &EntityAddress) -> Result<(), NodeError> {
        self.require_type(entity)?;
        Ok(self.region.passivate(entity.clone()).await?)
    }

    /// The committed state of an entity.
    pub fn entity_state(
        &self,
        entity: &EntityAddress,
    ) -> Result<Vec<(String, Vec<u8>)>, NodeError> {
        self.require_type(entity)?;
        self.state
            .entries(entity)
            .map_err(|error| NodeError::Internal(error.to_string()))
    }

    /// Per type of `tenant`: active version, live and remembered entities.
    pub fn status(&self, tenant: &str) -> Result<Vec<TypeStatus>, NodeError> {
        let live = self.entities.live_by_type();
        Ok(self
            .types(tenant)?
            .into_iter()
            .map(|record| {
                let key = TypeKey::new(record.tenant.clone(), record.name.clone());
                TypeStatus {
                    remember: record
                        .active()
                        .is_some_and(|version| version.options.remember),
                    live_entities: live.get(&key).copied().unwrap_or(0),
                    remembered_entities: self.remembered_count(&key),
                    active_version: record.active_version,
                    versions: record.versions.len(),
                    entity_type: record.name,
                }
            })
            .collect())
    }

    /// The shard allocation table: `(tenant/type, shard) -> (node, generation)`.
    pub async fn shards(&self) -> Result<Vec<(String, u32, String, u64)>, NodeError> {
        let table = self
            .coordinator
            .allocation_table()
            .await
            .map_err(|error| NodeError::Internal(error.to_string()))?;
        Ok(table
            .into_iter()
            .map(|(key, allocation)| {
                (
                    key.type_key.to_string(),
                    key.shard,
                    allocation.node,
                    allocation.generation,
                )
            })
            .collect())
    }

    /// The cluster members this node sees.
    pub fn members(&self) -> Vec<String> {
        self.membership
            .subscribe()
            .borrow()
            .members()
            .map(|member| member.node.clone())
            .collect()
    }

    /// Stops every entity (their commits complete first), flushes remembered ids and stops
    /// the region (graceful shutdown). Stopped entities stay remembered.
    pub async fn shutdown(&self) {
        self.entities.stop_all().await;
        if let Err(error) = self.region.flush_remembered().await {
            tracing::warn!(%error, "remembered ids could not be flushed");
        }
        self.region.shutdown().await;
        self.entities.detach();
        tracing::info!("node stopped");
    }

    fn remembered_count(&self, key: &TypeKey) -> usize {
        let Ok(shards) = self.remembered.list_shards(key) else {
            return 0;
        };
        shards
            .into_iter()
            .filter_map(|shard| self.remembered.list_ids(key, shard).ok())
            .map(|ids| ids.len())
            .sum()
    }

    /// The node's metrics in the Prometheus text format.
    pub fn render_metrics(&self) -> String {
        self.fold_entity_metrics();
        self.metrics.render()
    }

    /// Counts a refusal by a tenant quota.
    pub fn count_quota_rejection(&self, tenant: &str, entity_type: &str, quota: &str) {
        self.metrics.count(
            "tessera_quota_rejections_total",
            &[("tenant", tenant), ("type", entity_type), ("quota", quota)],
            1,
        );
    }

    fn admit(&self, to: &EntityAddress) -> Result<(), NodeError> {
        let quotas = self.tenant(&to.tenant)?.quotas;
        if !self.rate.try_take(
            &to.tenant,
            quotas.messages_per_second,
            quotas.messages_burst,
        ) {
            self.count_quota_rejection(&to.tenant, &to.entity_type, "message_rate");
            return Err(NodeError::Message(MessageError::new(
                ErrorKind::QuotaExceeded,
                format!(
                    "tenant {} is over its message rate of {} per second",
                    to.tenant, quotas.messages_per_second
                ),
            )));
        }
        Ok(())
    }

    fn require_type(&self, entity: &EntityAddress) -> Result<(), NodeError> {
        if self.types.get(&entity.type_key()).is_none() {
            return Err(NodeError::NotFound(format!(
                "no entity type {} in tenant {}",
                entity.entity_type, entity.tenant
            )));
        }
        Ok(())
    }

    /// Compiles (or finds) the plugin for `bytes`, off the async threads.
    async fn compile(&self, bytes: Vec<u8>) -> Result<Arc<Plugin>, NodeError> {
        let sha256 = hex::encode(Sha256::digest(&bytes));
        if let Some(plugin) = self.plugins().get(&sha256) {
            return Ok(plugin.clone());
        }
        let runtime = self.runtime.clone();
        let plugin = tokio::task::spawn_blocking(move || runtime.load(&bytes))
            .await
            .map_err(|error| NodeError::Internal(error.to_string()))?
            .map_err(|error| NodeError::BadPlugin(error.to_string()))?;
        self.plugins().insert(sha256, plugin.clone());
        Ok(plugin)
    }

    /// Points the type table at a type's active version, with its tenant's quotas.
    async fn bind(&self, record: &TypeRecord) -> Result<(), NodeError> {
        let version = record.active().ok_or_else(|| {
            NodeError::Internal(format!("type {} has no active version", record.name))
        })?;
        let bytes = self
            .metadata
            .plugin_bytes(&version.sha256)?
            .ok_or_else(|| NodeError::Internal(format!("plugin {} is missing", version.sha256)))?;
        let plugin = self.compile(bytes).await?;
        let quotas = self.tenant(&record.tenant)?.quotas;
        let key = TypeKey::new(record.tenant.clone(), record.name.clone());
        let idle = version
            .options
            .passivate_idle_ms
            .map(Duration::from_millis)
            .or(self.config.sharding.passivation_idle_timeout);
        self.types.bind(
            key.clone(),
            TypeBinding {
                plugin,
                version: version.version,
                limits: InstanceLimits {
                    memory_bytes_max: quotas.memory_bytes_max,
                    message_deadline_ms: quotas.message_deadline_ms,
                    entity_state_bytes_max: quotas.entity_state_bytes_max,
                    ..InstanceLimits::default()
                },
                passivate_idle: idle,
                mailbox_capacity: quotas.mailbox_capacity,
                tenant_live_entities_max: Some(quotas.live_entities_max),
            },
        );
        let mut settings = TypeSettings::new(self.config.sharding.num_shards);
        if version.options.remember {
            settings = settings.remembered();
        }
        self.region.register_type(key, settings).await?;
        Ok(())
    }

    fn fold_entity_metrics(&self) {
        let metrics = &self.metrics;
        metrics.clear_gauges("tessera_entities_live");
        metrics.clear_gauges("tessera_mailbox_depth");
        for (key, live) in self.entities.live_by_type() {
            let labels = [
                ("tenant", key.tenant.as_str()),
                ("type", key.entity_type.as_str()),
            ];
            metrics.gauge("tessera_entities_live", &labels, live as i64);
        }
        for (key, depth) in self.entities.mailbox_depths() {
            let labels = [
                ("tenant", key.tenant.as_str()),
                ("type", key.entity_type.as_str()),
            ];
            metrics.gauge("tessera_mailbox_depth", &labels, depth as i64);
        }
        for (key, counters) in self.entities.all_counters() {
            let tenant = key.tenant.as_str();
            let entity_type = key.entity_type.as_str();
            let labels = [("tenant", tenant), ("type", entity_type)];
            metrics.set_counter(
                "tessera_messages_total",
                &labels,
                counters.messages.load(Ordering::Relaxed),
            );
            metrics.set_counter(
                "tessera_passivations_total",
                &labels,
                counters.passivations.load(Ordering::Relaxed),
            );
            for (reason, count) in ACTIVATION_REASONS.iter().zip(&counters.activations) {
                metrics.set_counter(
                    "tessera_activations_total",
                    &[
                        ("tenant", tenant),
                        ("type", entity_type),
                        ("reason", reason),
                    ],
                    count.load(Ordering::Relaxed),
                );
            }
            for (kind, count) in ERROR_KINDS.iter().zip(&counters.failures) {
                let count = count.load(Ordering::Relaxed);
                // Refusals by the entity layer's quotas count as quota rejections too.
                let quota = match kind {
                    ErrorKind::QuotaExceeded => Some("live_entities"),
                    ErrorKind::MailboxFull => Some("mailbox_depth"),
                    _ => None,
                };
                if let Some(quota) = quota {
                    metrics.set_counter(
                        "tessera_quota_rejections_total",
                        &[("tenant", tenant), ("type", entity_type), ("quota", quota)],
                        count,
                    );
                }
                if count > 0 {
                    metrics.set_counter(
                        "tessera_message_errors_total",
                        &[
                            ("tenant", tenant),
                            ("type", entity_type),
                            ("kind", kind.code()),
                        ],
                        count,
                    );
                }
            }
            let mut cumulative = 0;
            for (bound, count) in COMMIT_BUCKETS_US.iter().zip(&counters.commit_buckets) {
                cumulative += count.load(Ordering::Relaxed);
                let le = format!("{}", *bound as f64 / 1_000_000.0);
                metrics.set_counter(
                    "tessera_commit_seconds_bucket",
                    &[
                        ("tenant", tenant),
                        ("type", entity_type),
                        ("le", le.as_str()),
                    ],
                    cumulative,
                );
            }
            let total: u64 = counters
                .commit_buckets
                .iter()
                .map(|count| count.load(Ordering::Relaxed))
                .sum();
            metrics.set_counter(
                "tessera_commit_seconds_bucket",
                &[("tenant", tenant), ("type", entity_type), ("le", "+Inf")],
                total,
            );
            metrics.set_counter("tessera_commit_seconds_count", &labels, total);
        }
    }

    fn plugins(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Plugin>>> {
        self.plugins
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn tenants_read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Tenant>> {
        self.tenants
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn tenants_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Tenant>> {
        self.tenants
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
