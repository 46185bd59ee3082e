//! The directory of a node's live entity cells: finds or starts the cell for an address,
//! enforces the active-entity limits, and routes messages between local entities.

use super::cell::{Cell, CellMessage};
use super::counters::TypeCounters;
use super::types::TypeTable;
use crate::envelope::{EntityAddress, Envelope, ErrorKind, MessageError, Reply, TypeKey};
use crate::runtime::{Router, Runtime};
use crate::state::{StateCommit, StateStore};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Node-wide settings of the entity layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EntityConfig {
    /// The most live entities on this node; starting one more passivates the least recently
    /// used. `None` means no limit beyond the runtime's instance pool.
    pub active_entities_max: Option<usize>,
    /// The most timers one activation may have armed at once.
    pub timers_per_entity_max: usize,
}

impl Default for EntityConfig {
    fn default() -> Self {
        EntityConfig {
            active_entities_max: None,
            timers_per_entity_max: 1024,
        }
    }
}

/// Told when entities start and stop, so remember-entities can record and forget them.
pub trait Lifecycle: Send + Sync + 'static {
    /// An entity got a live cell.
    fn started(&self, entity: &EntityAddress);
    /// An entity was passivated (explicitly, when idle, or evicted) and its cell is gone.
    fn passivated(&self, entity: &EntityAddress);
    /// An entity was stopped for a handoff or shutdown; it is not forgotten.
    fn stopped(&self, _entity: &EntityAddress) {}
}

/// Counters of the entity layer.
#[derive(Debug, Default)]
pub struct EntitiesStats {
    /// Activations (instance created and `activate` ran).
    pub activations: AtomicU64,
    /// Cells that ended by passivation.
    pub passivations: AtomicU64,
    /// Live cells passivated to respect the active-entity limit.
    pub evictions: AtomicU64,
    /// Messages refused because a mailbox was full.
    pub mailbox_rejections: AtomicU64,
    /// Messages handled (successfully or not).
    pub messages: AtomicU64,
    /// Messages that failed.
    pub message_failures: AtomicU64,
    /// Instances discarded after a trap, deadline, memory cap or oversized reply.
    pub instance_discards: AtomicU64,
    /// Tells produced by entities that their target refused.
    pub dropped_tells: AtomicU64,
    /// Timers not armed because the activation had too many.
    pub dropped_timers: AtomicU64,
    /// Guest stdout/stderr/log lines dropped by the per-message log budget.
    pub guest_log_lines_dropped: AtomicU64,
}

pub(crate) struct CellHandle {
    pub(crate) sender: mpsc::Sender<CellMessage>,
    pub(crate) generation: u64,
    pub(crate) last_used: AtomicU64,
    pub(crate) evicting: bool,
}

pub(crate) struct Shared {
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) state: StateStore,
    pub(crate) commit: Arc<dyn StateCommit>,
    pub(crate) types: Arc<TypeTable>,
    pub(crate) config: EntityConfig,
    pub(crate) cells: Mutex<Cells>,
    pub(crate) router: RwLock<Option<Arc<dyn Router>>>,
    pub(crate) lifecycle: RwLock<Option<Arc<dyn Lifecycle>>>,
    pub(crate) stats: EntitiesStats,
    counters: RwLock<HashMap<TypeKey, Arc<TypeCounters>>>,
    clock: AtomicU64,
}

#[derive(Default)]
pub(crate) struct Cells {
    pub(crate) live: HashMap<EntityAddress, CellHandle>,
    tenants: HashMap<String, usize>,
    evicting: usize,
    next_generation: u64,
}

impl Cells {
    /// Removes the cell of `entity` if it is still generation `generation`.
    pub(crate) fn remove(&mut self, entity: &EntityAddress, generation: u64) -> bool {
        match self.live.get(entity) {
            Some(handle) if handle.generation == generation => {}
            _ => return false,
        }
        if let Some(handle) = self.live.remove(entity) {
            if handle.evicting {
                self.evicting -= 1;
            }
            if let Some(count) = self.tenants.get_mut(&entity.tenant) {
                *count = count.saturating_sub(1);
            }
        }
        true
    }
}

