//! The node's view of the catalog: the one [`CatalogObserver`] that turns applied commands into
//! what the layers below run — type bindings in the entity layer's [`TypeTable`], type settings
//! in the region, compiled plugins in a bounded [`PluginCache`] — and the in-memory tenants and
//! token index that authentication and quotas read (no database read per request).
//!
//! A version's plugin is loaded from this node's blob store; one the store lacks is fetched
//! from a peer (`blob_transfer.rs`) while its type answers `unavailable` (retry), and bound
//! once it arrives. Blobs no version uses are collected a bounded number at a time.

use crate::node::NodeConfig;
use crate::node::member::blob_transfer::BlobTransfer;
use crate::node::member::mesh::Mesh;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;
use tessera_contract::{BoxFuture, TypeKey};
use tessera_entity::{Entities, TypeBinding, TypeTable};
use tessera_metadata::{
    Applied, BlobStore, CatalogObserver, MemberRecord, MemberState, MetadataStore, Tenant,
    TypeRecord, VersionRecord,
};
use tessera_runtime::{InstanceLimits, Plugin, PluginCache, Runtime};
use tessera_sharding::{MemberStatus, Membership, RegionHandle, TypeSettings};

// A tenant's plugin quota can never exceed what the runtime loads.
const _: () = assert!(
    tessera_metadata::quota_ceilings::PLUGIN_BYTES_MAX == tessera_runtime::PLUGIN_BYTES_MAX
);

/// Tenants by name and by token hash, as the catalog last applied them.
#[derive(Default)]
pub(crate) struct TenantIndex {
    by_name: foldhash::HashMap<String, Arc<Tenant>>,
    by_token: foldhash::HashMap<String, Arc<Tenant>>,
}

impl TenantIndex {
    fn insert(&mut self, tenant: Tenant) {
        if let Some(previous) = self.by_name.get(&tenant.name) {
            self.by_token.remove(&previous.token_sha256);
        }
        let tenant = Arc::new(tenant);
        self.by_token
            .insert(tenant.token_sha256.clone(), tenant.clone());
        self.by_name.insert(tenant.name.clone(), tenant);
    }
}

/// What follows committed members: the coordinator's view and, in a cluster, the mesh.
pub(crate) struct MemberFollowers {
    /// The members the coordinator may place shards on, as the catalog says. Weak: the node
    /// owns the view, and dropping it is what ends the coordinator (which holds this catalog
    /// through the plane).
    pub(crate) membership: Weak<Membership>,
    /// The cluster's connections, which dial every committed member (none on a single node).
    pub(crate) mesh: Option<Arc<Mesh>>,
}

impl MemberFollowers {
    /// Shows a member's committed state to the mesh (which dials it) and to the coordinator:
    /// only members that are up get new shards; joining ones do not yet; leaving and exiting
    /// ones hand theirs off; down ones keep theirs (unavailable); removed ones lose theirs.
    fn show(&self, member: &MemberRecord) {
        if let Some(mesh) = &self.mesh {
            mesh.show_member(member);
        }
        let Some(membership) = self.membership.upgrade() else {
            return; // the node is gone
        };
        let status = match member.state {
            MemberState::Joining => return,
            MemberState::Up => MemberStatus::Up,
            MemberState::Leaving | MemberState::Exiting => MemberStatus::Leaving,
            MemberState::Down => MemberStatus::Down,
            MemberState::Removed => MemberStatus::Removed,
        };
        membership.set_status(member.node.clone(), member.roles.iter().cloned(), status);
    }
}

/// An unused blob younger than this is kept: it may belong to a deploy not committed yet.
const BLOB_GARBAGE_GRACE_MS: u64 = 10 * 60 * 1000;

/// Unused blobs one collection pass removes at most (a pass runs after each type
/// deletion and every [`BLOB_GARBAGE_EVERY`]).
const BLOB_GARBAGE_BATCH_MAX: usize = 16;

