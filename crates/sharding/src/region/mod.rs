//! The region: one per node. Senders route through a [`RegionHandle`] (`send`), or through an
//! [`EntityRoute`] resolved once for a sender that keeps sending to one entity
//! (`entity_route`): a message for a shard this node owns goes straight from the sender to the
//! entity (the shard-home table in `homes`; an idle entity's message may run on the sender's
//! task); the region task (`task`) is involved only on a miss — allocating a shard through the
//! coordinator (buffering, bounded, meanwhile), forwarding to the shard's owner on another
//! node, answering asks forwarded from there, and handing shards off when the coordinator moves
//! them. A state read goes where an ask would and is answered from the owner's state
//! (`state_read`). Remembered entities of acquired shards are restarted by `recovery`; guest
//! `tell`s and `ask`s enter through the region's [`Router`] (`router`). Warnings that come once
//! per message are counted per kind (`warnings`).

mod batch;
mod entity_route;
mod forward;
mod homes;
mod recovery;
mod route;
mod router;
mod send;
mod state_read;
mod stats;
mod task;
mod transfer;
mod warnings;

pub use entity_route::EntityRoute;
pub use entity_route::PendingReply;
pub use homes::TypeSettings;
pub use state_read::{STATE_READ_BYTES_MAX, STATE_READ_ENTRIES_MAX};
pub use transfer::{TRANSFER_STALL_ATTEMPTS, TRANSFERS_SENDING_MAX};

use std::sync::Arc;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::config::{ConfigError, ShardingConfig};
use crate::handoff::Buffered;
use crate::lease::NodeLease;
use crate::link::Switchboard;
use crate::local::LocalEntities;
use homes::{Homes, RegisteredType};
use route::{fail_all, stopped};
pub use stats::RegionCounters;
pub(crate) use stats::RegionStats;
use tessera_contract::{
    Allocation, EntityAddress, ErrorKind, MessageError, NodeId, Router, ShardId, ShardKey, TypeKey,
};
use tessera_metadata::{Applied, MetadataStore};
use tessera_state::remember::{RememberEvent, RememberWriter};
use tessera_state::{ShardStates, StoreError};

/// The refusal of a message served while its node's lease ran out.
pub(crate) fn lost_lease() -> MessageError {
    MessageError::shard_unavailable(
        "this node lost its lease on its shards while serving: nothing it wrote is kept, and no \
         answer is sent from what it read; retry",
    )
}

/// A request from a handle to the region task (local only, never on the wire).
pub(crate) enum Request {
    /// A sender found the shard unknown and set it allocating: ask the coordinator.
    Allocate(ShardKey),
    /// Route this envelope from the task (the shard is remote): forward it in order.
    Route {
        item: Buffered,
        /// Where the routing outcome goes; `None` for a one-way message, whose sender does not
        /// wait (a refusal is counted as a dropped tell, like any failure after acceptance).
        accepted: Option<oneshot::Sender<Result<(), MessageError>>>,
    },
    /// Restart the remembered entities of a newly registered type.
    RecoverType(TypeKey),
    /// The node's catalog applied these allocations (`moved`: as handoffs).
    Committed {
        assigned: Vec<(ShardKey, Allocation)>,
        moved: bool,
    },
    /// The node's catalog was replaced by a snapshot.
    CatalogRestored,
    /// Stop the task.
    Shutdown(oneshot::Sender<()>),
}

/// Work the region task sends itself when a spawned step finishes.
pub(crate) enum Internal {
    HandoffStopped(ShardKey),
    /// Every part of a shard's state was installed by its new owner.
    Transferred(ShardKey, Allocation),
    RememberedShards(TypeKey, Vec<ShardId>),
    /// A shard's lineage began here (its stale rows cleared), or could not.
    LineageBegun(ShardKey, Result<(), String>),
}

/// State shared by the region task and every handle.
pub(crate) struct Shared {
    pub(crate) node: NodeId,
    pub(crate) config: ShardingConfig,
    pub(crate) homes: Homes,
    pub(crate) local: Arc<dyn LocalEntities>,
    pub(crate) remember: Option<RememberWriter>,
    pub(crate) switchboard: Arc<Switchboard>,
    pub(crate) shard_states: Option<Arc<dyn ShardStates>>,
    pub(crate) catalog: Option<MetadataStore>,
    pub(crate) lease: Arc<NodeLease>,
    pub(crate) requests: mpsc::Sender<Request>,
    pub(crate) stats: RegionStats,
    /// The per-message warnings, counted per kind.
    pub(crate) warnings: warnings::RegionWarnings,
}

