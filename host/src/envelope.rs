//! The vocabulary every layer shares: entity addresses, message envelopes, reply ports and
//! the error a caller sees when a message fails.
//!
//! These types are plain data (serde) so that what a region hands to the entity layer today can
//! cross a network tomorrow. Nothing here knows about wasm, redb or sharding.

use serde::{Deserialize, Serialize};
use std::fmt;
use tokio::sync::oneshot;

/// The full address of one entity: `(tenant, entity type, id)`.
///
/// ```
/// use tessera_host::envelope::EntityAddress;
/// let address = EntityAddress::new("acme", "counter", "c-1");
/// assert_eq!(address.to_string(), "acme/counter/c-1");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EntityAddress {
    /// The tenant that owns the entity.
    pub tenant: String,
    /// The entity type name, as deployed by the tenant.
    pub entity_type: String,
    /// The id within the type.
    pub id: String,
}

impl EntityAddress {
    /// Builds an address from its three parts.
    pub fn new(
        tenant: impl Into<String>,
        entity_type: impl Into<String>,
        id: impl Into<String>,
    ) -> Self {
        EntityAddress {
            tenant: tenant.into(),
            entity_type: entity_type.into(),
            id: id.into(),
        }
    }

    /// The `(tenant, type)` pair this entity belongs to.
    pub fn type_key(&self) -> TypeKey {
        TypeKey::new(self.tenant.clone(), self.entity_type.clone())
    }
}

impl fmt::Display for EntityAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.tenant, self.entity_type, self.id)
    }
}

/// An entity type within a tenant: `(tenant, entity type)`.
///
/// ```
/// use tessera_host::envelope::TypeKey;
/// assert_eq!(TypeKey::new("acme", "counter").to_string(), "acme/counter");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TypeKey {
    /// The tenant.
    pub tenant: String,
    /// The entity type name.
    pub entity_type: String,
}

impl TypeKey {
    /// Builds a type key.
    pub fn new(tenant: impl Into<String>, entity_type: impl Into<String>) -> Self {
        TypeKey {
            tenant: tenant.into(),
            entity_type: entity_type.into(),
        }
    }

    /// The address of entity `id` of this type.
    pub fn entity(&self, id: impl Into<String>) -> EntityAddress {
        EntityAddress::new(self.tenant.clone(), self.entity_type.clone(), id)
    }
}

impl fmt::Display for TypeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.entity_type)
    }
}

/// What kind of failure a message met. Stable names: they appear in HTTP errors and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// The entity's mailbox is full: back off and retry.
    MailboxFull,
    /// The shard's buffer is full while its home is being resolved.
    BufferOverflow,
    /// No plugin is deployed for this entity type.
    EntityTypeNotRegistered,
    /// An ask did not get its reply before its deadline.
    Timeout,
    /// A tenant quota (live entities, rate, ...) refused the message.
    QuotaExceeded,
    /// The target cannot take messages right now (stopping, shard failed, store down).
    Unavailable,
    /// The plugin could not be instantiated or called.
    Instantiation,
    /// A bug or an I/O failure in the host.
    Internal,
}

impl ErrorKind {
    /// A `snake_case` name for logs, metrics and API error codes.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::BadMessage => "bad_message",
            ErrorKind::Rejected => "rejected",
            ErrorKind::Failed => "failed",
            ErrorKind::Trap => "trap",
            ErrorKind::Deadline => "deadline",
            ErrorKind::MemoryLimit => "memory_limit",
            ErrorKind::ReplyTooLarge => "reply_too_large",
            ErrorKind::StateTooLarge => "state_too_large",
            ErrorKind::MailboxFull => "mailbox_full",
            ErrorKind::BufferOverflow => "buffer_overflow",
            ErrorKind::EntityTypeNotRegistered => "entity_type_not_registered",
            ErrorKind::Timeout => "timeout",
            ErrorKind::QuotaExceeded => "quota_exceeded",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Instantiation => "instantiation",
            ErrorKind::Internal => "internal",
        }
    }
}

/// Why a message to an entity failed, as its sender sees it.
///
/// ```
/// use tessera_host::envelope::{ErrorKind, MessageError};
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
}

/// The outcome of one message: the reply bytes (MessagePack) or why it failed.
pub type Reply = Result<Vec<u8>, MessageError>;

/// Where the reply to an ask goes. A tell has none.
pub type ReplyPort = oneshot::Sender<Reply>;

/// One message on its way to an entity.
#[derive(Debug)]
pub struct Envelope {
    /// The MessagePack payload.
    pub payload: Vec<u8>,
    /// The reply port for an ask; `None` for a tell.
    pub reply: Option<ReplyPort>,
}

impl Envelope {
    /// A one-way message.
    pub fn tell(payload: Vec<u8>) -> Self {
        Envelope {
            payload,
            reply: None,
        }
    }

    /// A message whose reply goes to the returned receiver.
    pub fn ask(payload: Vec<u8>) -> (Self, oneshot::Receiver<Reply>) {
        let (sender, receiver) = oneshot::channel();
        let envelope = Envelope {
            payload,
            reply: Some(sender),
        };
        (envelope, receiver)
    }

    /// Answers the sender, if it asked and still listens. A tell's outcome is dropped here.
    pub fn answer(self, reply: Reply) {
        if let Some(port) = self.reply {
            // The asker may have timed out and gone; nothing to do then.
            let _ = port.send(reply);
        }
    }
}
