//! One message through a live entity: what decides whether it runs at all (the node closing,
//! the ask's deadline passed, a duplicate of an effectively-once message), then the guest call
//! through the tenant's gate, and the commit of its writes together with its messaging before
//! the reply.
//!
//! A message goes through steps, so that its sender can run it as far as it goes without
//! waiting and hand only the rest to the cell's task ([`CellState::start_here`]): it is
//! [`PausedMessage::Start`] until it has passed its tenant's gate, [`PausedMessage::Call`] while its guest
//! call runs and [`PausedMessage::Commit`] while its writes commit; [`CellState::resume`] takes it
//! from any of them to its reply.

use super::{CellState, gate_limits, shutting_down};
use crate::fairness::Entered;
use crate::trace::MessageSpan;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use tessera_contract::envelope::answer;
use tessera_contract::{
    BoxFuture, EntityAddress, Envelope, ErrorKind, MessageError, Reply, ReplyPort,
};
use tessera_runtime::{Effects, EntityInstance, HandleOutcome, Sender, Weight};
use tessera_state::{CommitError, Receipt, WriteSet};

/// Where a message stopped when it had to wait (for activation or its tenant's gate, for its
/// guest call, for its commit); [`CellState::resume`] goes on from there.
pub(in crate::cell) enum PausedMessage {
    /// Nothing of it has run: the instance must be made ready and the gate passed first.
    Start(Message),
    /// Its guest call is under way.
    Call(CallUnderWay),
    /// Its guest call finished; its writes commit before its reply.
    /// (Boxed: a commit waits on the disk anyway, and every message's step is moved.)
    Commit(Box<Committing>),
}

/// A message that is to run: what it carries past the checks of [`CellState::admit`].
pub(in crate::cell) struct Message {
    payload: Vec<u8>,
    chain: Vec<EntityAddress>,
    receipt: Option<Box<Receipt>>,
    reply: Answer,
}

/// Where a message's outcome goes: its asker's port (`None` for a tell), and its trace, which
/// ends with it.
pub(in crate::cell) struct Answer {
    port: Option<ReplyPort>,
    span: Option<Box<MessageSpan>>,
}

/// A message's guest call, begun: the call's future and where its reply goes.
pub(in crate::cell) struct BegunCall {
    call: BoxFuture<'static, GuestCall>,
    receipt: Option<Box<Receipt>>,
    reply: Answer,
}

/// A message's guest call, begun and inside its tenant's gate.
pub(in crate::cell) struct CallUnderWay {
    begun: BegunCall,
    pass: Entered,
    /// Whether its first (untimed) poll was made: the runtime times the polls after it.
    first_poll_done: bool,
}

/// A message whose guest call finished, with writes to commit before its reply (`None`: it
/// wrote nothing, and its reply waits for a barrier of the state it read).
pub(in crate::cell) struct Committing {
    reply: Vec<u8>,
    effects: Option<Box<Effects>>,
    writes: Option<Box<WriteSet>>,
    port: Answer,
}

impl CellState {
    /// Processes one message to its reply (the cell's task: it may wait at every step).
    pub(in crate::cell) async fn process(&mut self, envelope: Envelope) {
        if let Some(message) = self.admit(envelope) {
            self.resume(PausedMessage::Start(message)).await;
        }
    }

    /// Runs one message on its sender's task as far as it goes without waiting, polling its
    /// guest call once with `context`: most messages finish (a short guest call
    /// and nothing to commit) and `None` is returned. Otherwise what is left, for
    /// [`resume`](Self::resume) to take on the cell's task — so a message's future is made
    /// (and boxed) only when it has to wait (an activation or upgrade among them).
    pub(in crate::cell) fn start_here(
        &mut self,
        envelope: Envelope,
        context: &mut Context<'_>,
    ) -> Option<PausedMessage> {
        let message = self.admit(envelope)?;
        // Ready when claimed, but a deploy may have moved the type's version (or removed the
        // type) since: the upgrade at this message boundary has to wait.
        let (running, has_instance) = (self.running_version, self.instance.is_some());
        let (cap, budget) = match self.cached_binding() {
            Some(binding) if has_instance && binding.version == running => gate_limits(binding),
            _ => return Some(PausedMessage::Start(message)),
        };
        if !self.gate_pass_for(cap, budget).try_enter() {
            return Some(PausedMessage::Start(message));
        }
        let Some(mut begun) = self.begin_call(message) else {
            self.leave_gate();
            return None;
        };
        match begun.call.as_mut().poll(context) {
            Poll::Pending => Some(PausedMessage::Call(CallUnderWay {
                begun,
                pass: self.entered(),
                first_poll_done: true,
            })),
            Poll::Ready(output) => {
                self.leave_gate();
                let BegunCall { receipt, reply, .. } = begun;
                self.after_call(Ok((output, Weight::Light)), receipt, reply)
            }
        }
    }