/// What a region is built from.
pub struct RegionParts {
    /// This node's id.
    pub node: NodeId,
    /// Sharding settings.
    pub config: ShardingConfig,
    /// How regions and the coordinator reach each other.
    pub switchboard: Arc<Switchboard>,
    /// The remember-entities writer (also given to the entity layer), if enabled.
    pub remember: Option<RememberWriter>,
    /// Where a shard's durable state is read and installed when the shard moves to or from
    /// another node; `None` when every region reads one store (regions in one process), so a
    /// handoff moves no rows.
    pub shard_states: Option<Arc<dyn ShardStates>>,
    /// This node's lease: the region serves its shards only while it is valid. `None` for a
    /// node that needs none (a single node, regions in one process).
    pub lease: Option<Arc<NodeLease>>,
    /// This node's applied catalog: when given, the region serves a shard only once the
    /// committed shard table gives it to this node at the generation it was told, and stops a
    /// shard the table gives to another node (see [`RegionHandle::catalog_applied`]). `None`
    /// for regions in one process that share one coordinator's word.
    pub catalog: Option<MetadataStore>,
}

/// Starts regions.
pub struct Region;

impl Region {
    /// Validates the config and starts the region of `parts.node`. `build_local` gets the
    /// [`Router`] guest messages must leave through and returns the node's entity layer (plus
    /// anything the caller wants back), so the two are built in one pass, with no setter: the
    /// router holds the region weakly. Must be called inside a Tokio runtime.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::Arc;
    /// use tessera_contract::{BoxFuture, EntityAddress, Envelope, ShardId, TypeKey};
    /// use tessera_entity::Refused;
    /// use tessera_metadata::{Applied, CatalogObserver, LocalPlane, MetadataStore};
    /// use tessera_sharding::{
    ///     Coordinator, LocalEntities, Membership, Region, RegionParts, ShardingConfig,
    ///     Switchboard, TypeSettings,
    /// };
    /// struct Echo;
    /// impl LocalEntities for Echo {
    ///     fn deliver(&self, _: EntityAddress, _: ShardId, envelope: Envelope) -> Result<(), Refused> {
    ///         let payload = envelope.payload.clone();
    ///         envelope.answer(Ok(payload));
    ///         Ok(())
    ///     }
    ///     fn start(&self, _: EntityAddress, _: ShardId) {}
    ///     fn passivate(&self, _: &EntityAddress) {}
    ///     fn stop_shard(&self, _: &TypeKey, _: ShardId) -> BoxFuture<'static, ()> { Box::pin(async {}) }
    ///     fn live_in_shard(&self, _: &TypeKey, _: ShardId) -> usize { 0 }
    /// }
    /// struct Quiet;
    /// impl CatalogObserver for Quiet {
    ///     fn applied<'a>(&'a self, _: &'a Applied) -> BoxFuture<'a, ()> { Box::pin(async {}) }
    /// }
    /// let dir = tempfile::tempdir().unwrap();
    /// let database = Arc::new(redb::Database::create(dir.path().join("m.redb")).unwrap());
    /// let plane = Arc::new(LocalPlane::new(MetadataStore::open(database).unwrap(), Arc::new(Quiet)));
    /// let config = ShardingConfig::default();
    /// let switchboard = Arc::new(Switchboard::new());
    /// let parts = RegionParts {
    ///     node: "node-1".into(), config: config.clone(), switchboard: switchboard.clone(), remember: None, shard_states: None, lease: None, catalog: None,
    /// };
    /// let (region, ()) = Region::start(parts, |_router| (Arc::new(Echo) as Arc<dyn LocalEntities>, ())).unwrap();
    /// let membership = Membership::new();
    /// membership.join("node-1", Vec::<String>::new());
    /// let _coordinator = Coordinator::start(config, membership.subscribe(), switchboard, plane).unwrap();
    /// let counter = TypeKey::new("acme", "counter");
    /// region.register_type(counter.clone(), TypeSettings::new(128)).await.unwrap();
    /// let reply = region.ask(counter.entity("c-1"), b"hi".to_vec(), None).await;
    /// assert_eq!(reply.unwrap(), b"hi");
    /// # }
    /// ```
    pub fn start<T>(
        parts: RegionParts,
        build_local: impl FnOnce(Arc<dyn Router>) -> (Arc<dyn LocalEntities>, T),
    ) -> Result<(RegionHandle, T), ConfigError> {
        parts.config.validate()?;
        let capacity = parts.config.command_buffer;
        let (requests, request_receiver) = mpsc::channel(capacity);
        let mut extra = None;
        let lease = parts
            .lease
            .unwrap_or_else(|| Arc::new(NodeLease::always_valid()));
        let shared = Arc::new_cyclic(|weak| {
            let router: Arc<dyn Router> =
                Arc::new(router::RegionRouter::new(weak.clone(), lease.clone()));
            let (local, built) = build_local(router);
            extra = Some(built);
            Shared {
                node: parts.node,
                config: parts.config,
                homes: Homes::default(),
                local,
                remember: parts.remember,
                switchboard: parts.switchboard,
                shard_states: parts.shard_states,
                catalog: parts.catalog,
                lease,
                requests,
                stats: RegionStats::default(),
                warnings: warnings::region_warnings(),
            }
        });
        let extra = extra.expect("invariant: new_cyclic ran the closure that builds the entities");
        task::RegionTask::spawn(shared.clone(), request_receiver);
        Ok((RegionHandle { shared }, extra))
    }
}

