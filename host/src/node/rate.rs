//! Per-tenant token buckets for the message-rate quota.

use std::sync::Mutex;
use std::time::Instant;

struct Bucket {
    tokens: f64,
    refilled: Instant,
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
    buckets: Mutex<foldhash::HashMap<String, Bucket>>,
}

impl RateLimiter {
    /// Takes one token from `tenant`'s bucket (refilled at `per_second`, holding at most
    /// `burst`); false when it is empty.
    pub fn try_take(&self, tenant: &str, per_second: u32, burst: u32) -> bool {
        let now = Instant::now();
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // One lookup for a known tenant, the common case; a second only after adding one.
        let bucket = match buckets.get_mut(tenant) {
            Some(bucket) => bucket,
            None => {
                let full = Bucket {
                    tokens: f64::from(burst),
                    refilled: now,
                };
                buckets.entry(tenant.to_string()).or_insert(full)
            }
        };
        let elapsed = now.duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * f64::from(per_second)).min(f64::from(burst));
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Forgets a tenant's bucket (after its quotas change).
    pub fn reset(&self, tenant: &str) {
        self.buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(tenant);
    }
}
