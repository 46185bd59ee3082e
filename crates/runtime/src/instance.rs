//! One live entity instance: its store, its bindings, and the calls into the guest, each with
//! fresh per-message limits and every failure classified.

use super::bindings::{Activation, Entity, GuestError, v1};
use super::host::{AskClock, HostState, HostTrap};
use super::host_v1::error_from_v1;
use super::plugin::Plugin;
use super::retire::{RETIRE_OFF_WORKER_GROWTH_BYTES, Retirement};
use super::sender::Sender;
use super::slots::SlotGuard;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::time::Duration;
use tessera_contract::{EntityAddress, ErrorKind, MessageError, TraceContext};
use tessera_state::WriteSet;
use wasmtime::Store;

pub use super::message_scope::{Effects, ScheduledMessage};

/// What a message that succeeded produced: the reply, the writes to commit and the effects to
/// carry out after the commit.
#[derive(Debug)]
pub struct HandleOutcome {
    /// The reply bytes (MessagePack).
    pub reply: Vec<u8>,
    /// The message's state changes; `None` when it wrote nothing (boxed: an outcome is moved
    /// several times on its way back from the guest call, and most messages write nothing).
    pub writes: Option<Box<WriteSet>>,
    /// Tells, timers and passivation requested by the message; `None` when it requested
    /// none (most messages: boxed, so that the outcome of those stays small).
    pub effects: Option<Box<Effects>>,
}

/// An instance's exports, by the contract version its component was built against.
pub(crate) enum Bindings {
    V2(Entity),
    V1(v1::Entity),
}

/// A live instance of a plugin for one entity. After any error other than the guest's own
/// `err` result the instance is poisoned and must be dropped.
pub struct EntityInstance {
    /// Taken only by `drop`, which drops it with `slot` (on the retiring thread when its
    /// memory grew large).
    store: ManuallyDrop<Store<HostState>>,
    bindings: Bindings,
    plugin: Arc<Plugin>,
    log_lines_per_message: u32,
    poisoned: bool,
    /// The clock of the guest's asks (the store's own, held here too so that a call's
    /// watchdog reads it beside the call without a clone per call).
    ask_clock: Arc<AskClock>,
    /// Counts this instance's pool slot; dropped after `store` has given the slot back, so a
    /// waiter woken by it finds the slot free. Taken only by `drop`.
    slot: ManuallyDrop<SlotGuard>,
    /// Where the instance is dropped if its memory grew large.
    retirement: Retirement,
}

impl EntityInstance {
    pub(crate) fn new(
        store: Store<HostState>,
        bindings: Bindings,
        plugin: Arc<Plugin>,
        log_lines_per_message: u32,
        slot: SlotGuard,
        retirement: Retirement,
    ) -> Self {
        let ask_clock = store.data().ask_clock.clone();
        EntityInstance {
            store: ManuallyDrop::new(store),
            bindings,
            plugin,
            log_lines_per_message,
            poisoned: false,
            ask_clock,
            slot: ManuallyDrop::new(slot),
            retirement,
        }
    }

