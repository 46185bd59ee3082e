//! Fair execution across tenants: each tenant's guest calls pass a gate before they run.
//!
//! The gate has two parts, both per tenant:
//! - a cap on the tenant's guest calls running at once (`concurrent_guests_max`): a tenant with
//!   a backlog holds at most that many worker threads, so on a node with more cores than the
//!   cap other tenants always find one free — one tenant's flood does not queue another's
//!   messages behind it. Waiting cells wait asynchronously (they hold no thread), in FIFO order;
//! - a CPU budget (`cpu_ms_per_second`): the wall-clock time the tenant's guest calls run (a
//!   close proxy of their CPU time, since a guest call never blocks a thread: host calls are
//!   async) is summed over one-second windows; a tenant past its budget waits for the next
//!   window before its next call starts (a delay, not an error), as Linux CFS bandwidth
//!   control throttles a group past its quota.
//!
//! Together they give each busy tenant at most `concurrent_guests_max` cores and at most its
//! budget of CPU per second, whatever the others do. The cap is work-conserving: while no
//! other tenant has a call running or waiting, a tenant may run past it (idle cores are not
//! kept from anyone); the budget always holds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One tenant's gate.
pub(crate) struct TenantGate {
    running: Arc<Semaphore>,
    cap: usize,
    /// Microseconds of guest time used in the current window.
    used_us: AtomicU64,
    /// The current window's start, in microseconds since `epoch`.
    window_start_us: AtomicU64,
    /// The clock windows are measured on (Tokio's, so tests can pause it).
    epoch: tokio::time::Instant,
    /// This tenant's calls running or waiting at the gate.
    in_flight: AtomicU64,
    /// Tokens of the bucket its entities' tells and asks are sent from: `(tokens, refilled at)`.
    messages: Mutex<(f64, tokio::time::Instant)>,
    /// Tenants with a call running or waiting, shared by every gate of the node.
    busy_tenants: Arc<AtomicU64>,
    /// Until when (µs since `epoch`) caps hold, shared by every gate of the node; 0 for no
    /// grace running.
    contended_until_us: Arc<AtomicU64>,
}

/// The gates of every tenant, made on first use.
pub(crate) struct Gates {
    tenants: Mutex<HashMap<String, Arc<TenantGate>>>,
    /// Set by `open_all` at shutdown: gates made later are open too.
    opened: std::sync::atomic::AtomicBool,
    epoch: tokio::time::Instant,
    busy_tenants: Arc<AtomicU64>,
    contended_until_us: Arc<AtomicU64>,
}

impl Default for Gates {
    fn default() -> Self {
        Gates {
            tenants: Mutex::default(),
            opened: std::sync::atomic::AtomicBool::new(false),
            epoch: tokio::time::Instant::now(),
            busy_tenants: Arc::default(),
            contended_until_us: Arc::default(),
        }
    }
}

/// Permission to run one guest call; dropping it (after the call) records the time used.
pub(crate) struct Pass {
    gate: Arc<TenantGate>,
    /// `None` when the call ran past the cap because no other tenant was busy.
    permit: Option<OwnedSemaphorePermit>,
    /// When the call started, if the tenant has a CPU budget to account it against.
    started: Option<Instant>,
}

impl Drop for Pass {
    fn drop(&mut self) {
        if let Some(started) = self.started {
            let used = started.elapsed().as_micros() as u64;
            self.gate.used_us.fetch_add(used, Ordering::Relaxed);
        }
        self.gate.leave();
    }
}

const WINDOW_US: u64 = 1_000_000;

/// How long caps keep holding after two tenants last had calls at the same time.
const CONTENTION_GRACE_US: u64 = 1_000_000;

impl Gates {
    /// The gate of `tenant` with a cap of `cap` running calls (a fresh gate if the cap
    /// changed; calls holding the old one finish under it).
    pub(crate) fn gate(&self, tenant: &str, cap: usize) -> Arc<TenantGate> {
        let mut tenants = self
            .tenants
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match tenants.get(tenant) {
            Some(gate) if gate.cap == cap => gate.clone(),
            _ => {
                let gate = Arc::new(TenantGate {
                    running: Arc::new(Semaphore::new(cap)),
                    cap,
                    used_us: AtomicU64::new(0),
                    window_start_us: AtomicU64::new(0),
                    epoch: self.epoch,
                    in_flight: AtomicU64::new(0),
                    messages: Mutex::new((f64::MAX, tokio::time::Instant::now())),
                    busy_tenants: self.busy_tenants.clone(),
                    contended_until_us: self.contended_until_us.clone(),
                });
                if self.opened.load(Ordering::Relaxed) {
                    gate.running.close();
                }
                tenants.insert(tenant.to_string(), gate.clone());
                gate
            }
        }
    }

