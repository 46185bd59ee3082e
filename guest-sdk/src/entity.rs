//! The trait an entity author implements.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Activation, Ctx, Error};

/// A virtual actor: one instance per address, fed one message at a time.
///
/// The host calls [`activate`](Entity::activate) when it starts an instance, then
/// [`handle`](Entity::handle) once per message, then [`deactivate`](Entity::deactivate) before
/// it drops the instance. Instance memory is only a cache: anything that must survive
/// passivation, a trap, an upgrade or a move goes to durable state with
/// [`Ctx::put`](Ctx::put), and `activate` rebuilds from [`Ctx::get`](Ctx::get).
///
/// Export the type with [`export_entity!`](crate::export_entity).
///
/// ```
/// use tessera_sdk::prelude::*;
///
/// #[derive(Default)]
/// struct Counter { value: i64 }
///
/// #[derive(Serialize, Deserialize)]
/// enum Msg { Add(i64), Get }
///
/// impl Entity for Counter {
///     type Msg = Msg;
///     type Reply = i64;
///     fn activate(ctx: &mut Ctx, _: Activation) -> Self { Counter { value: ctx.get("value").unwrap_or(0) } }
///     fn handle(&mut self, ctx: &mut Ctx, msg: Msg) -> Result<i64, Error> {
///         if let Msg::Add(n) = msg { self.value += n; ctx.put("value", &self.value); }
///         Ok(self.value)
///     }
/// }
///
/// let mut counter = tessera_sdk::testing::Harness::<Counter>::new(Address::new("counter", "c"));
/// assert_eq!(counter.send(&Msg::Add(5)), Ok(5));
/// assert_eq!(counter.send(&Msg::Get), Ok(5));
/// ```
pub trait Entity: Sized + 'static {
    /// The messages this entity understands, decoded from MessagePack. With serde's default
    /// (externally tagged) enums a client's JSON `{"Add":5}` or `"Get"` decodes into
    /// `enum Msg { Add(i64), Get }`.
    type Msg: DeserializeOwned;

    /// The reply to a message, encoded as MessagePack with named fields.
    type Reply: Serialize;

    /// Starts an instance: rebuild in-memory state from durable state here, and migrate it
    /// after an upgrade or a rollback ([`Activation::Upgraded`], [`Activation::RolledBack`]):
    /// state written here is committed before the first message. A state value that no longer
    /// decodes, or a [`Ctx::fail`](Ctx::fail), refuses the activation: nothing written here is
    /// kept, the message that needed the entity fails with the reason, and reminders and tells
    /// wait for a version that activates.
    fn activate(ctx: &mut Ctx, reason: Activation) -> Self;

    /// Handles one message. Every state write made here is committed together if this returns
    /// `Ok`, and discarded if it returns `Err` or panics. [`Ctx::sender`](Ctx::sender) says who
    /// sent it.
    fn handle(&mut self, ctx: &mut Ctx, msg: Self::Msg) -> Result<Self::Reply, Error>;

    /// Called once before the instance is dropped on passivation or upgrade. Durable writes
    /// are not allowed here. Does nothing by default.
    fn deactivate(&mut self, ctx: &mut Ctx) {
        let _ = ctx;
    }
}
