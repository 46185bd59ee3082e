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
//! other tenant has a call running or waiting, a tenant may run past it, up to one call per
//! core (idle cores are not kept from anyone; more calls than cores would only take turns on
//! the threads, in front of whatever another tenant's first request needs them for); the
//! budget always holds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

mod call_pass;

pub(crate) use call_pass::{CallPass, Entered};

/// One tenant's gate.
pub(crate) struct TenantGate {
    running: Arc<Semaphore>,
    cap: usize,
    /// Calls running past the cap while the tenant is alone, at most `lone_max`: one per core.
    /// Without this bound a lone tenant's flood started a call on every flooded entity at
    /// once, each holding an instance of the pool and taking turns with the rest on the I/O
    /// threads, and another tenant's first request, which is what ends the tenant's being
    /// alone, waited behind all of them to be read (seconds, issue 33). A count, not a
    /// semaphore, so a lone tenant's call takes no lock.
    lone_running: AtomicUsize,
    lone_max: usize,
    /// Rung once per lone call that ends while calls wait for a place (and at shutdown).
    lone_freed: Notify,
    /// Calls waiting for a lone place now. An ending call rings `lone_freed` whenever one
    /// waits: ringing only when the count was at `lone_max` lost a waiter when two calls ended
    /// back to back (the second end found the count below the limit, the first waiter not yet
    /// in), and that waiter then waited for an end at the limit that might never come.
    lone_waiting: AtomicUsize,
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
    /// Calls a lone tenant may run past its cap: the node's cores, at least
    /// [`LONE_RUNNING_MIN`].
    lone_running_max: usize,
}

/// The fewest calls a lone tenant may run at once, on a node of fewer cores: so that one long
/// call does not hold up a lone tenant's others.
const LONE_RUNNING_MIN: usize = 2;

impl Default for Gates {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Gates {
            tenants: Mutex::default(),
            opened: std::sync::atomic::AtomicBool::new(false),
            epoch: tokio::time::Instant::now(),
            busy_tenants: Arc::default(),
            contended_until_us: Arc::default(),
            lone_running_max: cores.max(LONE_RUNNING_MIN),
        }
    }
}

/// Permission to run one guest call, given back to its gate after the call
/// ([`TenantGate::release`]; a [`CallPass`] does so for its calls).
pub(crate) struct Pass {
    /// `None` when the call ran past the cap because no other tenant was busy.
    permit: Option<OwnedSemaphorePermit>,
    /// Whether the call runs past the cap, the tenant alone: counted in `lone_running`.
    lone: bool,
    /// When the call started, if the tenant has a CPU budget to account it against.
    started: Option<Instant>,
}

impl Pass {
    /// A pass holding nothing but its call's arrival: no slot of the cap, no time to account.
    fn bare() -> Pass {
        Pass {
            permit: None,
            lone: false,
            started: None,
        }
    }

    /// A pass holding nothing but its arrival and its place among a lone tenant's calls.
    fn lone() -> Pass {
        Pass {
            lone: true,
            ..Pass::bare()
        }
    }

    fn is_bare(&self) -> bool {
        self.permit.is_none() && !self.lone && self.started.is_none()
    }

    fn is_lone(&self) -> bool {
        self.permit.is_none() && self.lone && self.started.is_none()
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
                    lone_running: AtomicUsize::new(0),
                    lone_max: self.lone_running_max,
                    lone_freed: Notify::new(),
                    lone_waiting: AtomicUsize::new(0),
                    used_us: AtomicU64::new(0),
                    window_start_us: AtomicU64::new(0),
                    epoch: self.epoch,
                    in_flight: AtomicU64::new(0),
                    messages: Mutex::new((f64::MAX, tokio::time::Instant::now())),
                    busy_tenants: self.busy_tenants.clone(),
                    contended_until_us: self.contended_until_us.clone(),
                });
                if self.opened.load(Ordering::Relaxed) {
                    gate.close();
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
            gate.close();
        }
    }
}

