//! Unit-test an entity natively, with plain `cargo test`: an in-memory host with the same
//! per-message atomicity as the real one, captured tells, asks and timers, scripted ask replies,
//! controllable time and a passivation flag.
//!
//! [`Harness`] drives one entity the way the host does; [`TestHost`] is the fake host behind it
//! (reachable through the harness by `Deref`), usable on its own to test code that takes a
//! [`Ctx`].
//!
//! ```
//! use tessera_sdk::prelude::*;
//! use tessera_sdk::testing::Harness;
//!
//! struct Greeter;
//!
//! #[derive(Serialize, Deserialize)]
//! enum Msg { Hello(String) }
//!
//! impl Entity for Greeter {
//!     type Msg = Msg;
//!     type Reply = String;
//!     fn activate(_: &mut Ctx, _: Activation) -> Self { Greeter }
//!     fn handle(&mut self, ctx: &mut Ctx, Msg::Hello(name): Msg) -> Result<String, Error> {
//!         ctx.put("last", &name);
//!         Ok(format!("hello, {name}"))
//!     }
//! }
//!
//! let mut greeter = Harness::<Greeter>::new(Address::new("greeter", "g-1"));
//! assert_eq!(greeter.send(&Msg::Hello("Ada".into())), Ok("hello, Ada".to_string()));
//! assert_eq!(greeter.state::<String>("last"), Some("Ada".to_string()));
//! ```

use core::cell::RefCell;
use core::ops::Deref;
use std::collections::{BTreeMap, HashMap};
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec;
use crate::ctx::Backend;
use crate::runtime::{encode_reply, handle_typed};
use crate::{Activation, Address, Ctx, Entity, Error, Level, TimerId};

/// The clock of a new [`TestHost`]: 2023-11-14T22:13:20Z, in ms since the Unix epoch.
pub const START_MS: u64 = 1_700_000_000_000;

/// At most this many timers fire in one [`Harness::fire_due`] call, so an entity that keeps
/// scheduling itself with no delay cannot hang a test.
pub const FIRE_DUE_LIMIT: usize = 10_000;

type AskHandler = Box<dyn FnMut(&[u8]) -> Result<Vec<u8>, Error>>;

/// A one-way message the entity sent with [`Ctx::tell`].
///
/// ```
/// use tessera_sdk::prelude::*;
/// use tessera_sdk::testing::TestHost;
///
/// let host = TestHost::new(Address::new("a", "1"));
/// host.with_ctx(|ctx| ctx.tell(&Address::new("b", "2"), &5u8)).unwrap();
/// let tell = &host.tells()[0];
/// assert_eq!(tell.to, Address::new("b", "2"));
/// assert_eq!(tell.decode::<u8>(), Ok(5));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentTell {
    /// The target.
    pub to: Address,
    /// The MessagePack payload.
    pub payload: Vec<u8>,
}

impl SentTell {
    /// Decodes the payload as `M`.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # let host = tessera_sdk::testing::TestHost::new(Address::new("a", "1"));
    /// host.with_ctx(|ctx| ctx.tell(&Address::new("b", "2"), "Get")).unwrap();
    /// assert_eq!(host.tells()[0].decode::<String>(), Ok("Get".to_string()));
    /// ```
    pub fn decode<M: DeserializeOwned>(&self) -> Result<M, Error> {
        codec::decode(&self.payload).map_err(Error::BadMessage)
    }
}

/// A request the entity sent with [`Ctx::ask`], and what it got back.
///
/// ```
/// use tessera_sdk::prelude::*;
/// use tessera_sdk::testing::TestHost;
///
/// let host = TestHost::new(Address::new("a", "1"));
/// let to = Address::new("b", "2");
/// let reply: Result<u8, Error> = host.with_ctx(|ctx| ctx.ask(&to, &1u8, Duration::from_millis(50)));
/// assert!(reply.is_err(), "no reply was scripted");
/// let ask = &host.asks()[0];
/// assert_eq!(ask.timeout, Duration::from_millis(50));
/// assert_eq!(ask.decode::<u8>(), Ok(1));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentAsk {
    /// The target.
    pub to: Address,
    /// The MessagePack payload.
    pub payload: Vec<u8>,
    /// The timeout the entity gave, in whole milliseconds.
    pub timeout: Duration,
    /// What the entity got back.
    pub reply: Result<Vec<u8>, Error>,
}

