//! The records the catalog keeps: tenants and their quotas, entity types and their versions,
//! partitions and their replicas.

use super::error::MetadataError;
use serde::{Deserialize, Serialize};
use tessera_contract::NodeId;

use super::limits::NAME_BYTES_MAX;

/// Checks a tenant or type name.
///
/// ```
/// use tessera_metadata::validate_name;
/// assert!(validate_name("counter-v2").is_ok());
/// assert!(validate_name("no spaces").is_err());
/// ```
pub fn validate_name(name: &str) -> Result<(), MetadataError> {
    let valid = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(MetadataError::InvalidName(name.to_string()))
    }
}

/// What a tenant may use. Every limit has a default; a tenant is created with them unless it
/// says otherwise.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Quotas {
    /// Linear memory per entity instance.
    pub memory_bytes_max: usize,
    /// CPU time per message.
    pub message_deadline_ms: u64,
    /// Live entities of the tenant on a node.
    pub live_entities_max: usize,
    /// Messages waiting in one entity's mailbox.
    pub mailbox_capacity: usize,
    /// Sustained messages per second accepted from clients (token bucket rate).
    pub messages_per_second: u32,
    /// Messages accepted in a burst above the rate (token bucket size).
    pub messages_burst: u32,
    /// Size of one uploaded plugin.
    pub plugin_bytes_max: usize,
    /// Plugin bytes the tenant keeps in all: the sum of the sizes of every version of every
    /// type (a deploy past it is refused with `quota_exceeded`; deleting a type frees its).
    pub plugin_bytes_total_max: usize,
    /// State bytes (keys plus values) one entity may hold.
    pub entity_state_bytes_max: usize,
    /// Committed tells one entity's outbox may hold before its receivers acknowledge them.
    pub outbox_entries_max: u64,
    /// Durable reminders one entity may hold.
    pub reminders_max: u64,
    /// Guest calls of the tenant running at once on a node; 0 means the node's default (one
    /// fewer than its cores, at least 1), so one tenant never holds every core.
    pub concurrent_guests_max: usize,
    /// Guest CPU time (milliseconds per second) the tenant may use on a node; past it its
    /// next calls wait for the next second. 0 means no budget beyond the concurrency cap.
    pub cpu_ms_per_second: u64,
    /// Replicas of the partitions that keep the entities of the tenant's types that ask for
    /// no factor of their own when first deployed (`None`: the cluster's). A type keeps the
    /// factor of its first deploy: changing this later changes no deployed type.
    pub replication_factor: Option<u8>,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            memory_bytes_max: 64 << 20,
            message_deadline_ms: 500,
            live_entities_max: 10_000,
            mailbox_capacity: 1024,
            messages_per_second: 10_000,
            messages_burst: 20_000,
            plugin_bytes_max: 32 << 20,
            plugin_bytes_total_max: 256 << 20,
            entity_state_bytes_max: 16 << 20,
            outbox_entries_max: 4_096,
            reminders_max: 1_024,
            concurrent_guests_max: 0,
            cpu_ms_per_second: 0,
            replication_factor: None,
        }
    }
}

