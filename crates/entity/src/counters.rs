//! Per-type counters kept with atomics on the message path and read when metrics are
//! rendered: messages, failures by kind, activations by reason, passivations, commit latency.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tessera_contract::{ErrorKind, error::ERROR_KIND_COUNT};
use tessera_runtime::Activation;

/// Activation reasons, in the order of [`TypeCounters::activations`].
pub const ACTIVATION_REASONS: [&str; 4] = ["first_start", "restarted", "upgraded", "rolled_back"];

/// Upper bounds (microseconds) of the commit-latency buckets.
pub const COMMIT_BUCKETS_US: [u64; 10] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000, 1_000_000,
];

/// Stripes of a [`StripedCounter`]: enough that the worker threads of a small node rarely share
/// one, few enough that reading the sum stays cheap.
pub const COUNTER_STRIPES: usize = 8;

/// One counter cache line.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Stripe(AtomicU64);

/// A counter bumped on every message from every worker thread: each thread adds to its own
/// cache line, so counting does not make the threads contend; reading sums the stripes.
///
/// ```
/// use tessera_entity::StripedCounter;
/// let counter = StripedCounter::default();
/// counter.add(2);
/// counter.add(3);
/// assert_eq!(counter.sum(), 5);
/// ```
#[derive(Debug, Default)]
pub struct StripedCounter {
    stripes: [Stripe; COUNTER_STRIPES],
}

thread_local! {
    /// This thread's stripe, assigned round-robin on first use.
    static STRIPE: usize = {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        (NEXT.fetch_add(1, Ordering::Relaxed) as usize) % COUNTER_STRIPES
    };
}

impl StripedCounter {
    /// Adds `value` on this thread's stripe.
    pub fn add(&self, value: u64) {
        let stripe = STRIPE.with(|stripe| *stripe);
        self.stripes[stripe].0.fetch_add(value, Ordering::Relaxed);
    }

    /// The total over every stripe.
    pub fn sum(&self) -> u64 {
        self.stripes
            .iter()
            .map(|stripe| stripe.0.load(Ordering::Relaxed))
            .sum()
    }
}

/// Counters of one `(tenant, type)`.
#[derive(Debug, Default)]
pub struct TypeCounters {
    /// Messages handled.
    pub messages: StripedCounter,
    /// Failed messages by [`ErrorKind::index`].
    pub failures: [AtomicU64; ERROR_KIND_COUNT],
    /// Activations by [`ACTIVATION_REASONS`] index.
    pub activations: [AtomicU64; ACTIVATION_REASONS.len()],
    /// Passivations.
    pub passivations: AtomicU64,
    /// Commits by [`COMMIT_BUCKETS_US`] bucket (cumulative counts are computed when read).
    pub commit_buckets: [AtomicU64; COMMIT_BUCKETS_US.len() + 1],
    /// Sum of commit latencies in microseconds.
    pub commit_micros_sum: AtomicU64,
}

impl TypeCounters {
    #[cold]
    pub(crate) fn failed(&self, kind: ErrorKind) {
        self.failures[kind.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Failed messages of `kind`.
    pub fn failures_of(&self, kind: ErrorKind) -> u64 {
        self.failures[kind.index()].load(Ordering::Relaxed)
    }

    pub(crate) fn activated(&self, reason: Activation) {
        let index = match reason {
            Activation::FirstStart => 0,
            Activation::Restarted => 1,
            Activation::Upgraded(_) => 2,
            Activation::RolledBack(_) => 3,
        };
        self.activations[index].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn committed(&self, latency: Duration) {
        let micros = latency.as_micros() as u64;
        let bucket = COMMIT_BUCKETS_US
            .iter()
            .position(|bound| micros <= *bound)
            .unwrap_or(COMMIT_BUCKETS_US.len());
        self.commit_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.commit_micros_sum.fetch_add(micros, Ordering::Relaxed);
    }
}
