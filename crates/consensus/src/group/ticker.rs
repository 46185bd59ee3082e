//! The clock a group's driver ticks on, aligned across every group of the process: each tick
//! falls on a multiple of the tick length since one process-wide instant, so a node's many
//! groups (a partition plane runs dozens) wake together — one wake-up of a runtime worker
//! runs all their ticks and their heartbeats leave together, instead of each group's timer
//! waking a parked worker at its own moment. An idle three-node cluster with 64 partitions
//! spent most of its CPU on those wake-ups (`docs/partitions.md`, "What one group costs").
//! A tick missed while the task was busy is skipped, not made up, so alignment holds.

use std::sync::OnceLock;
use std::time::Duration;
use tokio::time::{Instant, Interval, MissedTickBehavior};

/// The instant every group's ticks are counted from (the first ticker made).
static TICK_ORIGIN: OnceLock<Instant> = OnceLock::new();

/// An interval of `tick` whose ticks fall on multiples of `tick` since [`TICK_ORIGIN`], the
/// first of them the next such instant (or now, at the origin itself).
pub(super) fn aligned_ticker(tick: Duration) -> Interval {
    let now = Instant::now();
    let origin = *TICK_ORIGIN.get_or_init(|| now);
    let tick_nanos = tick.as_nanos().max(1);
    let since = now.saturating_duration_since(origin).as_nanos();
    let ahead = (tick_nanos - since % tick_nanos) % tick_nanos;
    let ahead = Duration::from_nanos(u64::try_from(ahead).unwrap_or(u64::MAX));
    let mut ticker = tokio::time::interval_at(now + ahead, tick.max(Duration::from_nanos(1)));
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    ticker
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tickers_made_at_different_moments_tick_together() {
        let tick = Duration::from_millis(10);
        let mut first = aligned_ticker(tick);
        let origin = first.tick().await;
        tokio::time::sleep(Duration::from_millis(3)).await;
        let mut second = aligned_ticker(tick);
        let mut third = aligned_ticker(Duration::from_millis(20));
        for _ in 0..5 {
            let at = second.tick().await;
            let since = at.duration_since(origin).as_nanos();
            assert_eq!(since % tick.as_nanos(), 0, "{since} ns after the origin");
            assert_eq!(first.tick().await, at);
        }
        // A longer tick falls on the same grid (a multiple of both from the origin).
        let at = third.tick().await;
        assert_eq!(at.duration_since(origin).as_nanos() % tick.as_nanos(), 0);
    }
}
