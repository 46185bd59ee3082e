//! Leases: what keeps a shard from being served by two nodes when one of them is cut off. A node
//! serves the shards it owns only while its [`Lease`] is valid, and only a renewal committed by
//! the metadata log extends it — so only a node in touch with a majority renews. A renewal sent
//! at local time `t` and committed lets the node serve until `t + duration` on its own clock:
//! measured from the send, never from the answer, because the commit may happen any time in
//! between and the answer may arrive any time after. The log refuses renewals from a member it
//! has marked down or removed, so every renewal of a removed member was sent before its removal
//! was committed. The coordinator's [`ReassignGuard`] therefore lets a removed owner's shards go
//! to another node only after [`LeaseConfig::reassign_wait_ms`] (the duration stretched by the
//! largest clock-rate difference, plus a margin), counted on the coordinator's clock from the
//! later of its own start and the moment it first saw the owner gone: by then the old owner's
//! clock has passed the end of every lease it could still hold. Times are plain `u64`
//! milliseconds of a monotonic clock the caller supplies, so the same code runs in a node and in
//! a deterministic simulation.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Parts per million in one: the unit of [`LeaseConfig::drift_ppm`].
const PARTS_PER_MILLION: u64 = 1_000_000;

/// The largest clock-rate difference [`LeaseConfig::validate`] accepts (10%): clocks that
/// disagree more are broken, and a wait stretched further would only hide it.
pub const DRIFT_PPM_MAX: u64 = 100_000;

/// Gone owners one [`ReassignGuard`] remembers at once. Bounds the coordinator's memory against
/// a runaway removal loop. An owner that finds the guard full is not tracked, and an untracked
/// owner is never ready to be reassigned: safe, and live again once
/// [`ReassignGuard::owner_back`] frees a slot.
pub const GONE_OWNERS_MAX: usize = 1024;

/// Source of [`Lease`] identities, so a ticket is only ever honoured by the lease that issued it.
static NEXT_LEASE_ID: AtomicU64 = AtomicU64::new(1);

/// Lease timing, shared by every node and the coordinator.
///
/// ```
/// use tessera_sharding::lease::LeaseConfig;
/// let config = LeaseConfig::default();
/// assert!(config.validate().is_ok());
/// assert_eq!(config.reassign_wait_ms(), 6_000 + 6 + 500);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// How long one committed renewal lets a node serve, measured from when the node sent that
    /// renewal, on its own clock.
    pub duration_ms: u64,
    /// How often a node sends a renewal; below `duration_ms`, so a lease can stay valid.
    pub renew_every_ms: u64,
    /// The largest clock-rate difference between any two nodes, in parts per million; the
    /// coordinator's wait is stretched by it.
    pub drift_ppm: u64,
    /// Added to the coordinator's wait, for clock granularity and second-order drift.
    pub margin_ms: u64,
}

