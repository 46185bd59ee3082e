//! What the entity sent, as a test reads it back from the [`TestHost`](super::TestHost): its
//! tells ([`SentTell`]), its asks with the replies they got ([`SentAsk`]) and its timers
//! ([`Scheduled`]). The fake host's backend (`backend.rs`) records them; `host.rs` hands out
//! copies.

use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::codec;
use crate::{Address, Error, TimerId};

/// A one-way message the entity sent with [`Ctx::tell`](crate::Ctx::tell).
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

/// A request the entity sent with [`Ctx::ask`](crate::Ctx::ask), and what it got back.
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

/// A timer the entity made with [`Ctx::schedule`](crate::Ctx::schedule).
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
    /// The id [`Ctx::schedule`](crate::Ctx::schedule) returned.
    pub id: TimerId,
    /// The delay the entity asked for.
    pub delay: Duration,
    /// When it is due, in the test clock's milliseconds.
    pub due_ms: u64,
    /// The MessagePack message it will deliver to the entity.
    pub payload: Vec<u8>,
    /// Whether [`Ctx::cancel`](crate::Ctx::cancel) cancelled it (a deactivation does not: the
    /// host's reminders outlive the instance).
    pub cancelled: bool,
    /// Whether [`Harness::fire_due`](super::Harness::fire_due) delivered it.
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

    pub(super) fn is_live(&self) -> bool {
        !self.cancelled && !self.fired
    }
}
