//! The fake host a test holds: [`TestHost`], an in-memory stand-in for the Tessera host for one
//! entity address, and the state behind it ([`FakeState`]). This file owns what a test does
//! with the host: seed and read committed state, read back what the entity sent, script ask
//! replies, set the clock, check the passivation flag. How the host runs a message on that
//! state (the `Backend` a [`Ctx`] calls, commit and discard, trap rules, timers) is in
//! `backend.rs`.

use core::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::records::{Scheduled, SentAsk, SentTell};
use crate::codec;
use crate::runtime::encode_reply;
use crate::{Address, Ctx, Error, Level};

/// The clock of a new [`TestHost`]: 2023-11-14T22:13:20Z, in ms since the Unix epoch.
pub const START_MS: u64 = 1_700_000_000_000;

type AskHandler = Box<dyn FnMut(&[u8]) -> Result<Vec<u8>, Error>>;

/// The state a [`TestHost`] and every [`Ctx`] it hands out share.
pub(super) struct FakeState {
    pub(super) address: Address,
    /// Set while `activate` or `deactivate` runs, where the host refuses state writes and
    /// messages (it traps); the harness panics with the same rule.
    pub(super) lifecycle_call: Option<&'static str>,
    pub(super) committed: BTreeMap<String, Vec<u8>>,
    /// Writes of the current message: `None` is a delete.
    pub(super) pending: BTreeMap<String, Option<Vec<u8>>>,
    pub(super) tells: Vec<SentTell>,
    pub(super) asks: Vec<SentAsk>,
    pub(super) ask_handlers: HashMap<Address, AskHandler>,
    pub(super) timers: Vec<Scheduled>,
    pub(super) next_timer: u64,
    pub(super) now_ms: u64,
    pub(super) passivation_requested: bool,
    pub(super) logs: Vec<(Level, String)>,
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
    pub(super) state: Rc<RefCell<FakeState>>,
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
}