impl Default for LeaseConfig {
    /// Six-second leases renewed every 1.5 s, 0.1% drift, half a second of margin.
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
    /// Refuses timings that cannot keep a lease alive, drift no real clock has, or a wait that
    /// does not fit in a `u64`.
    ///
    /// ```
    /// use tessera_sharding::lease::LeaseConfig;
    /// let renews_too_late = LeaseConfig { renew_every_ms: 6_000, ..LeaseConfig::default() };
    /// assert!(renews_too_late.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), String> {
        if self.duration_ms == 0 {
            return Err("lease duration_ms must be positive".to_string());
        }
        if self.renew_every_ms == 0 || self.renew_every_ms >= self.duration_ms {
            return Err(format!(
                "renew_every_ms ({}) must be positive and below duration_ms ({})",
                self.renew_every_ms, self.duration_ms
            ));
        }
        if self.drift_ppm > DRIFT_PPM_MAX {
            return Err(format!(
                "drift_ppm ({}) above {DRIFT_PPM_MAX}: clocks that far apart are broken",
                self.drift_ppm
            ));
        }
        if self.checked_reassign_wait_ms().is_none() {
            return Err("duration_ms stretched by drift_ppm plus margin_ms overflows u64".into());
        }
        Ok(())
    }

    /// How long a coordinator waits, on its own clock, before a gone owner's shards may go to
    /// another node: `duration_ms` stretched by `drift_ppm` (rounded up), plus `margin_ms`.
    /// Saturates at `u64::MAX` for a configuration [`LeaseConfig::validate`] refuses.
    ///
    /// ```
    /// use tessera_sharding::lease::LeaseConfig;
    /// let config = LeaseConfig { duration_ms: 1_000, drift_ppm: 1, margin_ms: 0, ..LeaseConfig::default() };
    /// assert_eq!(config.reassign_wait_ms(), 1_001);
    /// ```
    pub fn reassign_wait_ms(&self) -> u64 {
        self.checked_reassign_wait_ms().unwrap_or(u64::MAX)
    }

    fn checked_reassign_wait_ms(&self) -> Option<u64> {
        let stretched = u128::from(self.duration_ms)
            * u128::from(PARTS_PER_MILLION + self.drift_ppm.min(PARTS_PER_MILLION));
        let stretched_ms = u64::try_from(stretched.div_ceil(u128::from(PARTS_PER_MILLION))).ok()?;
        stretched_ms.checked_add(self.margin_ms)
    }
}

/// A renewal on its way to the log: remembers when it was sent, and for which lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renewal {
    sent_ms: u64,
    lease_id: u64,
    revocations: u64,
}

/// The holder's side, one per node. Read on every delivery: [`Lease::is_valid`] is one atomic
/// load and a compare. Writers (renewal answers, refusals) are rare and take a small lock so
/// that a refusal and a late answer cannot interleave.
///
/// ```
/// use tessera_sharding::lease::{Lease, LeaseConfig};
/// let lease = Lease::new(LeaseConfig::default());
/// assert!(!lease.is_valid(0));
/// let renewal = lease.renewal_sent(1_000);
/// // ... the log commits it; the answer arrives much later ...
/// lease.renewal_committed(renewal);
/// assert!(lease.is_valid(6_999));
/// assert!(!lease.is_valid(7_000));
/// ```
#[derive(Debug)]
pub struct Lease {
    duration_ms: u64,
    lease_id: u64,
    /// Serving is allowed while `now < valid_until_ms`: 0 never, `u64::MAX` always.
    valid_until_ms: AtomicU64,
    /// How often the lease was revoked; a ticket issued before the last revocation is void.
    revocations: Mutex<u64>,
}

impl Lease {
    /// A lease that was never renewed: invalid until a renewal commits.
    pub fn new(config: LeaseConfig) -> Lease {
        debug_assert!(
            config.validate().is_ok(),
            "lease config must be validated first"
        );
        Lease::with_valid_until(config.duration_ms, 0)
    }

    /// A lease that is valid until revoked: a single node, which no other node can replace.
    ///
    /// ```
    /// use tessera_sharding::lease::Lease;
    /// assert!(Lease::always_valid().is_valid(123_456));
    /// ```
    pub fn always_valid() -> Lease {
        Lease::with_valid_until(LeaseConfig::default().duration_ms, u64::MAX)
    }

    fn with_valid_until(duration_ms: u64, valid_until_ms: u64) -> Lease {
        Lease {
            duration_ms,
            lease_id: NEXT_LEASE_ID.fetch_add(1, Ordering::Relaxed),
            valid_until_ms: AtomicU64::new(valid_until_ms),
            revocations: Mutex::new(0),
        }
    }

    /// A ticket for a renewal sent now: put it in the renewal command and hand it back to
    /// [`Lease::renewal_committed`] when the log answers that it committed.
    ///
    /// ```
    /// use tessera_sharding::lease::{Lease, LeaseConfig};
    /// let lease = Lease::new(LeaseConfig::default());
    /// let renewal = lease.renewal_sent(42); // travels with the renewal command
    /// lease.renewal_committed(renewal);
    /// assert_eq!(lease.valid_until_ms(), Some(42 + 6_000));
    /// ```
    pub fn renewal_sent(&self, now_ms: u64) -> Renewal {
        Renewal {
            sent_ms: now_ms,
            lease_id: self.lease_id,
            revocations: *self.lock_revocations(),
        }
    }