    /// The plugin this instance runs.
    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.plugin
    }

    /// Guest log lines dropped over the instance's life because a message spent its budget.
    pub fn log_lines_dropped(&self) -> u64 {
        self.store.data().log_budget.dropped()
    }

    /// True once a trap, deadline, memory cap or oversized reply made the instance unusable.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    fn begin_call(&mut self, in_message: bool) {
        let data = self.store.data_mut();
        data.message.begin(in_message);
        data.limiter.memory_limit_hit = false;
        data.log_budget.reset(self.log_lines_per_message);
        self.store.set_epoch_deadline(1);
    }

    /// The guest call's wall-clock bound (time waiting on asks not counted: see
    /// `self.ask_clock`).
    fn wall_bound(&self) -> Duration {
        Duration::from_millis(self.store.data().limits.message_wall_ms_max)
    }

    /// The error of a guest call cut off by its wall-clock bound.
    #[cold]
    fn past_wall_bound(&mut self, wall: Duration) -> MessageError {
        self.poisoned = true;
        MessageError::new(
            ErrorKind::Deadline,
            format!(
                "the guest call ran past its wall-clock bound of {} ms (time waiting on asks \
                 not counted): it was blocked in a host call such as a sleep",
                wall.as_millis()
            ),
        )
    }

    /// Runs the guest's `activate`. A 0.2 guest may write state there (a migration): its
    /// writes come back for the caller to commit before the first message (`None`: it wrote
    /// nothing), and its `err` is a [`ErrorKind::Failed`] naming its reason. A 0.1 guest is
    /// told of a rollback as an upgrade, and writes nothing.
    pub async fn activate(
        &mut self,
        reason: Activation,
    ) -> Result<Option<Box<WriteSet>>, MessageError> {
        self.begin_call(false);
        self.store.data_mut().message.migrating = matches!(self.bindings, Bindings::V2(_));
        let wall = self.wall_bound();
        let ran = match &self.bindings {
            Bindings::V2(bindings) => {
                let call = std::pin::pin!(
                    bindings
                        .tessera_entity_handler()
                        .call_activate(&mut *self.store, reason)
                );
                bounded(wall, &self.ask_clock, call).await
            }
            Bindings::V1(bindings) => {
                let call = std::pin::pin!(
                    bindings
                        .tessera_entity_handler()
                        .call_activate(&mut *self.store, activation_to_v1(reason))
                );
                bounded(wall, &self.ask_clock, call)
                    .await
                    .map(|result| result.map(Ok))
            }
        };
        let Some(result) = ran else {
            return Err(self.past_wall_bound(wall));
        };
        let scope = self.store.data_mut().message.finish();
        match result {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => return Err(MessageError::new(ErrorKind::Failed, reason)),
            Err(trap) => return Err(self.poison(trap)),
        }
        let data = self.store.data_mut();
        data.entity_state_bytes =
            (data.entity_state_bytes as i64 + scope.state_bytes_delta).max(0) as u64;
        if let Some(writes) = &scope.writes {
            data.remember_sizes(writes);
        }
        Ok(scope.writes.filter(|writes| !writes.is_empty()))
    }

    /// Runs the guest's `handle` on `payload`. On `Ok` the caller commits the writes before
    /// replying; on `Err` nothing of the message is kept.
    pub async fn handle(&mut self, payload: &[u8]) -> Result<HandleOutcome, MessageError> {
        self.begin_message(Vec::new(), None, Sender::Client);
        self.handle_begun(payload).await
    }

    /// Begins a message from `sender` that `chain`'s asks wait on (outermost first): the
    /// guest's own asks to any of them will fail at once with `deadlock`. `gate`, if given, is paused while the
    /// guest waits on an ask; the instance keeps it between messages (it is cloned only when
    /// it changes). Then [`handle_begun`](Self::handle_begun) runs it: two steps, so the call's
    /// future (boxed once per message) carries neither the chain nor the gate.
    pub fn begin_message(
        &mut self,
        chain: Vec<EntityAddress>,
        gate: Option<&Arc<dyn super::gate::CallGate>>,
        sender: Sender,
    ) {
        self.begin_call(true);
        let message = &mut self.store.data_mut().message;
        message.chain = chain;
        message.sender = sender;
        let same = match (&message.gate, gate) {
            (Some(held), Some(gate)) => Arc::ptr_eq(held, gate),
            (None, None) => true,
            _ => false,
        };
        if !same {
            message.gate = gate.cloned();
        }
    }

    /// Names the trace context the asks of the message [`begin_message`](Self::begin_message)
    /// began carry (its span's). A message begins with none.
    pub fn trace_message(&mut self, context: TraceContext) {
        self.store.data_mut().message.trace = Some(context);
    }

    /// How long the guest's asks have waited, over the instance's life (a message's share is
    /// the difference across its call).
    pub fn asks_waited(&self) -> Duration {
        self.ask_clock.waited()
    }

    /// Runs the guest's `handle` on `payload`, for the message
    /// [`begin_message`](Self::begin_message) began, as [`handle`](Self::handle) does.
    pub async fn handle_begun(&mut self, payload: &[u8]) -> Result<HandleOutcome, MessageError> {
        debug_assert!(
            self.store.data().message.in_message,
            "handle_begun runs a message begin_message began"
        );
        let wall = self.wall_bound();
        let ran = match &self.bindings {
            Bindings::V2(bindings) => {
                let sender = self.store.data().message.sender.to_wit();
                let call = std::pin::pin!(bindings.tessera_entity_handler().call_handle(
                    &mut *self.store,
                    payload,
                    &sender
                ));
                bounded(wall, &self.ask_clock, call).await
            }
            Bindings::V1(bindings) => {
                let call = std::pin::pin!(
                    bindings
                        .tessera_entity_handler()
                        .call_handle(&mut *self.store, payload)
                );
                bounded(wall, &self.ask_clock, call)
                    .await
                    .map(|result| result.map(|reply| reply.map_err(error_from_v1)))
            }
        };
        let Some(result) = ran else {
            return Err(self.past_wall_bound(wall));
        };
        let scope = self.store.data_mut().message.finish();
        let reply = match result {
            Ok(Ok(reply)) => reply,
            Ok(Err(error)) if scope.deadlocked => {
                let error = from_guest_error(error);
                return Err(MessageError::new(ErrorKind::Deadlock, error.message));
            }
            Ok(Err(error)) => return Err(from_guest_error(error)),
            Err(trap) => return Err(self.poison(trap)),
        };
        let reply_bytes_max = self.store.data().limits.reply_bytes_max;
        if reply.len() > reply_bytes_max {
            return Err(self.reply_too_large(reply.len(), reply_bytes_max));
        }
        let writes = scope.writes;
        let data = self.store.data_mut();
        data.entity_state_bytes =
            (data.entity_state_bytes as i64 + scope.state_bytes_delta).max(0) as u64;
        if let Some(writes) = &writes {
            data.remember_sizes(writes);
        }
        Ok(HandleOutcome {
            reply,
            writes,
            effects: scope.effects,
        })
    }

    /// The error of a reply over the limit; the instance is not used again.
    #[cold]
    fn reply_too_large(&mut self, bytes: usize, reply_bytes_max: usize) -> MessageError {
        self.poisoned = true;
        MessageError::new(
            ErrorKind::ReplyTooLarge,
            format!("the reply is {bytes} bytes, over the limit of {reply_bytes_max}"),
        )
    }

    /// Runs the guest's `deactivate`; a failure there is logged, never surfaced.
    pub async fn deactivate(&mut self) {
        if self.poisoned {
            return;
        }
        self.begin_call(false);
        let wall = self.wall_bound();
        let ran = match &self.bindings {
            Bindings::V2(bindings) => {
                let call = std::pin::pin!(
                    bindings
                        .tessera_entity_handler()
                        .call_deactivate(&mut *self.store)
                );
                bounded(wall, &self.ask_clock, call).await
            }
            Bindings::V1(bindings) => {
                let call = std::pin::pin!(
                    bindings
                        .tessera_entity_handler()
                        .call_deactivate(&mut *self.store)
                );
                bounded(wall, &self.ask_clock, call).await
            }
        };
        let Some(result) = ran else {
            let error = self.past_wall_bound(wall);
            tracing::warn!(entity = %self.store.data().address, %error, "deactivate cut off");
            return;
        };
        if let Err(trap) = result {
            let error = self.poison(trap);
            tracing::warn!(entity = %self.store.data().address, %error, "deactivate failed");
        }
    }

    /// Marks the instance unusable and says why it failed.
    #[cold]
    fn poison(&mut self, trap: wasmtime::Error) -> MessageError {
        self.poisoned = true;
        let data = self.store.data();
        if let Some(host_trap) = trap.downcast_ref::<HostTrap>() {
            return MessageError::new(host_trap.kind(), host_trap.to_string());
        }
        if data.limiter.memory_limit_hit {
            return MessageError::new(
                ErrorKind::MemoryLimit,
                format!(
                    "the instance tried to grow past its memory cap of {} bytes",
                    data.limiter.memory_bytes_max
                ),
            );
        }
        MessageError::new(ErrorKind::Trap, format!("the guest trapped: {trap:#}"))
    }
}

