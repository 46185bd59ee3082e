//! Unit tests of the lease logic.

use crate::lease::*;

#[test]
fn configs_that_cannot_work_are_refused() {
    // (duration, renew every, drift, margin): zero duration, zero or too slow renewal,
    // impossible drift, overflowing wait.
    let refused = [
        (0, 1_500, 1_000, 500),
        (6_000, 0, 1_000, 500),
        (6_000, 6_000, 1_000, 500),
        (6_000, 1_500, DRIFT_PPM_MAX + 1, 500),
        (6_000, 1_500, 1_000, u64::MAX),
    ];
    for (duration_ms, renew_every_ms, drift_ppm, margin_ms) in refused {
        let config = LeaseConfig {
            duration_ms,
            renew_every_ms,
            drift_ppm,
            margin_ms,
        };
        assert!(config.validate().is_err(), "{config:?} must be refused");
    }
    let overflowing = LeaseConfig {
        margin_ms: u64::MAX,
        ..LeaseConfig::default()
    };
    assert_eq!(overflowing.reassign_wait_ms(), u64::MAX);
}

#[test]
fn a_refusal_wins_over_answers_to_earlier_renewals() {
    let lease = Lease::new(LeaseConfig::default());
    lease.renewal_committed(lease.renewal_sent(0));
    let in_flight = lease.renewal_sent(1_500);
    lease.revoke();
    assert!(!lease.is_valid(1_600));
    lease.renewal_committed(in_flight);
    assert_eq!(lease.valid_until_ms(), None);
    lease.renewal_committed(lease.renewal_sent(3_000));
    assert_eq!(lease.valid_until_ms(), Some(9_000));
}

#[test]
fn a_ticket_only_counts_for_the_lease_that_issued_it() {
    let before_restart = Lease::new(LeaseConfig::default());
    let after_restart = Lease::new(LeaseConfig::default());
    after_restart.renewal_committed(before_restart.renewal_sent(0));
    assert!(!after_restart.is_valid(0));
}

#[test]
fn a_single_node_lease_is_valid_until_revoked() {
    let lease = Lease::always_valid();
    assert_eq!(lease.valid_until_ms(), Some(u64::MAX));
    assert!(lease.is_valid(u64::MAX - 1));
    lease.revoke();
    assert!(!lease.is_valid(0));
}

#[test]
fn the_guard_waits_from_the_later_of_start_and_first_sighting() {
    let config = LeaseConfig::default();
    let wait_ms = config.reassign_wait_ms();
    let mut guard = ReassignGuard::new(config, 10_000);
    guard.owner_gone("early", 2_000);
    guard.owner_gone("late", 20_000);
    assert_eq!(guard.wait_left_ms("early", 10_000), Some(wait_ms));
    assert!(guard.may_reassign("early", 10_000 + wait_ms));
    assert!(!guard.may_reassign("late", 20_000 + wait_ms - 1));
    assert!(guard.may_reassign("late", 20_000 + wait_ms));
    assert_eq!(guard.wait_left_ms("unknown", 0), None);
}

#[test]
fn a_full_guard_never_reassigns_an_owner_it_could_not_track() {
    let mut guard = ReassignGuard::new(LeaseConfig::default(), 0);
    for index in 0..GONE_OWNERS_MAX {
        guard.owner_gone(&format!("node-{index}"), 0);
    }
    guard.owner_gone("one-too-many", 0);
    assert!(!guard.may_reassign("one-too-many", u64::MAX));
    guard.owner_back("node-0");
    guard.owner_gone("one-too-many", 0);
    assert!(guard.may_reassign("one-too-many", u64::MAX));
}

/// The safety argument, checked over many clock pairs and timings: however fast the
/// coordinator's clock runs against the holder's (within `drift_ppm`), the holder's lease
/// ends, in real time, no later than the coordinator may reassign.
#[test]
fn a_lease_ends_before_the_guard_allows_reassignment_for_any_allowed_drift() {
    let config = LeaseConfig::default();
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move |bound: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % bound
    };
    for _ in 0..10_000 {
        // Rates in ppm around 1, at most `drift_ppm` apart in total.
        let half = (config.drift_ppm / 2) as i64;
        let holder_rate = next(config.drift_ppm / 2 + 1) as i64 * 2 - half;
        let coordinator_rate = next(config.drift_ppm / 2 + 1) as i64 * 2 - half;
        let real = |local_elapsed: u64, rate_ppm: i64| -> f64 {
            local_elapsed as f64 / (1.0 + rate_ppm as f64 / 1e6)
        };
        let sent_real = next(100_000) as f64;
        let removed_real = sent_real + next(5_000) as f64;
        let lease_end_real = sent_real + real(config.duration_ms, holder_rate);
        let reassign_real = removed_real + real(config.reassign_wait_ms(), coordinator_rate);
        assert!(lease_end_real <= reassign_real);
    }
}
