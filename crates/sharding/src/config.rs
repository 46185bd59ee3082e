//! Sharding configuration: every knob of the sharding layer, its default, and the validation
//! that refuses zero, empty or contradictory values before a region or coordinator starts.

use crate::lease::LeaseConfig;
use serde::Deserialize;
use std::time::Duration;

/// How long an entity may sit idle before it is passivated, unless its type or the node says
/// otherwise (Akka's default): idle entities give back their instance and memory.
pub const PASSIVATION_IDLE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(120);

pub use tessera_state::remember::RememberConfig;

/// Configuration for the coordinator and every region of a node. Durations are read from
/// config files as milliseconds (`request_timeout_ms = 750`, ...).
///
/// ```
/// use tessera_sharding::ShardingConfig;
/// let config: ShardingConfig = serde_json::from_str(r#"{ "num_shards": 64 }"#).unwrap();
/// assert_eq!(config.num_shards, 64);
/// assert_eq!(config.allocation_buffer, 1024);
/// config.validate().unwrap();
/// ```
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShardingConfig {
    /// Shards per entity type. Fixed for the life of a cluster: changing it re-homes entities.
    pub num_shards: u32,
    /// Messages buffered per shard while its allocation is in flight or while it is handed
    /// off; one more is refused with `BufferOverflow`.
    pub allocation_buffer: usize,
    /// How long a region waits for an allocation, and the default deadline of an ask.
    #[serde(rename = "request_timeout_ms", with = "duration_ms")]
    pub request_timeout: Duration,
    /// Capacity of every command channel: region inboxes, coordinator inbox, links.
    pub command_buffer: usize,
    /// If set, only members advertising this role own shards.
    pub role_constraint: Option<String>,
    /// Period of coordinator rebalance rounds and region housekeeping.
    #[serde(rename = "coordinator_tick_ms", with = "duration_ms")]
    pub coordinator_tick: Duration,
    /// Graceful spread moves per rebalance round; moves away from dead owners are not capped.
    pub rebalance_per_round: usize,
    /// Idle time after which the entity layer passivates an entity (checked every half of it,
    /// so within one and a half of it); `None` keeps it alive.
    #[serde(rename = "passivation_idle_timeout_ms", with = "option_duration_ms")]
    pub passivation_idle_timeout: Option<Duration>,
    /// Pause between a handed-off shard's entities stopping and its buffer draining.
    #[serde(rename = "handoff_drain_delay_ms", with = "duration_ms")]
    pub handoff_drain_delay: Duration,
    /// Live entities per node before the entity layer evicts the least recently used one.
    pub max_active_entities: Option<usize>,
    /// Remembered entities restarted per second after a restart or a shard move, so that
    /// recovery does not starve live traffic.
    pub recovery_rate_per_second: u32,
    /// Remember-entities write-behind settings.
    pub remember: RememberConfig,
    /// Where shards' state lives, which decides how shards move. Set by the node, not by
    /// config.
    #[serde(skip)]
    pub moves: ShardMoves,
    /// Where the partition plane's replicas go (`docs/partitions.md`).
    pub partitions: PartitionConfig,
}

/// The partition plane's placement: how many partitions, and replicas of each.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PartitionConfig {
    /// Partitions in the cluster; 0 places none (the plane off: each owner keeps its shards'
    /// state on its own disk). Unset, [`PartitionConfig::resolve`] takes
    /// [`PARTITIONS_CLUSTER_DEFAULT`] for a node of a cluster and 0 for a single node.
    pub count: Option<u32>,
    /// Replicas per partition; fewer while fewer members are eligible (one on a single node).
    pub replication_factor: usize,
    /// The cluster's voters, as the host knows them (not configured here). A first placement
    /// waits for as many eligible members as the replication factor asks, or as there are
    /// voters if fewer — so a cluster of one voter places at once and its partitions gain
    /// replicas, by moves, as members join. Unset, it waits for the replication factor.
    #[serde(skip)]
    pub voters: Option<usize>,
    /// Whether [`PartitionConfig::resolve`] filled `count` in (the config left it unset).
    #[serde(skip)]
    pub defaulted: bool,
}

