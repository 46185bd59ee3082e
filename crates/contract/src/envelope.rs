//! One message on its way to an entity: the MessagePack payload, what the host knows about it
//! ([`MessageMeta`]: who sent it durably, which asks wait on it, its deadline, its trace) and, for an ask,
//! the port its reply goes to.

use super::address::EntityAddress;
use super::error::MessageError;
use super::trace::MessageTrace;
use serde::{Deserialize, Serialize};
use std::time::Instant;
use tokio::sync::oneshot;

/// The outcome of one message: the reply bytes (MessagePack) or why it failed.
pub type Reply = Result<Vec<u8>, MessageError>;

/// Where the reply to an ask goes. A tell has none.
pub type ReplyPort = oneshot::Sender<Reply>;

/// Who sent a message that is delivered effectively once, and the key the receiver drops
/// duplicates by. The receiver records it in the same transaction as the message's writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Origin {
    /// A tell from another entity's durable outbox: the sender and its outbox sequence number
    /// (increasing per sender, so the receiver keeps only the highest it has committed).
    Entity {
        /// The sending entity.
        sender: EntityAddress,
        /// The sender's outbox sequence number of this message.
        seq: u64,
    },
    /// A durable reminder the entity scheduled for itself, by its timer id.
    Reminder {
        /// The timer id `schedule` returned.
        timer: u64,
    },
    /// A client's tell carrying an idempotency key.
    Client {
        /// The `Idempotency-Key` the client sent.
        key: String,
    },
}

/// What travels with a message besides its payload.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageMeta {
    /// Set for a message delivered effectively once (boxed: most messages have none, and
    /// every envelope carries this field).
    pub origin: Option<Box<Origin>>,
    /// The entities whose asks wait on this message, outermost first. An entity on the chain
    /// cannot be asked again until the chain unwinds (that would be a deadlock).
    pub chain: Vec<EntityAddress>,
    /// When the asker stops waiting: a message that has not started by then is not executed.
    /// Local to this node (a forwarded ask carries its remaining timeout instead).
    #[serde(skip)]
    pub deadline: Option<Instant>,
    /// The trace the message belongs to (boxed, and absent from the wire when `None`: most
    /// messages are not traced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<Box<MessageTrace>>,
}

impl MessageMeta {
    /// The metadata of a message sent effectively once from `origin`.
    pub fn from_origin(origin: Origin) -> Self {
        MessageMeta {
            origin: Some(Box::new(origin)),
            ..MessageMeta::default()
        }
    }
}

/// One message on its way to an entity.
///
/// ```
/// use tessera_contract::Envelope;
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let (envelope, reply) = Envelope::ask(b"ping".to_vec());
/// let payload = envelope.payload.clone();
/// envelope.answer(Ok(payload));
/// assert_eq!(reply.await.unwrap().unwrap(), b"ping");
/// # });
/// ```
#[derive(Debug)]
pub struct Envelope {
    /// The MessagePack payload.
    pub payload: Vec<u8>,
    /// Origin, call chain and deadline.
    pub meta: MessageMeta,
    /// The reply port for an ask; `None` for a tell.
    pub reply: Option<ReplyPort>,
}

impl Envelope {
    /// A one-way message.
    pub fn tell(payload: Vec<u8>) -> Self {
        Envelope {
            payload,
            meta: MessageMeta::default(),
            reply: None,
        }
    }

    /// A message whose reply goes to the returned receiver.
    pub fn ask(payload: Vec<u8>) -> (Self, oneshot::Receiver<Reply>) {
        let (sender, receiver) = oneshot::channel();
        let envelope = Envelope {
            payload,
            meta: MessageMeta::default(),
            reply: Some(sender),
        };
        (envelope, receiver)
    }

    /// Whether the sender waits for a reply.
    pub fn is_ask(&self) -> bool {
        self.reply.is_some()
    }

    /// Answers the sender, if it asked and still listens. A tell's outcome is dropped here.
    pub fn answer(self, reply: Reply) {
        answer(self.reply, reply);
    }
}

/// Answers through `port` (an envelope's reply port, taken out of it), if the sender asked and
/// still listens. A tell's outcome is dropped here.
pub fn answer(port: Option<ReplyPort>, reply: Reply) {
    if let Some(port) = port {
        // The asker may have timed out and gone; nothing to do then.
        let _ = port.send(reply);
    }
}