/// Runs `call` until it finishes or has run `wall` of wall-clock time outside its asks; `None`
/// when cut off (the caller then drops the call mid-way, so its instance must be discarded).
/// The call is pinned where the caller made it: a guest call's future is most of a message's
/// future, and is not copied into this one.
async fn bounded<F: std::future::Future>(
    wall: Duration,
    clock: &AskClock,
    mut call: std::pin::Pin<&mut F>,
) -> Option<F::Output> {
    // Most guest calls finish in their first poll (no async host call, no epoch yield): no
    // timer is armed for those, and the timed wait is boxed, so a guest call's future (moved
    // onto the heap once per message) does not carry its timers. Not arming the timer was the
    // largest single step of the region benchmark: 489 K -> 1.09 M msg/s (2026-12-03).
    let first =
        std::future::poll_fn(|context| std::task::Poll::Ready(call.as_mut().poll(context))).await;
    if let std::task::Poll::Ready(output) = first {
        return Some(output);
    }
    Box::pin(timed_wait(wall, clock, call)).await
}

/// The rest of [`bounded`] for a call that did not finish in its first poll.
async fn timed_wait<F: std::future::Future>(
    wall: Duration,
    clock: &AskClock,
    mut call: std::pin::Pin<&mut F>,
) -> Option<F::Output> {
    let started = tokio::time::Instant::now();
    loop {
        let deadline = started + wall + clock.waited();
        tokio::select! {
            output = &mut call => return Some(output),
            _ = tokio::time::sleep_until(deadline) => {
                let limit = started + wall + clock.waited();
                if !clock.is_waiting() && tokio::time::Instant::now() >= limit {
                    return None;
                }
                // Waiting on an ask (bounded by its own timeout), or an ask finished meanwhile:
                // look again later.
                if clock.is_waiting() {
                    tokio::select! {
                        output = &mut call => return Some(output),
                        _ = tokio::time::sleep(wall.min(Duration::from_millis(100))) => {}
                    }
                }
            }
        }
    }
}

