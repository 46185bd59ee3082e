//! Per-tenant token buckets for the message-rate quota.
//!
//! A bucket is kept as one number, the time its next token is due (the generic cell rate
//! algorithm, equivalent to a token bucket of `burst` tokens refilled at `per_second`), so a
//! message takes its token with one compare-and-swap, with no lock and no floating point. Time
//! is read from the kernel's coarse monotonic clock (Linux `CLOCK_MONOTONIC_COARSE`, a few
//! nanoseconds per read where the precise clock takes tens on a VM): its resolution of a few
//! milliseconds can let at most that long's refill (`per_second` × resolution) through early,
//! on top of the burst.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// One tenant's token bucket. An [`EntityRef`](crate::node::EntityRef) holds it, so its tells take a
/// token without looking the tenant up.
pub(crate) struct TenantBucket {
    /// When the bucket's next token is due, in nanoseconds of [`coarse_now_ns`]: a bucket
    /// whose due time is now or past is full; each token taken moves it one refill interval
    /// on, and a token is refused while it is more than `burst - 1` intervals ahead.
    next_due_ns: AtomicU64,
    /// Set when the tenant's bucket is reset (its quotas changed): holders look it up again.
    retired: AtomicBool,
    /// The rate it refills at and the burst it holds, as the tenant's quota said when it was
    /// made (a quota change resets the bucket), for [`RateLimiter::try_take_known`].
    per_second: u32,
    burst: u32,
    /// The generation of the tenant records at which that quota was last confirmed.
    confirmed_at: AtomicU64,
}

impl TenantBucket {
    fn full(per_second: u32, burst: u32, generation: u64) -> Self {
        TenantBucket {
            next_due_ns: AtomicU64::new(0),
            retired: AtomicBool::new(false),
            per_second,
            burst,
            confirmed_at: AtomicU64::new(generation),
        }
    }

    /// Takes one token (the bucket refilled at `per_second`, holding at most `burst`); false
    /// when it is empty.
    pub(crate) fn try_take(&self, per_second: u32, burst: u32) -> bool {
        self.take_at(coarse_now_ns(), per_second, burst)
    }

    /// [`try_take`](Self::try_take) at `now_ns`.
    fn take_at(&self, now_ns: u64, per_second: u32, burst: u32) -> bool {
        let interval = NANOS_PER_SECOND / u64::from(per_second.max(1));
        let ahead_max = interval.saturating_mul(u64::from(burst.max(1)) - 1);
        let mut due = self.next_due_ns.load(Ordering::Relaxed);
        loop {
            let from = due.max(now_ns);
            if from - now_ns > ahead_max {
                return false;
            }
            match self.next_due_ns.compare_exchange_weak(
                due,
                from.saturating_add(interval),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(moved) => due = moved,
            }
        }
    }

    /// Whether the bucket was reset since it was looked up.
    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }
}

/// Nanoseconds on the kernel's coarse monotonic clock (resolution: the kernel's tick, a few
/// milliseconds).
#[cfg(target_os = "linux")]
fn coarse_now_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec; the clock id is one Linux always has.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) };
    debug_assert_eq!(
        read, 0,
        "CLOCK_MONOTONIC_COARSE is always readable on Linux"
    );
    (now.tv_sec as u64)
        .saturating_mul(NANOS_PER_SECOND)
        .saturating_add(now.tv_nsec as u64)
}

/// Nanoseconds since the first read, elsewhere (no coarse clock to read).
#[cfg(not(target_os = "linux"))]
fn coarse_now_ns() -> u64 {
    static START: std::sync::LazyLock<std::time::Instant> =
        std::sync::LazyLock::new(std::time::Instant::now);
    START.elapsed().as_nanos() as u64
}

/// Token buckets keyed by tenant.
///
/// ```
/// use tessera_host::node::RateLimiter;
/// let limiter = RateLimiter::default();
/// assert!(limiter.try_take("acme", 1, 2));
/// assert!(limiter.try_take("acme", 1, 2));
/// assert!(!limiter.try_take("acme", 1, 2));
/// ```
#[derive(Default)]
pub struct RateLimiter {
    /// Read on every client message, written when a tenant first sends or its quotas change:
    /// senders on several threads look buckets up side by side.
    buckets: RwLock<foldhash::HashMap<String, Arc<TenantBucket>>>,
}

impl RateLimiter {
    /// Takes one token from `tenant`'s bucket (refilled at `per_second`, holding at most
    /// `burst`); false when it is empty. A bucket made with another rate or burst is made
    /// again, full, as a quota change resets it.
    pub fn try_take(&self, tenant: &str, per_second: u32, burst: u32) -> bool {
        let now = coarse_now_ns();
        {
            let buckets = self.buckets.read().unwrap_or_else(|p| p.into_inner());
            if let Some(bucket) = buckets.get(tenant) {
                return bucket.take_at(now, per_second, burst);
            }
        }
        self.bucket(tenant, per_second, burst, 0)
            .take_at(now, per_second, burst)
    }

