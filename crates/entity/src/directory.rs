//! [`Entities`]: the directory of a node's live cells and the only way into the entity layer.
//! It finds or starts the cell for an address (admitting it against the tenant's and the
//! node's live-entity limits, evicting the least recently used cell past the latter), puts
//! messages in its bounded mailbox, and stops cells by shard, type or all at once.

use super::cell::{Cell, CellMessage, ClaimedRun, InstanceHold, Mailbox};
use super::cell_table::{CellHandle, CellTable, Cells};
use super::core::{Core, EntitiesStats, EntityParts};
use super::counters::TypeCounters;
use super::live_cell::LiveCell;
use super::types::TypeTable;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tessera_contract::{
    BoxFuture, EntityAddress, Envelope, ErrorKind, MessageError, MessageMeta, Reply, Router,
    ShardId, TypeKey,
};
use tessera_state::EntityState;
use tokio::sync::{mpsc, oneshot};

/// A message the entity layer could not take, given back with the reason.
pub type Refused = Box<(MessageError, Envelope)>;

/// A node's live entities. Clones share the directory.
///
/// ```no_run
/// # async fn demo(entities: tessera_entity::Entities) {
/// use std::time::Duration;
/// use tessera_contract::EntityAddress;
/// let counter = EntityAddress::new("default", "counter", "c-1");
/// let payload = rmp_serde::to_vec_named(&serde_json::json!({"Add": 5})).unwrap();
/// let reply = entities.ask(counter, 0, payload, Duration::from_secs(1)).await.unwrap();
/// let value: i64 = rmp_serde::from_slice(&reply).unwrap();
/// # }
/// ```
#[derive(Clone)]
pub struct Entities {
    pub(super) core: Arc<Core>,
    pub(super) cells: Arc<CellTable>,
}

impl Entities {
    /// A directory whose entities send their `tell`s and `ask`s through `router` (a sharding
    /// region, which reaches entities wherever they live).
    pub fn new(parts: EntityParts, router: Arc<dyn Router>) -> Self {
        let cells = Arc::new(CellTable::for_parts(&parts));
        Entities {
            core: Arc::new(Core::new(
                parts,
                router,
                cells.clone(),
                Arc::new(tessera_runtime::SystemClock),
            )),
            cells,
        }
    }

    /// Starts delivering committed tells and firing due reminders, including those left by an
    /// earlier run: call it once the types are bound (inside a Tokio runtime). Later calls do
    /// nothing. Until then committed tells and reminders wait in the store.
    pub fn start_messaging(&self) {
        if self
            .core
            .messaging_started
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        super::delivery::start_sweep(&self.core);
        super::reminders::start(&self.core);
    }

    /// The type table this directory reads.
    pub fn types(&self) -> &Arc<TypeTable> {
        &self.core.types
    }

    /// The state entities read from.
    pub fn state(&self) -> &Arc<dyn EntityState> {
        &self.core.state
    }

    /// The layer's counters.
    pub fn stats(&self) -> &EntitiesStats {
        &self.core.stats
    }

    /// Hands `envelope` to `to` (of shard `shard`), starting its cell on the first message.
    /// A refusal (unknown type, quota, full mailbox) gives the envelope back with the reason.
    pub fn deliver(
        &self,
        to: EntityAddress,
        shard: ShardId,
        envelope: Envelope,
    ) -> Result<(), Refused> {
        self.send(to, shard, CellMessage::Deliver(envelope), Runner::CellTask)
            .map(|_| ())
            .map_err(|not_sent| refused(*not_sent))
    }

