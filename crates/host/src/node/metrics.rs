//! `/metrics`: every counter the layers keep, rendered in the Prometheus text format by the
//! `prometheus-client` crate. Nothing is copied on the message path: each layer keeps its own
//! atomics (entity, region, state, remember writer, runtime, HTTP edge) and a scrape reads them
//! into one snapshot. Label values come only from tenants and types that exist; the names are
//! listed in `docs/api.md`.

use super::metric_families::{Kind, Sample, Snapshot, Value};
use super::{Node, NodeError};
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tessera_contract::{ErrorKind, TypeKey};
use tessera_entity::{ACTIVATION_REASONS, COMMIT_BUCKETS_US};

/// The `Content-Type` of `/metrics`.
pub const METRICS_CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Refusals by tenant quotas, by `(tenant, type, quota)`; the type is empty for refusals not
/// tied to an existing type. Bounded by tenants × types × quota kinds, all of which exist.
#[derive(Default)]
pub(crate) struct QuotaRejections {
    counts: Mutex<HashMap<(String, String, &'static str), u64>>,
}

impl QuotaRejections {
    fn count(&self, tenant: &str, entity_type: &str, quota: &'static str) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        *counts
            .entry((tenant.to_string(), entity_type.to_string(), quota))
            .or_default() += 1;
    }

    fn snapshot(&self) -> Vec<((String, String, &'static str), u64)> {
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts
            .iter()
            .map(|(key, count)| (key.clone(), *count))
            .collect()
    }
}

impl Node {
    /// Counts a refusal by a tenant quota. `entity_type` is used as a label only if the type
    /// exists, so client input cannot create series.
    pub fn count_quota_rejection(
        &self,
        tenant: &str,
        entity_type: Option<&str>,
        quota: &'static str,
    ) {
        let known = entity_type
            .filter(|name| {
                self.entities
                    .types()
                    .get(&TypeKey::new(tenant, *name))
                    .is_some()
            })
            .unwrap_or("");
        if self.catalog.tenant(tenant).is_some() {
            self.quota_rejections.count(tenant, known, quota);
        }
    }

    /// Quota refusals counted so far for `(tenant, type, quota)` (type `""`: not tied to one).
    pub fn quota_rejections(&self, tenant: &str, entity_type: &str, quota: &str) -> u64 {
        self.quota_rejections
            .snapshot()
            .into_iter()
            .filter(|((t, ty, q), _)| t == tenant && ty == entity_type && *q == quota)
            .map(|(_, count)| count)
            .sum()
    }

    /// The node's metrics in the Prometheus text format (version 0.0.4).
    pub fn render_metrics(&self) -> Result<String, NodeError> {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self.snapshot()));
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
            .map_err(|_| NodeError::Config("metrics could not be rendered".into()))?;
        Ok(text)
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot::default();
        self.snapshot_types(&mut snapshot);
        self.snapshot_layers(&mut snapshot);
        self.snapshot_cluster(&mut snapshot);
        let mut rejections: BTreeMap<(String, String, &'static str), u64> =
            self.quota_rejections.snapshot().into_iter().collect();
        // Refusals by the entity layer's quotas count as quota rejections too.
        for (key, counters) in self.entities.all_counters() {
            for (kind, quota) in [
                (ErrorKind::MailboxFull, "mailbox_depth"),
                (ErrorKind::QuotaExceeded, "live_entities"),
            ] {
                let count = counters.failures_of(kind);
                if count > 0 {
                    let labels = (key.tenant.clone(), key.entity_type.clone(), quota);
                    *rejections.entry(labels).or_default() += count;
                }
            }
        }
        let family = snapshot.family(
            "tessera_quota_rejections",
            "Messages and uploads refused by a tenant quota.",
            Kind::Counter,
        );
        for ((tenant, entity_type, quota), count) in rejections {
            family.push(Sample::counter(
                vec![
                    ("tenant", tenant),
                    ("type", entity_type),
                    ("quota", quota.into()),
                ],
                count,
            ));
        }
        snapshot
    }

