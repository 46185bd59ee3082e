//! [`Harness`]: drives one entity through a [`TestHost`] the way the host does. It owns the
//! entity's lifecycle (activation on the first message, deactivation, restart), the message
//! loop (encode, decode, handle, check the reply encodes, then commit or discard), a panic
//! caught as a trap, and firing due timers, at most [`FIRE_DUE_LIMIT`] per call.

use core::ops::Deref;
use std::panic::{self, AssertUnwindSafe};

use serde::Serialize;

use super::TestHost;
use crate::codec;
use crate::runtime::{encode_reply, handle_typed};
use crate::{Activation, Address, Entity, Error, Sender};

/// At most this many timers fire in one [`Harness::fire_due`] call, so an entity that keeps
/// scheduling itself with no delay cannot hang a test.
pub const FIRE_DUE_LIMIT: usize = 10_000;

/// Drives one entity the way the host does: activation, one message at a time with atomic state
/// writes, deactivation, timers. Everything on [`TestHost`] is available through `Deref`.
///
/// A panic in `handle` is caught and behaves like a trap: the message fails with
/// [`Error::Failed`], its writes are discarded and the instance is dropped (the next message
/// activates a new one with [`Activation::Restarted`]).
///
/// ```
/// use tessera_sdk::prelude::*;
/// use tessera_sdk::testing::Harness;
///
/// struct Wallet { cents: u64 }
///
/// #[derive(Serialize, Deserialize)]
/// enum Msg { Spend(u64) }
///
/// impl Entity for Wallet {
///     type Msg = Msg;
///     type Reply = u64;
///     fn activate(ctx: &mut Ctx, _: Activation) -> Self { Wallet { cents: ctx.get("cents").unwrap_or(100) } }
///     fn handle(&mut self, ctx: &mut Ctx, Msg::Spend(n): Msg) -> Result<u64, Error> {
///         let left = self.cents.checked_sub(n).ok_or_else(|| Error::rejected("not enough"))?;
///         self.cents = left;
///         ctx.put("cents", &left);
///         Ok(left)
///     }
/// }
///
/// let mut wallet = Harness::<Wallet>::new(Address::new("wallet", "w-1"));
/// assert_eq!(wallet.send(&Msg::Spend(30)), Ok(70));
/// assert_eq!(wallet.send(&Msg::Spend(300)), Err(Error::rejected("not enough")));
/// wallet.restart();
/// assert_eq!(wallet.entity().map(|w| w.cents), Some(70));
/// ```
pub struct Harness<E: Entity> {
    host: TestHost,
    entity: Option<E>,
}

impl<E: Entity> Harness<E> {
    /// A harness for the entity at `address`, not yet activated (the first message activates
    /// it).
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # struct Nop;
    /// # impl Entity for Nop { type Msg = (); type Reply = ();
    /// #   fn activate(_: &mut Ctx, _: Activation) -> Self { Nop }
    /// #   fn handle(&mut self, _: &mut Ctx, _: ()) -> Result<(), Error> { Ok(()) } }
    /// let harness = tessera_sdk::testing::Harness::<Nop>::new(Address::new("nop", "1"));
    /// assert!(harness.entity().is_none());
    /// ```
    pub fn new(address: Address) -> Self {
        Harness::with_host(TestHost::new(address))
    }

    /// A harness on an existing fake host (for example one with seeded state or scripted asks).
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # struct Nop;
    /// # impl Entity for Nop { type Msg = (); type Reply = ();
    /// #   fn activate(_: &mut Ctx, _: Activation) -> Self { Nop }
    /// #   fn handle(&mut self, _: &mut Ctx, _: ()) -> Result<(), Error> { Ok(()) } }
    /// use tessera_sdk::testing::{Harness, TestHost};
    /// let host = TestHost::new(Address::new("nop", "1"));
    /// host.set_state("seed", &1u8);
    /// let harness = Harness::<Nop>::with_host(host);
    /// assert_eq!(harness.state::<u8>("seed"), Some(1));
    /// ```
    pub fn with_host(host: TestHost) -> Self {
        Harness { host, entity: None }
    }