    /// Leaves what is left of a message a sender ran for the cell's task
    /// ([`finish_paused`](Self::finish_paused)).
    pub(in crate::cell) fn leave_paused(&mut self, paused: PausedMessage) {
        debug_assert!(
            self.paused.is_none(),
            "a sender runs a message only when none is unfinished"
        );
        self.paused = Some(paused);
    }

    /// Finishes what a sender left of its message, if anything: true when there was one.
    pub(in crate::cell) async fn finish_paused(&mut self) -> bool {
        let Some(paused) = self.paused.take() else {
            return false;
        };
        self.resume(paused).await;
        true
    }

    /// Takes a message from where it had to wait to its reply.
    pub(in crate::cell) async fn resume(&mut self, mut waiting: PausedMessage) {
        loop {
            waiting = match waiting {
                PausedMessage::Start(message) => match self.enter(message).await {
                    Some(call) => PausedMessage::Call(call),
                    None => return,
                },
                PausedMessage::Call(call) => {
                    let CallUnderWay {
                        begun:
                            BegunCall {
                                call,
                                receipt,
                                reply,
                            },
                        pass,
                        first_poll_done,
                    } = call;
                    let runtime = &self.core.runtime;
                    let ran = if first_poll_done {
                        runtime.run_polled_call(call).await
                    } else {
                        runtime.run_call(call, !self.runs_long).await
                    };
                    drop(pass);
                    match self.after_call(ran, receipt, reply) {
                        Some(waiting) => waiting,
                        None => return,
                    }
                }
                PausedMessage::Commit(committing) => {
                    self.commit(*committing).await;
                    return;
                }
            }
        }
    }

