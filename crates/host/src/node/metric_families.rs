//! One scrape's worth of metric families, gathered by the node and encoded in the Prometheus
//! text format by the `prometheus-client` registry.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

#[derive(Debug)]
pub(super) enum Value {
    Counter(u64),
    Gauge(i64),
    Histogram {
        sum: f64,
        count: u64,
        buckets: Vec<(f64, u64)>,
    },
}

#[derive(Debug)]
pub(super) struct Sample {
    pub(super) labels: Vec<(&'static str, String)>,
    pub(super) value: Value,
}

impl Sample {
    pub(super) fn counter(labels: Vec<(&'static str, String)>, value: u64) -> Self {
        Sample {
            labels,
            value: Value::Counter(value),
        }
    }

    pub(super) fn gauge(labels: Vec<(&'static str, String)>, value: i64) -> Self {
        Sample {
            labels,
            value: Value::Gauge(value),
        }
    }
}

#[derive(Debug)]
struct Family {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    samples: Vec<Sample>,
}

/// Everything one scrape read, encoded by the `prometheus-client` registry.
#[derive(Debug, Default)]
pub(super) struct Snapshot {
    families: Vec<Family>,
}

impl Snapshot {
    pub(super) fn family(
        &mut self,
        name: &'static str,
        help: &'static str,
        kind: Kind,
    ) -> &mut Vec<Sample> {
        let index = match self.families.iter().position(|family| family.name == name) {
            Some(index) => index,
            None => {
                self.families.push(Family {
                    name,
                    help,
                    kind,
                    samples: Vec::new(),
                });
                self.families.len() - 1
            }
        };
        &mut self.families[index].samples
    }
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in &self.families {
            let metric_type = match family.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Histogram => MetricType::Histogram,
            };
            let mut family_encoder =
                encoder.encode_descriptor(family.name, family.help, None, metric_type)?;
            for sample in &family.samples {
                let mut metric = family_encoder.encode_family(&sample.labels)?;
                match &sample.value {
                    Value::Counter(value) => {
                        metric.encode_counter::<NoLabelSet, _, u64>(value, None)?
                    }
                    Value::Gauge(value) => metric.encode_gauge(value)?,
                    Value::Histogram {
                        sum,
                        count,
                        buckets,
                    } => metric.encode_histogram::<NoLabelSet>(*sum, *count, buckets, None)?,
                }
            }
        }
        Ok(())
    }
}

impl Snapshot {
    /// The sum of every sample of family `name` (a counter's count, a gauge's value; a
    /// histogram's observations), 0 if the scrape has none: the node-wide number the
    /// dashboard shows.
    pub(super) fn total(&self, name: &str) -> u64 {
        let Some(family) = self.families.iter().find(|family| family.name == name) else {
            return 0;
        };
        family
            .samples
            .iter()
            .map(|sample| match &sample.value {
                Value::Counter(value) => *value,
                Value::Gauge(value) => u64::try_from(*value).unwrap_or(0),
                Value::Histogram { count, .. } => *count,
            })
            .sum()
    }
}
