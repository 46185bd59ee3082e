//! The bounds and timeouts of a replica. Every queue a replica holds is capped by a constant
//! here, and every timeout is counted in ticks of the host's clock so the simulator can drive
//! time.

use thiserror::Error;

use super::message::ReplicaIndex;

/// The largest cluster this implementation supports: quorums are counted in small vectors and
/// five replicas already tolerate two failures.
pub const REPLICA_COUNT_MAX: u8 = 5;

/// Ops the primary may have prepared but not yet committed. Bounds the work a primary keeps in
/// flight (and retransmits) so a slow quorum applies backpressure instead of growing memory.
pub const PIPELINE_PREPARE_QUEUE_MAX: u64 = 8;

/// Requests the primary holds while its pipeline is full. Beyond this a request is dropped and
/// counted; the client retries.
pub const REQUEST_QUEUE_MAX: usize = 256;

/// Requests batched into one op when batching is on. Bounds the size of a prepare.
pub const BATCH_REQUESTS_MAX: usize = 64;

/// Ops a log may hold. There is no checkpointing yet, so the whole log lives in memory and
/// travels in view-change messages; this caps both. A full log stops accepting requests.
pub const LOG_OPS_MAX: u64 = 1 << 16;

/// Client sessions kept for at-most-once execution. When full, the session whose last request
/// committed earliest is evicted (a deterministic choice, so every replica evicts the same one).
pub const CLIENT_SESSIONS_MAX: usize = 1024;

/// Prepares the primary resends per backup per retransmission, and per repair request: bounds
/// the burst one lagging backup can cause.
pub const REPAIR_PREPARES_MAX: u64 = 16;

/// Ticks between protocol timers. Defaults suit a tick of about 10 ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// The primary sends a commit heartbeat this often.
    pub heartbeat_interval_ticks: u64,
    /// A backup that hears nothing from its primary for this long starts a view change.
    pub primary_silence_timeout_ticks: u64,
    /// A view change that has not completed after this long moves on to the next view.
    pub view_change_timeout_ticks: u64,
    /// View-change messages, retransmitted prepares, repair and recovery requests are resent
    /// this often.
    pub resend_interval_ticks: u64,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            heartbeat_interval_ticks: 4,
            primary_silence_timeout_ticks: 30,
            view_change_timeout_ticks: 40,
            resend_interval_ticks: 6,
        }
    }
}

/// The configuration of one replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Replicas in the cluster, `1..=REPLICA_COUNT_MAX`.
    pub replica_count: u8,
    /// This replica's index, `0..replica_count`.
    pub replica: ReplicaIndex,
    /// Requests per op, `1..=BATCH_REQUESTS_MAX`; 1 turns batching off.
    pub batch_requests_max: usize,
    /// Protocol timers.
    pub timeouts: Timeouts,
    /// Deliberately broken: the primary commits as soon as it has prepared, without a quorum.
    /// Exists only so the simulator can prove that its checkers catch a broken replica.
    #[doc(hidden)]
    pub canary_commit_without_quorum: bool,
}

/// A configuration that cannot work.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `replica_count` is 0 or above [`REPLICA_COUNT_MAX`].
    #[error("replica count {0} outside 1..={REPLICA_COUNT_MAX}")]
    ReplicaCount(u8),
    /// `replica` is not below `replica_count`.
    #[error("replica index {replica} not below replica count {replica_count}")]
    ReplicaIndex {
        /// The index given.
        replica: ReplicaIndex,
        /// The cluster size.
        replica_count: u8,
    },
    /// `batch_requests_max` is 0 or above [`BATCH_REQUESTS_MAX`].
    #[error("batch size {0} outside 1..={BATCH_REQUESTS_MAX}")]
    BatchSize(usize),
}

impl Config {
    /// A configuration with default timeouts and batching on.
    pub fn new(replica_count: u8, replica: ReplicaIndex) -> Config {
        Config {
            replica_count,
            replica,
            batch_requests_max: BATCH_REQUESTS_MAX,
            timeouts: Timeouts::default(),
            canary_commit_without_quorum: false,
        }
    }

    /// Checks the bounds documented on each field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.replica_count == 0 || self.replica_count > REPLICA_COUNT_MAX {
            return Err(ConfigError::ReplicaCount(self.replica_count));
        }
        if self.replica >= self.replica_count {
            return Err(ConfigError::ReplicaIndex {
                replica: self.replica,
                replica_count: self.replica_count,
            });
        }
        if self.batch_requests_max == 0 || self.batch_requests_max > BATCH_REQUESTS_MAX {
            return Err(ConfigError::BatchSize(self.batch_requests_max));
        }
        Ok(())
    }

    /// Replicas that must agree: a majority.
    pub fn quorum(&self) -> usize {
        usize::from(self.replica_count) / 2 + 1
    }
}
