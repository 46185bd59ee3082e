//! The simulators' only source of randomness: a SplitMix64 generator seeded per run, so a seed
//! replays the same run exactly on any machine. Every simulator draws from it; nothing in a
//! simulation may use another source (no hash-map iteration order, no wall clock).

/// A SplitMix64 pseudo-random generator.
#[derive(Clone, Debug)]
pub struct SimRng {
    state: u64,
}

impl SimRng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> SimRng {
        SimRng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut mixed = self.state;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        mixed ^ (mixed >> 31)
    }

    /// A number in `0..bound`; 0 when `bound` is 0.
    pub fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            return 0;
        }
        self.next_u64() % bound
    }

    /// A number in `low..=high` (`low` when the range is empty).
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high.saturating_sub(low).saturating_add(1))
    }

    /// An index into a collection of `len` items; 0 when empty.
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// True with probability `per_mille` / 1000.
    pub fn per_mille(&mut self, per_mille: u64) -> bool {
        self.below(1_000) < per_mille
    }
}

#[cfg(test)]
mod tests {
    use super::SimRng;

    #[test]
    fn a_seed_replays_the_same_numbers() {
        let (mut first, mut second) = (SimRng::new(7), SimRng::new(7));
        for _ in 0..100 {
            assert_eq!(first.next_u64(), second.next_u64());
        }
        assert_ne!(SimRng::new(7).next_u64(), SimRng::new(8).next_u64());
    }

    #[test]
    fn ranges_stay_inside_their_bounds() {
        let mut rng = SimRng::new(1);
        for _ in 0..1_000 {
            assert!((5..=9).contains(&rng.between(5, 9)));
            assert!(rng.below(3) < 3);
        }
        assert_eq!(rng.below(0), 0);
    }
}