    /// [`deliver`](Self::deliver), or, when the entity is live, idle and has nothing waiting,
    /// the message claimed for the caller to run on its own task (the local fast path: no hop
    /// through the cell's task). The claim holds the entity until the message is done, so it
    /// must be run ([`ClaimedRun::run`]).
    pub fn deliver_here(
        &self,
        to: EntityAddress,
        shard: ShardId,
        envelope: Envelope,
    ) -> Result<Option<ClaimedRun<'static>>, Refused> {
        self.send(to, shard, CellMessage::Deliver(envelope), Runner::Sender)
            .map_err(|not_sent| refused(*not_sent))
    }

    /// Sends a message and waits for the reply, at most `timeout` (no sharding in between).
    pub async fn ask(
        &self,
        to: EntityAddress,
        shard: ShardId,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Reply {
        self.ask_with(to, shard, payload, MessageMeta::default(), timeout)
            .await
    }

    /// [`ask`](Self::ask) with the message's origin and call chain.
    pub async fn ask_with(
        &self,
        to: EntityAddress,
        shard: ShardId,
        payload: Vec<u8>,
        mut meta: MessageMeta,
        timeout: Duration,
    ) -> Reply {
        let (mut envelope, reply) = Envelope::ask(payload);
        meta.deadline = std::time::Instant::now().checked_add(timeout);
        envelope.meta = meta;
        if let Err(refused) = self.deliver(to, shard, envelope) {
            return Err(refused.0);
        }
        await_reply(reply, timeout).await
    }

    /// Starts an entity without a message (remember-entities respawn).
    pub fn start(&self, to: EntityAddress, shard: ShardId) -> Result<(), MessageError> {
        self.send(to, shard, CellMessage::Activate, Runner::CellTask)
            .map(|_| ())
            .map_err(|not_sent| not_sent.0)
    }

    /// Passivates `entity` after the messages already in its mailbox. A no-op if it is not
    /// live.
    pub fn passivate(&self, entity: &EntityAddress) -> Result<(), MessageError> {
        let cells = self.cells.lock();
        let Some(handle) = cells.live.get(entity) else {
            return Ok(());
        };
        handle
            .mailbox
            .try_post(CellMessage::Passivate)
            .map_err(|_| mailbox_full(entity))
    }

    /// Stops every live entity of `type_key` in `shard` (a handoff) after their queued
    /// messages, and resolves once their cells are gone. They stay remembered.
    pub fn stop_shard(&self, type_key: &TypeKey, shard: ShardId) -> BoxFuture<'static, ()> {
        let targets =
            self.senders_where(|address, handle| handle.shard == shard && address.is_of(type_key));
        Box::pin(stop(targets))
    }

    /// Stops every live entity of `type_key` (its type was deleted).
    pub async fn stop_type(&self, type_key: &TypeKey) {
        stop(self.senders_where(|address, _| address.is_of(type_key))).await;
    }

    /// Stops every live entity and waits for them (node shutdown). Messages still queued are
    /// answered `unavailable`, not run, and running guest calls are stopped at their next
    /// epoch tick (their effects discarded): this waits at most one tick for a CPU-bound call
    /// and the wall-clock bound for one blocked in a host call.
    pub async fn stop_all(&self) {
        self.core.closing.store(true, Ordering::Relaxed);
        self.core.gates.open_all();
        stop(self.senders_where(|_, _| true)).await;
    }

    /// Number of live entities.
    pub fn live_count(&self) -> usize {
        self.cells.lock().live.len()
    }

    /// Live entities per type.
    pub fn live_by_type(&self) -> HashMap<TypeKey, usize> {
        let mut counts = HashMap::new();
        for address in self.cells.lock().live.keys() {
            *counts.entry(address.type_key()).or_insert(0) += 1;
        }
        counts
    }

    /// Live entities of `type_key` in `shard`.
    pub fn live_in_shard(&self, type_key: &TypeKey, shard: ShardId) -> usize {
        self.cells
            .lock()
            .live
            .iter()
            .filter(|(address, handle)| handle.shard == shard && address.is_of(type_key))
            .count()
    }

    /// A direct handle on the live cell of `entity`, if it has one: for a sender that keeps
    /// sending to it ([`LiveCell::run_here`]).
    pub fn live_cell(&self, entity: &EntityAddress) -> Option<LiveCell> {
        let cells = self.cells.lock();
        let handle = cells.live.get(entity)?;
        Some(LiveCell {
            cell: handle.mailbox.cell().clone(),
            core: self.core.clone(),
        })
    }

    /// Whether `entity` has a live cell.
    pub fn is_live(&self, entity: &EntityAddress) -> bool {
        self.cells.lock().live.contains_key(entity)
    }

    /// The counters of every type seen so far.
    pub fn all_counters(&self) -> Vec<(TypeKey, Arc<TypeCounters>)> {
        self.core
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
        for (address, handle) in &self.cells.lock().live {
            *depths.entry(address.type_key()).or_insert(0) += handle.mailbox.depth();
        }
        depths
    }

    fn senders_where(&self, filter: impl Fn(&EntityAddress, &CellHandle) -> bool) -> Vec<Mailbox> {
        self.cells
            .lock()
            .live
            .iter()
            .filter(|(address, handle)| filter(address, handle))
            .map(|(_, handle)| handle.mailbox.clone())
            .collect()
    }

    fn send(
        &self,
        to: EntityAddress,
        shard: ShardId,
        message: CellMessage,
        runner: Runner,
    ) -> Result<Option<ClaimedRun<'static>>, NotSent> {
        // A cell's last use, for least-recently-used eviction: the use clock, kept under the
        // cells lock every sender takes anyway.
        let tick = self.core.next_use();
        let mut cells = self.cells.lock();
        // One lookup for a live cell, the common case; a second only after opening one.
        if let Some(handle) = cells.live.get(&to) {
            let posted = post(handle, shard, tick, message, runner);
            drop(cells);
            return posted.map_err(|refusal| self.refusal(&to, refusal));
        }
        if let Err(error) = self.open_cell(&mut cells, &to, shard, tick) {
            drop(cells);
            if error.kind != ErrorKind::EntityTypeNotRegistered {
                self.core.counters(&to.type_key()).failed(error.kind);
            }
            return Err(Box::new((error, message)));
        }
        let handle = cells
            .live
            .get(&to)
            .expect("invariant: the cell was inserted above under the same lock");
        let posted = post(handle, shard, tick, message, runner);
        drop(cells);
        posted.map_err(|refusal| self.refusal(&to, refusal))
    }

    /// Counts a message the cell of `to` did not take and says why.
    fn refusal(
        &self,
        to: &EntityAddress,
        refusal: mpsc::error::TrySendError<CellMessage>,
    ) -> NotSent {
        Box::new(match refusal {
            mpsc::error::TrySendError::Full(message) => {
                self.core
                    .stats
                    .mailbox_rejections
                    .fetch_add(1, Ordering::Relaxed);
                self.core
                    .counters(&to.type_key())
                    .failed(ErrorKind::MailboxFull);
                (mailbox_full(to), message)
            }
            mpsc::error::TrySendError::Closed(message) => (
                MessageError::unavailable(format!("{to} is stopping")),
                message,
            ),
        })
    }

    /// Starts the cell of `to` (under the cells lock): admits it, spawns its task, records it.
    fn open_cell(
        &self,
        cells: &mut Cells,
        to: &EntityAddress,
        shard: ShardId,
        tick: u64,
    ) -> Result<(), MessageError> {
        // Only a new cell needs the binding; a live one checks it at each message.
        let binding = self
            .core
            .types
            .get(&to.type_key())
            .ok_or_else(|| self.core.types.unbound(&to.type_key(), &to.to_string()))?;
        self.admit(cells, to, binding.tenant_live_entities_max)?;
        let generation = cells.next_generation;
        cells.next_generation += 1;
        let hold = Arc::new(InstanceHold::default());
        let mailbox = Cell::spawn(
            self.core.clone(),
            to.clone(),
            shard,
            generation,
            binding.mailbox_capacity.max(1),
            hold.clone(),
            tick,
        );
        *cells.tenants.entry(to.tenant.clone()).or_insert(0) += 1;
        cells.live.insert(
            to.clone(),
            CellHandle {
                mailbox,
                generation,
                shard,
                evicting: false,
                hold,
            },
        );
        Ok(())
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
        let Some(max) = self.core.config.active_entities_max else {
            return Ok(());
        };
        // Usually one victim; more when the node is over its limit (an eviction that was
        // abandoned because messages arrived leaves it one over).
        while cells.live.len() - cells.evicting >= max {
            let victim = cells
                .live
                .iter()
                .filter(|(_, handle)| !handle.evicting)
                .min_by_key(|(_, handle)| handle.mailbox.cell().last_used())
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
            if handle.mailbox.try_post(CellMessage::Passivate).is_err() {
                // Its mailbox is full: it is busy, not idle; the next start tries again.
                break;
            }
            handle.evicting = true;
            cells.evicting += 1;
            self.core.stats.evictions.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Sends each cell a stop request and waits until every one is gone.
async fn stop(targets: Vec<Mailbox>) {
    let mut waiters = Vec::with_capacity(targets.len());
    for mailbox in targets {
        let (done, stopped) = oneshot::channel();
        if mailbox.post(CellMessage::Stop(done)).await {
            waiters.push(stopped);
        }
    }
    for stopped in waiters {
        let _ = stopped.await;
    }
}

/// Waits for an ask's reply, turning a timeout or a dropped port into an error.
pub(crate) async fn await_reply(reply: oneshot::Receiver<Reply>, timeout: Duration) -> Reply {
    match tokio::time::timeout(timeout, reply).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(_)) => Err(MessageError::unavailable(
            "the entity stopped before replying",
        )),
        Err(_) => Err(MessageError::new(
            ErrorKind::Timeout,
            format!("no reply within {} ms", timeout.as_millis()),
        )),
    }
}

