//! [`Ctx`]: what an entity can do while it handles a message, behind a backend that is the
//! real host on wasm and an in-memory fake in [`testing`](crate::testing).

use core::fmt;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec;
use crate::{Address, Error, Level, Sender, TimerId};

/// The host operations a [`Ctx`] forwards to. Implemented by the wasm imports and by the
/// testing fake.
pub(crate) trait Backend {
    fn self_address(&self) -> Address;
    fn get(&self, key: &str) -> Option<Vec<u8>>;
    fn put(&self, key: &str, value: &[u8]);
    fn delete(&self, key: &str);
    fn tell(&self, to: &Address, payload: &[u8]) -> Result<(), Error>;
    fn ask(&self, to: &Address, payload: &[u8], timeout_ms: u32) -> Result<Vec<u8>, Error>;
    fn schedule(&self, delay_ms: u64, payload: &[u8]) -> u64;
    fn cancel(&self, timer: u64);
    fn passivate(&self);
    fn log(&self, level: Level, message: &str);
    fn now_ms(&self) -> u64;
}

/// What an entity can do while it is activated or handles a message: durable state, messages to
/// other entities, timers, passivation, logging and time.
///
/// State writes (`put`, `delete`) of one message are atomic: committed together when
/// [`Entity::handle`](crate::Entity::handle) returns `Ok`, discarded when it returns `Err`.
/// Reads see the current message's own writes.
///
/// ```
/// use tessera_sdk::prelude::*;
/// use tessera_sdk::testing::TestHost;
///
/// let host = TestHost::new(Address::new("counter", "c-1"));
/// host.with_ctx(|ctx| {
///     let seen: u32 = ctx.get("seen").unwrap_or(0);
///     ctx.put("seen", &(seen + 1));
///     ctx.info(format_args!("seen {} times", seen + 1));
/// });
/// assert_eq!(host.state::<u32>("seen"), Some(1));
/// ```
pub struct Ctx {
    backend: Box<dyn Backend>,
    /// The first encoding (or state decoding) failure of this message. A value that cannot be
    /// encoded is a bug in the entity; rather than panic, the SDK fails the message so the host
    /// discards its writes.
    failure: Option<Error>,
    /// Who sent the message being handled ([`Sender::Client`] in `activate`).
    sender: Sender,
}

impl Ctx {
    pub(crate) fn new(backend: Box<dyn Backend>) -> Self {
        Ctx {
            backend,
            failure: None,
            sender: Sender::Client,
        }
    }

    pub(crate) fn set_sender(&mut self, sender: Sender) {
        self.sender = sender;
    }

    /// Who sent the message being handled: a client, an entity (by address) or this entity's
    /// own reminder. The host says so, not the payload: a message only a reminder should send
    /// can be refused from anyone else.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::Harness;
    ///
    /// struct Cart;
    /// #[derive(Serialize, Deserialize)]
    /// enum Msg { Expire }
    /// impl Entity for Cart {
    ///     type Msg = Msg;
    ///     type Reply = ();
    ///     fn activate(_: &mut Ctx, _: Activation) -> Self { Cart }
    ///     fn handle(&mut self, ctx: &mut Ctx, Msg::Expire: Msg) -> Result<(), Error> {
    ///         if !ctx.sender().is_reminder() {
    ///             return Err(Error::rejected("only the cart's own reminder expires it"));
    ///         }
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let mut cart = Harness::<Cart>::new(Address::new("cart", "c-1"));
    /// assert!(matches!(cart.send(&Msg::Expire), Err(Error::Rejected(_))));
    /// let reminder = Sender::Reminder(TimerId::from_raw(1));
    /// assert_eq!(cart.send_from(reminder, &Msg::Expire), Ok(()));
    /// ```
    pub fn sender(&self) -> &Sender {
        &self.sender
    }