impl SentAsk {
    /// Decodes the payload as `M`.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # let host = tessera_sdk::testing::TestHost::new(Address::new("a", "1"));
    /// let _ = host.with_ctx(|ctx| ctx.ask::<_, u8>(&Address::new("b", "2"), "Get", Duration::from_secs(1)));
    /// assert_eq!(host.asks()[0].decode::<String>(), Ok("Get".to_string()));
    /// ```
    pub fn decode<M: DeserializeOwned>(&self) -> Result<M, Error> {
        codec::decode(&self.payload).map_err(Error::BadMessage)
    }
}

/// A timer the entity made with [`Ctx::schedule`].
///
/// ```
/// use tessera_sdk::prelude::*;
/// use tessera_sdk::testing::{TestHost, START_MS};
///
/// let host = TestHost::new(Address::new("a", "1"));
/// host.with_ctx(|ctx| ctx.schedule(Duration::from_millis(250), "Tick"));
/// let timer = &host.schedules()[0];
/// assert_eq!(timer.due_ms, START_MS + 250);
/// assert_eq!(timer.decode::<String>(), Ok("Tick".to_string()));
/// assert!(!timer.cancelled && !timer.fired);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheduled {
    /// The id [`Ctx::schedule`] returned.
    pub id: TimerId,
    /// The delay the entity asked for.
    pub delay: Duration,
    /// When it is due, in the test clock's milliseconds.
    pub due_ms: u64,
    /// The MessagePack message it will deliver to the entity.
    pub payload: Vec<u8>,
    /// Whether [`Ctx::cancel`] or a deactivation cancelled it.
    pub cancelled: bool,
    /// Whether [`Harness::fire_due`] delivered it.
    pub fired: bool,
}

impl Scheduled {
    /// Decodes the payload as `M`.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// # let host = tessera_sdk::testing::TestHost::new(Address::new("a", "1"));
    /// host.with_ctx(|ctx| ctx.schedule(Duration::from_secs(1), &7u32));
    /// assert_eq!(host.schedules()[0].decode::<u32>(), Ok(7));
    /// ```
    pub fn decode<M: DeserializeOwned>(&self) -> Result<M, Error> {
        codec::decode(&self.payload).map_err(Error::BadMessage)
    }

    fn is_live(&self) -> bool {
        !self.cancelled && !self.fired
    }
}

struct FakeState {
    address: Address,
    /// Set while `activate` or `deactivate` runs, where the host refuses state writes and
    /// messages (it traps); the harness panics with the same rule.
    lifecycle_call: Option<&'static str>,
    committed: BTreeMap<String, Vec<u8>>,
    /// Writes of the current message: `None` is a delete.
    pending: BTreeMap<String, Option<Vec<u8>>>,
    tells: Vec<SentTell>,
    asks: Vec<SentAsk>,
    ask_handlers: HashMap<Address, AskHandler>,
    timers: Vec<Scheduled>,
    next_timer: u64,
    now_ms: u64,
    passivation_requested: bool,
    logs: Vec<(Level, String)>,
}

/// An in-memory stand-in for the Tessera host, for one entity address.
///
/// Cloning gives another handle to the same fake host.
///
/// ```
/// use tessera_sdk::prelude::*;
/// use tessera_sdk::testing::TestHost;
///
/// let host = TestHost::new(Address::new("counter", "c-1"));
/// host.set_state("value", &10i64);
/// let doubled = host.with_ctx(|ctx| {
///     let value: i64 = ctx.get("value").unwrap_or(0);
///     ctx.put("value", &(value * 2));
///     value * 2
/// });
/// assert_eq!(doubled, 20);
/// assert_eq!(host.state::<i64>("value"), Some(20));
/// ```
#[derive(Clone)]
pub struct TestHost {
    state: Rc<RefCell<FakeState>>,
}

impl TestHost {
    /// A fake host for the entity at `address`, with empty state and the clock at [`START_MS`].
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    /// let host = TestHost::new(Address::new("counter", "c-1"));
    /// assert!(host.state_keys().is_empty());
    /// ```
    pub fn new(address: Address) -> Self {
        let state = FakeState {
            lifecycle_call: None,
            address,
            committed: BTreeMap::new(),
            pending: BTreeMap::new(),
            tells: Vec::new(),
            asks: Vec::new(),
            ask_handlers: HashMap::new(),
            timers: Vec::new(),
            next_timer: 1,
            now_ms: START_MS,
            passivation_requested: false,
            logs: Vec::new(),
        };
        TestHost {
            state: Rc::new(RefCell::new(state)),
        }
    }