/// Partitions of a cluster whose config does not say. An idle three-node cluster on a 2-core
/// machine spends about 4 % of it with 32 (2.2 % with the plane off, 4.7–5.2 % with 64:
/// `docs/partitions.md`, "What one group costs"); 32 primaries still spread over a dozen
/// nodes. The count is the cluster's for life (it decides where every entity's state lives),
/// so a cluster meant to grow larger sets more.
pub const PARTITIONS_CLUSTER_DEFAULT: u32 = 32;

impl PartitionConfig {
    /// The partition count in force (0 while unset and not yet resolved: the plane off).
    ///
    /// ```
    /// use tessera_sharding::{PartitionConfig, PARTITIONS_CLUSTER_DEFAULT};
    /// let mut clustered = PartitionConfig::default();
    /// clustered.resolve(true);
    /// assert_eq!(clustered.count(), PARTITIONS_CLUSTER_DEFAULT);
    /// let mut single = PartitionConfig::default();
    /// single.resolve(false);
    /// assert_eq!(single.count(), 0);
    /// ```
    pub fn count(&self) -> u32 {
        self.count.unwrap_or(0)
    }

    /// Fills an unset count with the default for where the node runs: the plane serves in a
    /// cluster (`clustered`) and is off on a single node, where an entity's one copy is its
    /// node's disk either way and a group of one would only add a journal. An explicit count,
    /// 0 included, is kept.
    pub fn resolve(&mut self, clustered: bool) {
        if self.count.is_none() {
            self.defaulted = true;
            self.count = Some(if clustered {
                PARTITIONS_CLUSTER_DEFAULT
            } else {
                0
            });
        }
    }

    /// Eligible members the first placement of partitions of `replicas` replicas each waits
    /// for (see [`PartitionConfig::voters`]).
    pub fn first_placement_members(&self, replicas: usize) -> usize {
        let voters = self.voters.unwrap_or(replicas);
        replicas.min(voters).max(1)
    }
}

impl Default for PartitionConfig {
    fn default() -> Self {
        PartitionConfig {
            count: None,
            replication_factor: 3,
            voters: None,
            defaulted: false,
        }
    }
}

/// Where shards' state lives, and so how shards move between nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShardMoves {
    /// Every region reads the same state store (regions in one process): a shard of a dead
    /// owner moves at once, and a handoff moves no rows.
    #[default]
    SharedState,
    /// Each owner keeps its shards' state on its own disk (a cluster of processes). Shards
    /// move only by handoff, their state with them: on joins, graceful leaves and spread
    /// rounds. A shard whose owner is down or cut off stays with it and answers
    /// `shard_unavailable` until the owner returns — or until an operator removes the owner
    /// (its state declared lost) and the owner's lease has run out.
    OwnerHoldsState(LeaseConfig),
}

impl Default for ShardingConfig {
    fn default() -> Self {
        ShardingConfig {
            num_shards: 128,
            allocation_buffer: 1024,
            request_timeout: Duration::from_millis(750),
            command_buffer: 65_536,
            role_constraint: None,
            coordinator_tick: Duration::from_millis(50),
            rebalance_per_round: 10,
            passivation_idle_timeout: Some(PASSIVATION_IDLE_TIMEOUT_DEFAULT),
            handoff_drain_delay: Duration::from_millis(1),
            max_active_entities: None,
            recovery_rate_per_second: 1000,
            remember: RememberConfig::default(),
            moves: ShardMoves::default(),
            partitions: PartitionConfig::default(),
        }
    }
}

