//! One message through a live entity: what decides whether it runs at all (the node closing,
//! the ask's deadline passed, a duplicate of an effectively-once message), then the guest call
//! through the tenant's gate, and the commit of its writes together with its messaging before
//! the reply.

use super::{CellState, shutting_down};
use crate::contract::envelope::answer;
use crate::contract::{EntityAddress, Envelope, ErrorKind, MessageError, Reply};
use crate::runtime::{Effects, EntityInstance, HandleOutcome, Weight};
use crate::state::{Receipt, WriteSet};
use std::sync::atomic::Ordering;

impl CellState {
    /// Processes one message. What decides whether it runs at all (the node closing, the
    /// ask's deadline passed, a duplicate of an effectively-once message) is checked now; the
    /// returned future runs it. So that future (boxed once per message a sender runs) carries
    /// the payload, chain, receipt and reply port, not the envelope they came in.
    // Inlined into its caller's future, so the returned future is built in place there rather
    // than copied into it.
    #[inline(always)]
    pub(in crate::entity::cell) fn process(
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