/// A node's live entities.
///
/// ```no_run
/// # async fn demo(entities: tessera_host::entity::Entities) {
/// use std::time::Duration;
/// use tessera_host::envelope::EntityAddress;
/// let counter = EntityAddress::new("default", "counter", "c-1");
/// let payload = rmp_serde::to_vec_named(&serde_json::json!({"Add": 5})).unwrap();
/// let reply = entities.ask(counter, payload, Duration::from_secs(1)).await.unwrap();
/// let value: i64 = rmp_serde::from_slice(&reply).unwrap();
/// # }
/// ```
#[derive(Clone)]
pub struct Entities {
    shared: Arc<Shared>,
}

impl Entities {
    /// A directory with no live entity yet.
    pub fn new(
        runtime: Arc<Runtime>,
        state: StateStore,
        commit: Arc<dyn StateCommit>,
        types: Arc<TypeTable>,
        config: EntityConfig,
    ) -> Self {
        Entities {
            shared: Arc::new(Shared {
                runtime,
                state,
                commit,
                types,
                config,
                cells: Mutex::new(Cells::default()),
                router: RwLock::new(None),
                lifecycle: RwLock::new(None),
                stats: EntitiesStats::default(),
                counters: RwLock::new(HashMap::new()),
                clock: AtomicU64::new(0),
            }),
        }
    }

    /// Routes entity-to-entity messages through `router` (a sharding region) instead of
    /// straight to local cells.
    pub fn set_router(&self, router: Arc<dyn Router>) {
        *self
            .shared
            .router
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(router);
    }

    /// Reports starts and passivations to `lifecycle`.
    pub fn set_lifecycle(&self, lifecycle: Arc<dyn Lifecycle>) {
        *self
            .shared
            .lifecycle
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(lifecycle);
    }

    /// Forgets the router and lifecycle listener set by the layer above (on shutdown), which
    /// otherwise keep that layer and this directory alive through each other.
    pub fn detach(&self) {
        *self
            .shared
            .router
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        *self
            .shared
            .lifecycle
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }

    /// The type table this directory reads.
    pub fn types(&self) -> &Arc<TypeTable> {
        &self.shared.types
    }

    /// The state store entities read from.
    pub fn state(&self) -> &StateStore {
        &self.shared.state
    }

    /// The layer's counters.
    pub fn stats(&self) -> &EntitiesStats {
        &self.shared.stats
    }

    /// Hands `envelope` to `to`, starting its cell on the first message. A refusal is
    /// answered on the envelope.
    pub fn deliver(&self, to: EntityAddress, envelope: Envelope) {
        if let Err((error, envelope)) = self.try_deliver(to, envelope) {
            envelope.answer(Err(error));
        }
    }

    /// Like [`deliver`](Self::deliver) but gives a refused envelope back with the reason.
    pub fn try_deliver(
        &self,
        to: EntityAddress,
        envelope: Envelope,
    ) -> Result<(), (MessageError, Envelope)> {
        self.send(to, CellMessage::Deliver(envelope))
            .map_err(|(error, message)| match message {
                CellMessage::Deliver(envelope) => (error, envelope),
                _ => unreachable!("send gives back the message it was given"),
            })
    }

    /// Sends a message and waits for the reply, at most `timeout`.
    pub async fn ask(&self, to: EntityAddress, payload: Vec<u8>, timeout: Duration) -> Reply {
        let (envelope, reply) = Envelope::ask(payload);
        self.deliver(to, envelope);
        await_reply(reply, timeout).await
    }

    /// Starts an entity without a message (remember-entities respawn).
    pub fn start(&self, to: EntityAddress) -> Result<(), MessageError> {
        self.send(to, CellMessage::Activate)
            .map_err(|(error, _)| error)
    }

    /// Passivates `entity` after the messages already in its mailbox. A no-op if it is not
    /// live.
    pub fn passivate(&self, entity: &EntityAddress) -> Result<(), MessageError> {
        let cells = self.cells();
        let Some(handle) = cells.live.get(entity) else {
            return Ok(());
        };
        handle
            .sender
            .try_send(CellMessage::Passivate)
            .map_err(|_| mailbox_full(entity))
    }

