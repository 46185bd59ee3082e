//! One live entity: the task that owns its instance and works through its mailbox one message
//! at a time — activating or upgrading at a message boundary, committing each message's writes
//! before its reply and its effects, and passivating when asked, idle or evicted.

use super::core::{CellMessage, Core};
use super::counters::TypeCounters;
use super::types::TypeBinding;
use crate::contract::{EntityAddress, Envelope, ErrorKind, MessageError, ShardId};
use crate::runtime::{Activation, Effects, EntityContext, EntityInstance};
use crate::state::remember::{RememberOp, RememberedId};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

enum Next {
    Message(CellMessage),
    Idle,
    Closed,
}

pub(crate) struct Cell {
    core: Arc<Core>,
    address: EntityAddress,
    shard: ShardId,
    generation: u64,
    /// This cell's own mailbox, for its timers.
    mailbox: mpsc::WeakSender<CellMessage>,
    receiver: mpsc::Receiver<CellMessage>,
    counters: Arc<TypeCounters>,
    /// The type's binding as of a type-table generation, so the hot path skips the lookup.
    binding_cache: Option<(u64, Option<Arc<TypeBinding>>)>,
    instance: Option<EntityInstance>,
    running_version: u32,
    version_to_record: Option<u32>,
    activated_before: bool,
    timers: HashMap<u64, AbortHandle>,
    stop_waiters: Vec<oneshot::Sender<()>>,
    passivate_requested: bool,
}

impl Cell {
    pub(crate) fn spawn(
        core: Arc<Core>,
        address: EntityAddress,
        shard: ShardId,
        generation: u64,
        mailbox: mpsc::Sender<CellMessage>,
        receiver: mpsc::Receiver<CellMessage>,
    ) {
        let counters = core.counters(&address.type_key());
        let cell = Cell {
            core,
            counters,
            binding_cache: None,
            address,
            shard,
            generation,
            mailbox: mailbox.downgrade(),
            receiver,
            instance: None,
            running_version: 0,
            version_to_record: None,
            activated_before: false,
            timers: HashMap::new(),
            stop_waiters: Vec::new(),
            passivate_requested: false,
        };
        tokio::spawn(cell.run());
    }

    async fn run(mut self) {
        self.remember(RememberOp::Started);
        loop {
            match self.next().await {
                Next::Message(CellMessage::Deliver(envelope)) => self.process(envelope).await,
                Next::Message(CellMessage::Activate) => {
                    if let Err(error) = self.ready().await {
                        tracing::warn!(entity = %self.address, %error, "respawn failed");
                    }
                }
                Next::Message(CellMessage::Passivate) | Next::Idle => {
                    self.passivate_requested = true
                }
                Next::Message(CellMessage::Stop(done)) => {
                    self.stop_waiters.push(done);
                    self.passivate_requested = true;
                }
                Next::Closed => self.passivate_requested = true,
            }
            if (self.passivate_requested || !self.stop_waiters.is_empty()) && self.passivate().await
            {
                break;
            }
        }
        // Report a stop only once this cell (and everything it holds: the instance, the
        // directory handle) is gone, so a waiter may reopen what it used.
        let waiters = std::mem::take(&mut self.stop_waiters);
        drop(self);
        for waiter in waiters {
            let _ = waiter.send(());
        }
    }

    async fn next(&mut self) -> Next {
        let idle = self
            .binding()
            .ok()
            .and_then(|binding| binding.passivate_idle);
        let received = match idle {
            Some(idle) => match tokio::time::timeout(idle, self.receiver.recv()).await {
                Ok(received) => received,
                Err(_) => return Next::Idle,
            },
            None => self.receiver.recv().await,
        };
        received.map_or(Next::Closed, Next::Message)
    }

    fn binding(&mut self) -> Result<Arc<TypeBinding>, MessageError> {
        let types = &self.core.types;
        let generation = types.generation();
        let binding = match &self.binding_cache {
            Some((cached, binding)) if *cached == generation => binding.clone(),
            _ => {
                let binding = types.get(&self.address.type_key());
                self.binding_cache = Some((generation, binding.clone()));
                binding
            }
        };
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
    async fn ready(&mut self) -> Result<(), MessageError> {
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
            self.drop_instance(true).await;
        }
        let core = self.core.clone();
        let meta = core
            .state
            .meta(&self.address)
            .map_err(|error| MessageError::new(ErrorKind::Internal, error.to_string()))?;
        let recorded = meta.version;
        let reason = match (upgraded_from, recorded) {
            (Some(from), _) => Activation::Upgraded(from),
            (None, Some(version)) if version != binding.version => Activation::Upgraded(version),
            (None, Some(_)) => Activation::Restarted,
            (None, None) if self.activated_before => Activation::Restarted,
            (None, None) => Activation::FirstStart,
        };
        let context = EntityContext {
            state: core.state.clone(),
            router: core.router.clone(),
            entity_state_bytes: meta.state_bytes,
        };
        let mut instance = core
            .runtime
            .instantiate(
                &binding.plugin,
                self.address.clone(),
                binding.limits,
                context,
            )
            .await?;
        instance.activate(reason).await?;
        core.stats.activations.fetch_add(1, Ordering::Relaxed);
        self.counters.activated(reason);
        tracing::debug!(entity = %self.address, version = binding.version, ?reason, "activated");
        self.activated_before = true;
        self.running_version = binding.version;
        self.version_to_record = (recorded != Some(binding.version)).then_some(binding.version);
        self.instance = Some(instance);
        Ok(())
    }

