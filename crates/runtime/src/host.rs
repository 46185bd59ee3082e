//! The host side of the WIT `host` interface: what a guest may do while it runs, each call
//! checked against the instance's limits and scoped to the current message.

use super::bindings::tessera::entity::{host, types};
use super::bindings::{Address, GuestError, LogLevel};
use super::guest_log::{GUEST_LOG_LINE_BYTES_MAX, LogBudget};
use super::limits::{InstanceLimits, MemoryLimiter, STATE_KEY_BYTES_MAX};
use super::message_scope::{MessageScope, ScheduledMessage};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tessera_contract::{
    ENTITY_ID_BYTES_MAX, ENTITY_TYPE_BYTES_MAX, EntityAddress, ErrorKind, MessageError,
    MessageMeta, MessageTrace, Router,
};
use tessera_state::{EntityState, StateChange, WriteSet};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// A guest action the host refuses so firmly that the message traps. Kept apart from guest
/// traps so the entity layer can report the exact cause.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HostTrap {
    #[error("the message ran past its CPU deadline of {0} ms")]
    Deadline(u64),
    #[error("{0}")]
    StateTooLarge(String),
    #[error("state storage failed: {0}")]
    Storage(String),
    #[error("{0}")]
    Misuse(String),
    #[error("the node is shutting down: the guest call was stopped at its next epoch tick")]
    Interrupted,
}

impl HostTrap {
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            HostTrap::Deadline(_) => ErrorKind::Deadline,
            HostTrap::StateTooLarge(_) => ErrorKind::StateTooLarge,
            HostTrap::Storage(_) => ErrorKind::Internal,
            HostTrap::Misuse(_) => ErrorKind::Trap,
            HostTrap::Interrupted => ErrorKind::Unavailable,
        }
    }
}

/// The data of one entity's `Store`.
pub struct HostState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) address: EntityAddress,
    pub(crate) state: Arc<dyn EntityState>,
    pub(crate) router: Arc<dyn Router>,
    pub(crate) limits: InstanceLimits,
    pub(crate) log_budget: Arc<LogBudget>,
    pub(crate) message: MessageScope,
    pub(crate) ticks_limit: u64,
    pub(crate) next_timer: u64,
    /// Committed state bytes (keys plus values) of this entity, kept up to date per message.
    pub(crate) entity_state_bytes: u64,
    /// Committed sizes (key plus value) of keys this instance touched, so the state quota does
    /// not read the store on every `put`.
    pub(crate) committed_sizes: HashMap<String, i64>,
    /// Time this instance spent waiting on asks, which its wall-clock bound does not count.
    pub(crate) ask_clock: Arc<AskClock>,
    /// Set by the instance's owner at shutdown ([`EntityContext::interrupt`]): the guest traps
    /// at its next epoch tick.
    ///
    /// [`EntityContext::interrupt`]: super::EntityContext::interrupt
    pub(crate) interrupted: Arc<std::sync::atomic::AtomicBool>,
    /// What `now-ms` reads ([`EntityContext::clock`](super::EntityContext::clock)).
    pub(crate) clock: Arc<dyn super::Clock>,
}

/// Time spent waiting on asks, shared with the watchdog of the guest call that made them.
#[derive(Debug, Default)]
pub(crate) struct AskClock {
    waited_us: std::sync::atomic::AtomicU64,
    waiting: std::sync::atomic::AtomicBool,
}

