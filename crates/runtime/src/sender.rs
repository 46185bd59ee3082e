//! Who sent a message ([`Sender`]), as the host knows it from the message's metadata, and the
//! form the 0.2 contract hands it to the guest in.

use super::bindings::{self, Address};
use tessera_contract::{EntityAddress, MessageMeta, Origin};

/// Who sent a message: a client of the tenant, an entity (by a tell or an ask), or the
/// entity's own reminder. Derived by the host, never from the payload, so a client cannot pass
/// for a reminder.
///
/// ```
/// use tessera_contract::{EntityAddress, MessageMeta, Origin};
/// use tessera_runtime::Sender;
/// assert_eq!(Sender::of(&MessageMeta::default()), Sender::Client);
/// let reminder = MessageMeta::from_origin(Origin::Reminder { timer: 7 });
/// assert_eq!(Sender::of(&reminder), Sender::Reminder(7));
/// let asker = EntityAddress::new("t", "cart", "c1");
/// let ask = MessageMeta { chain: vec![asker.clone()], ..MessageMeta::default() };
/// assert_eq!(Sender::of(&ask), Sender::Entity(asker));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Sender {
    /// A client of the tenant (through the API, with or without an idempotency key).
    #[default]
    Client,
    /// An entity of the same tenant: a tell from its outbox, or an ask.
    Entity(EntityAddress),
    /// The entity's own durable reminder, by its timer id.
    Reminder(u64),
}

impl Sender {
    /// The sender of a message with `meta`: its durable origin if it has one, else the
    /// innermost asker of its chain, else a client.
    pub fn of(meta: &MessageMeta) -> Sender {
        Sender::from_parts(meta.origin.as_deref(), &meta.chain)
    }

    /// [`of`](Self::of) from a message's origin and ask chain (outermost first).
    pub fn from_parts(origin: Option<&Origin>, chain: &[EntityAddress]) -> Sender {
        match (origin, chain.last()) {
            (Some(Origin::Entity { sender, .. }), _) => Sender::Entity(sender.clone()),
            (Some(Origin::Reminder { timer }), _) => Sender::Reminder(*timer),
            (Some(Origin::Client { .. }), _) | (None, None) => Sender::Client,
            (None, Some(asker)) => Sender::Entity(asker.clone()),
        }
    }

    /// The contract's form (an address inside the receiver's tenant).
    pub(crate) fn to_wit(&self) -> bindings::Sender {
        match self {
            Sender::Client => bindings::Sender::Client,
            Sender::Entity(address) => bindings::Sender::Entity(Address {
                entity_type: address.entity_type.clone(),
                id: address.id.clone(),
            }),
            Sender::Reminder(timer) => bindings::Sender::Reminder(*timer),
        }
    }
}