    /// The live instance, if activated.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # struct Nop;
    /// # impl Entity for Nop { type Msg = (); type Reply = ();
    /// #   fn activate(_: &mut Ctx, _: Activation) -> Self { Nop }
    /// #   fn handle(&mut self, _: &mut Ctx, _: ()) -> Result<(), Error> { Ok(()) } }
    /// let mut harness = tessera_sdk::testing::Harness::<Nop>::new(Address::new("nop", "1"));
    /// harness.activate(Activation::FirstStart);
    /// assert!(harness.entity().is_some());
    /// ```
    pub fn entity(&self) -> Option<&E> {
        self.entity.as_ref()
    }

    /// Activates a new instance (dropping a live one without `deactivate`, like a trap would).
    /// State writes and messages in `activate` panic, as the host traps on them.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # struct Nop;
    /// # impl Entity for Nop { type Msg = (); type Reply = ();
    /// #   fn activate(_: &mut Ctx, _: Activation) -> Self { Nop }
    /// #   fn handle(&mut self, _: &mut Ctx, _: ()) -> Result<(), Error> { Ok(()) } }
    /// let mut harness = tessera_sdk::testing::Harness::<Nop>::new(Address::new("nop", "1"));
    /// harness.activate(Activation::Upgraded { from_version: 1 });
    /// assert!(harness.entity().is_some());
    /// ```
    ///
    /// Panics if the activation was refused (a value that no longer decodes, a
    /// [`Ctx::fail`](crate::Ctx::fail)); [`try_activate`](Harness::try_activate) returns it.
    pub fn activate(&mut self, reason: Activation) {
        if let Err(error) = self.try_activate(reason) {
            panic!("activate failed: {error}");
        }
    }

    /// Activates a new instance as the host does, and says whether the activation was
    /// refused. What `activate` wrote (a migration) is committed when it succeeds and
    /// discarded when it is refused, which leaves no instance.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::Harness;
    ///
    /// struct Price { cents: u64 }
    /// impl Entity for Price {
    ///     type Msg = ();
    ///     type Reply = u64;
    ///     fn activate(ctx: &mut Ctx, reason: Activation) -> Self {
    ///         if let Activation::Upgraded { .. } = reason {
    ///             // Version 1 kept euros; version 2 keeps cents.
    ///             if let Some(euros) = ctx.get::<u64>("euros") {
    ///                 ctx.put("cents", &(euros * 100));
    ///                 ctx.delete("euros");
    ///             }
    ///         }
    ///         Price { cents: ctx.get("cents").unwrap_or(0) }
    ///     }
    ///     fn handle(&mut self, _: &mut Ctx, _: ()) -> Result<u64, Error> { Ok(self.cents) }
    /// }
    ///
    /// let mut price = Harness::<Price>::new(Address::new("price", "p-1"));
    /// price.set_state("euros", &3u64);
    /// price.try_activate(Activation::Upgraded { from_version: 1 }).unwrap();
    /// assert_eq!(price.state::<u64>("cents"), Some(300));
    /// assert_eq!(price.send(&()), Ok(300));
    /// ```
    pub fn try_activate(&mut self, reason: Activation) -> Result<(), Error> {
        self.entity = None;
        self.host.begin_activation();
        self.host.set_lifecycle_call(Some("activate"));
        let mut ctx = self.host.ctx();
        let entity = E::activate(&mut ctx, reason);
        self.host.set_lifecycle_call(None);
        if let Some(failure) = ctx.take_failure() {
            self.host.discard();
            return Err(failure);
        }
        self.host.commit();
        self.entity = Some(entity);
        Ok(())
    }