impl TenantGate {
    /// Lets every waiting and future call through (shutdown).
    fn close(&self) {
        self.running.close();
        self.lone_freed.notify_waiters();
    }

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
            let (permit, lone) = match self.admit(cpu_ms_per_second) {
                Admission::Now(permit) => (Some(permit), false),
                Admission::Alone => (None, true),
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
                    (self.running.clone().acquire_owned().await.ok(), false)
                }
                Admission::AtLoneCap => {
                    if !waited {
                        waited = true;
                        throttled.fetch_add(1, Ordering::Relaxed);
                    }
                    // Registered before the count is read again, so no end is missed.
                    let freed = self.lone_freed.notified();
                    tokio::pin!(freed);
                    freed.as_mut().enable();
                    if self.running.is_closed() {
                        // Shutdown (`open_all`): the call goes on unthrottled.
                        (None, false)
                    } else {
                        // Counted before the count is read again (both sequentially
                        // consistent, as in `release`): either this reads the place an ending
                        // call freed, or that call sees this one waiting and rings.
                        let _waiting = LoneWaiter::new(&self.lone_waiting);
                        if self.lone_running.load(Ordering::SeqCst) >= self.lone_max {
                            freed.await;
                        }
                        continue;
                    }
                }
            };
            arrival.let_in();
            return Self::pass(permit, lone, cpu_ms_per_second);
        }
    }

    /// [`enter`](Self::enter) if the tenant may run one more guest call now; `None`, with
    /// nothing changed or counted, if it would have to wait.
    pub(crate) fn try_enter(&self, cpu_ms_per_second: u64) -> Option<Pass> {
        let arrival = Arrival::new(self);
        let (permit, lone) = match self.admit(cpu_ms_per_second) {
            Admission::Now(permit) => (Some(permit), false),
            Admission::Alone => (None, true),
            Admission::BudgetSpent { .. } | Admission::AtCap | Admission::AtLoneCap => {
                return None;
            }
        };
        arrival.let_in();
        Some(Self::pass(permit, lone, cpu_ms_per_second))
    }

    /// Gives back the pass of a call that finished (or paused to wait on an ask): the time it
    /// ran is accounted against the budget, and its slot of the cap is freed.
    pub(crate) fn release(&self, pass: Pass) {
        let Pass {
            permit,
            lone,
            started,
        } = pass;
        if let Some(started) = started {
            let used = started.elapsed().as_micros() as u64;
            self.used_us.fetch_add(used, Ordering::Relaxed);
        }
        drop(permit);
        if lone {
            let running = self.lone_running.fetch_sub(1, Ordering::SeqCst);
            debug_assert!(running > 0, "a lone call ends once");
            if self.lone_waiting.load(Ordering::SeqCst) > 0 {
                self.lone_freed.notify_one();
            }
        }
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
            return if self.take_lone_place() {
                Admission::Alone
            } else {
                Admission::AtLoneCap
            };
        }
        match self.running.clone().try_acquire_owned() {
            Ok(permit) => Admission::Now(permit),
            Err(_) => Admission::AtCap,
        }
    }

    /// Takes one of a lone tenant's places to run past its cap, if one is free.
    fn take_lone_place(&self) -> bool {
        let mut running = self.lone_running.load(Ordering::Acquire);
        loop {
            if running >= self.lone_max {
                return false;
            }
            match self.lone_running.compare_exchange_weak(
                running,
                running + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(now) => running = now,
            }
        }
    }

    fn pass(permit: Option<OwnedSemaphorePermit>, lone: bool, cpu_ms_per_second: u64) -> Pass {
        Pass {
            permit,
            lone,
            started: (cpu_ms_per_second > 0).then(Instant::now),
        }
    }
}

/// A call counted among those waiting for a lone place while it exists (a wait cancelled
/// half-way is uncounted too).
struct LoneWaiter<'a>(&'a AtomicUsize);

impl<'a> LoneWaiter<'a> {
    fn new(waiting: &'a AtomicUsize) -> Self {
        waiting.fetch_add(1, Ordering::SeqCst);
        LoneWaiter(waiting)
    }
}

impl Drop for LoneWaiter<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What the gate says to a call that has arrived.
enum Admission {
    /// It runs now, holding a slot of the cap.
    Now(OwnedSemaphorePermit),
    /// It runs now past the cap, the tenant alone, in one of its places for that.
    Alone,
    /// The tenant is alone and runs a call on every core: wait for one to end.
    AtLoneCap,
    /// The tenant's CPU budget for this window is spent: wait `wait` for the next one.
    BudgetSpent { wait: Duration },
    /// The tenant is at its cap while others are busy: wait for a slot.
    AtCap,
}

#[cfg(test)]
mod tests;
