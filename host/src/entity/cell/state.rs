//! What running one message of a live entity takes: activating or upgrading at a message
//! boundary, the guest call through the tenant's gate, and committing the message's writes
//! together with its tells, reminders and the receipt of the message itself before replying.
//! A message that already committed (a duplicate delivery) is acknowledged without running; an
//! ask whose deadline passed is not run. Also the end of the entity: passivation.

use crate::contract::envelope::answer;
use crate::contract::{EntityAddress, Envelope, ErrorKind, MessageError, Reply, ShardId};
use crate::entity::core::{CellMessage, Core};
use crate::entity::counters::TypeCounters;
use crate::entity::fairness::CallPass;
use crate::entity::types::TypeBinding;
use crate::runtime::{Activation, Effects, EntityContext, EntityInstance, HandleOutcome, Weight};
use crate::state::remember::{RememberOp, RememberedId};
use crate::state::{Receipt, WriteSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::mpsc;

mod effects;

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
    /// Shared with the directory: whether this cell holds an instance now.
    holds_instance: Arc<std::sync::atomic::AtomicBool>,
    counters: Arc<TypeCounters>,
    /// The type's binding as of a type-table generation, so the hot path skips the lookup.
    binding_cache: Option<(u64, Option<Arc<TypeBinding>>)>,
    instance: Option<EntityInstance>,
    running_version: u32,
    version_to_record: Option<u32>,
    activated_before: bool,
    /// The outbox sequence number of this entity's next tell (durable, read at activation).
    next_seq: u64,
    /// The highest timer id this entity committed.
    last_timer: u64,
    /// Set by a message or a failed activation: the cell passivates after it.
    pub(super) passivate_requested: bool,
    /// This entity's place at its tenant's gate to guest execution.
    pass: Option<Arc<CallPass>>,
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
        holds_instance: Arc<std::sync::atomic::AtomicBool>,
    ) -> Self {
        let counters = core.counters(&address.type_key());
        CellState {
            core,
            counters,
            binding_cache: None,
            address,
            shard,
            holds_instance,
            instance: None,
            running_version: 0,
            version_to_record: None,
            activated_before: false,
            next_seq: 0,
            last_timer: 0,
            passivate_requested: false,
            pass: None,
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
    fn is_ready(&mut self) -> bool {
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

    fn binding(&mut self) -> Result<Arc<TypeBinding>, MessageError> {
        let binding = self.cached_binding().cloned();
        binding.ok_or_else(|| {
            MessageError::new(
                ErrorKind::EntityTypeNotRegistered,
                format!(
                    "entity type {} is no longer deployed in tenant {}",
                    self.address.entity_type, self.address.tenant
                ),
            )
        })
    }

    /// Makes sure an instance of the type's active version is running, activating or
    /// upgrading it at this message boundary.
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
        let meta = core
            .state
            .meta(&self.address)
            .map_err(|error| MessageError::new(ErrorKind::Internal, error.to_string()))?;
        let sequences = core
            .state
            .sequences(&self.address)
            .map_err(|error| MessageError::new(ErrorKind::Internal, error.to_string()))?;
        self.next_seq = sequences.next_seq;
        self.last_timer = sequences.last_timer;
        let recorded = meta.version;
        let reason = match (upgraded_from, recorded) {
            (Some(from), _) => Activation::Upgraded(from),
            (None, Some(version)) if version != binding.version => Activation::Upgraded(version),
            (None, Some(_)) => Activation::Restarted,
            (None, None) if self.activated_before => Activation::Restarted,
            (None, None) => Activation::FirstStart,
        };
        let context = || EntityContext {
            state: core.state.clone(),
            router: core.router.clone(),
            entity_state_bytes: meta.state_bytes,
            last_timer: sequences.last_timer,
            interrupt: core.closing.clone(),
        };
        // The pool is a cache of instances over durable state: when it is full, the least
        // recently used idle entity gives its instance back and this one waits for the slot,
        // at most `POOL_WAIT_MAX`.
        let waiting_since = std::time::Instant::now();
        let mut instance = loop {
            if core.runtime.pool_is_full() {
                core.release_lru_instance(&self.address);
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
                Ok(instance) => break instance,
                Err(error)
                    if error.kind == ErrorKind::Unavailable
                        && waiting_since.elapsed() < POOL_WAIT_MAX =>
                {
                    core.release_lru_instance(&self.address);
                    let _ = tokio::time::timeout(POOL_RETRY_INTERVAL, freed).await;
                }
                Err(error) => return Err(error),
            }
        };
        let pass = self
            .gate_pass(&binding)
            .enter(&self.core.stats.throttled_calls)
            .await;
        if core.is_closing() {
            return Err(shutting_down());
        }
        let call = Box::pin(async move {
            let activated = instance.activate(reason).await;
            (instance, activated)
        });
        let (instance, activated) = core.runtime.run_call(call, true).await?.0;
        drop(pass);
        activated?;
        self.holds_instance
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let tick = core.uses.load(Ordering::Relaxed);
        core.took_instance(&self.address, tick);
        core.stats.activations.fetch_add(1, Ordering::Relaxed);
        self.counters.activated(reason);
        tracing::debug!(entity = %self.address, version = binding.version, ?reason, "activated");
        self.activated_before = true;
        self.running_version = binding.version;
        self.version_to_record = (recorded != Some(binding.version)).then_some(binding.version);
        self.instance = Some(instance);
        Ok(())
    }

    /// Processes one message. What decides whether it runs at all (the node closing, the
    /// ask's deadline passed, a duplicate of an effectively-once message) is checked now; the
    /// returned future runs it. So that future (boxed once per message a sender runs) carries
    /// the payload, chain, receipt and reply port, not the envelope they came in.
    // Inlined into its caller's future, so the returned future is built in place there rather
    // than copied into it.
    #[inline(always)]
    pub(super) fn process(
        &mut self,
        envelope: Envelope,
    ) -> impl std::future::Future<Output = ()> + '_ {
        let Envelope {
            payload,
            meta,
            reply,
        } = envelope;
        let refused = self.refusal(meta.deadline, meta.origin.as_deref());
        let (chain, receipt) = (meta.chain, meta.origin);
        async move {
            if let Some(refused) = refused {
                answer(reply, refused);
                return;
            }
            self.counters.messages.add(1);
            let outcome = self.handle(payload, chain, receipt).await;
            if let Err(error) = &outcome {
                self.counters.failed(error.kind);
            }
            answer(reply, outcome);
        }
    }

    /// The answer to a message that must not run: the node is closing, the asker's deadline
    /// passed before it started (it is not executed), or it is a duplicate of an
    /// effectively-once message already applied (answered empty, not run again).
    fn refusal(
        &self,
        deadline: Option<std::time::Instant>,
        receipt: Option<&Receipt>,
    ) -> Option<Reply> {
        if self.core.is_closing() {
            return Some(Err(shutting_down()));
        }
        if deadline.is_some_and(|deadline| std::time::Instant::now() >= deadline) {
            self.core.stats.expired_asks.fetch_add(1, Ordering::Relaxed);
            return Some(Err(MessageError::new(
                ErrorKind::Timeout,
                "the ask's deadline passed before the entity started it; it was not executed",
            )));
        }
        let receipt = receipt?;
        match self.core.state.is_duplicate(&self.address, receipt) {
            Ok(true) => {
                self.core
                    .stats
                    .duplicates_dropped
                    .fetch_add(1, Ordering::Relaxed);
                Some(Ok(Vec::new()))
            }
            Ok(false) => None,
            Err(error) => Some(Err(MessageError::new(
                ErrorKind::Internal,
                error.to_string(),
            ))),
        }
    }

    async fn handle(
        &mut self,
        payload: Vec<u8>,
        chain: Vec<EntityAddress>,
        receipt: Option<Box<Receipt>>,
    ) -> Result<Vec<u8>, MessageError> {
        if !self.is_ready() {
            // Boxed: activation's future is large, and most messages find the instance up.
            Box::pin(self.ready()).await?;
        }
        let binding = self.binding()?;
        let pass = self
            .gate_pass(&binding)
            .enter(&self.core.stats.throttled_calls)
            .await;
        if self.core.is_closing() {
            return Err(shutting_down());
        }
        let mut instance = self
            .instance
            .take()
            .expect("invariant: ready() left a running instance");
        instance.begin_message(chain, Some(pass.call_gate()));
        let call = Box::pin(async move {
            let outcome = instance.handle_begun(&payload).await;
            (instance, outcome)
        });
        let ran = self.core.runtime.run_call(call, !self.runs_long).await;
        drop(pass);
        // What is left to wait for is the commit alone: only the write set, the effects and the
        // reply are kept across it (so a message's future stays small).
        let Settled {
            reply,
            effects,
            writes,
        } = self.settle(ran, receipt)?;
        if let Some(writes) = writes {
            let started = std::time::Instant::now();
            let committed = self.core.state.commit(*writes).await;
            self.counters.committed(started.elapsed());
            if let Err(error) = committed {
                // The instance saw writes that did not land: start afresh from durable state.
                let error = MessageError::new(ErrorKind::Internal, error.to_string());
                self.discard_instance(&error);
                return Err(error);
            }
            self.version_to_record = None;
        }
        self.carry_out(&effects);
        Ok(reply)
    }

    /// Takes a finished guest call back: the instance returns to the cell (unless it went
    /// down), and the message's writes are joined by its messaging (tells, timers, receipt) and
    /// the version to record, ready to commit.
    fn settle(
        &mut self,
        ran: Result<(GuestCall, Weight), MessageError>,
        receipt: Option<Box<Receipt>>,
    ) -> Result<Settled, MessageError> {
        let (instance, outcome) = match ran {
            Ok((ran, weight)) => {
                self.runs_long = weight == Weight::Heavy;
                ran
            }
            Err(error) => {
                // The instance went down with the call: the cell holds none now.
                self.discard_instance(&error);
                return Err(error);
            }
        };
        let instance = self.instance.insert(instance);
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(error) => {
                if instance.is_poisoned() {
                    self.discard_instance(&error);
                }
                return Err(error);
            }
        };
        let HandleOutcome {
            reply,
            writes,
            effects,
        } = outcome;
        let messaging = receipt.is_some()
            || !effects.tells.is_empty()
            || !effects.schedules.is_empty()
            || !effects.cancels.is_empty();
        let mut writes = writes;
        if messaging {
            let writes =
                writes.get_or_insert_with(|| Box::new(WriteSet::new(self.address.clone())));
            if let Err(error) =
                self.add_messaging(writes, &effects, receipt.map(|receipt| *receipt))
            {
                // The instance saw a message whose effects will not land: start afresh.
                self.discard_instance(&error);
                return Err(error);
            }
        }
        let writes = writes
            .filter(|writes| !writes.is_empty())
            .map(|mut writes| {
                if let Some(version) = self.version_to_record {
                    writes.set_version(version);
                }
                writes
            });
        Ok(Settled {
            reply,
            effects,
            writes,
        })
    }

    /// This entity's pass through its tenant's gate, made once (again only if the tenant's
    /// cap or budget changes); entering it waits until the tenant may run one more guest call.
    fn gate_pass(&mut self, binding: &TypeBinding) -> Arc<CallPass> {
        let cap = binding.limits.concurrent_guests_max.max(1);
        let budget = binding.limits.cpu_ms_per_second;
        match &self.pass {
            Some(pass) if pass.fits(cap, budget) => pass.clone(),
            _ => {
                let gate = self.core.gates.gate(&self.address.tenant, cap);
                let pass = CallPass::new(gate, budget, &self.core);
                self.pass = Some(pass.clone());
                pass
            }
        }
    }

    /// Drops the instance without calling the guest (it failed, or saw effects that did not
    /// land). Not async, so a message's future does not carry a guest call's state for it.
    fn discard_instance(&mut self, error: &MessageError) {
        self.core
            .stats
            .instance_discards
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(entity = %self.address, %error, "instance discarded");
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

    fn take_instance(&mut self) -> Option<EntityInstance> {
        self.holds_instance
            .store(false, std::sync::atomic::Ordering::Relaxed);
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
        {
            let mut cells = self.core.cells();
            if !mailbox.is_empty() {
                cells.keep(&self.address, generation);
                return false;
            }
            cells.remove(&self.address, generation);
            mailbox.close();
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

/// What a message's guest call gives back: the instance, and the call's outcome.
type GuestCall = (EntityInstance, Result<HandleOutcome, MessageError>);

/// A message whose guest call finished: its reply, its effects to carry out after the commit,
/// and what to commit (`None`: nothing).
struct Settled {
    reply: Vec<u8>,
    effects: Effects,
    writes: Option<Box<WriteSet>>,
}

/// The answer to a message the node did not start because it is shutting down.
fn shutting_down() -> MessageError {
    MessageError::unavailable("the node is shutting down; the message was not run")
}