    /// Per `(tenant, type)`: messages, failures by kind, activations, passivations, commit
    /// latency, live entities and mailbox depth — for types the entity layer has seen.
    fn snapshot_types(&self, snapshot: &mut Snapshot) {
        let live = self.entities.live_by_type();
        let depths = self.entities.mailbox_depths();
        for (key, counters) in self.entities.all_counters() {
            let labels = || {
                vec![
                    ("tenant", key.tenant.clone()),
                    ("type", key.entity_type.clone()),
                ]
            };
            let with = |name: &'static str, value: &str| {
                let mut labels = labels();
                labels.push((name, value.to_string()));
                labels
            };
            snapshot
                .family("tessera_messages", "Messages handled.", Kind::Counter)
                .push(Sample::counter(labels(), counters.messages.sum()));
            let errors = snapshot.family(
                "tessera_message_errors",
                "Messages that failed, by error kind.",
                Kind::Counter,
            );
            for kind in ErrorKind::all() {
                let count = counters.failures_of(kind);
                if count > 0 {
                    errors.push(Sample::counter(with("kind", kind.code()), count));
                }
            }
            let activations = snapshot.family(
                "tessera_activations",
                "Activations, by reason.",
                Kind::Counter,
            );
            for (reason, count) in ACTIVATION_REASONS.iter().zip(&counters.activations) {
                activations.push(Sample::counter(with("reason", reason), load(count)));
            }
            snapshot
                .family("tessera_passivations", "Passivations.", Kind::Counter)
                .push(Sample::counter(labels(), load(&counters.passivations)));
            let mut buckets: Vec<(f64, u64)> = COMMIT_BUCKETS_US
                .iter()
                .zip(&counters.commit_buckets)
                .map(|(bound, count)| (*bound as f64 / 1e6, load(count)))
                .collect();
            buckets.push((
                f64::INFINITY,
                load(&counters.commit_buckets[COMMIT_BUCKETS_US.len()]),
            ));
            let count = buckets.iter().map(|(_, count)| count).sum();
            snapshot
                .family(
                    "tessera_commit_seconds",
                    "Time from a message's commit request to its durable commit.",
                    Kind::Histogram,
                )
                .push(Sample {
                    labels: labels(),
                    value: Value::Histogram {
                        sum: load(&counters.commit_micros_sum) as f64 / 1e6,
                        count,
                        buckets,
                    },
                });
            snapshot
                .family(
                    "tessera_entities_live",
                    "Live entities on this node.",
                    Kind::Gauge,
                )
                .push(Sample::gauge(
                    labels(),
                    live.get(&key).copied().unwrap_or(0) as i64,
                ));
            snapshot
                .family(
                    "tessera_mailbox_depth",
                    "Messages waiting in the mailboxes of live entities.",
                    Kind::Gauge,
                )
                .push(Sample::gauge(
                    labels(),
                    depths.get(&key).copied().unwrap_or(0) as i64,
                ));
        }
    }

