//! The catalog's hard limits, named so records, errors and docs agree on them.

/// The most versions one type keeps, so a deploy loop cannot grow a record without bound.
pub const VERSIONS_PER_TYPE_MAX: usize = 1_000;

/// The longest tenant or type name, so names cannot bloat keys, logs and metric labels.
pub const NAME_BYTES_MAX: usize = 64;

/// The most partition ids a cluster may have: bounds the table, a placement command and the
/// groups a node may be asked to run.
pub const PARTITIONS_MAX: u32 = 4096;

/// The most replicas one partition may have (a VSR group of more gains nothing and costs a
/// prepare to each).
pub const PARTITION_REPLICAS_MAX: usize = 7;

/// Refuses a replication factor outside 1 to [`PARTITION_REPLICAS_MAX`] (`what` names whose
/// it is).
pub(crate) fn check_factor(factor: Option<u8>, what: &str) -> Result<(), String> {
    match factor {
        Some(factor) if factor == 0 || usize::from(factor) > PARTITION_REPLICAS_MAX => Err(
            format!("{what} replication_factor {factor}: 1 to {PARTITION_REPLICAS_MAX} allowed"),
        ),
        _ => Ok(()),
    }
}

/// Upper bounds of the tenant quotas, so no quota value can make a node allocate or wait
/// without bound (a mailbox of `usize::MAX` slots, a message deadline of a year).
pub mod quota_ceilings {
    /// Linear memory per instance: the whole 32-bit wasm address space.
    pub const MEMORY_BYTES_MAX: usize = 4 << 30;
    /// CPU time per message: ten minutes.
    pub const MESSAGE_DEADLINE_MS_MAX: u64 = 600_000;
    /// Live entities of one tenant on a node.
    pub const LIVE_ENTITIES_MAX: usize = 10_000_000;
    /// Slots of one entity's mailbox.
    pub const MAILBOX_CAPACITY_MAX: usize = 1_000_000;
    /// Messages per second, and burst, of the rate quota.
    pub const MESSAGES_PER_SECOND_MAX: u32 = 1_000_000_000;
    /// Size of one plugin: the runtime's own hard limit (`runtime::PLUGIN_BYTES_MAX`; the node
    /// checks at compile time that the two agree).
    pub const PLUGIN_BYTES_MAX: usize = 64 << 20;
    /// Plugin bytes one tenant keeps, summed over every version of every type: 1 GiB, so the
    /// blob store of every node stays bounded however many versions a tenant deploys.
    pub const PLUGIN_BYTES_TOTAL_MAX: usize = 1 << 30;
    /// State one entity may hold: 1 TiB.
    pub const ENTITY_STATE_BYTES_MAX: usize = 1 << 40;
    /// Unacknowledged tells, and reminders, one entity may hold.
    pub const ENTITY_MESSAGES_MAX: u64 = 1_000_000;
    /// Guest calls of one tenant running at once.
    pub const CONCURRENT_GUESTS_MAX: usize = 4_096;
    /// CPU milliseconds per second: 1,024 cores' worth.
    pub const CPU_MS_PER_SECOND_MAX: u64 = 1_024_000;
}