/// How often unused blobs are collected.
pub(crate) const BLOB_GARBAGE_EVERY: Duration = Duration::from_secs(60);

/// The longest wait between two attempts to fetch a blob no peer served.
const BLOB_FETCH_BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Where a node's plugin bytes come from: its blob store and, in a cluster, its peers.
pub(crate) struct PluginSources {
    /// This node's blob store.
    pub(crate) blobs: BlobStore,
    /// The way to peers' blobs (none on a single node).
    pub(crate) transfer: Option<Arc<BlobTransfer>>,
}

/// Why a plugin could not be had.
enum PluginError {
    /// This node does not hold its bytes (yet).
    Missing,
    /// It could not be read or compiled.
    Failed(String),
}

/// Applies catalog changes to the running node.
pub(crate) struct NodeCatalog {
    pub(crate) store: MetadataStore,
    pub(crate) sources: PluginSources,
    /// This catalog, for the fetches it starts (which bind their types when they end).
    this: Weak<NodeCatalog>,
    runtime: Arc<Runtime>,
    plugins: PluginCache,
    /// Plugins compiled for a deploy in flight, used (and persisted) if its command applies.
    staged: Mutex<HashMap<String, Arc<Plugin>>>,
    types: Arc<TypeTable>,
    region: RegionHandle,
    entities: Entities,
    members: MemberFollowers,
    tenants: RwLock<TenantIndex>,
    /// Bumped on every change to `tenants`, so a holder of a tenant record sees it is stale.
    tenants_generation: std::sync::atomic::AtomicU64,
    num_shards: u32,
    default_idle: Option<Duration>,
}