    async fn process(&mut self, envelope: Envelope) {
        self.counters.messages.add(1);
        let outcome = self.handle(&envelope.payload).await;
        if let Err(error) = &outcome {
            self.counters.failed(error.kind);
        }
        envelope.answer(outcome);
    }

    async fn handle(&mut self, payload: &[u8]) -> Result<Vec<u8>, MessageError> {
        self.ready().await?;
        let instance = self
            .instance
            .as_mut()
            .expect("invariant: ready() left a running instance");
        let outcome = match instance.handle(payload).await {
            Ok(outcome) => outcome,
            Err(error) => {
                if instance.is_poisoned() {
                    self.discard_instance(&error).await;
                }
                return Err(error);
            }
        };
        if let Some(mut writes) = outcome.writes {
            if let Some(version) = self.version_to_record {
                writes.set_version(version);
            }
            let started = std::time::Instant::now();
            let committed = self.core.state.commit(writes).await;
            self.counters.committed(started.elapsed());
            if let Err(error) = committed {
                // The instance saw writes that did not land: start afresh from durable state.
                let error = MessageError::new(ErrorKind::Internal, error.to_string());
                self.discard_instance(&error).await;
                return Err(error);
            }
            self.version_to_record = None;
        }
        self.carry_out(outcome.effects).await;
        Ok(outcome.reply)
    }

    /// Sends tells, arms and cancels timers, and notes a passivation request: only after the
    /// message's writes are durable.
    async fn carry_out(&mut self, effects: Effects) {
        let core = self.core.clone();
        for (to, payload) in effects.tells {
            if let Err(error) = core.router.tell(&self.address, to.clone(), payload).await {
                core.stats.dropped_tells.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(from = %self.address, %to, %error, "tell refused");
            }
        }
        for timer in effects.cancels {
            if let Some(handle) = self.timers.remove(&timer) {
                handle.abort();
            }
        }
        self.timers.retain(|_, handle| !handle.is_finished());
        for scheduled in effects.schedules {
            if self.timers.len() >= core.config.timers_per_entity_max {
                core.stats.dropped_timers.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(entity = %self.address, "too many timers; one was not armed");
                continue;
            }
            let mailbox = self.mailbox.clone();
            let address = self.address.clone();
            let task = tokio::spawn(async move {
                tokio::time::sleep(scheduled.delay).await;
                let delivered = match mailbox.upgrade() {
                    Some(mailbox) => mailbox
                        .try_send(CellMessage::Deliver(Envelope::tell(scheduled.payload)))
                        .is_ok(),
                    None => false,
                };
                if !delivered {
                    tracing::warn!(entity = %address, "timer message refused: mailbox full or gone");
                }
            });
            self.timers.insert(scheduled.timer, task.abort_handle());
        }
        if effects.passivate {
            self.passivate_requested = true;
        }
    }

    async fn discard_instance(&mut self, error: &MessageError) {
        self.core
            .stats
            .instance_discards
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(entity = %self.address, %error, "instance discarded");
        self.drop_instance(false).await;
    }

    async fn drop_instance(&mut self, deactivate: bool) {
        if let Some(mut instance) = self.instance.take() {
            if deactivate {
                instance.deactivate().await;
            }
            self.core
                .stats
                .guest_log_lines_dropped
                .fetch_add(instance.log_lines_dropped(), Ordering::Relaxed);
        }
        for (_, timer) in self.timers.drain() {
            timer.abort();
        }
    }

    /// Deactivates the instance and removes the cell if no message is waiting. Returns true
    /// when the cell is gone; otherwise the waiting messages go to a fresh activation.
    async fn passivate(&mut self) -> bool {
        self.drop_instance(true).await;
        self.passivate_requested = false;
        {
            let mut cells = self.core.cells();
            if !self.receiver.is_empty() {
                return false;
            }
            cells.remove(&self.address, self.generation);
            self.receiver.close();
        }
        self.core.stats.passivations.fetch_add(1, Ordering::Relaxed);
        self.counters.passivations.fetch_add(1, Ordering::Relaxed);
        // A stop (handoff, shutdown) keeps the entity remembered; a passivation forgets it.
        if self.stop_waiters.is_empty() {
            self.remember(RememberOp::Forgotten);
        }
        tracing::debug!(entity = %self.address, "passivated");
        true
    }

    /// Records a start or a passivation for remember-entities, if the type is remembered.
    fn remember(&mut self, op: fn(RememberedId) -> RememberOp) {
        let remembered = self.binding().is_ok_and(|binding| binding.remember);
        if let (true, Some(writer)) = (remembered, &self.core.remember) {
            writer.record(op(RememberedId::new(&self.address, self.shard)));
        }
    }
}
