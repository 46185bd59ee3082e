//! Unit-test an entity natively, with plain `cargo test`: an in-memory host with the same
//! per-message atomicity as the real one, captured tells, asks and timers, scripted ask replies,
//! controllable time and a passivation flag.
//!
//! [`Harness`] drives one entity the way the host does; [`TestHost`] is the fake host behind it
//! (reachable through the harness by `Deref`), usable on its own to test code that takes a
//! [`Ctx`](crate::Ctx).
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

// Where things live: `harness` runs an entity's lifecycle and messages (`Harness`); `host` is
// the fake host a test holds (`TestHost`): seeding, inspection, ask scripts and the clock;
// `backend` is how that host runs a message: the `Backend` a `Ctx` calls, commit and discard,
// the trap rules and timers; `records` holds what the entity sent; `tests` has the unit tests.

mod backend;
mod harness;
mod host;
mod records;
#[cfg(test)]
mod tests;

pub use harness::{FIRE_DUE_LIMIT, Harness};
pub use host::{START_MS, TestHost};
pub use records::{Scheduled, SentAsk, SentTell};