    /// Takes one token from `tenant`'s bucket at the quota the bucket was made with, if that
    /// quota was confirmed at the tenant records' `generation`: `None` when it was not (or
    /// the tenant has no bucket yet) — read the quota and use
    /// [`try_take_confirmed`](Self::try_take_confirmed). So a message by address reads the
    /// tenant's quota only after the tenant records changed.
    pub(crate) fn try_take_known(&self, tenant: &str, generation: u64) -> Option<bool> {
        let buckets = self.buckets.read().unwrap_or_else(|p| p.into_inner());
        let bucket = buckets.get(tenant)?;
        if bucket.confirmed_at.load(Ordering::Acquire) != generation {
            return None;
        }
        Some(bucket.take_at(coarse_now_ns(), bucket.per_second, bucket.burst))
    }

    /// Takes one token from `tenant`'s bucket at the quota `per_second`/`burst`, read at the
    /// tenant records' `generation` (read before the quota): a bucket made with another quota
    /// is replaced by a full one (as a quota change resets it), and the quota is noted as
    /// confirmed at `generation`.
    pub(crate) fn try_take_confirmed(
        &self,
        tenant: &str,
        per_second: u32,
        burst: u32,
        generation: u64,
    ) -> bool {
        let bucket = self.bucket(tenant, per_second, burst, generation);
        bucket.confirmed_at.store(generation, Ordering::Release);
        bucket.try_take(per_second, burst)
    }

    /// `tenant`'s bucket, made full if it is new or was made with another quota, to take
    /// tokens from without a lookup.
    pub(crate) fn bucket(
        &self,
        tenant: &str,
        per_second: u32,
        burst: u32,
        generation: u64,
    ) -> Arc<TenantBucket> {
        let mut buckets = self.buckets.write().unwrap_or_else(|p| p.into_inner());
        let bucket = buckets
            .entry(tenant.to_string())
            .or_insert_with(|| Arc::new(TenantBucket::full(per_second, burst, generation)));
        if (bucket.per_second, bucket.burst) != (per_second, burst) {
            bucket.retired.store(true, Ordering::Release);
            *bucket = Arc::new(TenantBucket::full(per_second, burst, generation));
        }
        bucket.clone()
    }

    /// Forgets a tenant's bucket (after its quotas change).
    pub fn reset(&self, tenant: &str) {
        let removed = self
            .buckets
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tenant);
        if let Some(bucket) = removed {
            bucket.retired.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = NANOS_PER_SECOND;

    #[test]
    fn a_full_bucket_lets_its_burst_through_then_refills_at_its_rate() {
        let bucket = TenantBucket::full(2, 3, 0);
        let start = 10 * SECOND;
        for taken in 0..3 {
            assert!(bucket.take_at(start, 2, 3), "token {taken} of the burst");
        }
        assert!(!bucket.take_at(start, 2, 3), "past the burst");
        assert!(
            !bucket.take_at(start + SECOND / 2 - 1, 2, 3),
            "a token before its refill interval"
        );
        assert!(
            bucket.take_at(start + SECOND / 2, 2, 3),
            "one interval later"
        );
        assert!(!bucket.take_at(start + SECOND / 2, 2, 3));
        // Idle for long: full again, never more than the burst.
        let later = start + 100 * SECOND;
        let taken = (0..10).filter(|_| bucket.take_at(later, 2, 3)).count();
        assert_eq!(taken, 3, "an idle bucket holds its burst, no more");
    }

    #[test]
    fn senders_on_several_threads_share_one_burst() {
        let bucket = TenantBucket::full(1, 100, 0);
        let now = 5 * SECOND;
        let taken = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..10_000 {
                        if bucket.take_at(now, 1, 1_000) {
                            taken.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(taken.load(Ordering::Relaxed), 1_000);
    }

    #[test]
    fn the_coarse_clock_moves_forward() {
        let first = coarse_now_ns();
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert!(coarse_now_ns() > first);
    }

    /// A message by address takes its token at the quota its bucket was made with only while
    /// the tenant records have not changed since that quota was read; after a change it is
    /// read again, and a new quota gets a new, full bucket.
    #[test]
    fn a_known_quota_is_used_until_the_tenant_records_change() {
        let limiter = RateLimiter::default();
        assert_eq!(limiter.try_take_known("acme", 7), None, "no bucket yet");
        assert!(limiter.try_take_confirmed("acme", 1, 2, 7));
        assert_eq!(
            limiter.try_take_known("acme", 7),
            Some(true),
            "the burst's second"
        );
        assert_eq!(
            limiter.try_take_known("acme", 7),
            Some(false),
            "past the burst"
        );
        assert_eq!(
            limiter.try_take_known("acme", 8),
            None,
            "the records changed: the quota must be read again"
        );
        // The same quota at the new generation: the same (empty) bucket, confirmed again.
        assert!(!limiter.try_take_confirmed("acme", 1, 2, 8));
        assert_eq!(limiter.try_take_known("acme", 8), Some(false));
        // A raised quota: a new bucket, full.
        let old = limiter.bucket("acme", 1, 2, 8);
        assert!(limiter.try_take_confirmed("acme", 1, 5, 9));
        assert!(
            old.is_retired(),
            "a holder of the old bucket looks it up again"
        );
        let taken = (0..10)
            .filter(|_| limiter.try_take_known("acme", 9) == Some(true))
            .count();
        assert_eq!(taken, 4, "the rest of the new burst of 5");
    }
}