    /// The log committed `renewal`: the node may serve until its send time plus the duration.
    /// Never shortens the lease (answers may arrive out of order), and ignores a ticket issued
    /// by another lease or before the last [`Lease::revoke`].
    ///
    /// ```
    /// use tessera_sharding::lease::{Lease, LeaseConfig};
    /// let lease = Lease::new(LeaseConfig::default());
    /// let (older, newer) = (lease.renewal_sent(0), lease.renewal_sent(1_500));
    /// lease.renewal_committed(newer);
    /// lease.renewal_committed(older);
    /// assert_eq!(lease.valid_until_ms(), Some(7_500));
    /// ```
    pub fn renewal_committed(&self, renewal: Renewal) {
        let revocations = self.lock_revocations();
        if renewal.lease_id != self.lease_id || renewal.revocations != *revocations {
            return;
        }
        let until_ms = renewal.sent_ms.saturating_add(self.duration_ms);
        self.valid_until_ms.fetch_max(until_ms, Ordering::AcqRel);
    }

    /// The log refused a renewal (this member is down or removed): invalid from now on, and
    /// answers to renewals sent before now no longer count. Later renewals count again.
    ///
    /// ```
    /// use tessera_sharding::lease::{Lease, LeaseConfig};
    /// let lease = Lease::new(LeaseConfig::default());
    /// let before = lease.renewal_sent(0);
    /// lease.revoke();
    /// lease.renewal_committed(before);
    /// assert!(!lease.is_valid(1));
    /// ```
    pub fn revoke(&self) {
        let mut revocations = self.lock_revocations();
        *revocations += 1;
        self.valid_until_ms.store(0, Ordering::Release);
    }

    /// Whether this node may serve its shards at `now_ms` (one atomic load and a compare).
    ///
    /// ```
    /// use tessera_sharding::lease::{Lease, LeaseConfig};
    /// let lease = Lease::new(LeaseConfig::default());
    /// lease.renewal_committed(lease.renewal_sent(10));
    /// assert!(lease.is_valid(10) && !lease.is_valid(6_010));
    /// ```
    #[inline]
    pub fn is_valid(&self, now_ms: u64) -> bool {
        now_ms < self.valid_until_ms.load(Ordering::Acquire)
    }

    /// The first instant the lease no longer allows serving; `None` if it never did or was
    /// revoked. `Some(u64::MAX)` for [`Lease::always_valid`].
    ///
    /// ```
    /// use tessera_sharding::lease::{Lease, LeaseConfig};
    /// let lease = Lease::new(LeaseConfig::default());
    /// assert_eq!(lease.valid_until_ms(), None);
    /// ```
    pub fn valid_until_ms(&self) -> Option<u64> {
        match self.valid_until_ms.load(Ordering::Acquire) {
            0 => None,
            until_ms => Some(until_ms),
        }
    }

    fn lock_revocations(&self) -> std::sync::MutexGuard<'_, u64> {
        // Nothing panics while the lock is held, so a poisoned lock still holds a sound count.
        self.revocations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The coordinator's side: may the shards of an owner that is gone (removed by an operator) go
/// to another node yet? Only once that owner's lease must have run out: `reassign_wait_ms` after
/// the later of this guard's start (a new coordinator cannot know what an earlier one saw) and
/// the moment it first saw the owner gone, on the coordinator's clock. An owner never passed
/// to [`ReassignGuard::owner_gone`] is never ready.
///
/// ```
/// use tessera_sharding::lease::{LeaseConfig, ReassignGuard};
/// let config = LeaseConfig::default();
/// let mut guard = ReassignGuard::new(config, 0);
/// guard.owner_gone("node-3", 10_000);
/// assert!(!guard.may_reassign("node-3", 10_000 + config.reassign_wait_ms() - 1));
/// assert!(guard.may_reassign("node-3", 10_000 + config.reassign_wait_ms()));
/// ```
#[derive(Debug)]
pub struct ReassignGuard {
    wait_ms: u64,
    started_ms: u64,
    gone_since_ms: BTreeMap<String, u64>,
}

impl ReassignGuard {
    /// A guard for a coordinator instance that started at `started_ms`, remembering nothing.
    pub fn new(config: LeaseConfig, started_ms: u64) -> ReassignGuard {
        ReassignGuard {
            wait_ms: config.reassign_wait_ms(),
            started_ms,
            gone_since_ms: BTreeMap::new(),
        }
    }