    /// Node-wide counters of the entity, sharding, state and runtime layers.
    fn snapshot_layers(&self, snapshot: &mut Snapshot) {
        let entities = self.entities.stats();
        let plain: [(&'static str, &'static str, u64); 15] = [
            (
                "tessera_entity_evictions",
                "Live entities passivated to respect the node's active-entity limit.",
                load(&entities.evictions),
            ),
            (
                "tessera_mailbox_rejections",
                "Messages refused because a mailbox was full.",
                load(&entities.mailbox_rejections),
            ),
            (
                "tessera_tells_throttled",
                "Entities' tells that waited for their tenant's message rate before delivery.",
                load(&entities.throttled_tells),
            ),
            (
                "tessera_asks_throttled",
                "Guests' asks that waited for their tenant's message rate before they were sent.",
                load(&entities.throttled_asks),
            ),
            (
                "tessera_guest_calls_throttled",
                "Guest calls that waited at their tenant's gate (concurrency cap or CPU budget).",
                load(&entities.throttled_calls),
            ),
            (
                "tessera_instance_swaps",
                "Instances given back to a full pool by idle live entities.",
                load(&entities.instance_swaps),
            ),
            (
                "tessera_instances_discarded",
                "Instances discarded after a trap, deadline, memory cap or oversized reply.",
                load(&entities.instance_discards),
            ),
            (
                "tessera_outbox_enqueued",
                "Tells committed to entities' outboxes.",
                load(&entities.outbox_enqueued),
            ),
            (
                "tessera_redeliveries",
                "Tells and reminders sent again after an unacknowledged attempt.",
                load(&entities.redeliveries),
            ),
            (
                "tessera_duplicates_dropped",
                "Messages a receiver had already committed, acknowledged without running again.",
                load(&entities.duplicates_dropped),
            ),
            (
                "tessera_activation_failures",
                "Activations refused because the guest's activate (a migration) failed or trapped; \
                 the entity kept its old state.",
                load(&entities.activation_failures),
            ),
            (
                "tessera_dead_letters",
                "Tells and reminders given up (answered with an error, or retried too long).",
                load(&entities.dead_letters),
            ),
            (
                "tessera_reminders_fired",
                "Durable reminders fired and committed.",
                load(&entities.reminders_fired),
            ),
            (
                "tessera_expired_asks",
                "Asks not executed because their deadline passed before they started.",
                load(&entities.expired_asks),
            ),
            (
                "tessera_guest_log_lines_dropped",
                "Guest log lines dropped by the per-message budget.",
                load(&entities.guest_log_lines_dropped),
            ),
        ];
        for (name, help, value) in plain {
            snapshot
                .family(name, help, Kind::Counter)
                .push(Sample::counter(Vec::new(), value));
        }
        if let Ok((outbox, reminders)) = self.entities.state().pending_messages() {
            snapshot
                .family(
                    "tessera_outbox_depth",
                    "Committed tells not yet acknowledged by their receivers, node-wide.",
                    Kind::Gauge,
                )
                .push(Sample::gauge(Vec::new(), outbox as i64));
            snapshot
                .family(
                    "tessera_reminders_pending",
                    "Durable reminders waiting to fire, node-wide.",
                    Kind::Gauge,
                )
                .push(Sample::gauge(Vec::new(), reminders as i64));
        }
        let region = self.region.counters();
        let refused = snapshot.family(
            "tessera_region_refused",
            "Envelopes the region refused, by error kind.",
            Kind::Counter,
        );
        for (kind, count) in &region.refused {
            refused.push(Sample::counter(vec![("kind", kind.to_string())], *count));
        }
        let region_counters = [
            (
                "tessera_region_tells_dropped",
                "Tells that failed after the region accepted them.",
                region.tells_dropped,
            ),
            (
                "tessera_region_forwarded",
                "Envelopes forwarded to another region.",
                region.forwarded,
            ),
            (
                "tessera_region_forwards_refused",
                "Forwarded envelopes the receiving region refused, from its per-envelope batch \
                 results.",
                region.forwards_refused,
            ),
            (
                "tessera_region_asks_orphaned",
                "Forwarded asks ended with a timeout (outcome unknown) because the connection to \
                 their owner was lost and did not come back.",
                region.asks_orphaned,
            ),
            (
                "tessera_region_shard_parts_sent",
                "Parts of shard state sent to a shard's new owner during handoffs.",
                region.shard_parts_sent,
            ),
            (
                "tessera_region_shard_parts_installed",
                "Parts of shard state installed here (shards this node took over).",
                region.shard_parts_installed,
            ),
            (
                "tessera_region_shard_parts_refused",
                "Parts of shard state refused from a peer (unknown type, a shard served here, \
                 or entities outside the shard).",
                region.shard_parts_refused,
            ),
            (
                "tessera_region_shard_transfer_stalls",
                "Times a shard's state transfer from here could not progress: a part refused, \
                 unanswered or not sent 8 times in a row (logged as an error; the transfer \
                 starts over).",
                region.shard_transfer_stalls,
            ),
            (
                "tessera_plugin_compilations",
                "Components compiled (disk-cache hits do not count).",
                self.runtime.compilations(),
            ),
            (
                "tessera_instances_retired",
                "Instances whose memory grew large, dropped on the retiring thread instead of an \
                 I/O worker.",
                self.runtime.retired_instances(),
            ),
        ];
        for (name, help, value) in region_counters {
            snapshot
                .family(name, help, Kind::Counter)
                .push(Sample::counter(Vec::new(), value));
        }
        if let Some(commits) = self.state.commit_stats() {
            let commit_counters = [
                (
                    "tessera_commit_transactions",
                    "Durable transactions of the group committer.",
                    load(&commits.transactions),
                ),
                (
                    "tessera_commit_write_sets",
                    "Message write sets committed.",
                    load(&commits.write_sets),
                ),
                (
                    "tessera_commit_remember_ops",
                    "Remembered-id changes committed.",
                    load(&commits.remember_ops),
                ),
                (
                    "tessera_commit_failures",
                    "Group-commit transactions that failed.",
                    load(&commits.failures),
                ),
            ];
            for (name, help, value) in commit_counters {
                snapshot
                    .family(name, help, Kind::Counter)
                    .push(Sample::counter(Vec::new(), value));
            }
        }
        let remember = self.remember.stats();
        let remember_counters = [
            (
                "tessera_remember_committed",
                "Remembered-id records committed.",
                load(&remember.committed),
            ),
            (
                "tessera_remember_failed",
                "Remembered-id records the store failed.",
                load(&remember.failed),
            ),
            (
                "tessera_remember_dropped",
                "Remembered-id records refused by a full queue.",
                load(&remember.dropped),
            ),
        ];
        for (name, help, value) in remember_counters {
            snapshot
                .family(name, help, Kind::Counter)
                .push(Sample::counter(Vec::new(), value));
        }
        self.snapshot_edge(snapshot);
    }

    /// The HTTP edge's connection and timeout counters.
    fn snapshot_edge(&self, snapshot: &mut Snapshot) {
        let edge = self.edge.snapshot();
        let edge_counters = [
            (
                "tessera_http_connections",
                "HTTP connections accepted and served.",
                edge.connections,
            ),
            (
                "tessera_http_connections_shed",
                "HTTP connections closed to make room for a newcomer near api.connections_max \
                 (idle, or never authenticated).",
                edge.connections_shed,
            ),
            (
                "tessera_http_header_timeouts",
                "HTTP connections closed because a request head did not arrive in time.",
                edge.header_timeouts,
            ),
            (
                "tessera_http_body_timeouts",
                "HTTP requests answered 408 because their body did not arrive in time.",
                edge.body_timeouts,
            ),
        ];
        for (name, help, value) in edge_counters {
            snapshot
                .family(name, help, Kind::Counter)
                .push(Sample::counter(Vec::new(), value));
        }
        let refused = snapshot.family(
            "tessera_http_connections_refused",
            "HTTP connections answered 503 and closed, by the bound that refused them.",
            Kind::Counter,
        );
        for (reason, value) in [
            ("connections_max", edge.connections_refused),
            ("per_address", edge.connections_refused_per_address),
            ("admin_reserve", edge.connections_refused_admin_reserve),
        ] {
            refused.push(Sample::counter(vec![("reason", reason.into())], value));
        }
    }
}

fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}