    /// Deactivates the live instance, as passivation does: calls `deactivate` and drops the
    /// instance. Its timers stay, as the host's reminders are durable: one that falls due later
    /// fires in [`fire_due`](Harness::fire_due), activating a new instance
    /// ([`Activation::Restarted`]). State writes and messages in `deactivate` panic, as the host
    /// traps on them.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # struct Nop;
    /// # impl Entity for Nop { type Msg = (); type Reply = ();
    /// #   fn activate(_: &mut Ctx, _: Activation) -> Self { Nop }
    /// #   fn handle(&mut self, _: &mut Ctx, _: ()) -> Result<(), Error> { Ok(()) } }
    /// let mut harness = tessera_sdk::testing::Harness::<Nop>::new(Address::new("nop", "1"));
    /// harness.send(&()).unwrap();
    /// harness.deactivate();
    /// assert!(harness.entity().is_none());
    /// ```
    pub fn deactivate(&mut self) {
        if let Some(mut entity) = self.entity.take() {
            self.host.set_lifecycle_call(Some("deactivate"));
            entity.deactivate(&mut self.host.ctx());
            self.host.set_lifecycle_call(None);
        }
        self.host.discard();
    }

    /// [`deactivate`](Harness::deactivate), then [`activate`](Harness::activate) with
    /// [`Activation::Restarted`]: checks that the entity rebuilds from durable state.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # struct Nop;
    /// # impl Entity for Nop { type Msg = (); type Reply = ();
    /// #   fn activate(_: &mut Ctx, _: Activation) -> Self { Nop }
    /// #   fn handle(&mut self, _: &mut Ctx, _: ()) -> Result<(), Error> { Ok(()) } }
    /// let mut harness = tessera_sdk::testing::Harness::<Nop>::new(Address::new("nop", "1"));
    /// harness.restart();
    /// assert!(harness.entity().is_some());
    /// ```
    pub fn restart(&mut self) {
        self.deactivate();
        self.activate(Activation::Restarted);
    }

    /// Sends a message the way a client would (encoded to MessagePack, then decoded as the
    /// entity's `Msg`) and returns the typed reply. The first message activates the entity:
    /// [`Activation::FirstStart`] if there is no committed state, [`Activation::Restarted`]
    /// otherwise.
    ///
    /// `msg` can be any serde value with the same shape as the entity's message, e.g. the
    /// string `"Get"` for a unit variant `Get`.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # struct Echo;
    /// # impl Entity for Echo { type Msg = String; type Reply = String;
    /// #   fn activate(_: &mut Ctx, _: Activation) -> Self { Echo }
    /// #   fn handle(&mut self, _: &mut Ctx, m: String) -> Result<String, Error> { Ok(m) } }
    /// let mut harness = tessera_sdk::testing::Harness::<Echo>::new(Address::new("echo", "1"));
    /// assert_eq!(harness.send("hi"), Ok("hi".to_string()));
    /// assert!(matches!(harness.send(&5u8), Err(Error::BadMessage(_))));
    /// ```
    pub fn send<M: Serialize + ?Sized>(&mut self, msg: &M) -> Result<E::Reply, Error> {
        self.send_from(Sender::Client, msg)
    }

    /// [`send`](Harness::send) as if `sender` sent it: what
    /// [`Ctx::sender`](crate::Ctx::sender) says while it is handled.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # struct Who;
    /// # impl Entity for Who { type Msg = (); type Reply = bool;
    /// #   fn activate(_: &mut Ctx, _: Activation) -> Self { Who }
    /// #   fn handle(&mut self, ctx: &mut Ctx, _: ()) -> Result<bool, Error> {
    /// #       Ok(ctx.sender().is_client()) } }
    /// let mut who = tessera_sdk::testing::Harness::<Who>::new(Address::new("who", "1"));
    /// assert_eq!(who.send(&()), Ok(true));
    /// let order = Sender::Entity(Address::new("order", "o-1"));
    /// assert_eq!(who.send_from(order, &()), Ok(false));
    /// ```
    pub fn send_from<M: Serialize + ?Sized>(
        &mut self,
        sender: Sender,
        msg: &M,
    ) -> Result<E::Reply, Error> {
        let payload = codec::encode(msg).map_err(Error::BadMessage)?;
        self.deliver(&payload, sender, Ok)
    }

