//! How the process's wasmtime engine is sized and tuned.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The most guest pool threads a node may be configured with.
pub const GUEST_THREADS_MAX: usize = 1_024;

/// Engine-wide settings: the instance pool and the CPU-deadline clock. Per-tenant limits are
/// in [`InstanceLimits`](super::InstanceLimits).
///
/// ```
/// use tessera_runtime::RuntimeConfig;
/// let config = RuntimeConfig { instances_max: 64, ..RuntimeConfig::default() };
/// assert!(config.validate().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Live entity instances the pooling allocator has slots for.
    pub instances_max: u32,
    /// The largest linear memory any instance may have (the pool's slot size); tenant quotas
    /// can only lower it.
    pub memory_bytes_max: usize,
    /// Virtual address space reserved per linear memory. 4 GiB lets wasmtime elide bounds
    /// checks; smaller fits more instances into the address space at some bounds-check cost.
    pub memory_reservation_bytes: u64,
    /// Period of the epoch clock that enforces CPU deadlines, and the longest a guest call
    /// runs on a thread before it yields. 2 ms: a call that ends within a tick or two (a
    /// memory-hog that traps at its cap) runs on the I/O workers, and with 10 ms slices it held
    /// one of them long enough to take another tenant's asks to 5.7× their p99 alone
    /// (`docs/performance.md`, fairness); 500 wake-ups a second cost nothing measurable.
    pub epoch_tick_ms: u64,
    /// Threads that finish CPU-heavy guest calls (an epoch tick of CPU or more), off the I/O
    /// workers (`0`: one fewer than the cores, at least one — a core's worth is always left
    /// to I/O and short calls).
    pub guest_threads: usize,
    /// Guest stdout/stderr lines logged per message; the rest are counted and dropped.
    pub guest_log_lines_per_message: u32,
    /// Where compiled plugins are cached, keyed by content hash and engine. `None` disables
    /// the disk cache.
    pub compiled_cache_dir: Option<PathBuf>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            instances_max: 1_000,
            memory_bytes_max: 256 << 20,
            memory_reservation_bytes: 4 << 30,
            epoch_tick_ms: 2,
            guest_threads: 0,
            guest_log_lines_per_message: 100,
            compiled_cache_dir: None,
        }
    }
}

impl RuntimeConfig {
    /// Checks that every value is usable.
    pub fn validate(&self) -> Result<(), String> {
        if self.instances_max == 0 {
            return Err("runtime.instances_max must be at least 1".into());
        }
        if self.memory_bytes_max < 64 * 1024 {
            return Err("runtime.memory_bytes_max must be at least one wasm page (65536)".into());
        }
        if self.memory_reservation_bytes < self.memory_bytes_max as u64 {
            return Err(
                "runtime.memory_reservation_bytes must be at least runtime.memory_bytes_max".into(),
            );
        }
        if self.epoch_tick_ms == 0 {
            return Err("runtime.epoch_tick_ms must be at least 1".into());
        }
        if self.guest_threads > GUEST_THREADS_MAX {
            return Err(format!(
                "runtime.guest_threads must be at most {GUEST_THREADS_MAX} (0: one fewer than the cores)"
            ));
        }
        Ok(())
    }
}