/// Why a [`ShardingConfig`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A count, capacity or duration that must be positive is zero.
    #[error("sharding config: `{field}` must be greater than zero")]
    Zero {
        /// The offending field.
        field: &'static str,
    },
    /// `role_constraint` is set but blank, so no member could ever match it.
    #[error("sharding config: `role_constraint` must not be empty when set")]
    EmptyRoleConstraint,
    /// The handoff drain delay is not shorter than the request timeout, so every ask that meets
    /// a moving shard would time out.
    #[error(
        "sharding config: `handoff_drain_delay` ({drain_ms} ms) must be shorter than \
         `request_timeout` ({timeout_ms} ms)"
    )]
    DrainOutlastsTimeout {
        /// The configured drain delay.
        drain_ms: u128,
        /// The configured request timeout.
        timeout_ms: u128,
    },
    /// A partition setting beyond what the catalog takes.
    #[error("sharding config: `{field}` is {value}, at most {max} allowed")]
    TooLarge {
        /// The offending field.
        field: &'static str,
        /// Its value.
        value: usize,
        /// The largest allowed.
        max: usize,
    },
    /// A per-shard buffer larger than the command channel it drains into cannot be drained.
    #[error(
        "sharding config: `allocation_buffer` ({allocation_buffer}) must not exceed \
         `command_buffer` ({command_buffer})"
    )]
    BufferExceedsChannel {
        /// The configured per-shard buffer.
        allocation_buffer: usize,
        /// The configured channel capacity.
        command_buffer: usize,
    },
}

impl ShardingConfig {
    /// Checks every value; the first problem found is returned.
    ///
    /// ```
    /// use tessera_sharding::{ConfigError, ShardingConfig};
    /// let config = ShardingConfig { num_shards: 0, ..ShardingConfig::default() };
    /// assert_eq!(config.validate(), Err(ConfigError::Zero { field: "num_shards" }));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        let counts = [
            ("num_shards", self.num_shards as usize),
            ("allocation_buffer", self.allocation_buffer),
            ("command_buffer", self.command_buffer),
            ("rebalance_per_round", self.rebalance_per_round),
            (
                "recovery_rate_per_second",
                self.recovery_rate_per_second as usize,
            ),
            ("remember.queue_capacity", self.remember.queue_capacity),
            ("remember.event_buffer", self.remember.event_buffer),
            ("max_active_entities", self.max_active_entities.unwrap_or(1)),
            (
                "partitions.replication_factor",
                self.partitions.replication_factor,
            ),
        ];
        if let Some((field, _)) = counts.iter().find(|(_, value)| *value == 0) {
            return Err(ConfigError::Zero { field });
        }
        let durations = [
            ("request_timeout", self.request_timeout),
            ("coordinator_tick", self.coordinator_tick),
            (
                "passivation_idle_timeout",
                self.passivation_idle_timeout.unwrap_or(Duration::MAX),
            ),
        ];
        if let Some((field, _)) = durations.iter().find(|(_, value)| value.is_zero()) {
            return Err(ConfigError::Zero { field });
        }
        if self
            .role_constraint
            .as_deref()
            .is_some_and(|role| role.trim().is_empty())
        {
            return Err(ConfigError::EmptyRoleConstraint);
        }
        if self.handoff_drain_delay >= self.request_timeout {
            return Err(ConfigError::DrainOutlastsTimeout {
                drain_ms: self.handoff_drain_delay.as_millis(),
                timeout_ms: self.request_timeout.as_millis(),
            });
        }
        let bounds = [
            (
                "partitions.count",
                self.partitions.count() as usize,
                tessera_metadata::PARTITION_COUNT_MAX as usize,
            ),
            (
                "partitions.replication_factor",
                self.partitions.replication_factor,
                tessera_metadata::PARTITION_REPLICAS_MAX,
            ),
        ];
        if let Some((field, value, max)) = bounds.iter().find(|(_, value, max)| value > max) {
            return Err(ConfigError::TooLarge {
                field,
                value: *value,
                max: *max,
            });
        }
        if self.allocation_buffer > self.command_buffer {
            return Err(ConfigError::BufferExceedsChannel {
                allocation_buffer: self.allocation_buffer,
                command_buffer: self.command_buffer,
            });
        }
        Ok(())
    }
}

mod duration_ms {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}