    /// The checks before a message runs: `None` when it must not (it has been answered).
    fn admit(&mut self, envelope: Envelope) -> Option<Message> {
        let Envelope {
            payload,
            meta,
            reply,
        } = envelope;
        if let Some(refused) = self.refusal(meta.deadline, meta.origin.as_deref()) {
            answer(reply, refused);
            return None;
        }
        self.counters.messages.add(1);
        Some(Message {
            payload,
            chain: meta.chain,
            receipt: meta.origin,
            reply: Answer {
                port: reply,
                span: MessageSpan::start(&self.address, meta.trace),
            },
        })
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
            return Some(Err(self.expired()));
        }
        self.duplicate(receipt?)
    }

    /// Counts an ask whose deadline passed before it started, and says so.
    #[cold]
    fn expired(&self) -> MessageError {
        self.core.stats.expired_asks.fetch_add(1, Ordering::Relaxed);
        MessageError::new(
            ErrorKind::Timeout,
            "the ask's deadline passed before the entity started it; it was not executed",
        )
    }

    /// The answer to an effectively-once message already applied (answered empty), if it is
    /// one. Out of line: only messages from entities and reminders carry a receipt. (With the
    /// other rare paths moved out of line and `#[cold]`, and a message's effects boxed, a
    /// message by address went from 10,044 to 9,811 instructions and from 765 to 750 L1i misses
    /// at `195280a`: `benches/instructions.sh`, `benches/icache.sh`; the wall clock moved within
    /// its noise.)
    #[inline(never)]
    fn duplicate(&self, receipt: &Receipt) -> Option<Reply> {
        match self.core.state.is_duplicate(&self.address, receipt) {
            Ok(true) => {
                self.core
                    .stats
                    .duplicates_dropped
                    .fetch_add(1, Ordering::Relaxed);
                Some(Ok(Vec::new()))
            }
            Ok(false) => None,
            Err(error) => Some(Err(super::read_failure(error))),
        }
    }

    /// Waits at the tenant's gate, then makes the instance ready (activating or upgrading it,
    /// inside the gate: a message waiting to run takes no slot of the instance pool) and
    /// begins the guest call; `None` if the message failed on the way (answered).
    async fn enter(&mut self, message: Message) -> Option<CallUnderWay> {
        let pass = match self.binding() {
            Ok(binding) => self.gate_pass(&binding).clone(),
            Err(error) => {
                self.passivate_requested = true;
                return self.fail(message, error);
            }
        };
        let pass = self.wait_at_gate(pass).await;
        if !self.is_ready() {
            // Boxed: activation's future is large, and most messages find the instance up.
            if let Err(error) = Box::pin(self.ready()).await {
                let error = kept_for_later(error, message.receipt.as_deref());
                return self.fail(message, error);
            }
        }
        // Not begun (the node closing): `pass` leaves the gate as it drops.
        let begun = self.begin_call(message)?;
        Some(CallUnderWay {
            begun,
            pass,
            first_poll_done: false,
        })
    }

    /// Begins the guest call of `message`, inside its tenant's gate; `None` if the node is
    /// closing (answered).
    fn begin_call(&mut self, message: Message) -> Option<BegunCall> {
        let Message {
            payload,
            chain,
            receipt,
            mut reply,
        } = message;
        if self.core.is_closing() {
            self.finish(reply, Err(shutting_down()));
            return None;
        }
        let mut instance = self
            .instance
            .take()
            .expect("invariant: a message begins its call on a ready instance");
        let sender = Sender::from_parts(receipt.as_deref(), &chain);
        instance.begin_message(chain, self.entered_pass().map(|(_, hook)| hook), sender);
        if let Some(span) = &mut reply.span {
            span.call_begins(self.running_version, instance.asks_waited());
            if let Some(context) = span.context() {
                instance.trace_message(context);
            }
        }
        let call = Box::pin(async move {
            let outcome = instance.handle_begun(&payload).await;
            (instance, outcome)
        });
        Some(BegunCall {
            call,
            receipt,
            reply,
        })
    }

    /// The call the cell's gate pass let in
    /// ([`CallPass::try_enter`](crate::fairness::CallPass::try_enter)), to leave the
    /// gate when dropped.
    fn entered(&self) -> Entered {
        let (pass, _) = self
            .entered_pass()
            .expect("invariant: a call that entered the gate entered through the cell's pass");
        pass.entered()
    }

    /// The call the cell's gate pass let in leaves the gate.
    fn leave_gate(&self) {
        if let Some((pass, _)) = self.entered_pass() {
            pass.leave();
        }
    }

    /// After the guest call: the reply at once when there is nothing to commit (`None`),
    /// else the commit to wait for.
    fn after_call(
        &mut self,
        ran: Result<(GuestCall, Weight), MessageError>,
        receipt: Option<Box<Receipt>>,
        mut port: Answer,
    ) -> Option<PausedMessage> {
        if let Some(span) = &mut port.span {
            let asks_waited = ran
                .as_ref()
                .ok()
                .map(|((instance, _), _)| instance.asks_waited());
            span.call_ends(asks_waited.unwrap_or_default());
        }
        match self.settle(ran, receipt) {
            Err(error) => {
                self.finish(port, Err(error));
                None
            }
            Ok(Settled {
                reply,
                effects,
                writes,
            }) if writes.is_some() || self.core.state.orders_reads(&self.address) => {
                Some(PausedMessage::Commit(Box::new(Committing {
                    reply,
                    effects,
                    writes,
                    port,
                })))
            }
            // Nothing written, on state whose reads are not ordered (the lease guards them).
            Ok(Settled { reply, effects, .. }) => {
                // A reply read from state this node may no longer serve is not sent.
                if let Err(error) = self.core.router.holds_lease() {
                    self.finish(port, Err(error));
                    return None;
                }
                if let Some(effects) = &effects {
                    self.carry_out(effects, port.span.as_deref());
                }
                self.finish(port, Ok(reply));
                None
            }
        }
    }

    /// Commits a message's writes with its messaging (or, if it wrote nothing, waits for the
    /// barrier of the state it read), then carries its effects out and replies.
    async fn commit(&mut self, committing: Committing) {
        let Committing {
            reply,
            effects,
            writes,
            mut port,
        } = committing;
        let Some(mut writes) = writes else {
            // Ordered reads: a copy that missed a write cannot answer from it.
            let barrier = self.core.state.barrier(&self.address, self.stamp).await;
            if let Err(error) = barrier {
                let error = commit_failure(error, false);
                self.discard_instance(&error);
                self.finish(port, Err(error));
                return;
            }
            if let Some(effects) = &effects {
                self.carry_out(effects, port.span.as_deref());
            }
            self.finish(port, Ok(reply));
            return;
        };
        // This node may have lost its lease or the shard while the message waited or ran (a
        // stalled process, a move): then nothing it wrote is kept, and the instance, which saw
        // those writes, starts afresh.
        if let Err(error) = self.may_serve() {
            self.discard_instance(&error);
            self.finish(port, Err(error));
            return;
        }
        let started = std::time::Instant::now();
        let written = self.stamp_writes(&mut writes);
        let committed = self.core.state.commit(*writes).await;
        let took = started.elapsed();
        self.counters.committed(took);
        if let Some(span) = &mut port.span {
            span.committed(took);
        }
        if let Err(error) = committed {
            // The instance saw writes that did not land: start afresh from durable state.
            let error = commit_failure(error, true);
            self.discard_instance(&error);
            self.finish(port, Err(error));
            return;
        }
        self.version_to_record = None;
        self.stamp = written;
        // Lost during the commit: the writes landed on a copy no one serves any more (a new
        // owner starts from what was handed off, or afresh), so the reply is not sent and
        // neither is the messaging.
        if let Err(error) = self.may_serve() {
            self.discard_instance(&error);
            self.finish(port, Err(error));
            return;
        }
        if let Some(effects) = &effects {
            self.carry_out(effects, port.span.as_deref());
        }
        self.finish(port, Ok(reply));
    }

    /// Whether this node may still serve this entity (its lease, its shard).
    fn may_serve(&self) -> Result<(), MessageError> {
        self.core.router.may_serve(&self.address, self.shard)
    }

    /// Answers `message` with `error` before its call began; nothing is left to run.
    fn fail<T>(&self, message: Message, error: MessageError) -> Option<T> {
        self.finish(message.reply, Err(error));
        None
    }

    /// Answers a message that ran (or failed on the way), counting a failure, and ends its
    /// span.
    fn finish(&self, reply: Answer, outcome: Reply) {
        if let Err(error) = &outcome {
            self.counters.failed(error.kind);
        }
        if let Some(span) = reply.span {
            (*span).end(outcome.as_ref().map(|_| ()));
        }
        answer(reply.port, outcome);
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
            || effects
                .as_ref()
                .is_some_and(|effects| effects.has_messaging());
        let mut writes = writes;
        if messaging {
            let effects = effects.as_deref().unwrap_or(&NO_EFFECTS);
            self.join_messaging(&mut writes, effects, receipt)?;
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

    /// Adds a message's messaging (tells, timers, receipt) to its writes. Out of line: most
    /// messages have none, and the path of those stays short.
    #[inline(never)]
    fn join_messaging(
        &mut self,
        writes: &mut Option<Box<WriteSet>>,
        effects: &Effects,
        receipt: Option<Box<Receipt>>,
    ) -> Result<(), MessageError> {
        let writes = writes.get_or_insert_with(|| Box::new(WriteSet::new(self.address.clone())));
        if let Err(error) = self.add_messaging(writes, effects, receipt.map(|receipt| *receipt)) {
            // The instance saw a message whose effects will not land: start afresh.
            self.discard_instance(&error);
            return Err(error);
        }
        Ok(())
    }
}

/// The answer to a message the entity could not activate for. A reminder or an entity's tell
/// is answered `unavailable`, which its sender retries, so it waits for a version that
/// activates (a fix or a rollback) instead of being given up; anyone else gets the failure.
/// Only activation fails a message before its call with a guest's kind of failure.
#[cold]
fn kept_for_later(error: MessageError, receipt: Option<&Receipt>) -> MessageError {
    let durable = matches!(
        receipt,
        Some(Receipt::Entity { .. } | Receipt::Reminder { .. })
    );
    let guest_failure = matches!(
        error.kind,
        ErrorKind::Failed
            | ErrorKind::Trap
            | ErrorKind::Deadline
            | ErrorKind::MemoryLimit
            | ErrorKind::StateTooLarge
    );
    if !(durable && guest_failure) {
        return error;
    }
    MessageError::unavailable(format!("kept for a version that activates: {error}"))
}

/// What a message whose commit (or read barrier, `wrote` false) failed answers: a `timeout`
/// (outcome unknown) when its writes may still land; `unavailable`, which senders retry, when
/// they were refused (a stale copy) or not sent, or a read could not be ordered now; an
/// internal failure otherwise.
pub(super) fn commit_failure(error: CommitError, wrote: bool) -> MessageError {
    match error {
        _ if wrote && error.may_have_committed() => {
            MessageError::new(ErrorKind::Timeout, error.to_string())
        }
        CommitError::Stale { .. } | CommitError::Unavailable(_) | CommitError::Unknown(_) => {
            MessageError::unavailable(error.to_string())
        }
        other => MessageError::new(ErrorKind::Internal, other.to_string()),
    }
}

/// The effects of a message that asked for none, for what reads them by reference.
static NO_EFFECTS: Effects = Effects::NONE;

/// What a message's guest call gives back: the instance, and the call's outcome.
type GuestCall = (Box<EntityInstance>, Result<HandleOutcome, MessageError>);

/// A message whose guest call finished: its reply, its effects to carry out after the commit,
/// and what to commit (`None`: nothing).
struct Settled {
    reply: Vec<u8>,
    effects: Option<Box<Effects>>,
    writes: Option<Box<WriteSet>>,
}
