//! A live entity's working state (`CellState`): its instance and what a message needs of it —
//! activating or upgrading at a message boundary, its pass through the tenant's gate, giving
//! the instance back to the pool — and the end of the entity: passivation. One message's way
//! through it (whether it runs at all, the guest call, the commit of its writes with its tells,
//! reminders and receipt before the reply) is `message`; its effects beyond its writes are
//! `effects`.

use super::{CellMessage, InstanceHold};
use crate::core::Core;
use crate::counters::TypeCounters;
use crate::fairness::{CallPass, Entered};
use crate::types::TypeBinding;
use crate::warnings::EntityWarning;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tessera_contract::{EntityAddress, ErrorKind, MessageError, ShardId};
use tessera_runtime::{Activation, CallGate, EntityContext, EntityInstance};
use tessera_state::remember::{RememberOp, RememberedId};
use tessera_state::{WriteSet, WriteStamps};
use tokio::sync::mpsc;

mod effects;
mod message;

pub(super) use message::PausedMessage;

/// The longest a cell waits for a slot of a full instance pool before its message fails with
/// `unavailable` (retryable).
const POOL_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// How often a cell waiting for a pool slot looks again if no instance was dropped meanwhile.
const POOL_RETRY_INTERVAL: std::time::Duration = std::time::Duration::from_millis(20);

/// What a message needs of a live entity: its instance, the type's binding, the entity's
/// durable counters and its tenant's gate. Held under the cell's lock by whoever runs a message.
pub(super) struct CellState {
    core: Arc<Core>,
    address: EntityAddress,
    shard: ShardId,
    /// Shared with the directory: whether this cell holds an instance now, and the request
    /// to give it back.
    hold: Arc<InstanceHold>,
    counters: Arc<TypeCounters>,
    /// The type's binding as of a type-table generation, so the hot path skips the lookup.
    binding_cache: Option<(u64, Option<Arc<TypeBinding>>)>,
    /// Boxed: it moves into each message's guest call and back, and a pointer moves for it.
    instance: Option<Box<EntityInstance>>,
    running_version: u32,
    version_to_record: Option<u32>,
    activated_before: bool,
    /// The outbox sequence number of this entity's next tell (durable, read at activation).
    next_seq: u64,
    /// The highest timer id this entity committed.
    last_timer: u64,
    /// The stamp of the copy this instance's state comes from: read at activation, then that
    /// of each commit (see `tessera_state::WriteStamps`).
    stamp: u64,
    /// Set by a message or a failed activation: the cell passivates after it.
    pub(super) passivate_requested: bool,
    /// This entity's place at its tenant's gate to guest execution, and the same place as
    /// the runtime's hook for its calls (kept by the instance between messages).
    pass: Option<(Arc<CallPass>, Arc<dyn CallGate>)>,
    /// What is left of a message a sender ran as far as it went without waiting, for the
    /// cell's task to finish before anything else ([`finish_paused`](Self::finish_paused)).
    paused: Option<PausedMessage>,
    /// Whether this entity's last message was CPU-heavy (took an epoch tick of CPU or more):
    /// its next one goes to the guest pool straight away instead of spending a tick on an I/O
    /// worker first.
    runs_long: bool,
}

impl CellState {
    pub(super) fn new(
        core: Arc<Core>,
        address: EntityAddress,
        shard: ShardId,
        hold: Arc<InstanceHold>,
    ) -> Self {
        let counters = core.counters(&address.type_key());
        CellState {
            core,
            counters,
            binding_cache: None,
            address,
            shard,
            hold,
            instance: None,
            running_version: 0,
            version_to_record: None,
            activated_before: false,
            next_seq: 0,
            last_timer: 0,
            stamp: 0,
            passivate_requested: false,
            pass: None,
            paused: None,
            runs_long: false,
        }
    }

    pub(super) fn address(&self) -> &EntityAddress {
        &self.address
    }