    /// Fails the current call with `error`, as a state value that does not decode does: in
    /// `handle` the message fails with it (if `handle` returned `Ok`) and none of its writes are
    /// kept; in `activate` the activation is refused with its reason — the host keeps the old
    /// state, answers the message `failed` with that reason and tries again on the next one.
    /// The first failure of a call wins.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// let host = TestHost::new(Address::new("cart", "c-1"));
    /// host.with_ctx(|ctx| ctx.fail(Error::failed("items: no price to migrate from")));
    /// ```
    pub fn fail(&mut self, error: Error) {
        self.record_failure(error);
    }

    /// Takes the encoding failure recorded while handling the current message, if any.
    pub(crate) fn take_failure(&mut self) -> Option<Error> {
        self.failure.take()
    }

    fn record_failure(&mut self, error: Error) {
        self.failure.get_or_insert(error);
    }

    /// This entity's own address.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// let host = TestHost::new(Address::new("bank-account", "alice"));
    /// let me = host.with_ctx(|ctx| ctx.self_address());
    /// assert_eq!(me.id, "alice");
    /// ```
    pub fn self_address(&self) -> Address {
        self.backend.self_address()
    }

    /// Reads and decodes a durable state value; `None` if it is absent.
    ///
    /// A value that is present but no longer decodes as `T` (a schema change) is never taken
    /// for an absent one: `get` returns `None` **and fails the current call** — the message
    /// fails with [`Error::Failed`] naming the key, so none of its writes can overwrite the
    /// stored value; in `activate` the activation fails and every message fails the same way
    /// until the plugin reads the value. Use [`try_get`](Ctx::try_get) to handle it yourself.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// let host = TestHost::new(Address::new("counter", "c-1"));
    /// host.set_state("value", &41i64);
    /// assert_eq!(host.with_ctx(|ctx| ctx.get::<i64>("value")), Some(41));
    /// assert_eq!(host.with_ctx(|ctx| ctx.get::<i64>("missing")), None);
    /// ```
    pub fn get<T: DeserializeOwned>(&mut self, key: &str) -> Option<T> {
        match self.try_get(key) {
            Ok(value) => value,
            Err(error) => {
                self.record_failure(error);
                None
            }
        }
    }

    /// Reads and decodes a durable state value: `Ok(None)` if absent, `Err(Error::Failed)` if
    /// present but not a `T`.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// let host = TestHost::new(Address::new("counter", "c-1"));
    /// host.set_state("value", &"not a number");
    /// assert!(host.with_ctx(|ctx| ctx.try_get::<i64>("value")).is_err());
    /// assert_eq!(host.with_ctx(|ctx| ctx.try_get::<i64>("missing")), Ok(None));
    /// ```
    pub fn try_get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, Error> {
        match self.backend.get(key) {
            None => Ok(None),
            Some(bytes) => codec::decode(&bytes).map(Some).map_err(|reason| {
                Error::failed(format!("state value {key:?} did not decode: {reason}"))
            }),
        }
    }