    /// Lets every waiting and future call through at once, caps no longer held (node
    /// shutdown: calls let through find the node closing and do not run the guest).
    pub(crate) fn open_all(&self) {
        let tenants = self
            .tenants
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.opened.store(true, Ordering::Relaxed);
        for gate in tenants.values() {
            gate.running.close();
        }
    }
}

impl TenantGate {
    /// The cap this gate enforces.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Waits until one more of this tenant's entities' messages (a tell delivered, an ask
    /// sent) may go under its message rate (`per_second`, 0 for none; `burst` tokens at
    /// most). True if it had to wait.
    pub(crate) async fn take_message_token(&self, per_second: u32, burst: u32) -> bool {
        if per_second == 0 {
            return false;
        }
        let (rate, burst) = (f64::from(per_second), f64::from(burst.max(1)));
        let mut waited = false;
        loop {
            let wait = {
                let mut bucket = self
                    .messages
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let now = tokio::time::Instant::now();
                let elapsed = now.duration_since(bucket.1).as_secs_f64();
                bucket.0 = (bucket.0.min(burst) + elapsed * rate).min(burst);
                bucket.1 = now;
                if bucket.0 >= 1.0 {
                    bucket.0 -= 1.0;
                    return waited;
                }
                Duration::from_secs_f64((1.0 - bucket.0) / rate)
            };
            waited = true;
            tokio::time::sleep(wait).await;
        }
    }

    /// Whether another tenant has had calls at the same time lately (the caps hold).
    fn contended(&self) -> bool {
        self.busy_tenants.load(Ordering::Relaxed) > 1 || self.in_grace()
    }

