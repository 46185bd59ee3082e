//! Leases: what keeps a shard from being served by two nodes when one is cut off. A node serves
//! its shards only while it holds a lease, and a lease is renewed only by a committed metadata
//! command (so only a node in touch with a majority renews). A renewal sent at local time `t`
//! and committed lets the node serve until `t + duration` on its own clock — measured from
//! the send, never from the answer, since the commit may happen any time in between. The
//! coordinator gives a shard of an owner that is gone (removed by an operator) to another node
//! only after [`LeaseConfig::reassign_wait_ms`] — the duration stretched by the largest clock
//! drift, plus a margin — counted from the later of when it first saw the owner gone and when
//! it started itself (a new coordinator cannot know what an earlier one saw). By then every
//! renewal committed before the removal has run out, and none is committed after it.
//!
//! Time is plain milliseconds of a monotonic clock the caller supplies, so the logic runs the
//! same in the node and in the deterministic simulation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Owners gone that a coordinator tracks at once; past it, an untracked owner counts as seen
/// gone now (later reassignment, never earlier).
pub const GONE_OWNERS_MAX: usize = 1024;

/// Lease timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// How long one committed renewal lets a node serve, from when it sent the renewal.
    pub duration_ms: u64,
    /// How often a node sends a renewal (well below `duration_ms`).
    pub renew_every_ms: u64,
    /// The largest clock-rate difference between two nodes, in parts per million.
    pub drift_ppm: u64,
    /// Added to the coordinator's wait.
    pub margin_ms: u64,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            duration_ms: 6_000,
            renew_every_ms: 1_500,
            drift_ppm: 1_000,
            margin_ms: 500,
        }
    }
}

impl LeaseConfig {
    /// Refuses timings that cannot keep a lease alive or that leave no room for drift.
    ///
    /// ```
    /// use tessera_host::sharding::lease::LeaseConfig;
    /// assert!(LeaseConfig::default().validate().is_ok());
    /// let bad = LeaseConfig { renew_every_ms: 7_000, ..LeaseConfig::default() };
    /// assert!(bad.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), String> {
        if self.duration_ms == 0 || self.renew_every_ms == 0 {
            return Err("lease duration and renewal interval must be positive".into());
        }
        if self.renew_every_ms * 2 > self.duration_ms {
            return Err(format!(
                "a lease of {} ms renewed every {} ms runs out between two renewals: renew at \
                 least twice per lease",
                self.duration_ms, self.renew_every_ms
            ));
        }
        if self.drift_ppm >= 100_000 {
            return Err("clock drift over 10% is not a clock".into());
        }
        Ok(())
    }

    /// How long a coordinator waits before giving a gone owner's shards to another node.
    ///
    /// ```
    /// use tessera_host::sharding::lease::LeaseConfig;
    /// assert_eq!(LeaseConfig::default().reassign_wait_ms(), 6_000 + 6 + 500);
    /// ```
    pub fn reassign_wait_ms(&self) -> u64 {
        let stretch = (self.duration_ms * self.drift_ppm).div_ceil(1_000_000);
        self.duration_ms + stretch + self.margin_ms
    }
}

/// The holder's side: one per node, read on every local delivery (one atomic load).
///
/// ```
/// use tessera_host::sharding::lease::{Lease, LeaseConfig};
/// let lease = Lease::new(LeaseConfig::default());
/// assert!(!lease.is_valid(0));
/// let renewal = lease.renewal_sent(1_000);
/// lease.renewal_committed(renewal);
/// assert!(lease.is_valid(6_999));
/// assert!(!lease.is_valid(7_000));
/// ```
#[derive(Debug)]
pub struct Lease {
    duration_ms: u64,
    /// Serving allowed while `now < valid_until`; 0 is invalid, `u64::MAX` always valid.
    valid_until: AtomicU64,
}

/// A renewal in flight: remembers when it was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renewal {
    sent_ms: u64,
}

impl Lease {
    /// A lease not yet renewed (invalid).
    pub fn new(config: LeaseConfig) -> Lease {
        Lease {
            duration_ms: config.duration_ms,
            valid_until: AtomicU64::new(0),
        }
    }

    /// A lease that never runs out: a single node, which nobody else can replace.
    pub fn always_valid() -> Lease {
        Lease {
            duration_ms: u64::MAX,
            valid_until: AtomicU64::new(u64::MAX),
        }
    }

    /// Notes a renewal sent at `now_ms`.
    pub fn renewal_sent(&self, now_ms: u64) -> Renewal {
        Renewal { sent_ms: now_ms }
    }

    /// The renewal committed: serve until its send time plus the duration (never shortened by
    /// an older renewal answered late).
    pub fn renewal_committed(&self, renewal: Renewal) {
        let until = renewal.sent_ms.saturating_add(self.duration_ms);
        self.valid_until.fetch_max(until, Ordering::AcqRel);
    }

    /// The cluster refused the renewal (this member is down or removed): stop serving now.
    pub fn revoke(&self) {
        if self.duration_ms != u64::MAX {
            self.valid_until.store(0, Ordering::Release);
        }
    }