    /// Encodes and writes a durable state value (MessagePack, named fields).
    ///
    /// If the value cannot be encoded (a bug in its `Serialize` impl), nothing is written and
    /// the current message fails with [`Error::Failed`]; use [`try_put`](Ctx::try_put) to handle
    /// that yourself.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// #[derive(Serialize, Deserialize, PartialEq, Debug)]
    /// struct Profile { name: String, age: u8 }
    ///
    /// let host = TestHost::new(Address::new("user", "u-1"));
    /// host.with_ctx(|ctx| ctx.put("profile", &Profile { name: "Ada".into(), age: 36 }));
    /// assert_eq!(host.state("profile"), Some(Profile { name: "Ada".into(), age: 36 }));
    /// ```
    pub fn put<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) {
        if let Err(error) = self.try_put(key, value) {
            self.record_failure(error);
        }
    }

    /// Encodes and writes a durable state value, returning an encoding failure instead of
    /// failing the message.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// let host = TestHost::new(Address::new("counter", "c-1"));
    /// assert_eq!(host.with_ctx(|ctx| ctx.try_put("value", &3i64)), Ok(()));
    /// ```
    pub fn try_put<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Error> {
        let bytes = codec::encode(value).map_err(|reason| {
            Error::failed(format!("state value {key:?} did not encode: {reason}"))
        })?;
        self.backend.put(key, &bytes);
        Ok(())
    }

    /// Deletes a durable state value.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// let host = TestHost::new(Address::new("counter", "c-1"));
    /// host.set_state("value", &1i64);
    /// host.with_ctx(|ctx| ctx.delete("value"));
    /// assert_eq!(host.state::<i64>("value"), None);
    /// ```
    pub fn delete(&mut self, key: &str) {
        self.backend.delete(key);
    }

    /// Reads a durable state value as raw bytes.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// let host = TestHost::new(Address::new("blob", "b-1"));
    /// host.with_ctx(|ctx| ctx.put_bytes("raw", b"\x01\x02"));
    /// assert_eq!(host.with_ctx(|ctx| ctx.get_bytes("raw")), Some(vec![1, 2]));
    /// ```
    pub fn get_bytes(&self, key: &str) -> Option<Vec<u8>> {
        self.backend.get(key)
    }

    /// Writes a durable state value as raw bytes, without encoding.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// let host = TestHost::new(Address::new("blob", "b-1"));
    /// host.with_ctx(|ctx| ctx.put_bytes("raw", &[0xff]));
    /// assert_eq!(host.state_bytes("raw"), Some(vec![0xff]));
    /// ```
    pub fn put_bytes(&mut self, key: &str, value: &[u8]) {
        self.backend.put(key, value);
    }

    /// Sends a one-way message to another entity of the same tenant, **effectively once**.
    ///
    /// The tell is committed with this message's state writes (if the message fails, nothing
    /// is sent) and delivered after the commit, retried until the receiver has committed it;
    /// the receiver drops duplicates, and tells from one sender arrive in the order sent. It
    /// survives passivation, upgrades and host restarts. This is how effects across entities
    /// belong: withdraw here and tell the other side to credit, in one message. `Ok` means the
    /// tell was queued; `Err` means this message may send no more (its per-message bound).
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// #[derive(Serialize)]
    /// enum CounterMsg { Add(i64) }
    ///
    /// let host = TestHost::new(Address::new("clicks", "page-1"));
    /// let to = Address::new("counter", "total");
    /// host.with_ctx(|ctx| ctx.tell(&to, &CounterMsg::Add(1))).unwrap();
    /// assert_eq!(host.tells()[0].to, to);
    /// ```
    pub fn tell<M: Serialize + ?Sized>(&mut self, to: &Address, msg: &M) -> Result<(), Error> {
        let payload = codec::encode(msg)
            .map_err(|reason| Error::failed(format!("message to {to} did not encode: {reason}")))?;
        self.backend.tell(to, &payload)
    }

    /// Sends raw MessagePack bytes one way to another entity.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// let host = TestHost::new(Address::new("clicks", "page-1"));
    /// let to = Address::new("counter", "total");
    /// host.with_ctx(|ctx| ctx.tell_bytes(&to, b"\xa3Get")).unwrap();
    /// assert_eq!(host.tells()[0].payload, b"\xa3Get");
    /// ```
    pub fn tell_bytes(&mut self, to: &Address, payload: &[u8]) -> Result<(), Error> {
        self.backend.tell(to, payload)
    }

    /// Sends a message to another entity of the same tenant and waits for its reply, at most
    /// `timeout` (rounded down to milliseconds, saturating at `u32::MAX` ms). An entity may not
    /// ask itself. A reply that does not decode as `R` is an [`Error::Failed`].
    ///
    /// What an ask does **not** guarantee: it is not atomic with this message's writes. The
    /// target may commit its part and this message still fail (a timeout, a later error), or
    /// the reverse. Use asks to read; put effects on other entities in [`tell`](Ctx::tell)s.
    /// An ask that would wait on an entity already waiting on this one (`A → B → A`) fails at
    /// once with a `deadlock` error naming the chain; an ask whose timeout passes before the
    /// target starts it is not executed there.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// #[derive(Serialize, Deserialize)]
    /// enum CounterMsg { Get }
    ///
    /// let host = TestHost::new(Address::new("dashboard", "d-1"));
    /// let counter = Address::new("counter", "total");
    /// host.on_ask(counter.clone(), |_: CounterMsg| Ok(12i64));
    /// let value: i64 = host
    ///     .with_ctx(|ctx| ctx.ask(&counter, &CounterMsg::Get, Duration::from_secs(1)))
    ///     .unwrap();
    /// assert_eq!(value, 12);
    /// ```
    pub fn ask<M: Serialize + ?Sized, R: DeserializeOwned>(
        &mut self,
        to: &Address,
        msg: &M,
        timeout: Duration,
    ) -> Result<R, Error> {
        let payload = codec::encode(msg)
            .map_err(|reason| Error::failed(format!("message to {to} did not encode: {reason}")))?;
        let reply = self.ask_bytes(to, &payload, timeout)?;
        codec::decode(&reply)
            .map_err(|reason| Error::failed(format!("reply from {to} did not decode: {reason}")))
    }

    /// Sends raw MessagePack bytes to another entity and returns its raw reply.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// let host = TestHost::new(Address::new("dashboard", "d-1"));
    /// let counter = Address::new("counter", "total");
    /// host.on_ask_bytes(counter.clone(), |_| Ok(vec![0x0c]));
    /// let reply = host.with_ctx(|ctx| ctx.ask_bytes(&counter, b"\xa3Get", Duration::from_secs(1)));
    /// assert_eq!(reply, Ok(vec![0x0c]));
    /// ```
    pub fn ask_bytes(
        &mut self,
        to: &Address,
        payload: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, Error> {
        let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        self.backend.ask(to, payload, timeout_ms)
    }

    /// Sends `msg` to this entity after `delay` (in whole milliseconds): a **durable reminder**.
    ///
    /// The reminder is committed with this message's writes (nothing is scheduled if the
    /// message fails), survives passivation, upgrades and host restarts, activates the entity
    /// when it fires and is delivered effectively once. An entity holds a bounded number of
    /// reminders (the tenant's `reminders_max` quota); past it the message fails with a
    /// quota error.
    ///
    /// If the message cannot be encoded, no timer is made, the current message fails with
    /// [`Error::Failed`], and the returned id names no timer.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// #[derive(Serialize)]
    /// enum Msg { Tick }
    ///
    /// let host = TestHost::new(Address::new("clock", "c-1"));
    /// let timer = host.with_ctx(|ctx| ctx.schedule(Duration::from_secs(5), &Msg::Tick));
    /// assert_eq!(host.schedules()[0].id, timer);
    /// assert_eq!(host.schedules()[0].delay, Duration::from_secs(5));
    /// ```
    pub fn schedule<M: Serialize + ?Sized>(&mut self, delay: Duration, msg: &M) -> TimerId {
        match codec::encode(msg) {
            Ok(payload) => self.schedule_bytes(delay, &payload),
            Err(reason) => {
                self.record_failure(Error::failed(format!(
                    "scheduled message did not encode: {reason}"
                )));
                TimerId::from_raw(u64::MAX)
            }
        }
    }

    /// Sends raw MessagePack bytes to this entity after `delay`.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// let host = TestHost::new(Address::new("clock", "c-1"));
    /// host.with_ctx(|ctx| ctx.schedule_bytes(Duration::from_millis(10), b"\xa4Tick"));
    /// assert_eq!(host.schedules()[0].payload, b"\xa4Tick");
    /// ```
    pub fn schedule_bytes(&mut self, delay: Duration, payload: &[u8]) -> TimerId {
        let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        TimerId::from_raw(self.backend.schedule(delay_ms, payload))
    }

    /// Cancels a reminder made by [`schedule`](Ctx::schedule), durably, with this message's
    /// commit. Unknown or fired timers are ignored.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// let host = TestHost::new(Address::new("clock", "c-1"));
    /// host.with_ctx(|ctx| {
    ///     let timer = ctx.schedule(Duration::from_secs(1), "Tick");
    ///     ctx.cancel(timer);
    /// });
    /// assert!(host.schedules()[0].cancelled);
    /// ```
    pub fn cancel(&mut self, timer: TimerId) {
        self.backend.cancel(timer.as_raw());
    }

    /// Asks the host to passivate this entity after the current message.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// let host = TestHost::new(Address::new("session", "s-1"));
    /// host.with_ctx(|ctx| ctx.passivate());
    /// assert!(host.passivation_requested());
    /// ```
    pub fn passivate(&mut self) {
        self.backend.passivate();
    }

    /// Wall-clock time in milliseconds since the Unix epoch, as the host sees it.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// let host = TestHost::new(Address::new("clock", "c-1"));
    /// host.set_now_ms(1_000);
    /// assert_eq!(host.with_ctx(|ctx| ctx.now_ms()), 1_000);
    /// ```
    pub fn now_ms(&self) -> u64 {
        self.backend.now_ms()
    }

    /// Writes a line to the host log, tagged with this entity's address.
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// let host = TestHost::new(Address::new("counter", "c-1"));
    /// host.with_ctx(|ctx| ctx.log(Level::Warn, "value is negative"));
    /// assert_eq!(host.logs(), vec![(Level::Warn, "value is negative".to_string())]);
    /// ```
    pub fn log(&self, level: Level, message: impl fmt::Display) {
        self.backend.log(level, &message.to_string());
    }

    /// [`log`](Ctx::log) at [`Level::Trace`].
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # let host = tessera_sdk::testing::TestHost::new(Address::new("t", "1"));
    /// host.with_ctx(|ctx| ctx.trace("entered"));
    /// assert_eq!(host.logs()[0].0, Level::Trace);
    /// ```
    pub fn trace(&self, message: impl fmt::Display) {
        self.log(Level::Trace, message);
    }

    /// [`log`](Ctx::log) at [`Level::Debug`].
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # let host = tessera_sdk::testing::TestHost::new(Address::new("t", "1"));
    /// host.with_ctx(|ctx| ctx.debug(format_args!("x = {}", 3)));
    /// assert_eq!(host.logs()[0], (Level::Debug, "x = 3".to_string()));
    /// ```
    pub fn debug(&self, message: impl fmt::Display) {
        self.log(Level::Debug, message);
    }

    /// [`log`](Ctx::log) at [`Level::Info`].
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # let host = tessera_sdk::testing::TestHost::new(Address::new("t", "1"));
    /// host.with_ctx(|ctx| ctx.info("started"));
    /// assert_eq!(host.logs()[0].0, Level::Info);
    /// ```
    pub fn info(&self, message: impl fmt::Display) {
        self.log(Level::Info, message);
    }

    /// [`log`](Ctx::log) at [`Level::Warn`].
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # let host = tessera_sdk::testing::TestHost::new(Address::new("t", "1"));
    /// host.with_ctx(|ctx| ctx.warn("odd"));
    /// assert_eq!(host.logs()[0].0, Level::Warn);
    /// ```
    pub fn warn(&self, message: impl fmt::Display) {
        self.log(Level::Warn, message);
    }

    /// [`log`](Ctx::log) at [`Level::Error`].
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # let host = tessera_sdk::testing::TestHost::new(Address::new("t", "1"));
    /// host.with_ctx(|ctx| ctx.error("broken"));
    /// assert_eq!(host.logs()[0].0, Level::Error);
    /// ```
    pub fn error(&self, message: impl fmt::Display) {
        self.log(Level::Error, message);
    }
}

impl fmt::Debug for Ctx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ctx")
            .field("self_address", &self.self_address())
            .finish_non_exhaustive()
    }
}