    /// Whether caps still hold after the last overlap of two tenants. An expired grace is
    /// cleared (to 0, "none"), so a node whose tenants stopped overlapping reads no clock for
    /// it; clearing only that very value, so a newer overlap's grace is never lost.
    fn in_grace(&self) -> bool {
        let until = self.contended_until_us.load(Ordering::Relaxed);
        if until == 0 {
            return false;
        }
        if self.now_us() < until {
            return true;
        }
        let _ = self.contended_until_us.compare_exchange(
            until,
            0,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        false
    }

    /// One more call of this tenant is running or waiting.
    fn arrive(&self) {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            self.busy_tenants.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// One call of this tenant finished. The last one stops counting the tenant busy *before*
    /// its count reaches zero (and counts it again if a call arrived meanwhile), so one tenant
    /// never shows as two busy tenants: with a decrement after the count reached zero, a call
    /// arriving in between would count the tenant again first, and its own calls on two
    /// threads would look like contention and bring its cap down on it.
    fn leave(&self) {
        loop {
            let in_flight = self.in_flight.load(Ordering::Acquire);
            debug_assert!(in_flight > 0, "a call leaves the gate it entered");
            if in_flight > 1 {
                if self
                    .in_flight
                    .compare_exchange(
                        in_flight,
                        in_flight - 1,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
                {
                    return;
                }
                continue;
            }
            self.busy_tenants.fetch_sub(1, Ordering::AcqRel);
            if self
                .in_flight
                .compare_exchange(1, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return;
            }
            self.busy_tenants.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Waits until the tenant may run one more guest call: under its concurrency cap and
    /// within its CPU budget (`cpu_ms_per_second`, 0 for none). Counts a wait in `throttled`.
    pub(crate) async fn enter(
        self: Arc<Self>,
        cpu_ms_per_second: u64,
        throttled: &AtomicU64,
    ) -> Pass {
        self.arrive();
        let mut waited = false;
        loop {
            let permit = match self.admit(cpu_ms_per_second) {
                Admission::Now(permit) => permit,
                Admission::BudgetSpent { wait } => {
                    if !waited {
                        // Counted when the wait begins, so the count shows calls held now.
                        waited = true;
                        throttled.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(wait).await;
                    continue;
                }
                Admission::AtCap => {
                    if !waited {
                        throttled.fetch_add(1, Ordering::Relaxed);
                    }
                    // Closed only at shutdown (`open_all`): the call goes on unthrottled.
                    self.running.clone().acquire_owned().await.ok()
                }
            };
            return self.pass(permit, cpu_ms_per_second);
        }
    }

    /// [`enter`](Self::enter) if the tenant may run one more guest call now; `None`, with
    /// nothing changed or counted, if it would have to wait.
    pub(crate) fn try_enter(self: Arc<Self>, cpu_ms_per_second: u64) -> Option<Pass> {
        self.arrive();
        match self.admit(cpu_ms_per_second) {
            Admission::Now(permit) => Some(self.pass(permit, cpu_ms_per_second)),
            Admission::BudgetSpent { .. } | Admission::AtCap => {
                self.leave();
                None
            }
        }
    }

    /// Whether a call that has arrived may run now: within the CPU budget, and under the cap
    /// or alone.
    fn admit(&self, cpu_ms_per_second: u64) -> Admission {
        if cpu_ms_per_second > 0 {
            let budget_us = cpu_ms_per_second.saturating_mul(1_000);
            loop {
                let now = self.now_us();
                let start = self.window_start_us.load(Ordering::Relaxed);
                if now >= start + WINDOW_US {
                    // A new window: whoever sees it first resets the count.
                    if self
                        .window_start_us
                        .compare_exchange(start, now, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                    {
                        self.used_us.store(0, Ordering::Relaxed);
                    }
                    continue;
                }
                if self.used_us.load(Ordering::Relaxed) >= budget_us {
                    return Admission::BudgetSpent {
                        wait: Duration::from_micros(start + WINDOW_US - now),
                    };
                }
                break;
            }
        }
        // Work-conserving: while no other tenant has had a call running or waiting lately, the
        // cap is not applied — idle cores are not kept from anyone, and a lone tenant pays no
        // semaphore. Once two tenants overlap, caps hold for `CONTENTION_GRACE_US` after the
        // last overlap, so a calm tenant's gaps between calls do not lift the noisy one's cap.
        let overlapping = self.busy_tenants.load(Ordering::Relaxed) > 1;
        if overlapping {
            self.contended_until_us
                .fetch_max(self.now_us() + CONTENTION_GRACE_US, Ordering::Relaxed);
        }
        if !overlapping && !self.in_grace() {
            return Admission::Now(None);
        }
        match self.running.clone().try_acquire_owned() {
            Ok(permit) => Admission::Now(Some(permit)),
            Err(_) => Admission::AtCap,
        }
    }

    fn pass(self: Arc<Self>, permit: Option<OwnedSemaphorePermit>, cpu_ms_per_second: u64) -> Pass {
        Pass {
            gate: self,
            permit,
            started: (cpu_ms_per_second > 0).then(Instant::now),
        }
    }
}

/// What the gate says to a call that has arrived.
enum Admission {
    /// It runs now, holding a slot of the cap (`None`: the tenant is alone, no cap applies).
    Now(Option<OwnedSemaphorePermit>),
    /// The tenant's CPU budget for this window is spent: wait `wait` for the next one.
    BudgetSpent { wait: Duration },
    /// The tenant is at its cap while others are busy: wait for a slot.
    AtCap,
}

/// A cell's place at its tenant's gate, made once per cell (again only if the tenant's cap or
/// CPU budget changes) and entered for each of its guest calls: entered before the call, left
/// while the guest waits on an ask (so a nested ask to the same tenant finds a slot) and entered
/// again after.
pub(crate) struct CallPass {
    gate: Arc<TenantGate>,
    cpu_ms_per_second: u64,
    core: std::sync::Weak<super::core::Core>,
    /// The pass of the call running now, if it holds one.
    pass: Arc<Mutex<Option<Pass>>>,
}

/// A call inside its tenant's gate; leaves it when dropped.
pub(crate) struct Entered(Arc<CallPass>);

impl Entered {
    /// The pass, as the runtime's hook for the call.
    pub(crate) fn call_gate(&self) -> Arc<dyn crate::runtime::CallGate> {
        self.0.clone()
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        lock(&self.0.pass).take();
    }
}

impl CallPass {
    /// A pass through `gate` under a CPU budget of `cpu_ms_per_second` (0 for none).
    pub(crate) fn new(
        gate: Arc<TenantGate>,
        cpu_ms_per_second: u64,
        core: &Arc<super::core::Core>,
    ) -> Arc<CallPass> {
        Arc::new(CallPass {
            gate,
            cpu_ms_per_second,
            core: Arc::downgrade(core),
            pass: Arc::default(),
        })
    }

    /// Whether this pass is still for a cap of `cap` running calls and a budget of
    /// `cpu_ms_per_second`.
    pub(crate) fn fits(&self, cap: usize, cpu_ms_per_second: u64) -> bool {
        self.gate.cap() == cap && self.cpu_ms_per_second == cpu_ms_per_second
    }

    /// Enters the gate for one call.
    pub(crate) async fn enter(self: Arc<Self>, throttled: &AtomicU64) -> Entered {
        let pass = self
            .gate
            .clone()
            .enter(self.cpu_ms_per_second, throttled)
            .await;
        *lock(&self.pass) = Some(pass);
        Entered(self)
    }

    /// Enters the gate for one call if that needs no wait; `None` otherwise, with nothing
    /// changed or counted (then [`enter`](Self::enter)).
    pub(crate) fn try_enter(self: &Arc<Self>) -> Option<Entered> {
        let pass = self.gate.clone().try_enter(self.cpu_ms_per_second)?;
        *lock(&self.pass) = Some(pass);
        Some(Entered(self.clone()))
    }
}

fn lock(slot: &Mutex<Option<Pass>>) -> std::sync::MutexGuard<'_, Option<Pass>> {
    slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl crate::runtime::CallGate for CallPass {
    fn pause(&self) {
        lock(&self.pass).take();
    }

    fn preempt(&self) -> Option<crate::contract::BoxFuture<'static, ()>> {
        {
            let pass = lock(&self.pass);
            let unslotted = pass.as_ref().is_some_and(|pass| pass.permit.is_none());
            if !unslotted || !self.gate.contended() {
                return None;
            }
        }
        let (gate, slot) = (self.gate.clone(), self.pass.clone());
        if let Some(core) = self.core.upgrade() {
            core.stats.throttled_calls.fetch_add(1, Ordering::Relaxed);
        }
        Some(Box::pin(async move {
            let Ok(permit) = gate.running.clone().acquire_owned().await else {
                return;
            };
            if let Some(pass) = lock(&slot).as_mut() {
                pass.permit = Some(permit);
            }
        }))
    }

    fn pace(&self, per_second: u32, burst: u32) -> crate::contract::BoxFuture<'static, ()> {
        let (gate, core) = (self.gate.clone(), self.core.clone());
        Box::pin(async move {
            if gate.take_message_token(per_second, burst).await
                && let Some(core) = core.upgrade()
            {
                core.stats.throttled_asks.fetch_add(1, Ordering::Relaxed);
            }
        })
    }

    fn resume(&self) -> crate::contract::BoxFuture<'static, ()> {
        let (gate, budget) = (self.gate.clone(), self.cpu_ms_per_second);
        let (core, slot) = (self.core.clone(), self.pass.clone());
        Box::pin(async move {
            let Some(core) = core.upgrade() else { return };
            let pass = gate.enter(budget, &core.stats.throttled_calls).await;
            *lock(&slot) = Some(pass);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One tenant's calls entering and leaving on two threads at once must never count it as
    /// two busy tenants: that would read as contention and cap a tenant that is alone.
    #[test]
    fn a_lone_tenant_on_two_threads_is_one_busy_tenant() {
        let gates = Gates::default();
        let gate = gates.gate("alone", 1);
        let most_seen = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    for _ in 0..1_000_000 {
                        gate.arrive();
                        most_seen.fetch_max(
                            gate.busy_tenants.load(Ordering::Acquire),
                            Ordering::Relaxed,
                        );
                        gate.leave();
                    }
                });
            }
        });
        assert_eq!(
            most_seen.load(Ordering::Relaxed),
            1,
            "one tenant counted as more"
        );
        assert_eq!(gate.busy_tenants.load(Ordering::Relaxed), 0);
        assert_eq!(gate.in_flight.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenant_runs_at_most_its_cap_while_others_are_busy() {
        let gates = Gates::default();
        let throttled = AtomicU64::new(0);
        let noisy = gates.gate("noisy", 1);
        // Alone, the tenant may run past its cap: no core is kept idle.
        let first = noisy.clone().enter(0, &throttled).await;
        let second = noisy.clone().enter(0, &throttled).await;
        drop((first, second));
        // With another tenant busy, the cap holds...
        let calm = gates.gate("calm", 1);
        let calm_pass = calm.clone().enter(0, &throttled).await;
        let held = noisy.clone().enter(0, &throttled).await;
        let mut waiting = Box::pin(noisy.clone().enter(0, &throttled));
        assert!(
            futures_poll(&mut waiting).is_none(),
            "the cap let a second call run"
        );
        // ...while the other tenant itself is not held back by the noisy one.
        drop(calm_pass);
        let _calm_again = calm.enter(0, &throttled).await;
        drop(held);
        assert!(
            futures_poll(&mut waiting).is_some(),
            "the slot was not handed on"
        );
        assert_eq!(throttled.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_call_that_would_wait_is_not_let_in_and_leaves_no_trace() {
        let gates = Gates::default();
        let throttled = AtomicU64::new(0);
        let (noisy, calm) = (gates.gate("noisy", 1), gates.gate("calm", 1));
        let alone = noisy.clone().try_enter(0);
        assert!(alone.is_some(), "a lone tenant was kept waiting");
        drop(alone);
        let _calm_pass = calm.enter(0, &throttled).await;
        let held = noisy.clone().try_enter(0);
        assert!(held.is_some(), "a free slot was refused");
        assert!(
            noisy.clone().try_enter(0).is_none(),
            "the cap let a second call in"
        );
        assert_eq!(
            noisy.in_flight.load(Ordering::Relaxed),
            1,
            "a refused call still counts as in flight"
        );
        assert_eq!(
            throttled.load(Ordering::Relaxed),
            0,
            "a refusal counted as a wait"
        );
        drop(held);
        assert!(noisy.try_enter(0).is_some(), "the freed slot was refused");
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenant_past_its_cpu_budget_waits_for_the_next_second() {
        let gates = Gates::default();
        let throttled = AtomicU64::new(0);
        let gate = gates.gate("busy", 4);
        // 300 ms of guest time against a budget of 200 ms per second.
        gate.used_us.store(300_000, Ordering::Relaxed);
        gate.window_start_us.store(gate.now_us(), Ordering::Relaxed);
        let waited_from = tokio::time::Instant::now();
        let _pass = gate.clone().enter(200, &throttled).await;
        assert!(
            waited_from.elapsed() >= Duration::from_millis(900),
            "the call did not wait for the next window"
        );
        assert_eq!(gate.used_us.load(Ordering::Relaxed), 0, "a new window");
        assert_eq!(throttled.load(Ordering::Relaxed), 1);
    }

    /// After two tenants overlap, caps hold for the grace even for a tenant alone again; once
    /// it has passed they lift, and the expired grace is cleared (so later calls read no
    /// clock for it).
    #[tokio::test(start_paused = true)]
    async fn caps_hold_for_the_grace_after_an_overlap_and_then_lift() {
        let gates = Gates::default();
        let throttled = AtomicU64::new(0);
        let (noisy, calm) = (gates.gate("noisy", 1), gates.gate("calm", 1));
        let alone = noisy.clone().enter(0, &throttled).await;
        assert!(alone.permit.is_none(), "a lone tenant was capped");
        let overlapping = calm.clone().enter(0, &throttled).await;
        assert!(overlapping.permit.is_some(), "an overlap did not cap");
        drop((alone, overlapping));
        let in_grace = noisy.clone().enter(0, &throttled).await;
        assert!(
            in_grace.permit.is_some(),
            "caps lifted before the grace ended"
        );
        drop(in_grace);
        tokio::time::advance(Duration::from_micros(CONTENTION_GRACE_US)).await;
        let after = noisy.clone().enter(0, &throttled).await;
        assert!(after.permit.is_none(), "caps held past the grace");
        assert_eq!(
            gates.contended_until_us.load(Ordering::Relaxed),
            0,
            "the expired grace was not cleared"
        );
    }

    /// Polls `future` once: `Some` if it finished.
    fn futures_poll<F: std::future::Future + Unpin>(future: &mut F) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        match std::pin::Pin::new(future).poll(&mut context) {
            std::task::Poll::Ready(output) => Some(output),
            std::task::Poll::Pending => None,
        }
    }
}
