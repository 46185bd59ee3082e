//! The policy of repeated warnings, sans IO: which occurrence to log, which to count, and the
//! counts to summarise once their window has closed. Every call takes the time from the caller.
//!
//! A key's window opens at its first occurrence (which is logged) and lasts `window`; the
//! occurrences after it in the window are counted. The count comes back as a [`Summary`] once
//! the window has closed: at the key's next occurrence (which opens a new window and is logged),
//! at the first [`LogAggregator::record`] of any key past the next sweep (one every window,
//! which also forgets the closed windows), or at a [`LogAggregator::flush`]. A window with
//! nothing counted closes without a summary.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Counts repeated occurrences per key; see the module doc.
///
/// ```
/// use std::time::{Duration, Instant};
/// use tessera_logs::LogAggregator;
///
/// let mut aggregator = LogAggregator::new(Duration::from_secs(10), 64);
/// let start = Instant::now();
/// assert!(aggregator.record(&"shard 7 down", start).log);
/// assert!(!aggregator.record(&"shard 7 down", start + Duration::from_secs(1)).log);
/// let later = aggregator.record(&"shard 7 down", start + Duration::from_secs(10));
/// assert!(later.log, "a new window");
/// assert_eq!(later.summaries[0].suppressed, 1);
/// ```
#[derive(Debug)]
pub struct LogAggregator<K> {
    window: Duration,
    keys_max: usize,
    windows: HashMap<K, Window>,
    /// Occurrences of keys that found `keys_max` keys counted already, counted together.
    others: Option<Window>,
    /// When the next sweep forgets closed windows; `None` while nothing is counted.
    sweep_due: Option<Instant>,
}

/// One key's open window.
#[derive(Clone, Copy, Debug)]
struct Window {
    /// The occurrence that was logged.
    first: Instant,
    /// The last occurrence counted.
    last: Instant,
    /// Occurrences counted, not logged.
    suppressed: u64,
}

/// What to write for one occurrence.
#[derive(Debug, PartialEq, Eq)]
pub struct Recorded<K> {
    /// Log this occurrence: it is the first of its key in a window.
    pub log: bool,
    /// Counts of windows that have closed, to write before it.
    pub summaries: Vec<Summary<K>>,
}

/// Occurrences of one key counted, not logged, in one window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary<K> {
    /// The key; `None` for the keys past the aggregator's bound, counted together.
    pub key: Option<K>,
    /// Occurrences after the one logged.
    pub suppressed: u64,
    /// From the occurrence logged to the last one counted.
    pub over: Duration,
}

impl Window {
    fn open(now: Instant) -> Window {
        Window {
            first: now,
            last: now,
            suppressed: 0,
        }
    }

    fn is_closed(&self, window: Duration, now: Instant) -> bool {
        now.saturating_duration_since(self.first) >= window
    }

    fn count(&mut self, now: Instant) {
        self.suppressed += 1;
        self.last = self.last.max(now);
    }

    fn summary<K>(&self, key: Option<K>) -> Option<Summary<K>> {
        (self.suppressed > 0).then(|| Summary {
            key,
            suppressed: self.suppressed,
            over: self.last.saturating_duration_since(self.first),
        })
    }
}

impl<K: Hash + Eq + Clone> LogAggregator<K> {
    /// An aggregator that counts repeats of a key for `window` after the one logged, and
    /// counts at most `keys_max` keys apart.
    pub fn new(window: Duration, keys_max: usize) -> Self {
        LogAggregator {
            window,
            keys_max,
            windows: HashMap::new(),
            others: None,
            sweep_due: None,
        }
    }

    /// Records an occurrence of `key` at `now`.
    pub fn record(&mut self, key: &K, now: Instant) -> Recorded<K> {
        let mut summaries = Vec::new();
        if self.sweep_due.is_some_and(|due| now >= due) {
            self.sweep(now, &mut summaries);
        }
        let window = self.window;
        let log = if let Some(open) = self.windows.get_mut(key) {
            roll(open, window, Some(key), now, &mut summaries)
        } else if self.windows.len() < self.keys_max {
            self.windows.insert(key.clone(), Window::open(now));
            true
        } else if let Some(others) = self.others.as_mut() {
            roll(others, window, None, now, &mut summaries)
        } else {
            self.others = Some(Window::open(now));
            true
        };
        debug_assert!(
            self.windows.len() <= self.keys_max,
            "the aggregator counts at most keys_max keys apart"
        );
        if self.sweep_due.is_none() {
            self.sweep_due = now.checked_add(self.window);
        }
        Recorded { log, summaries }
    }

    /// The counts of every window closed by `now`; those still open go on counting.
    pub fn flush(&mut self, now: Instant) -> Vec<Summary<K>> {
        let mut summaries = Vec::new();
        self.sweep(now, &mut summaries);
        summaries
    }

    /// Keys with a window open or closed but not yet swept.
    pub fn keys_counted(&self) -> usize {
        self.windows.len()
    }

    /// Summarises and forgets every window closed by `now`.
    fn sweep(&mut self, now: Instant, summaries: &mut Vec<Summary<K>>) {
        let window = self.window;
        self.windows.retain(|key, open| {
            if !open.is_closed(window, now) {
                return true;
            }
            summaries.extend(open.summary(Some(key.clone())));
            false
        });
        if let Some(others) = self.others.take_if(|others| others.is_closed(window, now)) {
            summaries.extend(others.summary(None));
        }
        let counting = !self.windows.is_empty() || self.others.is_some();
        self.sweep_due = counting.then(|| now.checked_add(window)).flatten();
    }
}