/// Who runs a delivered message: the cell's task (always possible), or the sender, when the
/// cell is idle ([`Entities::deliver_here`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Runner {
    CellTask,
    Sender,
}

/// Gives `message` to the live cell `handle` (under the cells lock): runs it on the sender's
/// task if `runner` says so and the cell can be claimed, else posts it to the mailbox.
fn post(
    handle: &CellHandle,
    shard: ShardId,
    tick: u64,
    message: CellMessage,
    runner: Runner,
) -> Result<Option<ClaimedRun<'static>>, mpsc::error::TrySendError<CellMessage>> {
    debug_assert_eq!(
        handle.shard, shard,
        "an entity stays in the shard it started in"
    );
    handle.mailbox.cell().used_at(tick);
    let message = match message {
        CellMessage::Deliver(envelope) if runner == Runner::Sender => {
            match handle.mailbox.cell().claim_owned(envelope) {
                Ok(run) => return Ok(Some(run)),
                Err(envelope) => CellMessage::Deliver(envelope),
            }
        }
        message => message,
    };
    handle.mailbox.try_post(message).map(|()| None)
}

/// The refusal of a `Deliver`, with its envelope.
/// A message a cell did not take, given back with the reason (boxed: the error path is rare,
/// and the message is large).
type NotSent = Box<(MessageError, CellMessage)>;

fn refused((error, message): (MessageError, CellMessage)) -> Refused {
    match message {
        CellMessage::Deliver(envelope) => Box::new((error, envelope)),
        _ => unreachable!("send gives back the message it was given"),
    }
}

fn mailbox_full(to: &EntityAddress) -> MessageError {
    MessageError::new(
        ErrorKind::MailboxFull,
        format!("the mailbox of {to} is full; retry later"),
    )
}