impl Quotas {
    /// Checks every value is usable.
    pub fn validate(&self) -> Result<(), String> {
        use super::limits::quota_ceilings as max;
        let wide = |value: usize| value as u128;
        // (name, value, least, most) for every quota.
        let bounds: [(&str, u128, u128, u128); 13] = [
            (
                "memory_bytes_max",
                wide(self.memory_bytes_max),
                64 * 1024,
                wide(max::MEMORY_BYTES_MAX),
            ),
            (
                "message_deadline_ms",
                self.message_deadline_ms.into(),
                1,
                max::MESSAGE_DEADLINE_MS_MAX.into(),
            ),
            (
                "live_entities_max",
                wide(self.live_entities_max),
                1,
                wide(max::LIVE_ENTITIES_MAX),
            ),
            (
                "mailbox_capacity",
                wide(self.mailbox_capacity),
                1,
                wide(max::MAILBOX_CAPACITY_MAX),
            ),
            (
                "messages_per_second",
                self.messages_per_second.into(),
                1,
                max::MESSAGES_PER_SECOND_MAX.into(),
            ),
            (
                "messages_burst",
                self.messages_burst.into(),
                1,
                max::MESSAGES_PER_SECOND_MAX.into(),
            ),
            (
                "plugin_bytes_max",
                wide(self.plugin_bytes_max),
                1,
                wide(max::PLUGIN_BYTES_MAX),
            ),
            (
                "plugin_bytes_total_max",
                wide(self.plugin_bytes_total_max),
                1,
                wide(max::PLUGIN_BYTES_TOTAL_MAX),
            ),
            (
                "entity_state_bytes_max",
                wide(self.entity_state_bytes_max),
                1,
                wide(max::ENTITY_STATE_BYTES_MAX),
            ),
            (
                "outbox_entries_max",
                self.outbox_entries_max.into(),
                1,
                max::ENTITY_MESSAGES_MAX.into(),
            ),
            (
                "reminders_max",
                self.reminders_max.into(),
                0,
                max::ENTITY_MESSAGES_MAX.into(),
            ),
            (
                "concurrent_guests_max",
                wide(self.concurrent_guests_max),
                0,
                wide(max::CONCURRENT_GUESTS_MAX),
            ),
            (
                "cpu_ms_per_second",
                self.cpu_ms_per_second.into(),
                0,
                max::CPU_MS_PER_SECOND_MAX.into(),
            ),
        ];
        for (name, value, least, most) in bounds {
            if value < least {
                return Err(format!("{name} must be at least {least}"));
            }
            if value > most {
                return Err(format!("{name} must be at most {most}"));
            }
        }
        super::limits::check_factor(self.replication_factor, "the tenant's")
    }
}

/// A tenant: a namespace with its own plugins, entities, quotas and token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    /// The tenant's name (also its id).
    pub name: String,
    /// Hex SHA-256 of the tenant's API token; the token itself is never stored.
    pub token_sha256: String,
    /// The tenant's limits.
    pub quotas: Quotas,
    /// When it was created (ms since the Unix epoch).
    pub created_ms: u64,
}

/// Options of an entity type, given with each deployed version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TypeOptions {
    /// Remember started entities and bring them back after a restart.
    pub remember: bool,
    /// Passivate an entity after this long without a message.
    pub passivate_idle_ms: Option<u64>,
    /// Replicas of the partitions that keep the type's entities (the partition plane), 1 to
    /// [`PARTITION_REPLICAS_MAX`](crate::PARTITION_REPLICAS_MAX); `None` takes its tenant's
    /// default, or the cluster's factor. Fixed by the type's first deploy: a later version may
    /// leave it out, but may not ask for another.
    pub replication_factor: Option<u8>,
}

/// One deployed version of a type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRecord {
    /// Counted from 1 per type.
    pub version: u32,
    /// Hex SHA-256 of the component bytes.
    pub sha256: String,
    /// Size of the component.
    pub size_bytes: u64,
    /// The options deployed with it.
    pub options: TypeOptions,
    /// When it was deployed (ms since the Unix epoch).
    pub deployed_ms: u64,
}

/// An entity type of a tenant and its versions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeRecord {
    /// The tenant.
    pub tenant: String,
    /// The type name.
    pub name: String,
    /// The version new messages run on.
    pub active_version: u32,
    /// Every version, oldest first.
    pub versions: Vec<VersionRecord>,
}

impl TypeRecord {
    /// The active version's record.
    pub fn active(&self) -> Option<&VersionRecord> {
        self.version(self.active_version)
    }

    /// A version's record.
    pub fn version(&self, version: u32) -> Option<&VersionRecord> {
        self.versions
            .iter()
            .find(|record| record.version == version)
    }
}

/// A partition's committed replica set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionReplicas {
    /// Its replicas, the preferred primary first.
    pub replicas: Vec<NodeId>,
    /// The placement's generation.
    pub generation: u64,
    /// The replica set's epoch: 0 when first placed, one more at each placement that changes
    /// the set (not its order). Each epoch is a group of its own (`partition_group`); a move
    /// carries the state from one to the next (`docs/partitions.md`, "Moves").
    #[serde(default)]
    pub epoch: u64,
    /// The replica set of the epoch before (empty at epoch 0): the replicas a move's new
    /// group takes its state from.
    #[serde(default)]
    pub previous: Vec<NodeId>,
}
