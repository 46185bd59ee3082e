//! One live entity: the task that owns its instance and works through its mailbox one message
//! at a time.

use super::counters::TypeCounters;
use super::directory::Entities;
use super::types::TypeBinding;
use crate::envelope::{EntityAddress, Envelope, ErrorKind, MessageError};
use crate::runtime::{Activation, Effects, EntityInstance};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

/// What a cell's mailbox carries.
pub(crate) enum CellMessage {
    /// A message for the entity.
    Deliver(Envelope),
    /// Activate without a message (remember-entities respawn).
    Activate,
    /// Passivate after the messages ahead of this one.
    Passivate,
    /// Passivate and report when the cell is gone (handoff, shutdown).
    Stop(oneshot::Sender<()>),
}

enum Next {
    Message(CellMessage),
    Idle,
    Closed,
}

pub(crate) struct Cell {
    entities: Entities,
    address: EntityAddress,
    generation: u64,
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
        entities: Entities,
        address: EntityAddress,
        generation: u64,
        receiver: mpsc::Receiver<CellMessage>,
    ) {
        let counters = entities.counters(&address.type_key());
        let cell = Cell {
            entities,
            counters,
            binding_cache: None,
            address,
            generation,
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
        self.lifecycle_started();
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
        let types = self.entities.types();
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
        let shared = self.entities.shared().clone();
        let recorded = shared
            .state
            .version(&self.address)
            .map_err(|error| MessageError::new(ErrorKind::Internal, error.to_string()))?;
        let reason = match (upgraded_from, recorded) {
            (Some(from), _) => Activation::Upgraded(from),
            (None, Some(version)) if version != binding.version => Activation::Upgraded(version),
            (None, Some(_)) => Activation::Restarted,
            (None, None) if self.activated_before => Activation::Restarted,
            (None, None) => Activation::FirstStart,
        };
        let mut instance = shared
            .runtime
            .instantiate(
                &binding.plugin,
                self.address.clone(),
                binding.limits,
                shared.state.clone(),
                self.entities.router(),
            )
            .await?;
        instance.activate(reason).await?;
        shared.stats.activations.fetch_add(1, Ordering::Relaxed);
        self.counters.activated(reason);
        tracing::debug!(entity = %self.address, version = binding.version, ?reason, "activated");
        self.activated_before = true;
        self.running_version = binding.version;
        self.version_to_record = (recorded != Some(binding.version)).then_some(binding.version);
        self.instance = Some(instance);
        Ok(())
    }

    async fn process(&mut self, envelope: Envelope) {
        let stats = &self.entities.shared().stats;
        stats.messages.fetch_add(1, Ordering::Relaxed);
        self.counters.messages.fetch_add(1, Ordering::Relaxed);
        let outcome = self.handle(&envelope.payload).await;
        if let Err(error) = &outcome {
            self.counters.failed(error.kind);
            self.entities
                .shared()
                .stats
                .message_failures
                .fetch_add(1, Ordering::Relaxed);
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
            let committed = self.entities.shared().commit.commit(writes).await;
            self.counters.committed(started.elapsed());
            if let Err(error) = committed {
                // The instance saw writes that did not land: start afresh from durable state.
                let error = MessageError::new(ErrorKind::Internal, error.to_string());
                self.discard_instance(&error).await;
                return Err(error);
            }
            self.version_to_record = None;
        }
        self.carry_out(outcome.effects);
        Ok(outcome.reply)
    }

    /// Sends tells, arms and cancels timers, and notes a passivation request: only after the
    /// message's writes are durable.
    fn carry_out(&mut self, effects: Effects) {
        let shared = self.entities.shared().clone();
        if !effects.tells.is_empty() {
            let router = self.entities.router();
            for (to, payload) in effects.tells {
                if let Err(error) = router.tell(&self.address, to.clone(), payload) {
                    shared.stats.dropped_tells.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(from = %self.address, %to, %error, "tell refused");
                }
            }
        }
        for timer in effects.cancels {
            if let Some(handle) = self.timers.remove(&timer) {
                handle.abort();
            }
        }
        self.timers.retain(|_, handle| !handle.is_finished());
        for scheduled in effects.schedules {
            if self.timers.len() >= shared.config.timers_per_entity_max {
                shared.stats.dropped_timers.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(entity = %self.address, "too many timers; one was not armed");
                continue;
            }
            let entities = self.entities.clone();
            let address = self.address.clone();
            let task = tokio::spawn(async move {
                tokio::time::sleep(scheduled.delay).await;
                if let Err((error, _)) =
                    entities.try_deliver(address.clone(), Envelope::tell(scheduled.payload))
                {
                    tracing::warn!(entity = %address, %error, "timer message refused");
                }
            });
            self.timers.insert(scheduled.timer, task.abort_handle());
        }
        if effects.passivate {
            self.passivate_requested = true;
        }
    }

    async fn discard_instance(&mut self, error: &MessageError) {
        self.entities
            .shared()
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
            self.entities
                .shared()
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
            let mut cells = self.entities.cells();
            if !self.receiver.is_empty() {
                return false;
            }
            cells.remove(&self.address, self.generation);
            self.receiver.close();
        }
        let shared = self.entities.shared();
        shared.stats.passivations.fetch_add(1, Ordering::Relaxed);
        self.counters.passivations.fetch_add(1, Ordering::Relaxed);
        if let Some(lifecycle) = shared
            .lifecycle
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
        {
            if self.stop_waiters.is_empty() {
                lifecycle.passivated(&self.address);
            } else {
                lifecycle.stopped(&self.address);
            }
        }
        tracing::debug!(entity = %self.address, "passivated");
        true
    }

    fn lifecycle_started(&self) {
        let lifecycle = self
            .entities
            .shared()
            .lifecycle
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        if let Some(lifecycle) = lifecycle {
            lifecycle.started(&self.address);
        }
    }
}
