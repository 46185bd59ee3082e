//! A [`LogAggregator`] behind a lock with the real clock, for a warning written from many
//! tasks. The caller writes the line of an occurrence to log (it knows the details the key
//! leaves out: the entity, the request); the summaries are written here, through the key's
//! [`WarningKey::warn_summary`], after the lock is released.

use crate::aggregator::{LogAggregator, Summary};
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What tells repeats of a warning apart, and how its summary line reads.
pub trait WarningKey: Hash + Eq + Clone {
    /// Writes that `suppressed` more occurrences of this warning came in the `over` after the
    /// one logged.
    fn warn_summary(&self, suppressed: u64, over: Duration);
}

/// Repeats of one family of warnings, counted per key; see the crate doc.
#[derive(Debug)]
pub struct RepeatedWarnings<K> {
    /// What the warnings are, for the summary of keys past the bound.
    name: &'static str,
    keys_max: usize,
    aggregator: Mutex<LogAggregator<K>>,
}

impl<K: WarningKey> RepeatedWarnings<K> {
    /// Warnings called `name` (in the summary of keys past the bound), whose repeats are
    /// counted for `window` after the one logged, at most `keys_max` keys apart.
    pub fn new(name: &'static str, window: Duration, keys_max: usize) -> Self {
        RepeatedWarnings {
            name,
            keys_max,
            aggregator: Mutex::new(LogAggregator::new(window, keys_max)),
        }
    }

    /// Counts an occurrence of `key`: true if the caller is to write its line (the first of its
    /// key in a window). Writes the summaries of windows closed since.
    pub fn first_in_window(&self, key: &K) -> bool {
        let recorded = self.aggregator().record(key, Instant::now());
        self.write(recorded.summaries);
        recorded.log
    }

    /// Writes the summaries of windows closed by now: for an owner with a tick of its own, so
    /// a count is written soon after its window even if nothing else comes.
    pub fn flush(&self) {
        let summaries = self.aggregator().flush(Instant::now());
        self.write(summaries);
    }

    fn aggregator(&self) -> MutexGuard<'_, LogAggregator<K>> {
        // Every critical section is one call that leaves the counts usable if it panics.
        self.aggregator
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self, summaries: Vec<Summary<K>>) {
        for summary in summaries {
            match summary.key {
                Some(key) => key.warn_summary(summary.suppressed, summary.over),
                None => tracing::warn!(
                    warnings = self.name,
                    suppressed = summary.suppressed,
                    "… and {} more {} of more than {} kinds in {:.1?}",
                    summary.suppressed,
                    self.name,
                    self.keys_max,
                    summary.over,
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    struct Fault(&'static str);

    impl WarningKey for Fault {
        fn warn_summary(&self, suppressed: u64, over: Duration) {
            tracing::warn!(
                fault = self.0,
                suppressed,
                "… and {suppressed} more in {over:.1?}"
            );
        }
    }

    #[test]
    fn only_the_first_of_a_key_in_a_window_is_to_be_written() {
        // A window far longer than the test: nothing closes while it runs.
        let warnings = RepeatedWarnings::new("faults", Duration::from_secs(3_600), 2);
        assert!(warnings.first_in_window(&Fault("a")));
        assert!(!warnings.first_in_window(&Fault("a")));
        assert!(warnings.first_in_window(&Fault("b")));
        assert!(
            warnings.first_in_window(&Fault("c")),
            "the first past the bound"
        );
        assert!(!warnings.first_in_window(&Fault("d")));
        warnings.flush();
        assert!(
            !warnings.first_in_window(&Fault("a")),
            "a flush closes no open window"
        );
    }
}