    /// The type's idle timeout (`None`: never passivated for idleness, or the type is gone).
    pub(super) fn idle_timeout(&mut self) -> Option<std::time::Duration> {
        self.binding()
            .ok()
            .and_then(|binding| binding.passivate_idle)
    }

    /// Whether the instance is up on the type's active version.
    pub(super) fn is_ready(&mut self) -> bool {
        let running = self.running_version;
        self.instance.is_some()
            && self
                .cached_binding()
                .is_some_and(|binding| binding.version == running)
    }

    /// Whether a message may run on its sender's task now: the instance is up on the type's
    /// active version (no activation or upgrade to do), the entity's calls have been short, and
    /// no passivation or shutdown is under way.
    pub(super) fn can_run_here(&mut self) -> bool {
        !self.runs_long && !self.passivate_requested && !self.core.is_closing() && self.is_ready()
    }

    /// Gives the instance back to the pool (another entity needs the slot); the entity stays
    /// live and activates afresh on its next message.
    pub(super) async fn release_instance(&mut self) {
        if self.instance.is_some() {
            self.drop_instance().await;
            self.core
                .stats
                .instance_swaps
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The type's binding as of the type table's generation (looked up again only when the
    /// table changed); `None` once the type is gone.
    fn cached_binding(&mut self) -> Option<&Arc<TypeBinding>> {
        let types = &self.core.types;
        let generation = types.generation();
        if !matches!(&self.binding_cache, Some((cached, _)) if *cached == generation) {
            let binding = types.get(&self.address.type_key());
            self.binding_cache = Some((generation, binding));
        }
        self.binding_cache
            .as_ref()
            .and_then(|(_, binding)| binding.as_ref())
    }

    pub(super) fn binding(&mut self) -> Result<Arc<TypeBinding>, MessageError> {
        let binding = self.cached_binding().cloned();
        binding.ok_or_else(|| self.type_gone())
    }

    /// The error of a message to an entity whose type is no longer deployed.
    fn type_gone(&self) -> MessageError {
        let key = self.address.type_key();
        let unbound = self.core.types.unbound(&key, &self.address.to_string());
        if unbound.kind != ErrorKind::EntityTypeNotRegistered {
            return unbound;
        }
        MessageError::new(
            ErrorKind::EntityTypeNotRegistered,
            format!(
                "entity type {} is no longer deployed in tenant {}",
                self.address.entity_type, self.address.tenant
            ),
        )
    }

    /// Activates the instance ahead of any message (a remembered entity respawned), inside
    /// its tenant's gate like any guest call.
    pub(super) async fn respawn(&mut self) -> Result<(), MessageError> {
        let binding = match self.binding() {
            Ok(binding) => binding,
            Err(error) => {
                self.passivate_requested = true;
                return Err(error);
            }
        };
        let pass = self.gate_pass(&binding).clone();
        let _entered = self.wait_at_gate(pass).await;
        self.ready().await
    }

    /// Waits at the tenant's gate until the cell may run one guest call. A cell waiting there
    /// with an instance gives it back if a cell that needs a slot of the full pool picks it
    /// meanwhile ([`InstanceHold::want_back`]), and activates afresh once let in: a tenant's
    /// backlog waiting to run holds no slot another tenant's entity is waiting for.
    pub(super) async fn wait_at_gate(&mut self, pass: Arc<CallPass>) -> Entered {
        if pass.try_enter() {
            return pass.entered();
        }
        let core = self.core.clone();
        let entering = pass.enter(&core.stats.throttled_calls);
        if self.instance.is_none() {
            return entering.await;
        }
        let hold = self.hold.clone();
        let wanted = hold.wanted();
        tokio::pin!(entering);
        tokio::select! {
            biased;
            entered = &mut entering => return entered,
            () = wanted => {}
        }
        self.release_instance().await;
        entering.await
    }

    /// Makes sure an instance of the type's active version is running, activating or
    /// upgrading it at this message boundary. The caller has passed the tenant's gate: a cell
    /// takes a slot of the instance pool only once it may run, so a tenant's backlog waiting
    /// at its gate holds none.
    pub(super) async fn ready(&mut self) -> Result<(), MessageError> {
        let binding = match self.binding() {
            Ok(binding) => binding,
            Err(error) => {
                self.passivate_requested = true;
                return Err(error);
            }
        };
        let upgraded_from = match &self.instance {
            Some(_) if self.running_version == binding.version => return Ok(()),
            Some(_) => Some(self.running_version),
            None => None,
        };
        if upgraded_from.is_some() {
            self.drop_instance().await;
        }
        let core = self.core.clone();
        let meta = current_meta(&core.state, &self.address).await?;
        let sequences = core.state.sequences(&self.address).map_err(read_failure)?;
        // A sender with no tells in its state numbers them from its shard's lineage, so a
        // life begun after its state was lost is never taken for the former one.
        self.next_seq = match sequences.next_seq {
            0 => core.router.sequence_base(&self.address, self.shard),
            held => held,
        };
        self.last_timer = sequences.last_timer;
        self.stamp = meta.stamp;
        let recorded = meta.version;
        let from = upgraded_from.or(recorded.filter(|version| *version != binding.version));
        let reason = match from {
            Some(from) if from > binding.version => Activation::RolledBack(from),
            Some(from) => Activation::Upgraded(from),
            None if recorded.is_some() || self.activated_before => Activation::Restarted,
            None => Activation::FirstStart,
        };
        let context = || EntityContext {
            state: core.state.clone(),
            router: core.router.clone(),
            entity_state_bytes: meta.state_bytes,
            last_timer: sequences.last_timer,
            interrupt: core.closing.clone(),
            clock: core.clock.clone(),
        };
        // The pool is a cache of instances over durable state: when it is full, the least
        // recently used idle entity gives its instance back and this one waits for the slot,
        // at most `POOL_WAIT_MAX`.
        let waiting_since = std::time::Instant::now();
        let mut instance = loop {
            if core.runtime.pool_is_full() {
                core.cells.release_lru_instance(&self.address);
            }
            let freed = core.runtime.instance_freed();
            let attempt = core
                .runtime
                .instantiate(
                    &binding.plugin,
                    self.address.clone(),
                    binding.limits,
                    context(),
                )
                .await;
            match attempt {
                Ok(instance) => break Box::new(instance),
                Err(error)
                    if error.kind == ErrorKind::Unavailable
                        && waiting_since.elapsed() < POOL_WAIT_MAX =>
                {
                    core.cells.release_lru_instance(&self.address);
                    let _ = tokio::time::timeout(POOL_RETRY_INTERVAL, freed).await;
                }
                Err(error) => return Err(error),
            }
        };
        if core.is_closing() {
            return Err(shutting_down());
        }
        let call = Box::pin(async move {
            let activated = instance.activate(reason).await;
            (instance, activated)
        });
        let (instance, activated) = core.runtime.run_call(call, true).await?.0;
        let migrated = match activated {
            Ok(migrated) => migrated,
            // Stopped by the node's shutdown: not the guest's failure.
            Err(error) if error.kind == ErrorKind::Unavailable => return Err(error),
            Err(error) => return Err(self.activation_refused(binding.version, reason, error)),
        };
        let recorded = match migrated {
            Some(writes) => {
                self.commit_migration(writes, binding.version).await?;
                Some(binding.version)
            }
            None => recorded,
        };
        self.hold.set_held(true);
        let tick = core.uses.load(Ordering::Relaxed);
        core.cells.took_instance(&self.address, tick);
        core.stats.activations.fetch_add(1, Ordering::Relaxed);
        self.counters.activated(reason);
        tracing::debug!(entity = %self.address, version = binding.version, ?reason, "activated");
        self.activated_before = true;
        self.running_version = binding.version;
        self.version_to_record = (recorded != Some(binding.version)).then_some(binding.version);
        self.instance = Some(instance);
        Ok(())
    }

    /// Commits what `activate` wrote (a migration) with the new version, before the first
    /// message; nothing of it is kept if the commit fails.
    async fn commit_migration(
        &mut self,
        mut writes: Box<WriteSet>,
        version: u32,
    ) -> Result<(), MessageError> {
        let core = self.core.clone();
        core.router.may_serve(&self.address, self.shard)?;
        writes.set_version(version);
        let written = self.stamp_writes(&mut writes);
        core.state.commit(*writes).await.map_err(|error| {
            let reason = format!("its migration's writes did not commit: {error}");
            MessageError::new(ErrorKind::Internal, reason)
        })?;
        self.stamp = written;
        Ok(())
    }

    /// Marks `writes` as computed from this instance's copy and returns the stamp they give
    /// the entity once committed.
    pub(super) fn stamp_writes(&self, writes: &mut WriteSet) -> u64 {
        let written = self.core.next_stamp();
        writes.set_stamps(WriteStamps {
            read: self.stamp,
            written,
        });
        written
    }

    /// The failure of a message whose entity could not activate on `version` for `reason`:
    /// counted, logged with the guest's reason, and naming it to the sender.
    #[cold]
    fn activation_refused(
        &mut self,
        version: u32,
        reason: Activation,
        error: MessageError,
    ) -> MessageError {
        self.core
            .stats
            .activation_failures
            .fetch_add(1, Ordering::Relaxed);
        let what = match reason {
            Activation::FirstStart => "a first start".to_string(),
            Activation::Restarted => "a restart".to_string(),
            Activation::Upgraded(from) => format!("an upgrade from version {from}"),
            Activation::RolledBack(from) => format!("a rollback from version {from}"),
        };
        let message = format!(
            "{} could not activate on version {version} after {what}; its state is unchanged: {}",
            self.address, error.message
        );
        let warning = EntityWarning::ActivationRefused {
            entity_type: self.address.type_key(),
            kind: error.kind,
        };
        if self.core.warnings.first_in_window(&warning) {
            tracing::warn!(entity = %self.address, version, kind = error.kind.code(), "{message}");
        }
        MessageError::new(error.kind, message)
    }

    /// This entity's pass through its tenant's gate under `binding`'s limits, made once
    /// (again only if the tenant's cap or budget changes); entering it waits until the tenant
    /// may run one more guest call.
    pub(super) fn gate_pass(&mut self, binding: &TypeBinding) -> &Arc<CallPass> {
        let (cap, budget) = gate_limits(binding);
        self.gate_pass_for(cap, budget)
    }

    /// [`gate_pass`](Self::gate_pass) for a cap of `cap` running calls and a budget of
    /// `cpu_ms_per_second`.
    pub(super) fn gate_pass_for(&mut self, cap: usize, cpu_ms_per_second: u64) -> &Arc<CallPass> {
        if !matches!(&self.pass, Some((pass, _)) if pass.fits(cap, cpu_ms_per_second)) {
            self.pass = None;
        }
        let (pass, _) = self.pass.get_or_insert_with(|| {
            let gate = self.core.gates.gate(&self.address.tenant, cap);
            let pass = CallPass::new(gate, cpu_ms_per_second, &self.core);
            let hook: Arc<dyn CallGate> = pass.clone();
            (pass, hook)
        });
        pass
    }

    /// The gate pass the current call entered through, and its runtime hook.
    pub(super) fn entered_pass(&self) -> Option<&(Arc<CallPass>, Arc<dyn CallGate>)> {
        self.pass.as_ref()
    }

    /// Drops the instance without calling the guest (it failed, or saw effects that did not
    /// land). Not async, so a message's future does not carry a guest call's state for it.
    #[cold]
    pub(super) fn discard_instance(&mut self, error: &MessageError) {
        self.core
            .stats
            .instance_discards
            .fetch_add(1, Ordering::Relaxed);
        let warning = EntityWarning::InstanceDiscarded {
            entity_type: self.address.type_key(),
            kind: error.kind,
        };
        if self.core.warnings.first_in_window(&warning) {
            tracing::warn!(entity = %self.address, %error, "instance discarded");
        }
        if let Some(instance) = self.take_instance() {
            self.count_dropped_log_lines(&instance);
        }
    }

    /// Deactivates the instance (the guest's `deactivate`) and drops it.
    async fn drop_instance(&mut self) {
        if let Some(mut instance) = self.take_instance() {
            instance.deactivate().await;
            self.count_dropped_log_lines(&instance);
        }
    }

    fn take_instance(&mut self) -> Option<Box<EntityInstance>> {
        self.hold.set_held(false);
        self.instance.take()
    }

    fn count_dropped_log_lines(&self, instance: &EntityInstance) {
        self.core
            .stats
            .guest_log_lines_dropped
            .fetch_add(instance.log_lines_dropped(), Ordering::Relaxed);
    }

    /// Deactivates the instance and removes the cell (generation `generation`) if no message
    /// is waiting in `mailbox`. Returns true when the cell is gone; otherwise the waiting
    /// messages go to a fresh activation. A `stopping` cell (handoff, shutdown) stays
    /// remembered; a passivated one is forgotten.
    pub(super) async fn passivate(
        &mut self,
        mailbox: &mut mpsc::Receiver<CellMessage>,
        generation: u64,
        stopping: bool,
    ) -> bool {
        self.drop_instance().await;
        self.passivate_requested = false;
        let left = self
            .core
            .cells
            .leave_unless(&self.address, generation, &mut || {
                if !mailbox.is_empty() {
                    return true;
                }
                mailbox.close();
                false
            });
        if !left {
            return false;
        }
        self.core.stats.passivations.fetch_add(1, Ordering::Relaxed);
        self.counters.passivations.fetch_add(1, Ordering::Relaxed);
        if !stopping {
            self.remember(RememberOp::Forgotten);
        }
        tracing::debug!(entity = %self.address, "passivated");
        true
    }

    /// Records a start or a passivation for remember-entities, if the type is remembered.
    pub(super) fn remember(&mut self, op: fn(RememberedId) -> RememberOp) {
        let remembered = self.binding().is_ok_and(|binding| binding.remember);
        if let (true, Some(writer)) = (remembered, &self.core.remember) {
            writer.record(op(RememberedId::new(&self.address, self.shard)));
        }
    }
}

/// The entity's metadata from this node's copy, brought up to date first where reads are
/// ordered: a partition's replica may trail its group (a new primary's, just after the
/// partition's shards came to it), so a commit barrier makes it apply everything committed
/// before, and a copy found behind is read again. An instance built from a trailing copy
/// could commit nothing (its writes would be refused as stale), and its message would be
/// answered `unavailable` for nothing.
async fn current_meta(
    state: &Arc<dyn tessera_state::EntityState>,
    address: &EntityAddress,
) -> Result<tessera_state::EntityMeta, MessageError> {
    let meta = state.meta(address).map_err(read_failure)?;
    if !state.orders_reads(address) {
        return Ok(meta);
    }
    match state.barrier(address, meta.stamp).await {
        Ok(()) => Ok(meta),
        Err(tessera_state::CommitError::Stale { .. }) => state.meta(address).map_err(read_failure),
        Err(error) => Err(message::commit_failure(error, false)),
    }
}

/// What a message whose state could not be read answers: `unavailable` (retried) when the
/// state is not on this node now — its partition moved away — an internal failure otherwise.
pub(super) fn read_failure(error: tessera_state::StoreError) -> MessageError {
    match error {
        tessera_state::StoreError::Unavailable(_) => MessageError::unavailable(error.to_string()),
        other => MessageError::new(ErrorKind::Internal, other.to_string()),
    }
}

/// The answer to a message the node did not start because it is shutting down.
pub(super) fn shutting_down() -> MessageError {
    MessageError::unavailable("the node is shutting down; the message was not run")
}

/// The cap of running calls and the CPU budget a type's calls pass their tenant's gate under.
pub(super) fn gate_limits(binding: &TypeBinding) -> (usize, u64) {
    (
        binding.limits.concurrent_guests_max.max(1),
        binding.limits.cpu_ms_per_second,
    )
}
