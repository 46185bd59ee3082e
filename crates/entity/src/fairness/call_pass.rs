//! A cell's place at its tenant's gate ([`CallPass`]): entered for each of the cell's guest
//! calls, left while the guest waits on an ask and entered again after (the runtime's
//! [`CallGate`](tessera_runtime::CallGate) hooks), and the pass of the call running now kept
//! where the call's owner finds it without a lock in the common case ([`PassSlot`]).

use super::{Pass, TenantGate};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::OwnedSemaphorePermit;

/// A cell's place at its tenant's gate, made once per cell (again only if the tenant's cap or
/// CPU budget changes) and entered for each of its guest calls: entered before the call, left
/// while the guest waits on an ask (so a nested ask to the same tenant finds a slot) and entered
/// again after.
pub(crate) struct CallPass {
    gate: Arc<TenantGate>,
    cpu_ms_per_second: u64,
    core: std::sync::Weak<crate::core::Core>,
    /// The pass of the call running now, if it holds one.
    slot: Arc<PassSlot>,
}

/// A call that entered its gate through its cell's [`CallPass`]; leaves it when dropped.
pub(crate) struct Entered(Arc<CallPass>);

impl Drop for Entered {
    fn drop(&mut self) {
        self.0.leave();
    }
}

impl CallPass {
    /// A pass through `gate` under a CPU budget of `cpu_ms_per_second` (0 for none).
    pub(crate) fn new(
        gate: Arc<TenantGate>,
        cpu_ms_per_second: u64,
        core: &Arc<crate::core::Core>,
    ) -> Arc<CallPass> {
        Arc::new(CallPass {
            gate,
            cpu_ms_per_second,
            core: Arc::downgrade(core),
            slot: Arc::default(),
        })
    }

    /// Whether this pass is still for a cap of `cap` running calls and a budget of
    /// `cpu_ms_per_second`.
    pub(crate) fn fits(&self, cap: usize, cpu_ms_per_second: u64) -> bool {
        self.gate.cap() == cap && self.cpu_ms_per_second == cpu_ms_per_second
    }

    /// Enters the gate for one call.
    pub(crate) async fn enter(self: Arc<Self>, throttled: &AtomicU64) -> Entered {
        let pass = self.gate.enter(self.cpu_ms_per_second, throttled).await;
        self.slot.put(pass);
        Entered(self)
    }

    /// Enters the gate for one call if that needs no wait (false, with nothing changed or
    /// counted, if it would: then [`enter`](Self::enter)). The call leaves through
    /// [`leave`](Self::leave), or through the [`Entered`] of [`entered`](Self::entered).
    pub(crate) fn try_enter(&self) -> bool {
        let Some(pass) = self.gate.try_enter(self.cpu_ms_per_second) else {
            return false;
        };
        self.slot.put(pass);
        true
    }

    /// The call that [`try_enter`](Self::try_enter) let in, to leave when dropped (if it is
    /// in then: a call waiting on an ask has paused, and is in again only once it resumed).
    pub(crate) fn entered(self: &Arc<Self>) -> Entered {
        Entered(self.clone())
    }

    /// The call running now leaves the gate (if it is in).
    pub(crate) fn leave(&self) {
        if let Some(pass) = self.slot.take() {
            self.gate.release(pass);
        }
    }
}

/// Where a [`CallPass`] keeps the pass of the call running now. A bare pass (the common
/// case: the tenant alone, no budget; counted among its lone calls or not) is kept as a state
/// alone, with no lock taken; a pass
/// with a slot of the cap or a start time is kept under the lock.
///
/// Only the call's owner touches it — its cell's message run, and the gate hooks the guest
/// call runs, on whichever thread polls the call, one at a time with the hand-over ordering
/// them — so the state needs no read-modify-write.
#[derive(Default)]
struct PassSlot {
    state: AtomicU8,
    held: Mutex<Option<Pass>>,
}

/// [`PassSlot`] states: no call in the gate, a call in with a bare pass, a call in with its
/// pass in `held`.
const OUT: u8 = 0;
const IN_BARE: u8 = 1;
const IN_HELD: u8 = 2;
/// In with a bare pass counted among its lone tenant's calls ([`Pass::lone`]).
const IN_LONE: u8 = 3;

impl PassSlot {
    fn put(&self, pass: Pass) {
        debug_assert!(!self.is_in(), "a cell's calls enter its gate one at a time");
        if pass.is_bare() {
            self.state.store(IN_BARE, Ordering::Relaxed);
        } else if pass.is_lone() {
            self.state.store(IN_LONE, Ordering::Relaxed);
        } else {
            *lock(&self.held) = Some(pass);
            self.state.store(IN_HELD, Ordering::Relaxed);
        }
    }

