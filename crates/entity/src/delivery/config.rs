//! What the delivery service may do: its settings and bounds, and which failures it retries.

use serde::{Deserialize, Serialize};
use tessera_contract::ErrorKind;

/// Senders whose outboxes are delivered at the same time.
pub const DELIVERY_SENDERS_MAX: usize = 1024;

/// Outbox entries one sender reads (and acknowledges) at a time.
pub const DELIVERY_BATCH_MAX: usize = 64;

/// Settings of the delivery service (milliseconds).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeliveryConfig {
    /// How long one attempt waits for the receiver's acknowledgement.
    pub ack_timeout_ms: u64,
    /// The first wait before a retry; doubled per failed attempt up to `retry_max_ms`.
    pub retry_min_ms: u64,
    /// The longest wait between retries.
    pub retry_max_ms: u64,
    /// After retrying this long a tell is given up (a dead letter, counted and logged).
    pub give_up_after_ms: u64,
    /// How often the outbox table is swept for senders nobody woke.
    pub sweep_interval_ms: u64,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            ack_timeout_ms: 5_000,
            retry_min_ms: 20,
            retry_max_ms: 5_000,
            give_up_after_ms: 24 * 60 * 60 * 1000,
            sweep_interval_ms: 1_000,
        }
    }
}

/// Whether a failed delivery may succeed later: the receiver was busy, absent or not yet
/// reachable. Any other failure is the receiver's answer to the message itself.
pub(crate) fn is_retryable(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::MailboxFull
            | ErrorKind::BufferOverflow
            | ErrorKind::Timeout
            | ErrorKind::Unavailable
            | ErrorKind::ShardUnavailable
            | ErrorKind::QuotaExceeded
            | ErrorKind::Instantiation
            | ErrorKind::Internal
    )
}
