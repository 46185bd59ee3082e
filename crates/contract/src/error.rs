//! The error a sender sees when a message fails: a stable [`ErrorKind`] and a message. The kinds
//! are an enum the metrics and the HTTP status table iterate over ([`ErrorKind::all`]), so a new
//! kind shows up everywhere without a hand-kept list.

use serde::{Deserialize, Serialize};
use strum::{EnumCount, EnumIter, IntoEnumIterator, IntoStaticStr};

/// What kind of failure a message met. Stable names: they appear in HTTP errors and metrics.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    EnumCount,
    EnumIter,
    IntoStaticStr,
)]
#[strum(serialize_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The entity could not decode the payload.
    BadMessage,
    /// The entity refused the message (a business rule); state unchanged.
    Rejected,
    /// The entity reported a failure of its own.
    Failed,
    /// The guest trapped or panicked; the instance was discarded.
    Trap,
    /// The message ran past its CPU deadline; the instance was discarded.
    Deadline,
    /// The instance hit its memory cap; the instance was discarded.
    MemoryLimit,
    /// The reply was larger than the configured limit.
    ReplyTooLarge,
    /// The message wrote more state than the entity's quota allows.
    StateTooLarge,
    /// The message is larger than its way to the entity can carry: in a cluster, a message
    /// that could not fit in one forwarding batch to another node. Sending it again fails the
    /// same way.
    PayloadTooLarge,
    /// The entity's mailbox is full: back off and retry.
    MailboxFull,
    /// The shard's buffer is full while its home is being resolved or moved.
    BufferOverflow,
    /// No plugin is deployed for this entity type.
    EntityTypeNotRegistered,
    /// An ask did not get its reply before its deadline, or its deadline passed before the
    /// target started it (then it was not executed).
    Timeout,
    /// An ask would wait on an entity that is itself waiting on this ask (`A → B → A`): it
    /// fails at once, naming the chain, instead of timing out.
    Deadlock,
    /// A tenant quota (live entities, rate, ...) refused the message.
    QuotaExceeded,
    /// The target cannot take messages right now (stopping, shard failed, store down).
    Unavailable,
    /// The entity's shard is owned by a node that is down or cut off, and its durable state is
    /// there: nothing can serve it until that node returns (or an operator removes the node,
    /// declaring the state lost). Never a wrong or reset value; retry later.
    ShardUnavailable,
    /// The plugin could not be instantiated or called.
    Instantiation,
    /// A bug or an I/O failure in the host.
    Internal,
}

/// The number of error kinds, for arrays of per-kind counters.
pub const ERROR_KIND_COUNT: usize = ErrorKind::COUNT;

impl ErrorKind {
    /// A `snake_case` name for logs, metrics and API error codes.
    ///
    /// ```
    /// use tessera_contract::ErrorKind;
    /// assert_eq!(ErrorKind::EntityTypeNotRegistered.code(), "entity_type_not_registered");
    /// ```
    pub fn code(self) -> &'static str {
        self.into()
    }

    /// Every kind, in declaration order.
    ///
    /// ```
    /// use tessera_contract::ErrorKind;
    /// assert_eq!(ErrorKind::all().next(), Some(ErrorKind::BadMessage));
    /// ```
    pub fn all() -> impl Iterator<Item = ErrorKind> {
        ErrorKind::iter()
    }

    /// The kind's position in [`ErrorKind::all`], for per-kind counter arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Why a message to an entity failed, as its sender sees it.
///
/// ```
/// use tessera_contract::{ErrorKind, MessageError};
/// let error = MessageError::new(ErrorKind::Rejected, "insufficient funds");
/// assert_eq!(error.to_string(), "rejected: insufficient funds");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{}: {message}", kind.code())]
pub struct MessageError {
    /// The kind of failure.
    pub kind: ErrorKind,
    /// A human-readable explanation.
    pub message: String,
}

impl MessageError {
    /// Builds an error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        MessageError {
            kind,
            message: message.into(),
        }
    }

    /// An [`ErrorKind::Unavailable`] error.
    pub fn unavailable(message: impl Into<String>) -> Self {
        MessageError::new(ErrorKind::Unavailable, message)
    }

    /// An [`ErrorKind::ShardUnavailable`] error.
    pub fn shard_unavailable(message: impl Into<String>) -> Self {
        MessageError::new(ErrorKind::ShardUnavailable, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_follow_the_iteration_order() {
        for (position, kind) in ErrorKind::all().enumerate() {
            assert_eq!(kind.index(), position, "{}", kind.code());
        }
        assert_eq!(ErrorKind::all().count(), ERROR_KIND_COUNT);
    }
}