/// Counts one more occurrence in `open`, or, if its window has closed, summarises it and opens
/// the next: returns whether the occurrence is to be logged.
fn roll<K: Clone>(
    open: &mut Window,
    window: Duration,
    key: Option<&K>,
    now: Instant,
    summaries: &mut Vec<Summary<K>>,
) -> bool {
    if !open.is_closed(window, now) {
        open.count(now);
        return false;
    }
    summaries.extend(open.summary(key.cloned()));
    *open = Window::open(now);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(10);

    /// A clock of the test's own: `at(seconds)` is that long after its start.
    struct Clock(Instant);

    impl Clock {
        fn at(&self, seconds: f64) -> Instant {
            self.0 + Duration::from_secs_f64(seconds)
        }
    }

    fn clock() -> Clock {
        Clock(Instant::now())
    }

    fn summary(
        key: Option<&'static str>,
        suppressed: u64,
        over_seconds: f64,
    ) -> Summary<&'static str> {
        Summary {
            key,
            suppressed,
            over: Duration::from_secs_f64(over_seconds),
        }
    }

    #[test]
    fn the_first_occurrence_is_logged_and_the_rest_summarised_at_the_next_window() {
        let clock = clock();
        let mut aggregator = LogAggregator::new(WINDOW, 8);
        assert!(aggregator.record(&"a", clock.at(0.0)).log);
        for second in 1..=9 {
            let recorded = aggregator.record(&"a", clock.at(f64::from(second)));
            assert_eq!(
                recorded,
                Recorded {
                    log: false,
                    summaries: vec![]
                }
            );
        }
        let next = aggregator.record(&"a", clock.at(12.0));
        assert!(next.log, "a new window opens with a line");
        assert_eq!(next.summaries, vec![summary(Some("a"), 9, 9.0)]);
        assert!(!aggregator.record(&"a", clock.at(13.0)).log);
    }

    #[test]
    fn keys_are_counted_apart() {
        let clock = clock();
        let mut aggregator = LogAggregator::new(WINDOW, 8);
        assert!(aggregator.record(&"shard 1 down", clock.at(0.0)).log);
        assert!(aggregator.record(&"shard 2 down", clock.at(0.5)).log);
        assert!(!aggregator.record(&"shard 1 down", clock.at(1.0)).log);
        assert!(!aggregator.record(&"shard 2 down", clock.at(1.0)).log);
        assert!(!aggregator.record(&"shard 2 down", clock.at(2.0)).log);
        let mut summaries = aggregator.flush(clock.at(10.5));
        summaries.sort_by_key(|summary| summary.key);
        assert_eq!(
            summaries,
            vec![
                summary(Some("shard 1 down"), 1, 1.0),
                summary(Some("shard 2 down"), 2, 1.5)
            ]
        );
    }

    #[test]
    fn keys_past_the_bound_share_one_count() {
        let clock = clock();
        let mut aggregator = LogAggregator::new(WINDOW, 2);
        assert!(aggregator.record(&"a", clock.at(0.0)).log);
        assert!(aggregator.record(&"b", clock.at(0.0)).log);
        assert!(
            aggregator.record(&"c", clock.at(1.0)).log,
            "the first past the bound"
        );
        for key in ["d", "e", "c", "f"] {
            assert!(!aggregator.record(&key, clock.at(2.0)).log, "{key}");
        }
        assert_eq!(aggregator.keys_counted(), 2);
        assert_eq!(
            aggregator.flush(clock.at(11.0)),
            vec![summary(None, 4, 1.0)]
        );
    }

    #[test]
    fn a_key_that_does_not_recur_is_summarised_at_the_sweep_after_its_window() {
        let clock = clock();
        let mut aggregator = LogAggregator::new(WINDOW, 8);
        aggregator.record(&"gone", clock.at(0.0));
        aggregator.record(&"gone", clock.at(3.0));
        // The sweep is due a window after the first record; a record of another key before it
        // finds nothing to summarise.
        assert_eq!(aggregator.record(&"other", clock.at(9.0)).summaries, vec![]);
        let swept = aggregator.record(&"other", clock.at(10.0));
        assert_eq!(swept.summaries, vec![summary(Some("gone"), 1, 3.0)]);
        assert_eq!(
            aggregator.keys_counted(),
            1,
            "the closed window is forgotten"
        );
    }

    #[test]
    fn a_window_with_nothing_counted_closes_without_a_summary() {
        let clock = clock();
        let mut aggregator = LogAggregator::new(WINDOW, 8);
        aggregator.record(&"once", clock.at(0.0));
        assert_eq!(aggregator.flush(clock.at(20.0)), vec![]);
        assert_eq!(aggregator.keys_counted(), 0);
        let again = aggregator.record(&"once", clock.at(21.0));
        assert_eq!(
            again,
            Recorded {
                log: true,
                summaries: vec![]
            }
        );
    }

    #[test]
    fn a_flush_leaves_open_windows_counting() {
        let clock = clock();
        let mut aggregator = LogAggregator::new(WINDOW, 8);
        aggregator.record(&"a", clock.at(0.0));
        aggregator.record(&"a", clock.at(1.0));
        assert_eq!(aggregator.flush(clock.at(5.0)), vec![]);
        aggregator.record(&"a", clock.at(6.0));
        assert_eq!(
            aggregator.flush(clock.at(10.0)),
            vec![summary(Some("a"), 2, 6.0)]
        );
    }
}
