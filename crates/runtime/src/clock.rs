//! The wall clock a node reads in milliseconds since the Unix epoch: what a guest's `now-ms`
//! answers and what reminders are due in. A node runs on [`SystemClock`]; a simulation
//! (`tessera-testkit`) hands the entity layer a clock of its own, so virtual time decides when
//! reminders fire and what guests read, and a run replays from its seed.

use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in milliseconds since the Unix epoch.
///
/// ```
/// use tessera_runtime::{Clock, SystemClock};
/// let now = SystemClock.now_ms();
/// assert!(now > 1_600_000_000_000, "after September 2020");
/// ```
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch, now.
    fn now_ms(&self) -> u64;
}

/// The operating system's clock: what every node runs on.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as u64)
    }
}
