//! A message's effects beyond its writes: its tells, reminders and receipt added to the
//! commit (refused past the entity's outbox and reminder bounds), and, once committed, the
//! delivery woken, the reminder clock rung and a passivation noted.

use super::CellState;
use crate::core::TellDelivery;
use crate::trace::MessageSpan;
use crate::trace::links::LinkKey;
use std::sync::atomic::Ordering;
use tessera_contract::{ErrorKind, MessageError, MessageMeta, MessageTrace, TraceContext};
use tessera_runtime::Effects;
use tessera_state::{OutboxEntry, Receipt, Reminder, WriteSet};

impl CellState {
    /// Adds the message's tells, reminders and receipt to its writes, refusing it when the
    /// entity's outbox or reminders would pass their bounds.
    pub(super) fn add_messaging(
        &mut self,
        writes: &mut WriteSet,
        effects: &Effects,
        receipt: Option<Receipt>,
    ) -> Result<(), MessageError> {
        let at_most_once = self.core.config.tells == TellDelivery::AtMostOnce;
        let (outbox_max, reminders_max) = match self.binding() {
            Ok(binding) => (
                binding.limits.outbox_entries_max,
                binding.limits.reminders_max,
            ),
            Err(error) => return Err(error),
        };
        let tells = if at_most_once {
            0
        } else {
            effects.tells.len() as u64
        };
        let schedules = effects.schedules.len() as u64;
        if tells > 0 || schedules > 0 {
            let internal = |error: tessera_state::StoreError| {
                MessageError::new(ErrorKind::Internal, error.to_string())
            };
            let held = self.core.state.sequences(&self.address).map_err(internal)?;
            if held.outbox + tells > outbox_max {
                return Err(MessageError::new(
                    ErrorKind::QuotaExceeded,
                    format!(
                        "the outbox of {} holds {} unacknowledged tells; {} more would pass the \
                         tenant's outbox_entries_max of {outbox_max}",
                        self.address, held.outbox, tells
                    ),
                ));
            }
            let mut cancelled = 0;
            for timer in &effects.cancels {
                if self
                    .core
                    .state
                    .reminder(&self.address, *timer)
                    .map_err(internal)?
                    .is_some()
                {
                    cancelled += 1;
                }
            }
            let reminders = (held.reminders + schedules).saturating_sub(cancelled);
            if schedules > 0 && reminders > reminders_max {
                return Err(MessageError::new(
                    ErrorKind::QuotaExceeded,
                    format!(
                        "{} would hold {reminders} reminders, over the tenant's reminders_max of \
                         {reminders_max}",
                        self.address
                    ),
                ));
            }
        }
        let now = self.core.now_ms();
        let messaging = writes.messaging_mut();
        let outbox = if at_most_once {
            &[][..]
        } else {
            &effects.tells[..]
        };
        for (offset, (to, payload)) in outbox.iter().enumerate() {
            messaging.outbox.push(OutboxEntry {
                seq: self.next_seq + offset as u64,
                to: to.clone(),
                payload: payload.clone(),
            });
        }
        for scheduled in &effects.schedules {
            messaging.reminders.push(Reminder {
                timer: scheduled.timer,
                due_ms: now.saturating_add(scheduled.delay.as_millis() as u64),
                payload: scheduled.payload.clone(),
            });
        }
        messaging.cancels.clone_from(&effects.cancels);
        messaging.receipt = receipt;
        let last_timer = effects
            .schedules
            .iter()
            .map(|scheduled| scheduled.timer)
            .max()
            .map_or(self.last_timer, |timer| timer.max(self.last_timer));
        if tells > 0 || last_timer != self.last_timer {
            messaging.counters = Some((self.next_seq + tells, last_timer));
        }
        Ok(())
    }

    /// After the commit: advances the entity's counters, wakes the delivery of its outbox and
    /// the reminder clock, keeps the trace context of its tells and reminders (`span`'s) for
    /// their delivery, and notes a passivation request.
    pub(super) fn carry_out(&mut self, effects: &Effects, span: Option<&MessageSpan>) {
        let trace = span.and_then(MessageSpan::context);
        if let Some(context) = trace {
            self.keep_trace_links(effects, context);
        }
        if self.core.config.tells == TellDelivery::AtMostOnce {
            self.send_at_most_once(effects, trace);
        } else {
            self.wake_delivery(effects.tells.len() as u64);
        }
        if !effects.schedules.is_empty() {
            self.core.reminders.ring();
        }
        if let Some(timer) = effects.schedules.iter().map(|s| s.timer).max() {
            self.last_timer = self.last_timer.max(timer);
        }
        if effects.passivate {
            self.passivate_requested = true;
        }
    }

    /// Keeps `context` for the delivery of the message's tells (by the outbox sequence numbers
    /// they were committed under) and the firing of its reminders. Out of line: only traced
    /// messages have it.
    #[inline(never)]
    fn keep_trace_links(&self, effects: &Effects, context: TraceContext) {
        let links = &self.core.trace_links;
        if self.core.config.tells == TellDelivery::EffectivelyOnce {
            for offset in 0..effects.tells.len() as u64 {
                let key = LinkKey::Tell(self.address.clone(), self.next_seq + offset);
                links.keep(key, context);
            }
        }
        for scheduled in &effects.schedules {
            let key = LinkKey::Reminder(self.address.clone(), scheduled.timer);
            links.keep(key, context);
        }
    }

    /// Sends the tells from memory, not waiting and not retrying.
    fn send_at_most_once(&self, effects: &Effects, trace: Option<TraceContext>) {
        let timeout = std::time::Duration::from_millis(self.core.config.delivery.ack_timeout_ms);
        for (to, payload) in &effects.tells {
            let meta = MessageMeta {
                trace: trace.map(|parent| Box::new(MessageTrace::new(Some(parent)))),
                ..MessageMeta::default()
            };
            let reply = self
                .core
                .router
                .ask(to.clone(), payload.clone(), meta, timeout);
            let (from, to) = (self.address.clone(), to.clone());
            tokio::spawn(async move {
                if let Err(error) = reply.await {
                    tracing::debug!(%from, %to, %error, "at-most-once tell lost");
                }
            });
        }
    }

    fn wake_delivery(&mut self, tells: u64) {
        self.next_seq += tells;
        if tells > 0 {
            self.core
                .stats
                .outbox_enqueued
                .fetch_add(tells, Ordering::Relaxed);
            crate::delivery::wake(&self.core, &self.address);
        }
    }
}
