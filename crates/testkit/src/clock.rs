//! The virtual clock of a simulation ([`VirtualClock`]): the time guests read from `now-ms`
//! and reminders fall due in, moved only by the simulation, so a run never depends on how fast
//! the machine is and replays from its seed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tessera_runtime::Clock;

/// Where every simulation's clock starts: 2024-01-01T00:00:00Z, in ms since the Unix epoch. A
/// fixed start makes what guests read from `now-ms` part of the replay.
pub const SIMULATION_EPOCH_MS: u64 = 1_704_067_200_000;

/// A clock that stands still until the simulation moves it. Clones share the time.
///
/// ```
/// use tessera_runtime::Clock;
/// use tessera_testkit::VirtualClock;
/// let clock = VirtualClock::default();
/// let start = clock.now_ms();
/// clock.advance(1_500);
/// assert_eq!(clock.now_ms(), start + 1_500);
/// ```
#[derive(Clone, Debug)]
pub struct VirtualClock {
    now_ms: Arc<AtomicU64>,
}

impl Default for VirtualClock {
    fn default() -> Self {
        VirtualClock {
            now_ms: Arc::new(AtomicU64::new(SIMULATION_EPOCH_MS)),
        }
    }
}

impl VirtualClock {
    /// Moves the clock `ms` forward.
    pub fn advance(&self, ms: u64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// Moves the clock to `ms` if that is later than now (it never goes back).
    pub fn advance_to(&self, ms: u64) {
        self.now_ms.fetch_max(ms, Ordering::SeqCst);
    }
}

impl Clock for VirtualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}
