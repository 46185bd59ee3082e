//! A phi accrual failure detector (Hayashibara et al., the one Akka uses) over the progress
//! reports every peer sends each second ([`PROGRESS_EVERY`], by the mesh). For each peer it
//! keeps the last [`SAMPLES_MAX`] intervals between reports; phi is how unlikely the silence
//! since the last one is under the normal distribution those intervals fit (mean plus an
//! acceptable pause, deviation at least a floor), on a log10 scale: phi 8 means a one in 10^8
//! chance that the peer is merely slow. A peer is suspected once phi reaches the threshold,
//! and trusted again at its next report.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};
use tessera_contract::NodeId;

/// How often a node tells its peers its metadata commit number: the heartbeat the detector
/// reads.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Intervals kept per peer.
pub const SAMPLES_MAX: usize = 200;

/// Phi at or above which a peer is suspected (Akka's default).
pub const PHI_THRESHOLD: f64 = 8.0;

/// Added to the mean interval: pauses this long (a GC, a busy disk) are not suspicious.
const ACCEPTABLE_PAUSE: Duration = Duration::from_secs(2);

/// The least deviation assumed, so a very regular peer is not suspected at its first delay.
const MIN_DEVIATION: Duration = Duration::from_millis(200);

/// What one peer's reports looked like.
struct History {
    intervals: VecDeque<f64>,
    last: Instant,
}

/// The detector for every peer that has reported.
#[derive(Default)]
pub struct PhiDetector {
    peers: HashMap<NodeId, History>,
}

impl PhiDetector {
    /// Records a report from `peer` at `now`.
    pub fn report(&mut self, peer: &str, now: Instant) {
        match self.peers.get_mut(peer) {
            Some(history) => {
                let interval = now.saturating_duration_since(history.last).as_secs_f64();
                if history.intervals.len() == SAMPLES_MAX {
                    history.intervals.pop_front();
                }
                history.intervals.push_back(interval);
                history.last = now;
            }
            None => {
                let mut intervals = VecDeque::with_capacity(SAMPLES_MAX);
                // A first estimate, as if the peer had reported on time once.
                intervals.push_back(PROGRESS_EVERY.as_secs_f64());
                self.peers.insert(
                    peer.to_string(),
                    History {
                        intervals,
                        last: now,
                    },
                );
            }
        }
    }

    /// Forgets every peer not in `keep` (removed members).
    pub fn retain(&mut self, keep: &[NodeId]) {
        self.peers.retain(|peer, _| keep.contains(peer));
    }

    /// Phi of `peer` at `now`; `None` if it never reported.
    pub fn phi(&self, peer: &str, now: Instant) -> Option<f64> {
        let history = self.peers.get(peer)?;
        let count = history.intervals.len() as f64;
        let mean = history.intervals.iter().sum::<f64>() / count;
        let variance = history
            .intervals
            .iter()
            .map(|interval| (interval - mean).powi(2))
            .sum::<f64>()
            / count;
        let deviation = variance.sqrt().max(MIN_DEVIATION.as_secs_f64());
        let mean = mean + ACCEPTABLE_PAUSE.as_secs_f64();
        let elapsed = now.saturating_duration_since(history.last).as_secs_f64();
        Some(phi(elapsed, mean, deviation))
    }

    /// Whether `peer` is suspected at `now` (never for a peer that never reported).
    pub fn suspects(&self, peer: &str, now: Instant) -> bool {
        self.phi(peer, now).is_some_and(|phi| phi >= PHI_THRESHOLD)
    }
}

/// -log10 of the probability that a report comes later than `elapsed`, for intervals normal
/// with `mean` and `deviation` (the logistic approximation of the normal tail Akka uses).
fn phi(elapsed: f64, mean: f64, deviation: f64) -> f64 {
    let y = (elapsed - mean) / deviation;
    let e = (-y * (1.5976 + 0.070566 * y * y)).exp();
    if elapsed > mean {
        -(e / (1.0 + e)).log10()
    } else {
        -(1.0 - 1.0 / (1.0 + e)).log10()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steady(detector: &mut PhiDetector, start: Instant, reports: u32) -> Instant {
        let mut now = start;
        for _ in 0..reports {
            detector.report("n2", now);
            now += Duration::from_secs(1);
        }
        now - Duration::from_secs(1)
    }

    #[test]
    fn a_peer_reporting_on_time_is_trusted() {
        let mut detector = PhiDetector::default();
        let last = steady(&mut detector, Instant::now(), 30);
        assert!(!detector.suspects("n2", last + Duration::from_millis(1_500)));
        assert!(detector.phi("n2", last + Duration::from_secs(1)).unwrap() < 1.0);
    }

    #[test]
    fn a_silent_peer_is_suspected_and_trusted_again_at_its_next_report() {
        let mut detector = PhiDetector::default();
        let last = steady(&mut detector, Instant::now(), 30);
        let quiet = last + Duration::from_secs(3);
        let silent = last + Duration::from_secs(6);
        assert!(
            detector.phi("n2", silent).unwrap() > detector.phi("n2", quiet).unwrap(),
            "phi grows with the silence"
        );
        assert!(detector.suspects("n2", silent));
        detector.report("n2", silent);
        assert!(!detector.suspects("n2", silent + Duration::from_millis(500)));
    }

    #[test]
    fn a_peer_that_never_reported_is_not_judged_and_removed_peers_are_forgotten() {
        let mut detector = PhiDetector::default();
        let now = Instant::now();
        assert_eq!(detector.phi("n9", now), None);
        assert!(!detector.suspects("n9", now + Duration::from_secs(3_600)));
        detector.report("n2", now);
        detector.retain(&[]);
        assert_eq!(detector.phi("n2", now), None);
    }
}
