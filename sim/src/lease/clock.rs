//! Each simulated process reads its own clock: `local = offset + real × (1 + rate)`, with a random
//! offset and a rate within ±`drift_ppm / 2` of real time, so any two clocks differ in rate by at
//! most `drift_ppm` — exactly what [`tessera_sharding::lease::LeaseConfig::drift_ppm`] promises.
//! Clocks are monotonic and survive a process crash (they belong to the machine).

use crate::rng::SimRng;

/// Offsets are drawn below this, so clocks disagree wildly in absolute value (only rates matter).
const CLOCK_OFFSET_MS_MAX: u64 = 1_000_000_000;

/// One machine's (or coordinator instance's) monotonic clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriftingClock {
    offset_ms: u64,
    rate_ppm: i64,
}

impl DriftingClock {
    /// A clock with a random offset and a rate at most `drift_ppm / 2` from real time.
    pub fn random(rng: &mut SimRng, drift_ppm: u64) -> DriftingClock {
        let half_ppm = drift_ppm / 2;
        let rate_ppm = rng.between(0, 2 * half_ppm) as i64 - half_ppm as i64;
        DriftingClock {
            offset_ms: rng.below(CLOCK_OFFSET_MS_MAX),
            rate_ppm,
        }
    }

    /// The local reading at real time `real_ms` (non-decreasing in `real_ms`).
    pub fn local_ms(&self, real_ms: u64) -> u64 {
        let drift = (i128::from(real_ms) * i128::from(self.rate_ppm)).div_euclid(1_000_000);
        let local = i128::from(self.offset_ms) + i128::from(real_ms) + drift;
        u64::try_from(local).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::{DriftingClock, SimRng};

    #[test]
    fn clocks_are_monotonic_and_drift_within_bounds() {
        let mut rng = SimRng::new(3);
        for _ in 0..50 {
            let clock = DriftingClock::random(&mut rng, 1_000);
            let mut previous = clock.local_ms(0);
            for real_ms in (0..200_000).step_by(997) {
                let local = clock.local_ms(real_ms);
                assert!(local >= previous);
                previous = local;
            }
            let elapsed = clock.local_ms(1_000_000) - clock.local_ms(0);
            assert!((999_499..=1_000_501).contains(&elapsed), "{elapsed}");
        }
    }
}