    /// Whether this node may serve at `now_ms`.
    pub fn is_valid(&self, now_ms: u64) -> bool {
        now_ms < self.valid_until.load(Ordering::Acquire)
    }

    /// Until when it may serve, if it may at all.
    pub fn valid_until_ms(&self) -> Option<u64> {
        match self.valid_until.load(Ordering::Acquire) {
            0 => None,
            until => Some(until),
        }
    }
}

/// A node's [`Lease`] read against the process's monotonic clock: what the region checks before
/// serving and the node's renewal task updates.
///
/// ```
/// use tessera_host::sharding::lease::{LeaseConfig, NodeLease};
/// let held = NodeLease::new(LeaseConfig::default());
/// assert!(!held.is_valid_now());
/// held.lease().renewal_committed(held.lease().renewal_sent(held.now_ms()));
/// assert!(held.is_valid_now());
/// assert!(NodeLease::always_valid().is_valid_now());
/// ```
#[derive(Debug)]
pub struct NodeLease {
    lease: Lease,
    origin: std::time::Instant,
}

impl NodeLease {
    /// A lease not yet renewed.
    pub fn new(config: LeaseConfig) -> NodeLease {
        NodeLease {
            lease: Lease::new(config),
            origin: std::time::Instant::now(),
        }
    }

    /// A lease that never runs out (a single node).
    pub fn always_valid() -> NodeLease {
        NodeLease {
            lease: Lease::always_valid(),
            origin: std::time::Instant::now(),
        }
    }

    /// Milliseconds on this lease's clock.
    pub fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// Whether this node may serve now (no clock read for a lease that never runs out).
    pub fn is_valid_now(&self) -> bool {
        self.lease.valid_until.load(Ordering::Relaxed) == u64::MAX
            || self.lease.is_valid(self.now_ms())
    }

    /// The lease itself.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }
}

/// The coordinator's side: when may a gone owner's shards go to another node?
///
/// ```
/// use tessera_host::sharding::lease::{LeaseConfig, ReassignGuard};
/// let config = LeaseConfig::default();
/// let mut guard = ReassignGuard::new(config, 0);
/// guard.owner_gone("node-3", 10_000);
/// assert!(!guard.may_reassign("node-3", 10_000 + config.reassign_wait_ms() - 1));
/// assert!(guard.may_reassign("node-3", 10_000 + config.reassign_wait_ms()));
/// ```
#[derive(Debug)]
pub struct ReassignGuard {
    config: LeaseConfig,
    started_ms: u64,
    gone: HashMap<String, u64>,
}

impl ReassignGuard {
    /// A guard for a coordinator started at `started_ms`.
    pub fn new(config: LeaseConfig, started_ms: u64) -> ReassignGuard {
        ReassignGuard {
            config,
            started_ms,
            gone: HashMap::new(),
        }
    }

    /// Notes that `node` is gone, at `now_ms` (the first sighting counts).
    pub fn owner_gone(&mut self, node: &str, now_ms: u64) {
        if self.gone.contains_key(node) || self.gone.len() >= GONE_OWNERS_MAX {
            return;
        }
        self.gone.insert(node.to_string(), now_ms);
    }

    /// Forgets `node` (it joined again).
    pub fn owner_back(&mut self, node: &str) {
        self.gone.remove(node);
    }

    /// How long until `node`'s shards may be reassigned; `None` if not known gone.
    pub fn wait_left_ms(&self, node: &str, now_ms: u64) -> Option<u64> {
        let seen = *self.gone.get(node)?;
        let from = seen.max(self.started_ms);
        let ready = from.saturating_add(self.config.reassign_wait_ms());
        Some(ready.saturating_sub(now_ms))
    }

    /// Whether `node`'s lease must have run out by `now_ms`.
    pub fn may_reassign(&self, node: &str, now_ms: u64) -> bool {
        self.wait_left_ms(node, now_ms) == Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_answer_to_an_old_renewal_does_not_shorten_the_lease() {
        let lease = Lease::new(LeaseConfig::default());
        let (old, new) = (lease.renewal_sent(0), lease.renewal_sent(1_500));
        lease.renewal_committed(new);
        lease.renewal_committed(old);
        assert_eq!(lease.valid_until_ms(), Some(7_500));
        lease.revoke();
        assert!(!lease.is_valid(0));
    }

    #[test]
    fn a_new_coordinator_waits_from_its_own_start() {
        let config = LeaseConfig::default();
        let mut guard = ReassignGuard::new(config, 50_000);
        guard.owner_gone("a", 1_000);
        assert_eq!(
            guard.wait_left_ms("a", 50_000),
            Some(config.reassign_wait_ms())
        );
        assert_eq!(guard.wait_left_ms("b", 50_000), None);
        guard.owner_back("a");
        assert!(!guard.may_reassign("a", u64::MAX));
    }

    #[test]
    fn a_single_node_lease_never_runs_out() {
        let lease = Lease::always_valid();
        lease.revoke();
        assert!(lease.is_valid(u64::MAX - 1));
    }
}
