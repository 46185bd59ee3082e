//! Warnings that can come once per request or message — a request failed, a tell dropped, an
//! instance discarded — written so that a fault failing thousands of them writes a few lines:
//! the first occurrence of each key in a window is logged, later ones are counted, and the
//! count is written as one summary line once the window has closed ("… and N more in Xs").
//! At most a named number of keys is counted apart; the rest share one count, so a flood of
//! distinct keys costs bounded memory and lines too.
//!
//! [`LogAggregator`] is the policy, sans IO: the caller passes the time, so its tests drive it
//! with a clock of their own. [`RepeatedWarnings`] is the aggregator behind a lock with the
//! real clock, for warnings written from many tasks; each user names its keys and writes its
//! own lines ([`WarningKey`]). Tests count what is written with `CapturedWarnings` (the
//! `capture` feature).
//!
//! Uses no other Tessera crate; the entity layer, the sharding region and the HTTP edge use it.
//!
//! ```
//! use std::time::Duration;
//! use tessera_logs::{RepeatedWarnings, WarningKey};
//!
//! #[derive(Clone, PartialEq, Eq, Hash)]
//! struct ShardDown(u32);
//!
//! impl WarningKey for ShardDown {
//!     fn warn_summary(&self, suppressed: u64, over: Duration) {
//!         tracing::warn!(shard = self.0, suppressed, "shard down … and {suppressed} more in {over:.1?}");
//!     }
//! }
//!
//! let warnings = RepeatedWarnings::new("shard warnings", Duration::from_secs(10), 64);
//! for _ in 0..1_000 {
//!     if warnings.first_in_window(&ShardDown(7)) {
//!         tracing::warn!(shard = 7, "shard down");
//!     }
//! }
//! // One line so far; the other 999 are written as one summary once the window has closed.
//! warnings.flush();
//! ```

mod aggregator;
#[cfg(feature = "capture")]
mod capture;
mod repeated;

pub use aggregator::{LogAggregator, Recorded, Summary};
#[cfg(feature = "capture")]
pub use capture::CapturedWarnings;
pub use repeated::{RepeatedWarnings, WarningKey};
