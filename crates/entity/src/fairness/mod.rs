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

mod call_pass;

pub(crate) use call_pass::{CallPass, Entered};

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

/// Permission to run one guest call, given back to its gate after the call
/// ([`TenantGate::release`]; a [`CallPass`] does so for its calls).
pub(crate) struct Pass {
    /// `None` when the call ran past the cap because no other tenant was busy.
    permit: Option<OwnedSemaphorePermit>,
    /// When the call started, if the tenant has a CPU budget to account it against.
    started: Option<Instant>,
}

impl Pass {
    /// A pass holding nothing but its call's arrival: no slot of the cap, no time to account.
    fn bare() -> Pass {
        Pass {
            permit: None,
            started: None,
        }
    }

    fn is_bare(&self) -> bool {
        self.permit.is_none() && self.started.is_none()
    }
}

/// A call that has arrived at its gate and not been let in yet: it leaves the gate if dropped
/// (its wait cancelled), so a cancelled wait never leaves its tenant counted busy.
struct Arrival<'a>(Option<&'a TenantGate>);

impl<'a> Arrival<'a> {
    fn new(gate: &'a TenantGate) -> Self {
        gate.arrive();
        Arrival(Some(gate))
    }

    /// The call was let in: it now leaves with its pass.
    fn let_in(mut self) {
        self.0 = None;
    }
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        if let Some(gate) = self.0 {
            gate.leave();
        }
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
    /// The pass goes back through [`release`](Self::release) after the call.
    pub(crate) async fn enter(&self, cpu_ms_per_second: u64, throttled: &AtomicU64) -> Pass {
        let arrival = Arrival::new(self);
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
            arrival.let_in();
            return Self::pass(permit, cpu_ms_per_second);
        }
    }

    /// [`enter`](Self::enter) if the tenant may run one more guest call now; `None`, with
    /// nothing changed or counted, if it would have to wait.
    pub(crate) fn try_enter(&self, cpu_ms_per_second: u64) -> Option<Pass> {
        let arrival = Arrival::new(self);
        match self.admit(cpu_ms_per_second) {
            Admission::Now(permit) => {
                arrival.let_in();
                Some(Self::pass(permit, cpu_ms_per_second))
            }
            Admission::BudgetSpent { .. } | Admission::AtCap => None,
        }
    }

    /// Gives back the pass of a call that finished (or paused to wait on an ask): the time it
    /// ran is accounted against the budget, and its slot of the cap is freed.
    pub(crate) fn release(&self, pass: Pass) {
        let Pass { permit, started } = pass;
        if let Some(started) = started {
            let used = started.elapsed().as_micros() as u64;
            self.used_us.fetch_add(used, Ordering::Relaxed);
        }
        drop(permit);
        self.leave();
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

    fn pass(permit: Option<OwnedSemaphorePermit>, cpu_ms_per_second: u64) -> Pass {
        Pass {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A pass that goes back to its gate when dropped, as a cell's calls give theirs back.
    struct Held<'a>(&'a TenantGate, Option<Pass>);

    impl Held<'_> {
        fn has_slot(&self) -> bool {
            self.1.as_ref().is_some_and(|pass| pass.permit.is_some())
        }
    }

    impl Drop for Held<'_> {
        fn drop(&mut self) {
            if let Some(pass) = self.1.take() {
                self.0.release(pass);
            }
        }
    }

    async fn enter<'a>(gate: &'a TenantGate, budget: u64, throttled: &AtomicU64) -> Held<'a> {
        Held(gate, Some(gate.enter(budget, throttled).await))
    }

    fn try_enter(gate: &TenantGate) -> Option<Held<'_>> {
        gate.try_enter(0).map(|pass| Held(gate, Some(pass)))
    }

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
        let first = enter(&noisy, 0, &throttled).await;
        let second = enter(&noisy, 0, &throttled).await;
        drop((first, second));
        // With another tenant busy, the cap holds...
        let calm = gates.gate("calm", 1);
        let calm_pass = enter(&calm, 0, &throttled).await;
        let held = enter(&noisy, 0, &throttled).await;
        let mut waiting = Box::pin(enter(&noisy, 0, &throttled));
        assert!(
            futures_poll(&mut waiting).is_none(),
            "the cap let a second call run"
        );
        // ...while the other tenant itself is not held back by the noisy one.
        drop(calm_pass);
        let _calm_again = enter(&calm, 0, &throttled).await;
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
        let alone = try_enter(&noisy);
        assert!(alone.is_some(), "a lone tenant was kept waiting");
        drop(alone);
        let _calm_pass = enter(&calm, 0, &throttled).await;
        let held = try_enter(&noisy);
        assert!(held.is_some(), "a free slot was refused");
        assert!(try_enter(&noisy).is_none(), "the cap let a second call in");
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
        assert!(try_enter(&noisy).is_some(), "the freed slot was refused");
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
        let _pass = enter(&gate, 200, &throttled).await;
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
        let alone = enter(&noisy, 0, &throttled).await;
        assert!(!alone.has_slot(), "a lone tenant was capped");
        let overlapping = enter(&calm, 0, &throttled).await;
        assert!(overlapping.has_slot(), "an overlap did not cap");
        drop((alone, overlapping));
        let in_grace = enter(&noisy, 0, &throttled).await;
        assert!(in_grace.has_slot(), "caps lifted before the grace ended");
        drop(in_grace);
        tokio::time::advance(Duration::from_micros(CONTENTION_GRACE_US)).await;
        let after = enter(&noisy, 0, &throttled).await;
        assert!(!after.has_slot(), "caps held past the grace");
        assert_eq!(
            gates.contended_until_us.load(Ordering::Relaxed),
            0,
            "the expired grace was not cleared"
        );
    }

    /// A call whose wait at the gate is cancelled (its message dropped at shutdown, its ask's
    /// resume cut off) leaves the gate: its tenant is not counted busy for ever after.
    #[tokio::test]
    async fn a_cancelled_wait_at_the_gate_leaves_no_trace() {
        let gates = Gates::default();
        let throttled = AtomicU64::new(0);
        let (noisy, calm) = (gates.gate("noisy", 1), gates.gate("calm", 1));
        let calm_pass = enter(&calm, 0, &throttled).await;
        let held = enter(&noisy, 0, &throttled).await;
        let mut waiting = Box::pin(enter(&noisy, 0, &throttled));
        assert!(futures_poll(&mut waiting).is_none(), "the cap let it in");
        assert_eq!(noisy.in_flight.load(Ordering::Relaxed), 2);
        drop(waiting);
        assert_eq!(
            noisy.in_flight.load(Ordering::Relaxed),
            1,
            "the cancelled wait still counts"
        );
        drop((held, calm_pass));
        assert_eq!(noisy.in_flight.load(Ordering::Relaxed), 0);
        assert_eq!(gates.busy_tenants.load(Ordering::Relaxed), 0);
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
