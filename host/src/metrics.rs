//! Counters, gauges and histograms with labels, rendered in the Prometheus text format.
//!
//! Deliberately small: every series lives in one map behind a mutex, keyed by name and label
//! values. Hot paths that count per message use their own atomics and are folded in when the
//! metrics are rendered.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// The most distinct series kept, so label values chosen by clients (tenant and type names)
/// cannot grow the registry without bound. Past it, new series are dropped and counted.
pub const SERIES_MAX: usize = 100_000;

/// Upper bounds (seconds) of the latency histogram buckets.
const LATENCY_BUCKETS_SECONDS: [f64; 12] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
];

type Labels = Vec<(&'static str, String)>;

#[derive(Default)]
struct Histogram {
    buckets: [u64; LATENCY_BUCKETS_SECONDS.len()],
    count: u64,
    sum_seconds: f64,
}

#[derive(Default)]
struct Series {
    counters: BTreeMap<(&'static str, Labels), u64>,
    gauges: BTreeMap<(&'static str, Labels), i64>,
    histograms: BTreeMap<(&'static str, Labels), Histogram>,
    dropped: u64,
}

impl Series {
    fn len(&self) -> usize {
        self.counters.len() + self.gauges.len() + self.histograms.len()
    }
}

/// A registry of metrics.
///
/// ```
/// use tessera_host::metrics::Metrics;
/// let metrics = Metrics::default();
/// metrics.count("tessera_messages_total", &[("tenant", "acme"), ("type", "counter")], 1);
/// assert!(metrics.render().contains("tessera_messages_total{tenant=\"acme\",type=\"counter\"} 1"));
/// ```
#[derive(Default)]
pub struct Metrics {
    series: Mutex<Series>,
    help: Mutex<BTreeMap<&'static str, &'static str>>,
}

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(key, value)| (*key, (*value).to_string()))
        .collect()
}

impl Metrics {
    fn series(&self) -> std::sync::MutexGuard<'_, Series> {
        self.series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sets the `# HELP` text of a metric.
    pub fn describe(&self, name: &'static str, help: &'static str) {
        self.help
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(name, help);
    }

    /// Adds `value` to a counter.
    pub fn count(&self, name: &'static str, pairs: &[(&'static str, &str)], value: u64) {
        let mut series = self.series();
        let key = (name, labels(pairs));
        if !series.counters.contains_key(&key) && series.len() >= SERIES_MAX {
            series.dropped += 1;
            return;
        }
        *series.counters.entry(key).or_insert(0) += value;
    }

    /// Sets a counter to a total kept elsewhere (folded in from atomics).
    pub fn set_counter(&self, name: &'static str, pairs: &[(&'static str, &str)], value: u64) {
        let mut series = self.series();
        let key = (name, labels(pairs));
        if !series.counters.contains_key(&key) && series.len() >= SERIES_MAX {
            series.dropped += 1;
            return;
        }
        series.counters.insert(key, value);
    }

    /// Sets a gauge.
    pub fn gauge(&self, name: &'static str, pairs: &[(&'static str, &str)], value: i64) {
        let mut series = self.series();
        let key = (name, labels(pairs));
        if !series.gauges.contains_key(&key) && series.len() >= SERIES_MAX {
            series.dropped += 1;
            return;
        }
        series.gauges.insert(key, value);
    }

    /// Records a latency in a histogram.
    pub fn observe(&self, name: &'static str, pairs: &[(&'static str, &str)], latency: Duration) {
        let mut series = self.series();
        let key = (name, labels(pairs));
        if !series.histograms.contains_key(&key) && series.len() >= SERIES_MAX {
            series.dropped += 1;
            return;
        }
        let histogram = series.histograms.entry(key).or_default();
        let seconds = latency.as_secs_f64();
        for (bucket, bound) in histogram.buckets.iter_mut().zip(LATENCY_BUCKETS_SECONDS) {
            if seconds <= bound {
                *bucket += 1;
            }
        }
        histogram.count += 1;
        histogram.sum_seconds += seconds;
    }

    /// The current value of a counter (tests and status).
    pub fn counter_value(&self, name: &'static str, pairs: &[(&'static str, &str)]) -> u64 {
        self.series()
            .counters
            .get(&(name, labels(pairs)))
            .copied()
            .unwrap_or(0)
    }

    /// Removes every gauge called `name` (before setting fresh values).
    pub fn clear_gauges(&self, name: &'static str) {
        self.series().gauges.retain(|(gauge, _), _| *gauge != name);
    }

    /// Everything in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let series = self.series();
        let help = self
            .help
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut out = String::new();
        let mut last_name = "";
        let mut header = |out: &mut String, name: &'static str, kind: &str| {
            if name != last_name {
                if let Some(text) = help.get(name) {
                    let _ = writeln!(out, "# HELP {name} {text}");
                }
                let _ = writeln!(out, "# TYPE {name} {kind}");
                last_name = name;
            }
        };
        for ((name, labels), value) in &series.counters {
            header(&mut out, name, "counter");
            let _ = writeln!(out, "{name}{} {value}", render_labels(labels, None));
        }
        for ((name, labels), value) in &series.gauges {
            header(&mut out, name, "gauge");
            let _ = writeln!(out, "{name}{} {value}", render_labels(labels, None));
        }
        for ((name, labels), histogram) in &series.histograms {
            header(&mut out, name, "histogram");
            for (bucket, bound) in histogram.buckets.iter().zip(LATENCY_BUCKETS_SECONDS) {
                let le = bound.to_string();
                let _ = writeln!(
                    out,
                    "{name}_bucket{} {bucket}",
                    render_labels(labels, Some(&le))
                );
            }
            let _ = writeln!(
                out,
                "{name}_bucket{} {}",
                render_labels(labels, Some("+Inf")),
                histogram.count
            );
            let _ = writeln!(
                out,
                "{name}_sum{} {}",
                render_labels(labels, None),
                histogram.sum_seconds
            );
            let _ = writeln!(
                out,
                "{name}_count{} {}",
                render_labels(labels, None),
                histogram.count
            );
        }
        let _ = writeln!(out, "# TYPE tessera_metrics_series_dropped_total counter");
        let _ = writeln!(
            out,
            "tessera_metrics_series_dropped_total {}",
            series.dropped
        );
        out
    }
}

fn render_labels(labels: &Labels, le: Option<&str>) -> String {
    if labels.is_empty() && le.is_none() {
        return String::new();
    }
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(key, value)| format!("{key}=\"{}\"", escape(value)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    format!("{{{}}}", parts.join(","))
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_and_histograms() {
        let metrics = Metrics::default();
        metrics.describe("tessera_entities_live", "Live entities.");
        metrics.gauge("tessera_entities_live", &[("tenant", "a\"b")], 3);
        metrics.observe("tessera_commit_seconds", &[], Duration::from_millis(3));
        let text = metrics.render();
        assert!(text.contains("# HELP tessera_entities_live Live entities."));
        assert!(text.contains("tessera_entities_live{tenant=\"a\\\"b\"} 3"));
        assert!(text.contains("tessera_commit_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("tessera_commit_seconds_bucket{le=\"0.001\"} 0"));
        assert!(text.contains("tessera_commit_seconds_count 1"));
    }
}