    /// The address of the entity this host serves.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("counter", "c-1"));
    /// assert_eq!(host.address().id, "c-1");
    /// ```
    pub fn address(&self) -> Address {
        self.state.borrow().address.clone()
    }

    /// Runs `f` with a [`Ctx`] on this host, as one message that succeeds: its writes are
    /// committed when `f` returns.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("counter", "c-1"));
    /// host.with_ctx(|ctx| ctx.put("value", &1i64));
    /// assert_eq!(host.state::<i64>("value"), Some(1));
    /// ```
    pub fn with_ctx<R>(&self, f: impl FnOnce(&mut Ctx) -> R) -> R {
        let result = f(&mut self.ctx());
        self.commit();
        result
    }

    /// A committed state value, decoded; `None` if absent or not a `T`.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("counter", "c-1"));
    /// host.set_state("value", &3i64);
    /// assert_eq!(host.state::<i64>("value"), Some(3));
    /// ```
    pub fn state<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        self.state_bytes(key)
            .and_then(|bytes| codec::decode(&bytes).ok())
    }

    /// A committed state value as raw bytes.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("counter", "c-1"));
    /// host.set_state("value", &3i64);
    /// assert_eq!(host.state_bytes("value"), Some(vec![3]));
    /// ```
    pub fn state_bytes(&self, key: &str) -> Option<Vec<u8>> {
        self.state.borrow().committed.get(key).cloned()
    }

    /// Seeds a committed state value (MessagePack, named fields), e.g. before activation.
    ///
    /// # Panics
    ///
    /// If `value` cannot be encoded: that is a bug in the test.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("counter", "c-1"));
    /// host.set_state("value", &3i64);
    /// assert_eq!(host.state_keys(), vec!["value".to_string()]);
    /// ```
    pub fn set_state<T: Serialize + ?Sized>(&self, key: &str, value: &T) {
        let bytes = codec::encode(value)
            .unwrap_or_else(|reason| panic!("test state {key:?} did not encode: {reason}"));
        self.set_state_bytes(key, bytes);
    }

    /// Seeds a committed state value as raw bytes.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("blob", "b-1"));
    /// host.set_state_bytes("raw", vec![1, 2, 3]);
    /// assert_eq!(host.state_bytes("raw"), Some(vec![1, 2, 3]));
    /// ```
    pub fn set_state_bytes(&self, key: &str, value: Vec<u8>) {
        self.state
            .borrow_mut()
            .committed
            .insert(key.to_string(), value);
    }

    /// The keys of committed state, sorted.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("counter", "c-1"));
    /// host.set_state("b", &1u8);
    /// host.set_state("a", &1u8);
    /// assert_eq!(host.state_keys(), vec!["a".to_string(), "b".to_string()]);
    /// ```
    pub fn state_keys(&self) -> Vec<String> {
        self.state.borrow().committed.keys().cloned().collect()
    }

    /// Every tell the entity sent, oldest first, whether or not its message then succeeded.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("a", "1"));
    /// host.with_ctx(|ctx| ctx.tell(&Address::new("b", "2"), "Hi")).unwrap();
    /// assert_eq!(host.tells().len(), 1);
    /// ```
    pub fn tells(&self) -> Vec<SentTell> {
        self.state.borrow().tells.clone()
    }

    /// Every ask the entity sent, oldest first, with the reply it got.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("a", "1"));
    /// let b = Address::new("b", "2");
    /// host.on_ask(b.clone(), |n: u8| Ok(n + 1));
    /// let _: Result<u8, Error> = host.with_ctx(|ctx| ctx.ask(&b, &1u8, Duration::from_secs(1)));
    /// assert_eq!(host.asks()[0].reply, Ok(vec![2]));
    /// ```
    pub fn asks(&self) -> Vec<SentAsk> {
        self.state.borrow().asks.clone()
    }

    /// Scripts the replies to asks sent to `to`: `reply` gets each decoded message and returns
    /// the reply (or error) the asking entity receives. An ask with no script fails with
    /// [`Error::Failed`]; a message that does not decode as `M` gets [`Error::BadMessage`].
    ///
    /// ```
    /// use tessera_sdk::prelude::*;
    /// use tessera_sdk::testing::TestHost;
    ///
    /// #[derive(Serialize, Deserialize)]
    /// enum Account { Deposit(u64) }
    ///
    /// let host = TestHost::new(Address::new("bank", "a"));
    /// let b = Address::new("bank", "b");
    /// host.on_ask(b.clone(), |Account::Deposit(n): Account| {
    ///     if n > 100 { Err(Error::rejected("too much")) } else { Ok(n) }
    /// });
    /// let ok: Result<u64, Error> = host.with_ctx(|ctx| ctx.ask(&b, &Account::Deposit(5), Duration::from_secs(1)));
    /// assert_eq!(ok, Ok(5));
    /// let refused: Result<u64, Error> = host.with_ctx(|ctx| ctx.ask(&b, &Account::Deposit(500), Duration::from_secs(1)));
    /// assert_eq!(refused, Err(Error::rejected("too much")));
    /// ```
    pub fn on_ask<M, R, F>(&self, to: Address, mut reply: F)
    where
        M: DeserializeOwned,
        R: Serialize,
        F: FnMut(M) -> Result<R, Error> + 'static,
    {
        self.on_ask_bytes(to, move |payload| {
            let msg = codec::decode(payload).map_err(Error::BadMessage)?;
            encode_reply(&reply(msg)?)
        });
    }

    /// Scripts the raw replies to asks sent to `to`.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("a", "1"));
    /// let b = Address::new("b", "2");
    /// host.on_ask_bytes(b.clone(), |payload| Ok(payload.to_vec()));
    /// assert_eq!(host.with_ctx(|ctx| ctx.ask_bytes(&b, &[7], Duration::from_secs(1))), Ok(vec![7]));
    /// ```
    pub fn on_ask_bytes(
        &self,
        to: Address,
        reply: impl FnMut(&[u8]) -> Result<Vec<u8>, Error> + 'static,
    ) {
        self.state
            .borrow_mut()
            .ask_handlers
            .insert(to, Box::new(reply));
    }

    /// Every timer the entity made, oldest first.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("a", "1"));
    /// host.with_ctx(|ctx| ctx.schedule(Duration::from_secs(1), "Tick"));
    /// assert_eq!(host.schedules().len(), 1);
    /// ```
    pub fn schedules(&self) -> Vec<Scheduled> {
        self.state.borrow().timers.clone()
    }

    /// The test clock, in ms since the Unix epoch; starts at [`START_MS`].
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("a", "1"));
    /// assert_eq!(host.now_ms(), tessera_sdk::testing::START_MS);
    /// ```
    pub fn now_ms(&self) -> u64 {
        self.state.borrow().now_ms
    }

    /// Sets the test clock.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("a", "1"));
    /// host.set_now_ms(5);
    /// assert_eq!(host.now_ms(), 5);
    /// ```
    pub fn set_now_ms(&self, now_ms: u64) {
        self.state.borrow_mut().now_ms = now_ms;
    }

    /// Moves the test clock forward by `by` (whole milliseconds).
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("a", "1"));
    /// host.set_now_ms(5);
    /// host.advance(Duration::from_millis(10));
    /// assert_eq!(host.now_ms(), 15);
    /// ```
    pub fn advance(&self, by: Duration) {
        let by_ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let mut state = self.state.borrow_mut();
        state.now_ms = state.now_ms.saturating_add(by_ms);
    }

    /// Whether the entity called [`Ctx::passivate`] since it was last activated.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("a", "1"));
    /// assert!(!host.passivation_requested());
    /// ```
    pub fn passivation_requested(&self) -> bool {
        self.state.borrow().passivation_requested
    }

    /// Every log line the entity wrote, oldest first.
    ///
    /// ```
    /// # use tessera_sdk::prelude::*;
    /// let host = tessera_sdk::testing::TestHost::new(Address::new("a", "1"));
    /// host.with_ctx(|ctx| ctx.info("hi"));
    /// assert_eq!(host.logs(), vec![(Level::Info, "hi".to_string())]);
    /// ```
    pub fn logs(&self) -> Vec<(Level, String)> {
        self.state.borrow().logs.clone()
    }

    fn ctx(&self) -> Ctx {
        Ctx::new(Box::new(FakeBackend {
            state: Rc::clone(&self.state),
        }))
    }

    fn commit(&self) {
        let mut state = self.state.borrow_mut();
        let pending = core::mem::take(&mut state.pending);
        for (key, value) in pending {
            match value {
                Some(bytes) => state.committed.insert(key, bytes),
                None => state.committed.remove(&key),
            };
        }
    }

    fn discard(&self) {
        self.state.borrow_mut().pending.clear();
    }

    fn begin_activation(&self) {
        self.state.borrow_mut().passivation_requested = false;
    }

    fn set_lifecycle_call(&self, call: Option<&'static str>) {
        self.state.borrow_mut().lifecycle_call = call;
    }

    fn cancel_live_timers(&self) {
        for timer in self.state.borrow_mut().timers.iter_mut() {
            if timer.is_live() {
                timer.cancelled = true;
            }
        }
    }

    /// Marks the earliest due live timer fired and returns its payload.
    fn take_due_timer(&self) -> Option<Vec<u8>> {
        let mut state = self.state.borrow_mut();
        let now_ms = state.now_ms;
        let timer = state
            .timers
            .iter_mut()
            .filter(|timer| timer.is_live() && timer.due_ms <= now_ms)
            .min_by_key(|timer| (timer.due_ms, timer.id))?;
        timer.fired = true;
        Some(timer.payload.clone())
    }
}

