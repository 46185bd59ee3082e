//! Per-tenant token buckets for the message-rate quota.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One tenant's token bucket. An [`EntityRef`](super::EntityRef) holds it, so its tells take a
/// token without looking the tenant up.
pub(crate) struct TenantBucket {
    state: Mutex<BucketState>,
    /// Set when the tenant's bucket is reset (its quotas changed): holders look it up again.
    retired: AtomicBool,
}

struct BucketState {
    tokens: f64,
    refilled: Instant,
}

impl TenantBucket {
    fn full(burst: u32, now: Instant) -> Self {
        TenantBucket {
            state: Mutex::new(BucketState {
                tokens: f64::from(burst),
                refilled: now,
            }),
            retired: AtomicBool::new(false),
        }
    }

    /// Takes one token (the bucket refilled at `per_second`, holding at most `burst`); false
    /// when it is empty.
    pub(crate) fn try_take(&self, per_second: u32, burst: u32) -> bool {
        self.take_at(Instant::now(), per_second, burst)
    }

    fn take_at(&self, now: Instant, per_second: u32, burst: u32) -> bool {
        let mut bucket = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed = now.saturating_duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * f64::from(per_second)).min(f64::from(burst));
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Whether the bucket was reset since it was looked up.
    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }
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
    buckets: Mutex<foldhash::HashMap<String, Arc<TenantBucket>>>,
}

impl RateLimiter {
    /// Takes one token from `tenant`'s bucket (refilled at `per_second`, holding at most
    /// `burst`); false when it is empty.
    pub fn try_take(&self, tenant: &str, per_second: u32, burst: u32) -> bool {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        // One lookup for a known tenant, the common case; a second only after adding one.
        match buckets.get(tenant) {
            Some(bucket) => bucket.take_at(now, per_second, burst),
            None => buckets
                .entry(tenant.to_string())
                .or_insert_with(|| Arc::new(TenantBucket::full(burst, now)))
                .take_at(now, per_second, burst),
        }
    }

    /// `tenant`'s bucket (full at `burst` if new), to take tokens from without a lookup.
    pub(crate) fn bucket(&self, tenant: &str, burst: u32) -> Arc<TenantBucket> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        buckets
            .entry(tenant.to_string())
            .or_insert_with(|| Arc::new(TenantBucket::full(burst, Instant::now())))
            .clone()
    }

    /// Forgets a tenant's bucket (after its quotas change).
    pub fn reset(&self, tenant: &str) {
        let removed = self
            .buckets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tenant);
        if let Some(bucket) = removed {
            bucket.retired.store(true, Ordering::Release);
        }
    }
}