    /// Sends raw MessagePack bytes and returns the raw reply, exactly as the host sees them.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # struct Echo;
    /// # impl Entity for Echo { type Msg = String; type Reply = String;
    /// #   fn activate(_: &mut Ctx, _: Activation) -> Self { Echo }
    /// #   fn handle(&mut self, _: &mut Ctx, m: String) -> Result<String, Error> { Ok(m) } }
    /// let mut harness = tessera_sdk::testing::Harness::<Echo>::new(Address::new("echo", "1"));
    /// assert_eq!(harness.send_bytes(b"\xa2hi"), Ok(b"\xa2hi".to_vec()));
    /// ```
    pub fn send_bytes(&mut self, payload: &[u8]) -> Result<Vec<u8>, Error> {
        self.deliver(payload, Sender::Client, |reply| encode_reply(&reply))
    }

    /// Delivers every live timer that is due at the test clock's time, earliest first (at most
    /// [`FIRE_DUE_LIMIT`]), and returns the replies.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::Harness;
    ///
    /// struct Alarm { rang: u32 }
    /// #[derive(Serialize, Deserialize)]
    /// enum Msg { Set(u64), Ring }
    /// impl Entity for Alarm {
    ///     type Msg = Msg;
    ///     type Reply = u32;
    ///     fn activate(_: &mut Ctx, _: Activation) -> Self { Alarm { rang: 0 } }
    ///     fn handle(&mut self, ctx: &mut Ctx, msg: Msg) -> Result<u32, Error> {
    ///         match msg {
    ///             Msg::Set(ms) => { ctx.schedule(Duration::from_millis(ms), &Msg::Ring); }
    ///             Msg::Ring => self.rang += 1,
    ///         }
    ///         Ok(self.rang)
    ///     }
    /// }
    ///
    /// let mut alarm = Harness::<Alarm>::new(Address::new("alarm", "a-1"));
    /// alarm.send(&Msg::Set(1_000)).unwrap();
    /// assert!(alarm.fire_due().is_empty());
    /// alarm.advance(Duration::from_secs(1));
    /// assert_eq!(alarm.fire_due(), vec![Ok(1)]);
    /// ```
    pub fn fire_due(&mut self) -> Vec<Result<E::Reply, Error>> {
        let mut replies = Vec::new();
        while replies.len() < FIRE_DUE_LIMIT {
            let Some((timer, payload)) = self.host.take_due_timer() else {
                break;
            };
            let sender = Sender::Reminder(timer);
            replies.push(self.deliver(&payload, sender, Ok));
        }
        replies
    }

    /// One message, as the host runs it: activate if needed, decode, handle, check the reply
    /// encodes, then commit on `Ok` or discard on `Err` or panic.
    fn deliver<T>(
        &mut self,
        payload: &[u8],
        sender: Sender,
        finish: impl FnOnce(E::Reply) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if self.entity.is_none() {
            let reason = if self.host.state_keys().is_empty() {
                Activation::FirstStart
            } else {
                Activation::Restarted
            };
            self.try_activate(reason)?;
        }
        let mut ctx = self.host.ctx();
        ctx.set_sender(sender);
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
            let reply = handle_typed(&mut self.entity, &mut ctx, payload)?;
            encode_reply(&reply)?;
            finish(reply)
        }));
        match outcome {
            Ok(Ok(reply)) => {
                self.host.commit();
                Ok(reply)
            }
            Ok(Err(error)) => {
                self.host.discard();
                Err(error)
            }
            Err(panic) => {
                self.host.discard();
                self.entity = None;
                Err(Error::failed(format!(
                    "entity panicked: {}",
                    panic_message(&*panic)
                )))
            }
        }
    }
}

impl<E: Entity> Deref for Harness<E> {
    type Target = TestHost;

    fn deref(&self) -> &TestHost {
        &self.host
    }
}

fn panic_message(panic: &(dyn core::any::Any + Send)) -> &str {
    if let Some(message) = panic.downcast_ref::<&str>() {
        message
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message
    } else {
        "non-string panic payload"
    }
}
