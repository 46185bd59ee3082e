//! What one message's guest call gathers while it runs ([`MessageScope`]): its writes, the
//! effects it asks for once they are committed ([`Effects`]), its asks and the chain of asks
//! it runs under, and its running slot at the tenant's gate. A call begins and finishes its
//! scope in place (the scope is a few hundred bytes, and there is one call per message).

use super::sender::Sender;
use std::time::Duration;
use tessera_contract::{EntityAddress, TraceContext};
use tessera_state::WriteSet;

/// A message to self, requested with `schedule`; stored as a durable reminder with the
/// message's commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledMessage {
    /// The timer id returned to the guest.
    pub timer: u64,
    /// How long after the commit to deliver it.
    pub delay: Duration,
    /// The MessagePack payload.
    pub payload: Vec<u8>,
}

/// What a message asked the host to do once its state is committed. Discarded if it fails.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// One-way messages to send, in call order.
    pub tells: Vec<(EntityAddress, Vec<u8>)>,
    /// Timers to arm.
    pub schedules: Vec<ScheduledMessage>,
    /// Timers to cancel.
    pub cancels: Vec<u64>,
    /// Whether the entity asked to be passivated after this message.
    pub passivate: bool,
}

impl Effects {
    /// No effects at all: the common case, carried as `None` ([`HandleOutcome`]).
    ///
    /// [`HandleOutcome`]: super::HandleOutcome
    pub const NONE: Effects = Effects {
        tells: Vec::new(),
        schedules: Vec::new(),
        cancels: Vec::new(),
        passivate: false,
    };

    /// Whether the message asked for nothing.
    pub fn is_empty(&self) -> bool {
        self.tells.is_empty()
            && self.schedules.is_empty()
            && self.cancels.is_empty()
            && !self.passivate
    }

    /// Whether the message sent tells or set or cancelled timers (committed with its writes).
    pub fn has_messaging(&self) -> bool {
        !self.tells.is_empty() || !self.schedules.is_empty() || !self.cancels.is_empty()
    }
}

/// Everything scoped to the message being handled.
#[derive(Default)]
pub(crate) struct MessageScope {
    /// True while `handle` runs: the only time messages are allowed, and state writes but for
    /// a migration.
    pub(crate) in_message: bool,
    /// True while a 0.2 `activate` runs: state writes are allowed (a migration), messages
    /// are not.
    pub(crate) migrating: bool,
    /// Who sent the message being handled.
    pub(crate) sender: Sender,
    /// The message's writes, created on its first `put` or `delete` (boxed: most messages
    /// write nothing, and a message's outcome is moved several times on its way back).
    pub(crate) writes: Option<Box<WriteSet>>,
    pub(crate) effects: Effects,
    pub(crate) asks: u32,
    /// The entities whose asks wait on this message, outermost first (this entity not
    /// included): an ask to any of them, or to itself, would deadlock.
    pub(crate) chain: Vec<EntityAddress>,
    /// The running slot of this instance's message calls, given back while an ask waits.
    /// Kept between messages (a message's gate is its entity's, which changes only with its
    /// tenant's cap), so it is consulted only while `in_message`.
    pub(crate) gate: Option<std::sync::Arc<dyn super::gate::CallGate>>,
    /// Set when one of this message's asks failed with `deadlock`: if the message then fails,
    /// it fails as a deadlock too, so the error reaches the outermost asker with its kind.
    pub(crate) deadlocked: bool,
    pub(crate) ticks_used: u64,
    /// Change of the entity's total state bytes made by this message.
    pub(crate) state_bytes_delta: i64,
    /// The trace context the message's asks carry (its span's, or the one it came with).
    pub(crate) trace: Option<TraceContext>,
}

impl MessageScope {
    /// Begins a call: the last call's scope is cleared in place (the scope is a few hundred
    /// bytes, and a call per message should not move it).
    pub(crate) fn begin(&mut self, in_message: bool) {
        let MessageScope {
            in_message: scope_in_message,
            migrating,
            sender: _, // set by the message that begins

            writes,
            effects,
            asks,
            chain,
            gate: _, // kept between messages
            deadlocked,
            ticks_used,
            state_bytes_delta,
            trace,
        } = self;
        *scope_in_message = in_message;
        *migrating = false;
        *writes = None;
        if !effects.is_empty() {
            // Left by a call that did not finish its message.
            *effects = Effects::default();
        }
        *asks = 0;
        chain.clear();
        *deadlocked = false;
        *ticks_used = 0;
        *state_bytes_delta = 0;
        *trace = None;
    }

    /// Ends a message: what its outcome needs is taken out, and the scope no longer allows
    /// writes or messages (nor consults its gate).
    pub(crate) fn finish(&mut self) -> FinishedScope {
        self.in_message = false;
        self.migrating = false;
        self.chain.clear();
        FinishedScope {
            writes: self.writes.take(),
            effects: (!self.effects.is_empty())
                .then(|| Box::new(std::mem::take(&mut self.effects))),
            deadlocked: self.deadlocked,
            state_bytes_delta: self.state_bytes_delta,
        }
    }
}

/// What a finished message's scope hands to its outcome ([`MessageScope::finish`]).
pub(crate) struct FinishedScope {
    pub(crate) writes: Option<Box<WriteSet>>,
    /// `None` when the message asked for nothing (most do).
    pub(crate) effects: Option<Box<Effects>>,
    pub(crate) deadlocked: bool,
    pub(crate) state_bytes_delta: i64,
}