    /// Stops every live entity matching `filter` (after their queued messages) and waits
    /// until their cells are gone.
    pub async fn stop_where(&self, filter: impl Fn(&EntityAddress) -> bool) {
        let targets: Vec<(EntityAddress, mpsc::Sender<CellMessage>)> = self
            .cells()
            .live
            .iter()
            .filter(|(address, _)| filter(address))
            .map(|(address, handle)| (address.clone(), handle.sender.clone()))
            .collect();
        let mut waiters = Vec::with_capacity(targets.len());
        for (_, sender) in targets {
            let (done, stopped) = oneshot::channel();
            if sender.send(CellMessage::Stop(done)).await.is_ok() {
                waiters.push(stopped);
            }
        }
        for stopped in waiters {
            let _ = stopped.await;
        }
    }

    /// Stops every live entity and waits for them (node shutdown).
    pub async fn stop_all(&self) {
        self.stop_where(|_| true).await;
    }

    /// Number of live entities.
    pub fn live_count(&self) -> usize {
        self.cells().live.len()
    }

    /// Live entities per type.
    pub fn live_by_type(&self) -> HashMap<TypeKey, usize> {
        let mut counts = HashMap::new();
        for address in self.cells().live.keys() {
            *counts.entry(address.type_key()).or_insert(0) += 1;
        }
        counts
    }

    /// Whether `entity` has a live cell.
    pub fn is_live(&self, entity: &EntityAddress) -> bool {
        self.cells().live.contains_key(entity)
    }

    /// Addresses of every live entity matching `filter`.
    pub fn live_where(&self, filter: impl Fn(&EntityAddress) -> bool) -> Vec<EntityAddress> {
        self.cells()
            .live
            .keys()
            .filter(|address| filter(address))
            .cloned()
            .collect()
    }

    /// The counters of one type, created on first use.
    pub fn counters(&self, key: &TypeKey) -> Arc<TypeCounters> {
        if let Some(counters) = self
            .shared
            .counters
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(key)
        {
            return counters.clone();
        }
        self.shared
            .counters
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(key.clone())
            .or_default()
            .clone()
    }

    /// The counters of every type seen so far.
    pub fn all_counters(&self) -> Vec<(TypeKey, Arc<TypeCounters>)> {
        self.shared
            .counters
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .map(|(key, counters)| (key.clone(), counters.clone()))
            .collect()
    }