/// A handle to a region; clones share it. The region task stops on
/// [`RegionHandle::shutdown`].
#[derive(Clone)]
pub struct RegionHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RegionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionHandle")
            .field("node", &self.shared.node)
            .finish_non_exhaustive()
    }
}

impl RegionHandle {
    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        RegionHandle { shared }
    }

    /// The node this region runs on.
    pub fn node(&self) -> &str {
        &self.shared.node
    }

    /// Registers (or re-registers) an entity type. For a remembered type with a store, the
    /// shards remembered for it are resolved and their entities restarted where they land.
    pub async fn register_type(
        &self,
        type_key: TypeKey,
        settings: TypeSettings,
    ) -> Result<(), MessageError> {
        let remember = settings.remember && self.shared.remember.is_some();
        if let Some(replaced) = self.shared.homes.register(type_key.clone(), settings) {
            self.fail_waiting(
                &replaced,
                "the type was re-registered with another shard count",
            );
        }
        if remember {
            self.shared
                .requests
                .send(Request::RecoverType(type_key))
                .await
                .map_err(|_| stopped())?;
        }
        Ok(())
    }

    /// Tells the region what this node's catalog applied: shard assignments and moves (so a
    /// shard this region serves and the catalog gave to another node stops here, and an
    /// allocation it was told before the catalog applied it is served now) and snapshot
    /// restores. Other commands are ignored. Call it from the node's catalog observer, in order.
    pub async fn catalog_applied(&self, applied: &Applied) {
        let request = match applied {
            Applied::ShardsAssigned(assigned) => Request::Committed {
                assigned: assigned.clone(),
                moved: false,
            },
            Applied::ShardsMoved(assigned) => Request::Committed {
                assigned: assigned.clone(),
                moved: true,
            },
            Applied::Restored => Request::CatalogRestored,
            _ => return,
        };
        // A stopped region has nothing left to serve.
        let _ = self.shared.requests.send(request).await;
    }

    /// Unregisters a type: its messages then fail with `EntityTypeNotRegistered`, and the ones
    /// waiting for its shards fail now.
    pub fn unregister_type(&self, type_key: &TypeKey) {
        if let Some(removed) = self.shared.homes.unregister(type_key) {
            self.fail_waiting(&removed, "the type was unregistered");
        }
    }

    fn fail_waiting(&self, ty: &RegisteredType, why: &str) {
        let error = MessageError::new(
            ErrorKind::EntityTypeNotRegistered,
            format!("entity type {}: {why}", ty.key),
        );
        for shard in 0..ty.num_shards() {
            if let Some(mut home) = ty.slot(shard)
                && let homes::Home::Allocating { buffer, .. }
                | homes::Home::HandingOff { buffer, .. } = &mut *home
            {
                fail_all(&self.shared, buffer, &error);
            }
        }
    }

    /// Whether this region owns `key` right now.
    pub fn owns(&self, key: &ShardKey) -> bool {
        self.shared.owns(key)
    }

    /// Shards this region serves or is handing off now (a leaving node waits for zero).
    pub fn held_shards(&self) -> usize {
        self.shared
            .homes
            .all()
            .iter()
            .map(|ty| {
                (0..ty.num_shards())
                    .filter(|shard| {
                        ty.slot(*shard).is_some_and(|home| {
                            matches!(
                                *home,
                                homes::Home::Local { .. } | homes::Home::HandingOff { .. }
                            )
                        })
                    })
                    .count()
            })
            .sum()
    }

    /// What this region refused, dropped and forwarded so far.
    pub fn counters(&self) -> RegionCounters {
        self.shared.stats.snapshot()
    }

    /// Waits until every remember record queued before this call is durable.
    pub async fn flush_remembered(&self) -> Result<(), StoreError> {
        match &self.shared.remember {
            Some(writer) => writer.flush().await,
            None => Ok(()),
        }
    }

    /// The remember event feed, if remember-entities is enabled.
    pub fn remember_events(&self) -> Option<broadcast::Receiver<RememberEvent>> {
        self.shared.remember.as_ref().map(RememberWriter::subscribe)
    }

    /// Stops the region: disconnects it and flushes remembered ids. Other handles then fail
    /// on misses; the local fast path keeps delivering to whatever entities still run.
    pub async fn shutdown(&self) {
        let (reply, receiver) = oneshot::channel();
        if self
            .shared
            .requests
            .send(Request::Shutdown(reply))
            .await
            .is_ok()
        {
            let _ = receiver.await;
        }
    }
}