struct FakeBackend {
    state: Rc<RefCell<FakeState>>,
}

impl FakeBackend {
    /// Panics like the host traps: writes and messages only while handling a message.
    fn require_message(&self, what: &str) {
        if let Some(call) = self.state.borrow().lifecycle_call {
            panic!(
                "`{what}` is only allowed while handling a message, not in {call} (the host traps)"
            );
        }
    }
}

impl Backend for FakeBackend {
    fn self_address(&self) -> Address {
        self.state.borrow().address.clone()
    }

    fn get(&self, key: &str) -> Option<Vec<u8>> {
        let state = self.state.borrow();
        match state.pending.get(key) {
            Some(pending) => pending.clone(),
            None => state.committed.get(key).cloned(),
        }
    }

    fn put(&self, key: &str, value: &[u8]) {
        self.require_message("put");
        self.state
            .borrow_mut()
            .pending
            .insert(key.to_string(), Some(value.to_vec()));
    }

    fn delete(&self, key: &str) {
        self.require_message("delete");
        self.state
            .borrow_mut()
            .pending
            .insert(key.to_string(), None);
    }

    fn tell(&self, to: &Address, payload: &[u8]) -> Result<(), Error> {
        self.require_message("tell");
        self.state.borrow_mut().tells.push(SentTell {
            to: to.clone(),
            payload: payload.to_vec(),
        });
        Ok(())
    }