impl NodeCatalog {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        this: Weak<NodeCatalog>,
        store: MetadataStore,
        sources: PluginSources,
        runtime: Arc<Runtime>,
        types: Arc<TypeTable>,
        region: RegionHandle,
        entities: Entities,
        members: MemberFollowers,
        config: &NodeConfig,
    ) -> Self {
        NodeCatalog {
            store,
            sources,
            this,
            runtime,
            plugins: PluginCache::new(config.plugin_cache_entries),
            staged: Mutex::default(),
            types,
            region,
            entities,
            members,
            tenants: RwLock::default(),
            tenants_generation: std::sync::atomic::AtomicU64::new(0),
            num_shards: config.sharding.num_shards,
            default_idle: config.sharding.passivation_idle_timeout,
        }
    }

    /// Loads every tenant and binds every type from the applied catalog (node start).
    pub(crate) async fn load(&self) -> Result<(), tessera_metadata::MetadataError> {
        for tenant in self.store.tenants()? {
            self.tenants_mut().insert(tenant);
        }
        for record in self.store.entity_types(None)? {
            self.bind(&record).await;
        }
        self.show_members()
    }

    /// Shows every committed member to the coordinator's view.
    pub(crate) fn show_members(&self) -> Result<(), tessera_metadata::MetadataError> {
        for member in self.store.members()? {
            self.show_member(&member);
        }
        Ok(())
    }

    pub(crate) fn tenant(&self, name: &str) -> Option<Arc<Tenant>> {
        self.tenants_read().by_name.get(name).cloned()
    }

    /// `name`'s message-rate quota (per second, burst), read without taking its record.
    pub(crate) fn message_rate(&self, name: &str) -> Option<(u32, u32)> {
        self.tenants_read().by_name.get(name).map(|tenant| {
            (
                tenant.quotas.messages_per_second,
                tenant.quotas.messages_burst,
            )
        })
    }

    pub(crate) fn tenant_by_token_hash(&self, token_sha256: &str) -> Option<Arc<Tenant>> {
        self.tenants_read().by_token.get(token_sha256).cloned()
    }

    pub(crate) fn tenants(&self) -> Vec<Arc<Tenant>> {
        let mut tenants: Vec<Arc<Tenant>> = self.tenants_read().by_name.values().cloned().collect();
        tenants.sort_by(|a, b| a.name.cmp(&b.name));
        tenants
    }

    /// Keeps `plugin` for the deploy in flight; [`unstage`](Self::unstage) after it.
    pub(crate) fn stage(&self, plugin: Arc<Plugin>) {
        self.staged_lock()
            .insert(plugin.content_hash().to_string(), plugin);
    }

    pub(crate) fn unstage(&self, content_hash: &str) {
        self.staged_lock().remove(content_hash);
    }

    /// The compiled plugin for `sha256`: staged, cached, or compiled from the stored bytes
    /// (and then cached on disk and in memory).
    async fn plugin(&self, sha256: &str) -> Result<Arc<Plugin>, PluginError> {
        let staged = self.staged_lock().get(sha256).cloned();
        if let Some(plugin) = staged {
            let runtime = self.runtime.clone();
            let persisted = plugin.clone();
            let _ = tokio::task::spawn_blocking(move || runtime.persist(&persisted)).await;
            self.plugins.insert(plugin.clone());
            return Ok(plugin);
        }
        if let Some(plugin) = self.plugins.get(sha256) {
            return Ok(plugin);
        }
        let failed = |error: &dyn std::fmt::Display| PluginError::Failed(error.to_string());
        let bytes = self
            .sources
            .blobs
            .get(sha256)
            .map_err(|error| failed(&error))?
            .ok_or(PluginError::Missing)?;
        // The bytes may have come from another node: they are hashed again here, and run only
        // if they are what was deployed.
        let actual = tessera_metadata::blob_name(&bytes);
        if actual != sha256 {
            return Err(PluginError::Failed(format!(
                "the stored bytes of plugin {sha256} hash to {actual}; refusing to run them"
            )));
        }
        let runtime = self.runtime.clone();
        let hash = sha256.to_string();
        let plugin = tokio::task::spawn_blocking(move || runtime.load_hashed(&bytes, hash))
            .await
            .map_err(|error| failed(&error))?
            .map_err(|error| failed(&error))?;
        self.plugins.insert(plugin.clone());
        Ok(plugin)
    }

    /// Points the type table and the region at a type's active version, with its tenant's
    /// quotas. A plugin that cannot be loaded leaves the type unbound (its messages fail with
    /// `entity_type_not_registered`) and is logged; the node goes on.
    async fn bind(&self, record: &TypeRecord) {
        let key = TypeKey::new(record.tenant.clone(), record.name.clone());
        let Some(version) = record.active() else {
            tracing::error!(entity_type = %key, "type has no active version; not bound");
            return;
        };
        let plugin = match self.plugin(&version.sha256).await {
            Ok(plugin) => plugin,
            Err(PluginError::Missing) if self.sources.transfer.is_some() => {
                tracing::info!(entity_type = %key, sha256 = %version.sha256, "plugin not held here; fetching it from a peer");
                self.types.unbind_fetching(&key);
                self.register(&key, version).await;
                self.fetch_in_background(version);
                return;
            }
            Err(error) => {
                let error = match error {
                    PluginError::Missing => format!("plugin {} is not stored", version.sha256),
                    PluginError::Failed(error) => error,
                };
                tracing::error!(entity_type = %key, %error, "plugin could not be loaded; type unavailable");
                self.types.unbind(&key);
                self.region.unregister_type(&key);
                return;
            }
        };
        let Some(tenant) = self.tenant(&record.tenant) else {
            tracing::error!(entity_type = %key, "type of an unknown tenant; not bound");
            return;
        };
        let quotas = &tenant.quotas;
        let options = &version.options;
        let binding = TypeBinding {
            plugin,
            version: version.version,
            limits: InstanceLimits {
                memory_bytes_max: quotas.memory_bytes_max,
                message_deadline_ms: quotas.message_deadline_ms,
                entity_state_bytes_max: quotas.entity_state_bytes_max,
                message_wall_ms_max: tessera_runtime::wall_bound_ms(quotas.message_deadline_ms),
                outbox_entries_max: quotas.outbox_entries_max,
                reminders_max: quotas.reminders_max,
                concurrent_guests_max: match quotas.concurrent_guests_max {
                    0 => default_concurrent_guests(),
                    cap => cap,
                },
                cpu_ms_per_second: quotas.cpu_ms_per_second,
                messages_per_second: quotas.messages_per_second,
                messages_burst: quotas.messages_burst,
                ..InstanceLimits::default()
            },
            passivate_idle: options
                .passivate_idle_ms
                .map(Duration::from_millis)
                .or(self.default_idle),
            mailbox_capacity: quotas.mailbox_capacity,
            tenant_live_entities_max: Some(quotas.live_entities_max),
            remember: options.remember,
        };
        self.types.bind(key.clone(), binding);
        self.register(&key, version).await;
    }

    /// Registers a type with the region, as `version` sets it.
    async fn register(&self, key: &TypeKey, version: &VersionRecord) {
        let mut settings = TypeSettings::new(self.num_shards);
        if version.options.remember {
            settings = settings.remembered();
        }
        if let Err(error) = self.region.register_type(key.clone(), settings).await {
            tracing::error!(entity_type = %key, %error, "type not registered with the region");
        }
    }

    /// Fetches `version`'s plugin from peers until this node holds it (or no version uses it
    /// any more), then binds every type whose active version it is.
    fn fetch_in_background(&self, version: &VersionRecord) {
        let (Some(transfer), Some(this)) = (self.sources.transfer.clone(), self.this.upgrade())
        else {
            return;
        };
        let (sha256, size_bytes) = (version.sha256.clone(), version.size_bytes);
        drop(this);
        let weak = self.this.clone();
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(200);
            loop {
                match transfer.fetch_or_wait(&sha256, size_bytes, None).await {
                    Ok(()) => break,
                    Err(error) => {
                        tracing::warn!(%sha256, %error, "plugin not fetched yet; trying again");
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BLOB_FETCH_BACKOFF_MAX);
                let Some(catalog) = weak.upgrade() else {
                    return;
                };
                if !catalog.store.plugin_used(&sha256).unwrap_or(true) {
                    return; // no version needs it any more
                }
            }
            tracing::info!(%sha256, "plugin fetched from a peer");
            if let Some(catalog) = weak.upgrade() {
                catalog.blob_arrived(&sha256).await;
            }
        });
    }

    /// How many types wait on this node for their plugin to be fetched.
    pub(crate) fn plugins_fetching(&self) -> usize {
        self.types.fetching()
    }

    /// Binds every type whose active version runs the plugin `sha256`, which just arrived.
    async fn blob_arrived(&self, sha256: &str) {
        match self.store.entity_types(None) {
            Ok(records) => {
                for record in records {
                    if record
                        .active()
                        .is_some_and(|version| version.sha256 == sha256)
                    {
                        self.bind(&record).await;
                    }
                }
            }
            Err(error) => tracing::error!(%error, "types not bound after their plugin arrived"),
        }
    }

    /// Removes a bounded number of blobs no version uses (and old enough not to belong to a
    /// deploy in flight). Not while the catalog is empty: a member rebuilding it from the voters
    /// would find every blob unused.
    pub(crate) async fn collect_blobs(&self) {
        if self.store.applied_commands().unwrap_or(0) == 0 {
            return;
        }
        let (blobs, store) = (self.sources.blobs.clone(), self.store.clone());
        let before = crate::node::tenants::now_ms().saturating_sub(BLOB_GARBAGE_GRACE_MS);
        let collected = tokio::task::spawn_blocking(move || {
            blobs.collect_garbage(
                |sha256| store.plugin_used(sha256).unwrap_or(true),
                before,
                BLOB_GARBAGE_BATCH_MAX,
            )
        })
        .await;
        match collected {
            Ok(Ok(0)) => {}
            Ok(Ok(count)) => tracing::info!(count, "unused plugin blobs removed"),
            Ok(Err(error)) => tracing::warn!(%error, "unused plugin blobs not collected"),
            Err(error) => tracing::warn!(%error, "unused plugin blobs not collected"),
        }
    }

    async fn unbind(&self, key: &TypeKey) {
        self.types.unbind(key);
        self.region.unregister_type(key);
        self.entities.stop_type(key).await;
    }

    /// Makes what the layers run match a catalog replaced by a snapshot: tenants afresh, types
    /// the snapshot lacks unbound, the rest bound (again), members shown.
    async fn reload(&self) -> Result<(), tessera_metadata::MetadataError> {
        *self.tenants_mut() = TenantIndex::default();
        let records = self.store.entity_types(None)?;
        for key in self.types.keys() {
            let kept = records
                .iter()
                .any(|record| record.tenant == key.tenant && record.name == key.entity_type);
            if !kept {
                self.unbind(&key).await;
            }
        }
        let members = self.store.members()?;
        if let Some(membership) = self.members.membership.upgrade() {
            for member in membership.snapshot().members() {
                if !members.iter().any(|record| record.node == member.node) {
                    membership.leave(&member.node);
                }
            }
        }
        self.load().await
    }

    async fn on_applied(&self, applied: &Applied) {
        match applied {
            Applied::Tenant(tenant) => {
                self.tenants_mut().insert(tenant.clone());
                // New quotas reach the tenant's types at their next activation.
                match self.store.entity_types(Some(&tenant.name)) {
                    Ok(records) => {
                        for record in records {
                            self.bind(&record).await;
                        }
                    }
                    Err(error) => tracing::error!(%error, "types not rebound after a quota change"),
                }
            }
            Applied::Type(record) => self.bind(record).await,
            Applied::TypeDeleted {
                tenant,
                entity_type,
            } => {
                self.unbind(&TypeKey::new(tenant.clone(), entity_type.clone()))
                    .await;
                self.collect_blobs().await;
            }
            Applied::Member(member) => self.show_member(member),
            Applied::Restored => {
                if let Err(error) = self.reload().await {
                    tracing::error!(%error, "the node could not reload a restored catalog");
                }
                self.region.catalog_applied(applied).await;
            }
            Applied::ShardsAssigned(_) | Applied::ShardsMoved(_) => {
                self.region.catalog_applied(applied).await;
            }
            _ => {}
        }
    }

    fn show_member(&self, member: &MemberRecord) {
        self.members.show(member);
    }

    fn staged_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Plugin>>> {
        self.staged.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tenants_read(&self) -> std::sync::RwLockReadGuard<'_, TenantIndex> {
        self.tenants.read().unwrap_or_else(|p| p.into_inner())
    }

    fn tenants_mut(&self) -> std::sync::RwLockWriteGuard<'_, TenantIndex> {
        let tenants = self.tenants.write().unwrap_or_else(|p| p.into_inner());
        // Bumped under the write lock, before any change: a reader that saw the old
        // generation re-reads after the change.
        self.tenants_generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        tenants
    }

    /// The generation of the tenant records: it moves on every change to them.
    pub(crate) fn tenants_generation(&self) -> u64 {
        self.tenants_generation
            .load(std::sync::atomic::Ordering::Acquire)
    }
}

impl CatalogObserver for NodeCatalog {
    fn applied<'a>(&'a self, applied: &'a Applied) -> BoxFuture<'a, ()> {
        Box::pin(self.on_applied(applied))
    }
}

/// A tenant's default cap on guest calls running at once: one fewer than the node's cores, at
/// least one, so a single tenant's backlog always leaves a core to the others.
fn default_concurrent_guests() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |cores| cores.get().saturating_sub(1))
        .max(1)
}