impl Shared {
    /// Whether this region owns `key` right now (recovery checks it before every start).
    /// Whether this node may still serve `to` in `shard` (see [`Router::may_serve`]).
    pub(crate) fn may_serve(&self, to: &EntityAddress, shard: ShardId) -> Result<(), MessageError> {
        self.holds_lease()?;
        let serving = self
            .homes
            .get(&to.tenant, &to.entity_type)
            .and_then(|ty| {
                ty.slot(shard).map(|home| {
                    matches!(
                        *home,
                        homes::Home::Local { .. } | homes::Home::HandingOff { .. }
                    )
                })
            })
            .unwrap_or(false);
        if !serving {
            return Err(MessageError::shard_unavailable(format!(
                "shard {shard} of {} left node {} while {to} was served: nothing it wrote is \
                 kept; retry",
                to.type_key(),
                self.node
            )));
        }
        Ok(())
    }

    /// Whether this node's lease is valid (see [`Router::holds_lease`]).
    pub(crate) fn holds_lease(&self) -> Result<(), MessageError> {
        if self.lease.is_valid_now() {
            return Ok(());
        }
        Err(lost_lease())
    }

    /// Whether this region serves `entity`'s shard now (see [`Router::serves_here`]); a shard
    /// never resolved since the region started is asked for.
    pub(crate) fn serves_here(&self, entity: &EntityAddress) -> bool {
        let Some(ty) = self.homes.get(&entity.tenant, &entity.entity_type) else {
            return false;
        };
        let shard = ty.extractor.shard_of(&entity.id);
        let Some(mut home) = ty.slot(shard) else {
            return false;
        };
        match &*home {
            homes::Home::Local { .. } | homes::Home::HandingOff { .. } => true,
            homes::Home::Unknown => {
                // As a sender finding the shard unknown does: ask, and let messages wait.
                let key = ShardKey::new(ty.key.clone(), shard);
                if self.requests.try_send(Request::Allocate(key)).is_ok() {
                    *home = homes::Home::Allocating {
                        since: tokio::time::Instant::now(),
                        buffer: crate::handoff::ShardBuffer::new(self.config.allocation_buffer),
                    };
                }
                false
            }
            homes::Home::Allocating { .. } | homes::Home::Remote(_) => false,
        }
    }

    /// The generation at which this region serves `to`'s shard, if it does.
    pub(crate) fn serving_generation(&self, to: &EntityAddress, shard: ShardId) -> Option<u64> {
        let ty = self.homes.get(&to.tenant, &to.entity_type)?;
        let home = ty.slot(shard)?;
        match &*home {
            homes::Home::Local { generation } => Some(*generation),
            _ => None,
        }
    }

    pub(crate) fn owns(&self, key: &ShardKey) -> bool {
        self.homes
            .get_key(&key.type_key)
            .and_then(|ty| {
                ty.slot(key.shard)
                    .map(|home| matches!(*home, homes::Home::Local { .. }))
            })
            .unwrap_or(false)
    }
}