    fn ask(&self, to: &Address, payload: &[u8], timeout_ms: u32) -> Result<Vec<u8>, Error> {
        self.require_message("ask");
        let is_self = *to == self.state.borrow().address;
        // The handler is taken out while it runs so that it may use the `TestHost` itself.
        let handler = self.state.borrow_mut().ask_handlers.remove(to);
        let reply = match (is_self, handler) {
            (true, _) => Err(Error::failed("an entity may not ask itself")),
            (false, None) => Err(Error::failed(format!(
                "no scripted reply for an ask to {to}"
            ))),
            (false, Some(mut handler)) => {
                let reply = handler(payload);
                self.state
                    .borrow_mut()
                    .ask_handlers
                    .entry(to.clone())
                    .or_insert(handler);
                reply
            }
        };
        self.state.borrow_mut().asks.push(SentAsk {
            to: to.clone(),
            payload: payload.to_vec(),
            timeout: Duration::from_millis(u64::from(timeout_ms)),
            reply: reply.clone(),
        });
        reply
    }

    fn schedule(&self, delay_ms: u64, payload: &[u8]) -> u64 {
        self.require_message("schedule");
        let mut state = self.state.borrow_mut();
        let id = state.next_timer;
        state.next_timer += 1;
        let due_ms = state.now_ms.saturating_add(delay_ms);
        state.timers.push(Scheduled {
            id: TimerId::from_raw(id),
            delay: Duration::from_millis(delay_ms),
            due_ms,
            payload: payload.to_vec(),
            cancelled: false,
            fired: false,
        });
        id
    }

    fn cancel(&self, timer: u64) {
        let mut state = self.state.borrow_mut();
        if let Some(timer) = state
            .timers
            .iter_mut()
            .find(|t| t.id.as_raw() == timer && t.is_live())
        {
            timer.cancelled = true;
        }
    }

    fn passivate(&self) {
        self.state.borrow_mut().passivation_requested = true;
    }

