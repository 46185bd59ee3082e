//! One message on its way to an entity: the MessagePack payload and, for an ask, the port its
//! reply goes to.

use super::error::MessageError;
use tokio::sync::oneshot;

/// The outcome of one message: the reply bytes (MessagePack) or why it failed.
pub type Reply = Result<Vec<u8>, MessageError>;

/// Where the reply to an ask goes. A tell has none.
pub type ReplyPort = oneshot::Sender<Reply>;

/// One message on its way to an entity.
///
/// ```
/// use tessera_host::contract::Envelope;
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

    /// Whether the sender waits for a reply.
    pub fn is_ask(&self) -> bool {
        self.reply.is_some()
    }

    /// Answers the sender, if it asked and still listens. A tell's outcome is dropped here.
    pub fn answer(self, reply: Reply) {
        if let Some(port) = self.reply {
            // The asker may have timed out and gone; nothing to do then.
            let _ = port.send(reply);
        }
    }
}