    /// Notes that `node` is gone at `now_ms`. Idempotent: the first sighting counts. Ignored
    /// when [`GONE_OWNERS_MAX`] owners are tracked already (that owner stays not ready).
    ///
    /// ```
    /// use tessera_sharding::lease::{LeaseConfig, ReassignGuard};
    /// let mut guard = ReassignGuard::new(LeaseConfig::default(), 0);
    /// guard.owner_gone("a", 100);
    /// guard.owner_gone("a", 5_000);
    /// assert_eq!(guard.wait_left_ms("a", 100), Some(LeaseConfig::default().reassign_wait_ms()));
    /// ```
    pub fn owner_gone(&mut self, node: &str, now_ms: u64) {
        if self.gone_since_ms.contains_key(node) || self.gone_since_ms.len() >= GONE_OWNERS_MAX {
            return;
        }
        self.gone_since_ms.insert(node.to_string(), now_ms);
    }

    /// Forgets `node`: it came back as a member, or none of its shards is left to reassign.
    ///
    /// ```
    /// use tessera_sharding::lease::{LeaseConfig, ReassignGuard};
    /// let mut guard = ReassignGuard::new(LeaseConfig::default(), 0);
    /// guard.owner_gone("a", 0);
    /// guard.owner_back("a");
    /// assert_eq!(guard.wait_left_ms("a", u64::MAX), None);
    /// ```
    pub fn owner_back(&mut self, node: &str) {
        self.gone_since_ms.remove(node);
    }

    /// Whether `node`'s shards may go to another node at `now_ms`.
    ///
    /// ```
    /// use tessera_sharding::lease::{LeaseConfig, ReassignGuard};
    /// let guard = ReassignGuard::new(LeaseConfig::default(), 0);
    /// assert!(!guard.may_reassign("never-seen-gone", u64::MAX));
    /// ```
    pub fn may_reassign(&self, node: &str, now_ms: u64) -> bool {
        self.wait_left_ms(node, now_ms) == Some(0)
    }

    /// How long until `node`'s shards may be reassigned (`Some(0)`: now); `None` if `node` is
    /// not tracked as gone.
    ///
    /// ```
    /// use tessera_sharding::lease::{LeaseConfig, ReassignGuard};
    /// let config = LeaseConfig::default();
    /// let mut guard = ReassignGuard::new(config, 50_000);
    /// guard.owner_gone("a", 1_000); // seen before this coordinator started: wait from its start
    /// assert_eq!(guard.wait_left_ms("a", 50_000), Some(config.reassign_wait_ms()));
    /// ```
    pub fn wait_left_ms(&self, node: &str, now_ms: u64) -> Option<u64> {
        let seen_ms = *self.gone_since_ms.get(node)?;
        let ready_ms = seen_ms.max(self.started_ms).saturating_add(self.wait_ms);
        Some(ready_ms.saturating_sub(now_ms))
    }
}

/// A node's [`Lease`] read against the process's monotonic clock: what the region checks before
/// serving and the node's renewal task updates.
///
/// ```
/// use tessera_sharding::lease::{LeaseConfig, NodeLease};
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
        match self.lease.valid_until_ms() {
            Some(u64::MAX) => true,
            Some(_) => self.lease.is_valid(self.now_ms()),
            None => false,
        }
    }

    /// The lease itself.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }
}