mod option_duration_ms {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<u64>::deserialize(deserializer).map(|value| value.map(Duration::from_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_state::remember::FailurePolicy;

    #[test]
    fn defaults_match_the_seed_and_validate() {
        let config = ShardingConfig::default();
        assert_eq!(config.num_shards, 128);
        assert_eq!(config.allocation_buffer, 1024);
        assert_eq!(config.request_timeout, Duration::from_millis(750));
        assert_eq!(config.command_buffer, 65_536);
        assert_eq!(config.coordinator_tick, Duration::from_millis(50));
        assert_eq!(config.rebalance_per_round, 10);
        assert_eq!(
            config.passivation_idle_timeout,
            Some(Duration::from_secs(120))
        );
        assert_eq!(config.remember.queue_capacity, 4096);
        assert_eq!(config.remember.failure_policy, FailurePolicy::FailOpen);
        assert_eq!(config.remember.event_buffer, 1024);
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn every_zero_is_refused_by_name() {
        let base = ShardingConfig::default();
        let cases: Vec<(ShardingConfig, &str)> = vec![
            (
                ShardingConfig {
                    num_shards: 0,
                    ..base.clone()
                },
                "num_shards",
            ),
            (
                ShardingConfig {
                    allocation_buffer: 0,
                    ..base.clone()
                },
                "allocation_buffer",
            ),
            (
                ShardingConfig {
                    command_buffer: 0,
                    ..base.clone()
                },
                "command_buffer",
            ),
            (
                ShardingConfig {
                    rebalance_per_round: 0,
                    ..base.clone()
                },
                "rebalance_per_round",
            ),
            (
                ShardingConfig {
                    recovery_rate_per_second: 0,
                    ..base.clone()
                },
                "recovery_rate_per_second",
            ),
            (
                ShardingConfig {
                    max_active_entities: Some(0),
                    ..base.clone()
                },
                "max_active_entities",
            ),
            (
                ShardingConfig {
                    request_timeout: Duration::ZERO,
                    ..base.clone()
                },
                "request_timeout",
            ),
            (
                ShardingConfig {
                    coordinator_tick: Duration::ZERO,
                    ..base.clone()
                },
                "coordinator_tick",
            ),
            (
                ShardingConfig {
                    passivation_idle_timeout: Some(Duration::ZERO),
                    ..base.clone()
                },
                "passivation_idle_timeout",
            ),
            (
                ShardingConfig {
                    remember: RememberConfig {
                        queue_capacity: 0,
                        ..RememberConfig::default()
                    },
                    ..base.clone()
                },
                "remember.queue_capacity",
            ),
            (
                ShardingConfig {
                    remember: RememberConfig {
                        event_buffer: 0,
                        ..RememberConfig::default()
                    },
                    ..base.clone()
                },
                "remember.event_buffer",
            ),
        ];
        for (config, field) in cases {
            assert_eq!(
                config.validate(),
                Err(ConfigError::Zero { field }),
                "{field}"
            );
        }
    }

    #[test]
    fn empty_and_contradictory_values_are_refused() {
        let base = ShardingConfig::default();
        let blank_role = ShardingConfig {
            role_constraint: Some("  ".into()),
            ..base.clone()
        };
        assert_eq!(blank_role.validate(), Err(ConfigError::EmptyRoleConstraint));
        let slow_drain = ShardingConfig {
            handoff_drain_delay: Duration::from_secs(1),
            ..base.clone()
        };
        assert!(matches!(
            slow_drain.validate(),
            Err(ConfigError::DrainOutlastsTimeout { .. })
        ));
        let big_buffer = ShardingConfig {
            allocation_buffer: 10,
            command_buffer: 5,
            ..base
        };
        let error = big_buffer.validate().unwrap_err();
        assert!(error.to_string().contains("allocation_buffer"), "{error}");
    }

    #[test]
    fn reads_from_a_config_file_in_milliseconds() {
        let text = r#"{ "request_timeout_ms": 100, "passivation_idle_timeout_ms": 30000,
            "role_constraint": "shard", "remember": { "failure_policy": "FailClosed" } }"#;
        let config: ShardingConfig = serde_json::from_str(text).unwrap();
        assert_eq!(config.request_timeout, Duration::from_millis(100));
        assert_eq!(
            config.passivation_idle_timeout,
            Some(Duration::from_secs(30))
        );
        assert_eq!(config.remember.failure_policy, FailurePolicy::FailClosed);
        assert_eq!(config.remember.queue_capacity, 4096);
        assert!(serde_json::from_str::<ShardingConfig>(r#"{ "shards": 1 }"#).is_err());
    }
}