    /// Messages waiting in the mailboxes of each type's live entities.
    pub fn mailbox_depths(&self) -> HashMap<TypeKey, usize> {
        let mut depths = HashMap::new();
        for (address, handle) in &self.cells().live {
            let depth = handle.sender.max_capacity() - handle.sender.capacity();
            *depths.entry(address.type_key()).or_insert(0) += depth;
        }
        depths
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    pub(crate) fn cells(&self) -> MutexGuard<'_, Cells> {
        self.shared
            .cells
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The router entities send through: the region if one is set, else this directory.
    pub(crate) fn router(&self) -> Arc<dyn Router> {
        let router = self
            .shared
            .router
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        router.unwrap_or_else(|| Arc::new(LocalRouter(Arc::downgrade(&self.shared))))
    }

    fn send(
        &self,
        to: EntityAddress,
        message: CellMessage,
    ) -> Result<(), (MessageError, CellMessage)> {
        let tick = self.shared.clock.fetch_add(1, Ordering::Relaxed);
        let mut cells = self.cells();
        if !cells.live.contains_key(&to) {
            // Only a new cell needs the binding; a live one checks it at each message.
            let Some(binding) = self.shared.types.get(&to.type_key()) else {
                return Err((not_registered(&to), message));
            };
            if let Err(error) = self.admit(&mut cells, &to, binding.tenant_live_entities_max) {
                drop(cells);
                self.counters(&to.type_key()).failed(error.kind);
                return Err((error, message));
            }
            let generation = cells.next_generation;
            cells.next_generation += 1;
            let (sender, receiver) = mpsc::channel(binding.mailbox_capacity.max(1));
            Cell::spawn(self.clone(), to.clone(), generation, receiver);
            *cells.tenants.entry(to.tenant.clone()).or_insert(0) += 1;
            cells.live.insert(
                to.clone(),
                CellHandle {
                    sender,
                    generation,
                    last_used: AtomicU64::new(tick),
                    evicting: false,
                },
            );
        }
        let handle = cells
            .live
            .get(&to)
            .expect("invariant: the cell was found or inserted above under the same lock");
        handle.last_used.store(tick, Ordering::Relaxed);
        match handle.sender.try_send(message) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(message)) => {
                self.shared
                    .stats
                    .mailbox_rejections
                    .fetch_add(1, Ordering::Relaxed);
                drop(cells);
                self.counters(&to.type_key()).failed(ErrorKind::MailboxFull);
                Err((mailbox_full(&to), message))
            }
            Err(mpsc::error::TrySendError::Closed(message)) => Err((
                MessageError::new(ErrorKind::Unavailable, format!("{to} is stopping")),
                message,
            )),
        }
    }

    /// Makes room for a new cell: refuses past the tenant quota, evicts the least recently
    /// used cell past the node limit.
    fn admit(
        &self,
        cells: &mut Cells,
        to: &EntityAddress,
        tenant_max: Option<usize>,
    ) -> Result<(), MessageError> {
        if let Some(max) = tenant_max {
            let live = cells.tenants.get(&to.tenant).copied().unwrap_or(0);
            if live >= max {
                return Err(MessageError::new(
                    ErrorKind::QuotaExceeded,
                    format!(
                        "tenant {} already has {live} live entities, its quota",
                        to.tenant
                    ),
                ));
            }
        }
        let Some(max) = self.shared.config.active_entities_max else {
            return Ok(());
        };
        if cells.live.len() - cells.evicting < max {
            return Ok(());
        }
        let victim = cells
            .live
            .iter()
            .filter(|(_, handle)| !handle.evicting)
            .min_by_key(|(_, handle)| handle.last_used.load(Ordering::Relaxed))
            .map(|(address, _)| address.clone());
        let Some(victim) = victim else {
            return Err(MessageError::new(
                ErrorKind::QuotaExceeded,
                format!("this node already runs {max} live entities"),
            ));
        };
        let handle = cells
            .live
            .get_mut(&victim)
            .expect("invariant: the victim was chosen from the live map under this lock");
        if handle.sender.try_send(CellMessage::Passivate).is_ok() {
            handle.evicting = true;
            cells.evicting += 1;
            self.shared.stats.evictions.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Waits for an ask's reply, turning a timeout or a dropped port into an error.
pub(crate) async fn await_reply(reply: oneshot::Receiver<Reply>, timeout: Duration) -> Reply {
    match tokio::time::timeout(timeout, reply).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(_)) => Err(MessageError::new(
            ErrorKind::Unavailable,
            "the entity stopped before replying",
        )),
        Err(_) => Err(MessageError::new(
            ErrorKind::Timeout,
            format!("no reply within {} ms", timeout.as_millis()),
        )),
    }
}

fn not_registered(to: &EntityAddress) -> MessageError {
    MessageError::new(
        ErrorKind::EntityTypeNotRegistered,
        format!(
            "entity type {} is not deployed in tenant {}",
            to.entity_type, to.tenant
        ),
    )
}

fn mailbox_full(to: &EntityAddress) -> MessageError {
    MessageError::new(
        ErrorKind::MailboxFull,
        format!("the mailbox of {to} is full; retry later"),
    )
}

/// Routes guest messages straight to the cells of this node (no region).
struct LocalRouter(std::sync::Weak<Shared>);

impl LocalRouter {
    fn entities(&self) -> Result<Entities, MessageError> {
        self.0
            .upgrade()
            .map(|shared| Entities { shared })
            .ok_or_else(|| MessageError::new(ErrorKind::Unavailable, "the node is shutting down"))
    }
}

impl Router for LocalRouter {
    fn tell(
        &self,
        _from: &EntityAddress,
        to: EntityAddress,
        payload: Vec<u8>,
    ) -> Result<(), MessageError> {
        self.entities()?
            .try_deliver(to, Envelope::tell(payload))
            .map_err(|(error, _)| error)
    }

    fn ask(
        &self,
        _from: &EntityAddress,
        to: EntityAddress,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Reply> + Send>> {
        let entities = self.entities();
        Box::pin(async move { entities?.ask(to, payload, timeout).await })
    }
}