    fn take(&self) -> Option<Pass> {
        let state = self.state.load(Ordering::Relaxed);
        self.state.store(OUT, Ordering::Relaxed);
        match state {
            IN_BARE => Some(Pass::bare()),
            IN_LONE => Some(Pass::lone()),
            IN_HELD => lock(&self.held).take(),
            _ => None,
        }
    }

    fn is_in(&self) -> bool {
        self.state.load(Ordering::Relaxed) != OUT
    }

    /// Whether the call in the gate runs without a slot of the cap (it came in alone).
    fn is_unslotted(&self) -> bool {
        match self.state.load(Ordering::Relaxed) {
            IN_BARE | IN_LONE => true,
            IN_HELD => lock(&self.held)
                .as_ref()
                .is_some_and(|pass| pass.permit.is_none()),
            _ => false,
        }
    }

    /// Gives the call in the gate the slot of the cap it waited for (dropped if the call has
    /// left meanwhile).
    fn give_permit(&self, permit: OwnedSemaphorePermit) {
        match self.state.load(Ordering::Relaxed) {
            state @ (IN_BARE | IN_LONE) => {
                *lock(&self.held) = Some(Pass {
                    permit: Some(permit),
                    lone: state == IN_LONE,
                    started: None,
                });
                self.state.store(IN_HELD, Ordering::Relaxed);
            }
            IN_HELD => {
                if let Some(pass) = lock(&self.held).as_mut() {
                    pass.permit = Some(permit);
                }
            }
            _ => {}
        }
    }
}

fn lock(slot: &Mutex<Option<Pass>>) -> std::sync::MutexGuard<'_, Option<Pass>> {
    slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl tessera_runtime::CallGate for CallPass {
    fn pause(&self) {
        self.leave();
    }

    fn preempt(&self) -> Option<tessera_contract::BoxFuture<'static, ()>> {
        if !self.slot.is_unslotted() || !self.gate.contended() {
            return None;
        }
        let (gate, slot) = (self.gate.clone(), self.slot.clone());
        if let Some(core) = self.core.upgrade() {
            core.stats.throttled_calls.fetch_add(1, Ordering::Relaxed);
        }
        Some(Box::pin(async move {
            let Ok(permit) = gate.running.clone().acquire_owned().await else {
                return;
            };
            slot.give_permit(permit);
        }))
    }

    fn pace(&self, per_second: u32, burst: u32) -> tessera_contract::BoxFuture<'static, ()> {
        let (gate, core) = (self.gate.clone(), self.core.clone());
        Box::pin(async move {
            if gate.take_message_token(per_second, burst).await
                && let Some(core) = core.upgrade()
            {
                core.stats.throttled_asks.fetch_add(1, Ordering::Relaxed);
            }
        })
    }

    fn resume(&self) -> tessera_contract::BoxFuture<'static, ()> {
        let (gate, budget) = (self.gate.clone(), self.cpu_ms_per_second);
        let (core, slot) = (self.core.clone(), self.slot.clone());
        Box::pin(async move {
            let Some(core) = core.upgrade() else { return };
            let pass = gate.enter(budget, &core.stats.throttled_calls).await;
            slot.put(pass);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fairness::Gates;

    /// A bare pass (no slot of the cap, no budget) is kept as a state alone; a slot granted
    /// to it later (preemption) turns it into a held one, given back with the pass.
    #[tokio::test]
    async fn a_pass_slot_keeps_a_bare_pass_and_the_slot_granted_to_it() {
        let gates = Gates::default();
        let gate = gates.gate("alone", 1);
        let slot = PassSlot::default();
        assert!(!slot.is_in() && !slot.is_unslotted());
        slot.put(gate.try_enter(0).expect("alone, let in"));
        assert!(slot.is_in() && slot.is_unslotted());
        let permit = gate
            .running
            .clone()
            .try_acquire_owned()
            .expect("a free slot");
        slot.give_permit(permit);
        assert!(slot.is_in() && !slot.is_unslotted());
        assert_eq!(gate.running.available_permits(), 0);
        let pass = slot.take().expect("the call is in");
        assert!(!slot.is_in());
        gate.release(pass);
        assert_eq!(gate.running.available_permits(), 1, "the slot went back");
        assert_eq!(gate.in_flight.load(Ordering::Relaxed), 0);
        assert!(slot.take().is_none(), "taken once");
    }
}
