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

/// Operation bytes batched into one op, at most: a batch takes requests while it holds fewer
/// (its first whatever its size). With large operations — a partition's write set may carry
/// 4 MiB — a batch of [`BATCH_REQUESTS_MAX`] could otherwise outgrow any frame a peer takes.
pub const BATCH_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Operation bytes of applied ops after which a replica checkpoints even before its interval
/// is up, and the most it keeps in its log below its checkpoint. With the pipeline's
/// [`PIPELINE_PREPARE_QUEUE_MAX`] batches of at most [`BATCH_BYTES_MAX`] above, the log — and
/// the suffix a view change carries — stays under about 68 MiB however large the operations
/// (the mesh's frames take 80 MiB); with small operations the interval comes first, as before.
/// Every replica applies the same ops, so they checkpoint at the same ops.
pub const CHECKPOINT_LOG_BYTES: u64 = 16 * 1024 * 1024;

/// Committed ops between two checkpoints by default. A replica snapshots its state machine
/// and client table every this many applied ops, so its log (in memory, in view-change
/// messages and in the journal) only spans a few intervals however long the cluster lives.
pub const CHECKPOINT_INTERVAL_OPS: u64 = 1024;

/// The smallest checkpoint interval: a whole prepare pipeline must fit in one interval, so a
/// healthy primary never runs its log past the window (see [`Config::log_entries_max`]).
pub const CHECKPOINT_INTERVAL_OPS_MIN: u64 = PIPELINE_PREPARE_QUEUE_MAX;

/// The largest checkpoint interval: bounds the log a replica holds (four intervals).
pub const CHECKPOINT_INTERVAL_OPS_MAX: u64 = 1 << 16;

/// Intervals of log a replica may hold: one below its checkpoint (so a slightly lagging backup
/// repairs from the log instead of transferring state), one being filled above it, and the
/// rest as slack for a view change that brings ops the replica has not applied yet.
pub const LOG_WINDOW_INTERVALS: u64 = 4;

/// Largest encoded checkpoint (state machine snapshot plus client table) a replica accepts in
/// a state transfer, so a peer cannot make it allocate without bound.
pub const CHECKPOINT_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// Largest chunk of a checkpoint in one state-transfer message by default: keeps every message
/// well below a transport's frame limit.
pub const STATE_CHUNK_BYTES_MAX: usize = 64 * 1024;

/// Client sessions kept for at-most-once execution. When full, the session whose last request
/// committed earliest is evicted (a deterministic choice, so every replica evicts the same one).
pub const CLIENT_SESSIONS_MAX: usize = 1024;

/// Evicted clients remembered (oldest forgotten first), so that a retry of a request whose
/// session was evicted is answered `SessionEvicted` instead of executing a second time.
pub const EVICTED_CLIENTS_MAX: usize = 4 * CLIENT_SESSIONS_MAX;

/// Prepares the primary resends per backup per retransmission, and per repair request: bounds
/// the burst one lagging backup can cause.
pub const REPAIR_PREPARES_MAX: u64 = 16;

/// Operation bytes the primary resends to one backup per retransmission or repair request
/// (always at least one prepare): with large operations (a restored 4 MiB part), sixteen
/// prepares every resend interval would fill the link and delay the heartbeats behind them.
pub const REPAIR_BYTES_MAX: u64 = 4 << 20;

/// How often the wait before retransmitting to a backup that acknowledged nothing since the
/// last retransmission doubles: at most `resend_interval_ticks << 4` (about 1 s at defaults).
pub const RETRANSMIT_DOUBLINGS_MAX: u32 = 4;

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
    /// Applied ops between checkpoints,
    /// `CHECKPOINT_INTERVAL_OPS_MIN..=CHECKPOINT_INTERVAL_OPS_MAX`. The same on every replica.
    pub checkpoint_interval_ops: u64,
    /// Bytes of checkpoint per state-transfer message, `1..=STATE_CHUNK_BYTES_MAX`.
    pub state_chunk_bytes: usize,
    /// Deliberately broken behaviours, each existing only so the simulator can prove that its
    /// checkers catch it.
    #[doc(hidden)]
    pub canaries: Canaries,
}

/// The deliberately broken behaviours a replica can be told to have (all off by default).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Canaries {
    /// The primary commits as soon as it has prepared, without a quorum.
    pub commit_without_quorum: bool,
    /// A backup acknowledges a prepare before its journal write is durable (it syncs in a
    /// later handler).
    pub acknowledge_before_durable: bool,
    /// A replica installs a transferred checkpoint without verifying its checksum.
    pub install_unverified_state: bool,
    /// A backup applies each prepare it appends at once, as if it were committed.
    pub apply_uncommitted: bool,
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
    /// `checkpoint_interval_ops` is outside its bounds.
    #[error(
        "checkpoint interval {0} outside {CHECKPOINT_INTERVAL_OPS_MIN}..={CHECKPOINT_INTERVAL_OPS_MAX}"
    )]
    CheckpointInterval(u64),
    /// `state_chunk_bytes` is 0 or above [`STATE_CHUNK_BYTES_MAX`].
    #[error("state chunk size {0} outside 1..={STATE_CHUNK_BYTES_MAX}")]
    StateChunk(usize),
}

impl Config {
    /// A configuration with default timeouts and batching on.
    pub fn new(replica_count: u8, replica: ReplicaIndex) -> Config {
        Config {
            replica_count,
            replica,
            batch_requests_max: BATCH_REQUESTS_MAX,
            timeouts: Timeouts::default(),
            checkpoint_interval_ops: CHECKPOINT_INTERVAL_OPS,
            state_chunk_bytes: STATE_CHUNK_BYTES_MAX,
            canaries: Canaries::default(),
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
        let interval = self.checkpoint_interval_ops;
        if !(CHECKPOINT_INTERVAL_OPS_MIN..=CHECKPOINT_INTERVAL_OPS_MAX).contains(&interval) {
            return Err(ConfigError::CheckpointInterval(interval));
        }
        if self.state_chunk_bytes == 0 || self.state_chunk_bytes > STATE_CHUNK_BYTES_MAX {
            return Err(ConfigError::StateChunk(self.state_chunk_bytes));
        }
        Ok(())
    }

    /// The most entries a replica's log holds (and a log-carrying message may carry).
    pub fn log_entries_max(&self) -> u64 {
        LOG_WINDOW_INTERVALS * self.checkpoint_interval_ops
    }

    /// Replicas that must agree: a majority.
    pub fn quorum(&self) -> usize {
        usize::from(self.replica_count) / 2 + 1
    }
}
