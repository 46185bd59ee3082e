//! The error an entity returns from `handle`, and that `tell` and `ask` return.

use core::fmt;

/// Why a message failed.
///
/// It mirrors the `error` variant of the WIT contract, so the host and a client see exactly which
/// of the three kinds it was. Returning any `Err` from [`Entity::handle`](crate::Entity::handle)
/// discards every state write made while handling that message.
///
/// ```
/// use tessera_sdk::Error;
///
/// let refused = Error::rejected("insufficient funds");
/// assert_eq!(refused, Error::Rejected("insufficient funds".to_string()));
/// assert_eq!(refused.to_string(), "rejected: insufficient funds");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Error {
    /// The payload could not be decoded as a message of this entity. The SDK answers with this
    /// by itself, without calling `handle`, when a payload does not decode.
    BadMessage(String),
    /// The entity understood the message and refused it (a business rule).
    Rejected(String),
    /// Something went wrong: a trap, a deadline, a limit, an unreachable target, a value that
    /// did not encode.
    Failed(String),
}

impl Error {
    /// An [`Error::BadMessage`] with the given reason.
    ///
    /// ```
    /// use tessera_sdk::Error;
    /// assert_eq!(Error::bad_message("unknown variant"), Error::BadMessage("unknown variant".into()));
    /// ```
    pub fn bad_message(reason: impl Into<String>) -> Self {
        Error::BadMessage(reason.into())
    }

    /// An [`Error::Rejected`] with the given reason.
    ///
    /// ```
    /// use tessera_sdk::Error;
    /// assert_eq!(Error::rejected("too big"), Error::Rejected("too big".into()));
    /// ```
    pub fn rejected(reason: impl Into<String>) -> Self {
        Error::Rejected(reason.into())
    }

    /// An [`Error::Failed`] with the given reason.
    ///
    /// ```
    /// use tessera_sdk::Error;
    /// assert_eq!(Error::failed("store down"), Error::Failed("store down".into()));
    /// ```
    pub fn failed(reason: impl Into<String>) -> Self {
        Error::Failed(reason.into())
    }

    /// The reason text, whatever the kind.
    ///
    /// ```
    /// use tessera_sdk::Error;
    /// assert_eq!(Error::rejected("no").reason(), "no");
    /// ```
    pub fn reason(&self) -> &str {
        match self {
            Error::BadMessage(reason) | Error::Rejected(reason) | Error::Failed(reason) => reason,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadMessage(reason) => write!(f, "bad message: {reason}"),
            Error::Rejected(reason) => write!(f, "rejected: {reason}"),
            Error::Failed(reason) => write!(f, "failed: {reason}"),
        }
    }
}

impl std::error::Error for Error {}
