//! The gates' rules: a lone tenant is one busy tenant, the cap on running calls while others
//! are busy, the CPU budget per one-second window, the grace after an overlap, and waits that
//! are cancelled or refused leaving no trace.

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
                    most_seen
                        .fetch_max(gate.busy_tenants.load(Ordering::Acquire), Ordering::Relaxed);
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

/// Alone, a tenant runs past its cap only up to one call per core: more would take turns on
/// the threads in front of the request of another tenant that arrives, and hold an instance
/// each meanwhile. A call that ends lets the next in.
#[test]
fn a_lone_tenant_runs_at_most_one_call_per_core() {
    let gates = Gates::default();
    let gate = gates.gate("alone", 1);
    let running: Vec<_> = (0..gates.lone_running_max)
        .map(|_| try_enter(&gate).expect("a lone tenant runs past its cap"))
        .collect();
    assert!(running.iter().all(|held| !held.has_slot()), "alone, no cap");
    assert!(
        try_enter(&gate).is_none(),
        "a lone tenant ran more calls than cores"
    );
    drop(running);
    assert!(try_enter(&gate).is_some(), "an ended call's place was kept");
}

/// Calls waiting at a lone tenant's limit are each let in as calls end, however the ends
/// fall: two calls ending back to back, before the first waiter let in has taken its place,
/// must wake two waiters, not one (the second would wait for an end at the limit that may
/// never come).
#[test]
fn every_waiter_at_the_lone_limit_is_let_in_as_calls_end() {
    let gates = Gates::default();
    let gate = gates.gate("alone", 1);
    let limit = gate.lone_max;
    let running: Vec<Held<'_>> = (0..limit)
        .map(|_| try_enter(&gate).expect("a place below the lone limit"))
        .collect();
    let throttled = AtomicU64::new(0);
    let mut first = Box::pin(enter(&gate, 0, &throttled));
    let mut second = Box::pin(enter(&gate, 0, &throttled));
    assert!(futures_poll(&mut first).is_none(), "at the limit: waits");
    assert!(futures_poll(&mut second).is_none(), "at the limit: waits");
    // Every running call ends before either waiter runs again.
    drop(running);
    let first = futures_poll(&mut first).expect("the first waiter is let in");
    let second = futures_poll(&mut second).expect("the second waiter is let in");
    drop((first, second));
}