    fn log(&self, level: Level, message: &str) {
        self.state
            .borrow_mut()
            .logs
            .push((level, message.to_string()));
    }

    fn now_ms(&self) -> u64 {
        self.state.borrow().now_ms
    }
}

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
    pub fn activate(&mut self, reason: Activation) {
        self.host.begin_activation();
        self.host.set_lifecycle_call(Some("activate"));
        let mut ctx = self.host.ctx();
        let entity = E::activate(&mut ctx, reason);
        self.host.set_lifecycle_call(None);
        self.entity = Some(entity);
    }

    /// Deactivates the live instance, as passivation does: calls `deactivate`, drops the
    /// instance and cancels its timers. State writes and messages in `deactivate` panic, as
    /// the host traps on them.
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
        self.host.cancel_live_timers();
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
        let payload = codec::encode(msg).map_err(Error::BadMessage)?;
        self.deliver(&payload, Ok)
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
        self.deliver(payload, |reply| encode_reply(&reply))
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
            let Some(payload) = self.host.take_due_timer() else {
                break;
            };
            replies.push(self.deliver(&payload, Ok));
        }
        replies
    }

    /// One message, as the host runs it: activate if needed, decode, handle, check the reply
    /// encodes, then commit on `Ok` or discard on `Err` or panic.
    fn deliver<T>(
        &mut self,
        payload: &[u8],
        finish: impl FnOnce(E::Reply) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if self.entity.is_none() {
            let reason = if self.host.state_keys().is_empty() {
                Activation::FirstStart
            } else {
                Activation::Restarted
            };
            self.activate(reason);
        }
        let mut ctx = self.host.ctx();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::handle_bytes;
    use serde::{Deserialize, Serializer};

    /// The STYLE.md counter, verbatim.
    #[derive(Default)]
    struct Counter {
        value: i64,
    }

    #[derive(Serialize, Deserialize)]
    enum Msg {
        Add(i64),
        Get,
    }

    impl Entity for Counter {
        type Msg = Msg;
        type Reply = i64;
        fn activate(ctx: &mut Ctx, _: Activation) -> Self {
            Counter {
                value: ctx.get("value").unwrap_or(0),
            }
        }
        fn handle(&mut self, ctx: &mut Ctx, msg: Msg) -> Result<i64, Error> {
            if let Msg::Add(n) = msg {
                self.value += n;
                ctx.put("value", &self.value);
            }
            Ok(self.value)
        }
    }

    #[test]
    fn counter_counts_and_rebuilds_from_state() {
        let mut counter = Harness::<Counter>::new(Address::new("counter", "c-1"));
        assert_eq!(counter.send(&Msg::Add(2)), Ok(2));
        assert_eq!(counter.send(&Msg::Add(3)), Ok(5));
        assert_eq!(counter.send(&Msg::Get), Ok(5));
        assert_eq!(counter.state::<i64>("value"), Some(5));
        counter.restart();
        assert_eq!(counter.entity().map(|c| c.value), Some(5));
        assert_eq!(counter.send_bytes(b"\xa3Get"), Ok(vec![5]));
    }

    /// Records what the host did to it, and misbehaves on request.
    struct Probe {
        activations: Vec<Activation>,
        handled: u32,
    }

    #[derive(Serialize, Deserialize)]
    enum ProbeMsg {
        Write(String),
        WriteThenFail(String),
        WriteThenPanic,
        ReadOwnWrite,
        PutUnencodable,
        Passivate,
        Handled,
    }

    struct Unencodable;

    impl Serialize for Unencodable {
        fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("refuses to encode"))
        }
    }

    impl Entity for Probe {
        type Msg = ProbeMsg;
        type Reply = String;
        fn activate(_: &mut Ctx, reason: Activation) -> Self {
            Probe {
                activations: vec![reason],
                handled: 0,
            }
        }
        fn handle(&mut self, ctx: &mut Ctx, msg: ProbeMsg) -> Result<String, Error> {
            self.handled += 1;
            match msg {
                ProbeMsg::Write(value) => ctx.put("key", &value),
                ProbeMsg::WriteThenFail(value) => {
                    ctx.put("key", &value);
                    return Err(Error::rejected("no"));
                }
                ProbeMsg::WriteThenPanic => {
                    ctx.put("key", "panicked");
                    panic!("probe panic");
                }
                ProbeMsg::ReadOwnWrite => {
                    ctx.put("key", "mine");
                    return Ok(ctx.get("key").unwrap_or_default());
                }
                ProbeMsg::PutUnencodable => ctx.put("key", &Unencodable),
                ProbeMsg::Passivate => ctx.passivate(),
                ProbeMsg::Handled => return Ok(self.handled.to_string()),
            }
            Ok("ok".to_string())
        }
    }

    fn probe() -> Harness<Probe> {
        Harness::new(Address::new("probe", "p-1"))
    }

    #[test]
    fn first_message_activates_with_first_start_or_restarted() {
        let mut fresh = probe();
        fresh.send(&ProbeMsg::Handled).unwrap();
        assert_eq!(
            fresh.entity().unwrap().activations,
            vec![Activation::FirstStart]
        );

        let host = TestHost::new(Address::new("probe", "p-2"));
        host.set_state("key", "old");
        let mut seeded = Harness::<Probe>::with_host(host);
        seeded.send(&ProbeMsg::Handled).unwrap();
        assert_eq!(
            seeded.entity().unwrap().activations,
            vec![Activation::Restarted]
        );
    }

    #[test]
    fn handle_without_activate_activates_restarted() {
        let host = TestHost::new(Address::new("probe", "p-1"));
        let mut entity: Option<Probe> = None;
        let reply = handle_bytes(&mut entity, &mut host.ctx(), b"\xa7Handled");
        assert_eq!(reply, Ok(b"\xa11".to_vec()));
        assert_eq!(entity.unwrap().activations, vec![Activation::Restarted]);
    }

    #[test]
    fn writes_commit_on_ok_and_are_discarded_on_err() {
        let mut probe = probe();
        probe.send(&ProbeMsg::Write("one".into())).unwrap();
        assert_eq!(probe.state::<String>("key"), Some("one".into()));
        assert_eq!(
            probe.send(&ProbeMsg::WriteThenFail("two".into())),
            Err(Error::rejected("no"))
        );
        assert_eq!(probe.state::<String>("key"), Some("one".into()));
    }

    #[test]
    fn reads_see_the_message_own_writes() {
        let mut probe = probe();
        assert_eq!(probe.send(&ProbeMsg::ReadOwnWrite), Ok("mine".into()));
    }

    #[test]
    fn a_bad_message_is_answered_without_calling_handle() {
        let mut probe = probe();
        assert!(matches!(
            probe.send("NoSuchMessage"),
            Err(Error::BadMessage(_))
        ));
        assert!(matches!(
            probe.send_bytes(b"\xc1"),
            Err(Error::BadMessage(_))
        ));
        assert_eq!(probe.send(&ProbeMsg::Handled), Ok("1".into()));
    }

    #[test]
    fn a_panic_is_a_trap_that_discards_writes_and_the_instance() {
        let mut probe = probe();
        probe.send(&ProbeMsg::Write("kept".into())).unwrap();
        let failed = probe.send(&ProbeMsg::WriteThenPanic);
        assert_eq!(failed, Err(Error::failed("entity panicked: probe panic")));
        assert_eq!(probe.state::<String>("key"), Some("kept".into()));
        assert!(probe.entity().is_none());
        assert_eq!(probe.send(&ProbeMsg::Handled), Ok("1".into()));
        assert_eq!(
            probe.entity().unwrap().activations,
            vec![Activation::Restarted]
        );
    }

    #[test]
    fn an_unencodable_put_fails_the_message() {
        let mut probe = probe();
        probe.send(&ProbeMsg::Write("kept".into())).unwrap();
        assert!(matches!(
            probe.send(&ProbeMsg::PutUnencodable),
            Err(Error::Failed(_))
        ));
        assert_eq!(probe.state::<String>("key"), Some("kept".into()));
    }

    #[test]
    fn passivation_is_flagged_until_the_next_activation() {
        let mut probe = probe();
        probe.send(&ProbeMsg::Passivate).unwrap();
        assert!(probe.passivation_requested());
        probe.restart();
        assert!(!probe.passivation_requested());
    }

    #[test]
    fn asks_are_scripted_per_address_and_recorded() {
        let host = TestHost::new(Address::new("a", "1"));
        let b = Address::new("b", "2");
        let mut calls = 0;
        host.on_ask(b.clone(), move |n: u32| {
            calls += 1;
            Ok(n * 10 + calls)
        });
        let ask =
            |n: u32| host.with_ctx(|ctx| ctx.ask::<_, u32>(&b, &n, Duration::from_millis(100)));
        assert_eq!(ask(1), Ok(11));
        assert_eq!(ask(2), Ok(22));
        let unscripted: Result<u32, Error> =
            host.with_ctx(|ctx| ctx.ask(&Address::new("c", "3"), &1u32, Duration::from_secs(1)));
        assert!(matches!(unscripted, Err(Error::Failed(_))));
        let to_self: Result<u32, Error> =
            host.with_ctx(|ctx| ctx.ask(&Address::new("a", "1"), &1u32, Duration::ZERO));
        assert!(matches!(to_self, Err(Error::Failed(_))));
        assert_eq!(host.asks().len(), 4);
        assert_eq!(host.asks()[1].reply, Ok(vec![22]));
    }

    #[test]
    fn an_undecodable_ask_reply_is_failed() {
        let host = TestHost::new(Address::new("a", "1"));
        let b = Address::new("b", "2");
        host.on_ask(b.clone(), |_: u32| Ok("text"));
        let reply: Result<u32, Error> =
            host.with_ctx(|ctx| ctx.ask(&b, &1u32, Duration::from_secs(1)));
        assert!(matches!(reply, Err(Error::Failed(_))));
    }

    #[test]
    fn timers_fire_in_due_order_and_cancelled_ones_do_not() {
        let host = TestHost::new(Address::new("counter", "c-1"));
        host.set_now_ms(0);
        let mut counter = Harness::<Counter>::with_host(host);
        counter.send(&Msg::Get).unwrap();
        let cancelled = counter.with_ctx(|ctx| {
            ctx.schedule(Duration::from_millis(30), &Msg::Add(100));
            ctx.schedule(Duration::from_millis(10), &Msg::Add(1));
            ctx.schedule(Duration::from_millis(20), &Msg::Add(1000))
        });
        counter.with_ctx(|ctx| ctx.cancel(cancelled));
        counter.advance(Duration::from_millis(15));
        assert_eq!(counter.fire_due(), vec![Ok(1)]);
        counter.set_now_ms(30);
        assert_eq!(counter.fire_due(), vec![Ok(101)]);
        assert!(counter.fire_due().is_empty());
        let timers = counter.schedules();
        assert_eq!(timers.iter().filter(|t| t.fired).count(), 2);
        assert!(timers[2].cancelled && !timers[2].fired);
    }

    #[test]
    fn deactivation_cancels_live_timers() {
        struct Leaves;
        impl Entity for Leaves {
            type Msg = ();
            type Reply = ();
            fn activate(_: &mut Ctx, _: Activation) -> Self {
                Leaves
            }
            fn handle(&mut self, ctx: &mut Ctx, _: ()) -> Result<(), Error> {
                ctx.schedule(Duration::from_secs(1), &());
                Ok(())
            }
        }
        let mut leaves = Harness::<Leaves>::new(Address::new("leaves", "l"));
        leaves.send(&()).unwrap();
        leaves.deactivate();
        assert!(leaves.schedules()[0].cancelled);
    }

    #[test]
    #[should_panic(expected = "only allowed while handling a message, not in deactivate")]
    fn writes_in_deactivate_are_refused_as_the_host_refuses_them() {
        struct Late;
        impl Entity for Late {
            type Msg = ();
            type Reply = ();
            fn activate(_: &mut Ctx, _: Activation) -> Self {
                Late
            }
            fn handle(&mut self, _: &mut Ctx, _: ()) -> Result<(), Error> {
                Ok(())
            }
            fn deactivate(&mut self, ctx: &mut Ctx) {
                ctx.put("late", &1u8);
            }
        }
        let mut late = Harness::<Late>::new(Address::new("late", "l"));
        late.send(&()).unwrap();
        late.deactivate();
    }

    #[test]
    fn the_clock_is_controlled_by_the_test() {
        let host = TestHost::new(Address::new("a", "1"));
        assert_eq!(host.with_ctx(|ctx| ctx.now_ms()), START_MS);
        host.advance(Duration::from_secs(2));
        assert_eq!(host.with_ctx(|ctx| ctx.now_ms()), START_MS + 2_000);
    }

    #[test]
    fn deletes_are_atomic_too() {
        let host = TestHost::new(Address::new("a", "1"));
        host.set_state("k", &1u8);
        host.with_ctx(|ctx| {
            ctx.delete("k");
            assert_eq!(ctx.get_bytes("k"), None);
        });
        assert_eq!(host.state_bytes("k"), None);
    }
}
