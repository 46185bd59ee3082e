//! The glue [`export_entity!`](crate::export_entity) expands to: one guest-global slot per
//! exported type, and the decode → handle → encode path shared with [`testing`](crate::testing).

use core::cell::RefCell;

use crate::codec;
use crate::host::{WasmHost, activation_from_wit, error_to_wit, sender_from_wit};
use crate::wit::tessera::entity::types as wit;
use crate::{Activation, Ctx, Entity, Error};

/// The live instance of an exported entity type between calls: `None` before `activate` and
/// after `deactivate`.
pub struct Slot<E> {
    entity: RefCell<Option<E>>,
}

impl<E> Slot<E> {
    /// An empty slot, for a `thread_local!` with a `const` initialiser.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Slot {
            entity: RefCell::new(None),
        }
    }
}

/// The `activate` export: starts (or restarts) the instance. State the entity could not read
/// (or a [`Ctx::fail`]) refuses the activation with its reason: the host keeps the old state,
/// discards what `activate` wrote, and no message runs on state the entity could not read.
pub fn activate<E: Entity>(slot: &Slot<E>, reason: wit::Activation) -> Result<(), String> {
    let mut ctx = Ctx::new(Box::new(WasmHost));
    let entity = E::activate(&mut ctx, activation_from_wit(reason));
    if let Some(failure) = ctx.take_failure() {
        return Err(failure.reason().to_string());
    }
    *slot.entity.borrow_mut() = Some(entity);
    Ok(())
}

/// The `handle` export: decodes, handles and encodes one message from `sender`.
pub fn handle<E: Entity>(
    slot: &Slot<E>,
    payload: &[u8],
    sender: wit::Sender,
) -> Result<Vec<u8>, wit::Error> {
    let mut ctx = Ctx::new(Box::new(WasmHost));
    ctx.set_sender(sender_from_wit(sender));
    let mut entity = slot.entity.borrow_mut();
    handle_bytes(&mut entity, &mut ctx, payload).map_err(error_to_wit)
}

/// The `deactivate` export: lets the entity clean up, then drops it.
pub fn deactivate<E: Entity>(slot: &Slot<E>) {
    let mut ctx = Ctx::new(Box::new(WasmHost));
    if let Some(mut entity) = slot.entity.borrow_mut().take() {
        entity.deactivate(&mut ctx);
    }
}

/// Decodes `payload`, hands it to the entity (activating it with [`Activation::Restarted`] if
/// the host skipped `activate`), and returns the typed reply. A payload that does not decode is
/// answered with [`Error::BadMessage`] without calling `handle`.
pub(crate) fn handle_typed<E: Entity>(
    entity: &mut Option<E>,
    ctx: &mut Ctx,
    payload: &[u8],
) -> Result<E::Reply, Error> {
    let msg: E::Msg = codec::decode(payload).map_err(Error::BadMessage)?;
    if entity.is_none() {
        let activated = E::activate(ctx, Activation::Restarted);
        // State the entity could not read while activating fails the message, and the entity
        // stays unactivated.
        if let Some(failure) = ctx.take_failure() {
            return Err(failure);
        }
        *entity = Some(activated);
    }
    let entity = entity
        .as_mut()
        .expect("invariant: activated just above when absent");
    let reply = entity.handle(ctx, msg);
    match ctx.take_failure() {
        Some(failure) => Err(failure),
        None => reply,
    }
}

/// Encodes a reply; failing to encode fails the message (so the host discards its writes).
pub(crate) fn encode_reply<R: serde::Serialize>(reply: &R) -> Result<Vec<u8>, Error> {
    codec::encode(reply).map_err(|reason| Error::failed(format!("reply did not encode: {reason}")))
}

/// [`handle_typed`] plus encoding: the byte-level `handle`.
pub(crate) fn handle_bytes<E: Entity>(
    entity: &mut Option<E>,
    ctx: &mut Ctx,
    payload: &[u8],
) -> Result<Vec<u8>, Error> {
    encode_reply(&handle_typed(entity, ctx, payload)?)
}
