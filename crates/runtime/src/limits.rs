//! Per-instance limits (from the tenant's quota) and the memory limiter that enforces them.

use serde::{Deserialize, Serialize};

/// The most table elements an instance may grow to, so a guest cannot exhaust host memory
/// through tables.
pub const TABLE_ELEMENTS_MAX: usize = 100_000;

/// The most bytes one state key may have.
pub const STATE_KEY_BYTES_MAX: usize = 1024;

/// Limits applied to one entity instance and each message it handles.
///
/// ```
/// use tessera_runtime::InstanceLimits;
/// let limits = InstanceLimits { memory_bytes_max: 16 << 20, ..InstanceLimits::default() };
/// assert!(limits.memory_bytes_max < InstanceLimits::default().memory_bytes_max);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InstanceLimits {
    /// Linear memory an instance may grow to.
    pub memory_bytes_max: usize,
    /// CPU time one message may use in the guest (epoch granularity).
    pub message_deadline_ms: u64,
    /// The largest reply a message may return.
    pub reply_bytes_max: usize,
    /// The most state bytes (keys plus values) one message may write.
    pub message_write_bytes_max: usize,
    /// The most state bytes (keys plus values) one entity may hold.
    pub entity_state_bytes_max: usize,
    /// The most `ask` calls one message may make.
    pub message_asks_max: u32,
    /// The most `tell` calls (and timers) one message may make.
    pub message_tells_max: u32,
    /// The longest `ask` timeout a guest may request.
    pub ask_timeout_ms_max: u32,
    /// The largest payload of one `tell`, `ask` or `schedule`.
    pub effect_payload_bytes_max: usize,
    /// The most payload bytes one message may queue in tells and reminders together.
    pub message_effect_bytes_max: usize,
    /// Wall-clock time one guest call (`activate`, `handle`, `deactivate`) may take, not
    /// counting time spent waiting on its asks: bounds a guest blocked in a host call (a WASI
    /// sleep), which the CPU deadline does not see. The node sets it to 10x the tenant's
    /// `message_deadline_ms`, at least 1 s.
    pub message_wall_ms_max: u64,
    /// Unacknowledged tells one entity's outbox may hold (the tenant's `outbox_entries_max`).
    pub outbox_entries_max: u64,
    /// Durable reminders one entity may hold (the tenant's `reminders_max`).
    pub reminders_max: u64,
    /// The tenant's guest calls running at once on this node.
    pub concurrent_guests_max: usize,
    /// The tenant's guest CPU milliseconds per second on this node; 0 for no budget.
    pub cpu_ms_per_second: u64,
    /// The tenant's message rate (`messages_per_second`), which its entities' tells are
    /// delivered at and their asks sent at, too; 0 for none.
    pub messages_per_second: u32,
    /// The burst above that rate (`messages_burst`).
    pub messages_burst: u32,
}

impl Default for InstanceLimits {
    fn default() -> Self {
        InstanceLimits {
            memory_bytes_max: 64 << 20,
            message_deadline_ms: 500,
            reply_bytes_max: 4 << 20,
            message_write_bytes_max: 4 << 20,
            entity_state_bytes_max: 64 << 20,
            message_asks_max: 64,
            message_tells_max: 1024,
            ask_timeout_ms_max: 30_000,
            effect_payload_bytes_max: 1 << 20,
            message_effect_bytes_max: 4 << 20,
            message_wall_ms_max: 5_000,
            outbox_entries_max: 4_096,
            reminders_max: 1_024,
            concurrent_guests_max: 4_096,
            cpu_ms_per_second: 0,
            messages_per_second: 0,
            messages_burst: 0,
        }
    }
}

/// The wall-clock bound the node gives a guest call for a CPU deadline of `deadline_ms`.
///
/// ```
/// use tessera_runtime::wall_bound_ms;
/// assert_eq!(wall_bound_ms(500), 5_000);
/// assert_eq!(wall_bound_ms(10), 1_000);
/// ```
pub fn wall_bound_ms(deadline_ms: u64) -> u64 {
    deadline_ms.saturating_mul(10).max(1_000)
}

/// Enforces the memory and table caps and remembers whether the memory cap was hit, so a
/// failed allocation can be reported as a memory-limit error rather than a bare trap.
pub(crate) struct MemoryLimiter {
    pub(crate) memory_bytes_max: usize,
    pub(crate) memory_limit_hit: bool,
    /// The largest size a memory of the instance was allowed to reach, in bytes.
    pub(crate) memory_bytes_peak: usize,
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes_max {
            self.memory_limit_hit = true;
            return Ok(false);
        }
        self.memory_bytes_peak = self.memory_bytes_peak.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= TABLE_ELEMENTS_MAX)
    }
}