/// A 0.1 guest knows no rollback: it is told of one as an upgrade from the newer version.
fn activation_to_v1(reason: Activation) -> v1::tessera::entity::types::Activation {
    use v1::tessera::entity::types::Activation as V1;
    match reason {
        Activation::FirstStart => V1::FirstStart,
        Activation::Restarted => V1::Restarted,
        Activation::Upgraded(from) | Activation::RolledBack(from) => V1::Upgraded(from),
    }
}

#[cold]
fn from_guest_error(error: GuestError) -> MessageError {
    match error {
        GuestError::BadMessage(message) => MessageError::new(ErrorKind::BadMessage, message),
        GuestError::Rejected(message) => MessageError::new(ErrorKind::Rejected, message),
        GuestError::Failed(message) => MessageError::new(ErrorKind::Failed, message),
    }
}

impl Drop for EntityInstance {
    /// Drops the store, then the pool slot: on the retiring thread if the instance's memory
    /// grew past [`RETIRE_OFF_WORKER_GROWTH_BYTES`] (resetting it would hold this thread in
    /// the kernel for milliseconds), else here.
    fn drop(&mut self) {
        // SAFETY: `store` and `slot` are taken here only, once, and neither is used after.
        let (store, slot) = unsafe {
            (
                ManuallyDrop::take(&mut self.store),
                ManuallyDrop::take(&mut self.slot),
            )
        };
        if store.data().limiter.memory_bytes_peak >= RETIRE_OFF_WORKER_GROWTH_BYTES {
            // A tuple drops its fields in order: the store, then the slot.
            self.retirement.retire(Box::new((store, slot)));
        } else {
            drop(store);
            drop(slot);
        }
    }
}
