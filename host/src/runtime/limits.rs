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
/// use tessera_host::runtime::InstanceLimits;
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
        }
    }
}

/// Enforces the memory and table caps and remembers whether the memory cap was hit, so a
/// failed allocation can be reported as a memory-limit error rather than a bare trap.
pub(crate) struct MemoryLimiter {
    pub(crate) memory_bytes_max: usize,
    pub(crate) memory_limit_hit: bool,
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