impl AskClock {
    /// Total time waited on finished asks.
    pub(crate) fn waited(&self) -> Duration {
        Duration::from_micros(self.waited_us.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Whether an ask is being waited on now.
    pub(crate) fn is_waiting(&self) -> bool {
        self.waiting.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A wait that the wall-clock bound does not count begins (an ask, a pause at the gate).
    pub(crate) fn begin_wait(&self) {
        self.waiting
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// That wait ended after `waited`.
    pub(crate) fn end_wait(&self, waited: Duration) {
        self.waited_us.fetch_add(
            waited.as_micros() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        self.waiting
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The most keys whose committed size an instance remembers; past it, sizes are read from the
/// store, so a guest with many keys cannot grow host memory through this cache.
pub(crate) const COMMITTED_SIZES_MAX: usize = 1024;

impl HostState {
    /// Folds a committed message's changes into the size cache.
    pub(crate) fn remember_sizes(&mut self, writes: &WriteSet) {
        for (key, change) in writes.changes() {
            let size = match change {
                StateChange::Put(value) => (key.len() + value.len()) as i64,
                StateChange::Delete => 0,
            };
            if self.committed_sizes.len() < COMMITTED_SIZES_MAX
                || self.committed_sizes.contains_key(key)
            {
                self.committed_sizes.insert(key.to_string(), size);
            }
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl HostState {
    fn require_message(&self, call: &str) -> wasmtime::Result<()> {
        if self.message.in_message {
            return Ok(());
        }
        Err(HostTrap::Misuse(format!(
            "`{call}` is only allowed while handling a message, not in activate or deactivate"
        ))
        .into())
    }

    /// Allows `call` (a state write) while handling a message, or in a 0.2 `activate`.
    fn require_writes(&self, call: &str) -> wasmtime::Result<()> {
        if self.message.migrating {
            return Ok(());
        }
        self.require_message(call)
    }

    fn writes(&mut self, call: &str) -> wasmtime::Result<&mut WriteSet> {
        self.require_writes(call)?;
        let address = &self.address;
        Ok(self
            .message
            .writes
            .get_or_insert_with(|| Box::new(WriteSet::new(address.clone()))))
    }

    /// Size (key plus value) `key` occupies now, as this message sees it.
    fn current_size(&mut self, key: &str) -> wasmtime::Result<i64> {
        let pending = self
            .message
            .writes
            .as_ref()
            .and_then(|w| w.pending(key).cloned());
        match pending {
            Some(StateChange::Put(value)) => return Ok((key.len() + value.len()) as i64),
            Some(StateChange::Delete) => return Ok(0),
            None => {}
        }
        if let Some(size) = self.committed_sizes.get(key) {
            return Ok(*size);
        }
        let size = self
            .state
            .get(&self.address, key)
            .map_err(|error| HostTrap::Storage(error.to_string()))?
            .map_or(0, |value| (key.len() + value.len()) as i64);
        if self.committed_sizes.len() < COMMITTED_SIZES_MAX {
            self.committed_sizes.insert(key.to_string(), size);
        }
        Ok(size)
    }

    /// Records the size change of one key and refuses it past the entity's state quota.
    fn account(&mut self, key: &str, new_size: i64) -> wasmtime::Result<()> {
        let old_size = self.current_size(key)?;
        self.message.state_bytes_delta += new_size - old_size;
        let total = self.entity_state_bytes as i64 + self.message.state_bytes_delta;
        let limit = self.limits.entity_state_bytes_max as i64;
        if total > limit {
            return Err(HostTrap::StateTooLarge(format!(
                "the entity would hold {total} state bytes, over its quota of {limit}"
            ))
            .into());
        }
        Ok(())
    }

    fn check_key(key: &str) -> wasmtime::Result<()> {
        if key.len() > STATE_KEY_BYTES_MAX {
            return Err(HostTrap::StateTooLarge(format!(
                "state key of {} bytes exceeds the limit of {STATE_KEY_BYTES_MAX}",
                key.len()
            ))
            .into());
        }
        Ok(())
    }

    /// The address `to` names in this entity's tenant, if its parts are within bounds.
    fn target(&self, to: Address) -> Result<EntityAddress, GuestError> {
        if to.id.len() > ENTITY_ID_BYTES_MAX || to.entity_type.len() > ENTITY_TYPE_BYTES_MAX {
            return Err(GuestError::BadMessage(format!(
                "an address names a type of at most {ENTITY_TYPE_BYTES_MAX} bytes and an id of \
                 at most {ENTITY_ID_BYTES_MAX} bytes"
            )));
        }
        Ok(EntityAddress::new(
            self.address.tenant.clone(),
            to.entity_type,
            to.id,
        ))
    }

    /// Refuses a payload over the per-call bound.
    fn check_payload(&self, call: &str, payload: &[u8]) -> Result<(), GuestError> {
        let max = self.limits.effect_payload_bytes_max;
        if payload.len() > max {
            return Err(GuestError::Failed(format!(
                "a `{call}` payload of {} bytes is over the limit of {max}",
                payload.len()
            )));
        }
        Ok(())
    }

    /// Takes a place for one more tell or reminder of `bytes`, within the message's bounds.
    fn take_effect_slot(&mut self, bytes: usize) -> Result<(), GuestError> {
        let effects = &self.message.effects;
        let used = effects.tells.len() + effects.schedules.len();
        if used >= self.limits.message_tells_max as usize {
            return Err(GuestError::Failed(format!(
                "a message may send at most {} tells and timers",
                self.limits.message_tells_max
            )));
        }
        let queued: usize = effects
            .tells
            .iter()
            .map(|(_, payload)| payload.len())
            .sum::<usize>()
            + effects
                .schedules
                .iter()
                .map(|s| s.payload.len())
                .sum::<usize>();
        let max = self.limits.message_effect_bytes_max;
        if queued + bytes > max {
            return Err(GuestError::Failed(format!(
                "a message may queue at most {max} bytes of tells and timers"
            )));
        }
        Ok(())
    }
}

/// Converts a host-side failure into the WIT error a guest sees.
pub(crate) fn to_guest_error(error: MessageError) -> GuestError {
    match error.kind {
        ErrorKind::BadMessage => GuestError::BadMessage(error.message),
        ErrorKind::Rejected => GuestError::Rejected(error.message),
        _ => GuestError::Failed(error.to_string()),
    }
}

impl types::Host for HostState {}

impl host::Host for HostState {
    async fn self_address(&mut self) -> wasmtime::Result<Address> {
        Ok(Address {
            entity_type: self.address.entity_type.clone(),
            id: self.address.id.clone(),
        })
    }

    async fn get(&mut self, key: String) -> wasmtime::Result<Option<Vec<u8>>> {
        if let Some(writes) = &self.message.writes {
            match writes.pending(&key) {
                Some(StateChange::Put(value)) => return Ok(Some(value.clone())),
                Some(StateChange::Delete) => return Ok(None),
                None => {}
            }
        }
        self.state
            .get(&self.address, &key)
            .map_err(|error| HostTrap::Storage(error.to_string()).into())
    }

    async fn put(&mut self, key: String, value: Vec<u8>) -> wasmtime::Result<()> {
        Self::check_key(&key)?;
        self.require_writes("put")?;
        self.account(&key, (key.len() + value.len()) as i64)?;
        let limit = self.limits.message_write_bytes_max;
        let writes = self.writes("put")?;
        writes.put(key, value);
        if writes.payload_bytes() > limit {
            return Err(HostTrap::StateTooLarge(format!(
                "the message wrote {} state bytes, over the limit of {limit}",
                writes.payload_bytes()
            ))
            .into());
        }
        Ok(())
    }

    async fn delete(&mut self, key: String) -> wasmtime::Result<()> {
        Self::check_key(&key)?;
        self.require_writes("delete")?;
        self.account(&key, 0)?;
        self.writes("delete")?.delete(key);
        Ok(())
    }

    async fn tell(
        &mut self,
        to: Address,
        payload: Vec<u8>,
    ) -> wasmtime::Result<Result<(), GuestError>> {
        self.require_message("tell")?;
        let checked = self
            .check_payload("tell", &payload)
            .and_then(|()| self.take_effect_slot(payload.len()))
            .and_then(|()| self.target(to));
        let target = match checked {
            Ok(target) => target,
            Err(error) => return Ok(Err(error)),
        };
        self.message.effects.tells.push((target, payload));
        Ok(Ok(()))
    }

    async fn ask(
        &mut self,
        to: Address,
        payload: Vec<u8>,
        timeout_ms: u32,
    ) -> wasmtime::Result<Result<Vec<u8>, GuestError>> {
        self.require_message("ask")?;
        let checked = self
            .check_payload("ask", &payload)
            .and_then(|()| self.target(to));
        let target = match checked {
            Ok(target) => target,
            Err(error) => return Ok(Err(error)),
        };
        if target == self.address {
            return Ok(Err(GuestError::Failed(
                "an entity cannot ask itself: it handles one message at a time".into(),
            )));
        }
        if self.message.chain.contains(&target) {
            let chain: Vec<String> = self
                .message
                .chain
                .iter()
                .chain([&self.address, &target])
                .map(ToString::to_string)
                .collect();
            let error = MessageError::new(
                ErrorKind::Deadlock,
                format!(
                    "deadlock: {} is waiting on this ask ({})",
                    target,
                    chain.join(" -> ")
                ),
            );
            self.message.deadlocked = true;
            return Ok(Err(to_guest_error(error)));
        }
        if self.message.asks >= self.limits.message_asks_max {
            return Ok(Err(GuestError::Failed(format!(
                "a message may make at most {} asks",
                self.limits.message_asks_max
            ))));
        }
        self.message.asks += 1;
        let timeout =
            Duration::from_millis(u64::from(timeout_ms.min(self.limits.ask_timeout_ms_max)));
        let meta = MessageMeta {
            chain: self
                .message
                .chain
                .iter()
                .chain(std::iter::once(&self.address))
                .cloned()
                .collect(),
            trace: self
                .message
                .trace
                .map(|parent| Box::new(MessageTrace::new(Some(parent)))),
            ..MessageMeta::default()
        };
        let clock = self.ask_clock.clone();
        clock.begin_wait();
        let started = std::time::Instant::now();
        if let Some(gate) = &self.message.gate {
            gate.pause();
            gate.pace(self.limits.messages_per_second, self.limits.messages_burst)
                .await;
        }
        let reply = self.router.ask(target, payload, meta, timeout).await;
        if let Some(gate) = &self.message.gate {
            gate.resume().await;
        }
        clock.end_wait(started.elapsed());
        if let Err(error) = &reply
            && error.kind == ErrorKind::Deadlock
        {
            self.message.deadlocked = true;
        }
        Ok(reply.map_err(to_guest_error))
    }

    async fn schedule(&mut self, delay_ms: u64, payload: Vec<u8>) -> wasmtime::Result<u64> {
        self.require_message("schedule")?;
        let checked = self
            .check_payload("schedule", &payload)
            .and_then(|()| self.take_effect_slot(payload.len()));
        if let Err(error) = checked {
            return Err(HostTrap::Misuse(format!("schedule refused: {error:?}")).into());
        }
        self.next_timer += 1;
        let timer = self.next_timer;
        self.message.effects.schedules.push(ScheduledMessage {
            timer,
            delay: Duration::from_millis(delay_ms),
            payload,
        });
        Ok(timer)
    }

    async fn cancel(&mut self, timer: u64) -> wasmtime::Result<()> {
        self.require_message("cancel")?;
        let effects = &mut self.message.effects;
        effects
            .schedules
            .retain(|scheduled| scheduled.timer != timer);
        if effects.cancels.len() < self.limits.message_tells_max as usize {
            effects.cancels.push(timer);
        }
        Ok(())
    }

    async fn passivate(&mut self) -> wasmtime::Result<()> {
        self.message.effects.passivate = true;
        Ok(())
    }

    async fn log(&mut self, level: LogLevel, message: String) -> wasmtime::Result<()> {
        if !self.log_budget.take() {
            return Ok(());
        }
        let mut end = message.len().min(GUEST_LOG_LINE_BYTES_MAX);
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        let text = &message[..end];
        let entity = &self.address;
        match level {
            LogLevel::Trace => tracing::trace!(target: "tessera::guest", %entity, "{text}"),
            LogLevel::Debug => tracing::debug!(target: "tessera::guest", %entity, "{text}"),
            LogLevel::Info => tracing::info!(target: "tessera::guest", %entity, "{text}"),
            LogLevel::Warn => tracing::warn!(target: "tessera::guest", %entity, "{text}"),
            LogLevel::Error => tracing::error!(target: "tessera::guest", %entity, "{text}"),
        }
        Ok(())
    }

    async fn now_ms(&mut self) -> wasmtime::Result<u64> {
        Ok(self.clock.now_ms())
    }
}
