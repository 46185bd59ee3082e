//! Write Tessera entities in Rust: typed messages, durable state, tell/ask, timers.
//!
//! An entity is a virtual actor. The host starts it on its first message, hands it one message
//! at a time, keeps its state durable and passivates it when idle. This crate turns the
//! `tessera:entity` WIT contract into an [`Entity`] trait, a [`Ctx`] for everything the host
//! offers, and one macro, [`export_entity!`], that exports the type. Messages, replies and state
//! values are MessagePack with named fields; serde's default enum form means a client's JSON
//! `{"Add":5}` or `"Get"` arrives as `Msg::Add(5)` or `Msg::Get`.
//!
//! A whole entity:
//!
//! ```
//! use tessera_sdk::prelude::*;
//!
//! #[derive(Default)]
//! struct Counter { value: i64 }
//!
//! #[derive(Deserialize)]
//! enum Msg { Add(i64), Get }
//!
//! impl Entity for Counter {
//!     type Msg = Msg;
//!     type Reply = i64;
//!     fn activate(ctx: &mut Ctx, _: Activation) -> Self { Counter { value: ctx.get("value").unwrap_or(0) } }
//!     fn handle(&mut self, ctx: &mut Ctx, msg: Msg) -> Result<i64, Error> {
//!         if let Msg::Add(n) = msg { self.value += n; ctx.put("value", &self.value); }
//!         Ok(self.value)
//!     }
//! }
//! export_entity!(Counter);
//! ```
//!
//! Its crate is a `cdylib` that depends on `tessera-sdk` alone — the prelude's `Serialize` and
//! `Deserialize` derives go through the serde this crate re-exports — built with
//! `cargo build --release --target wasm32-wasip2` (or `tessera build <crate dir>`); the `.wasm`
//! it produces is the component to deploy. Outside this repository:
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! tessera-sdk = { path = "../tessera/guest-sdk" }   # a checkout of the repository
//! # or: tessera-sdk = { git = "<the repository's URL>" }
//! ```
//!
//! Test it natively with [`testing::Harness`]:
//!
//! ```
//! # use tessera_sdk::prelude::*;
//! # struct Counter { value: i64 }
//! # #[derive(Deserialize)] enum Msg { Add(i64), Get }
//! # impl Entity for Counter {
//! #     type Msg = Msg;
//! #     type Reply = i64;
//! #     fn activate(ctx: &mut Ctx, _: Activation) -> Self { Counter { value: ctx.get("value").unwrap_or(0) } }
//! #     fn handle(&mut self, ctx: &mut Ctx, msg: Msg) -> Result<i64, Error> {
//! #         if let Msg::Add(n) = msg { self.value += n; ctx.put("value", &self.value); }
//! #         Ok(self.value)
//! #     }
//! # }
//! use tessera_sdk::testing::Harness;
//!
//! // A client's view of the messages: any serde value of the same shape will do.
//! #[derive(Serialize)]
//! enum Request { Add(i64) }
//!
//! let mut counter = Harness::<Counter>::new(Address::new("counter", "c-1"));
//! assert_eq!(counter.send(&Request::Add(2)), Ok(2));
//! assert_eq!(counter.send("Get"), Ok(2));
//! counter.restart();
//! assert_eq!(counter.send("Get"), Ok(2));
//! ```

#![warn(missing_docs)]

extern crate self as tessera_sdk;

mod codec;
mod ctx;
mod entity;
mod error;
mod host;
mod types;

#[doc(hidden)]
pub mod __rt {
    pub use crate::runtime::{Slot, activate, deactivate, handle};
}
mod runtime;

#[cfg(not(target_family = "wasm"))]
pub mod testing;

pub use ctx::Ctx;
pub use entity::Entity;
pub use error::Error;
pub use types::{Activation, Address, Level, Sender, TimerId};

/// serde, re-exported for its traits and for `#[serde(crate = "tessera_sdk::serde")]`.
///
/// ```
/// use tessera_sdk::serde::Serialize;
/// fn encodable<T: Serialize>(_: &T) {}
/// encodable(&5u8);
/// ```
pub use serde;
/// serde's traits, and the derives for them that go through the serde this crate re-exports
/// (`tessera-sdk-macros`), so an entity crate needs no `serde` dependency of its own:
///
/// ```
/// use tessera_sdk::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize)]
/// enum Msg { Add(i64), #[serde(rename = "get")] Get }
/// fn message<T: Serialize + for<'de> Deserialize<'de>>() {}
/// message::<Msg>();
/// ```
pub use serde::de::Deserialize;
pub use serde::ser::Serialize;
/// serde_bytes, re-exported so a message or reply can carry MessagePack `bin` data.
///
/// ```
/// use tessera_sdk::serde_bytes::ByteBuf;
/// let reply = ByteBuf::from(vec![0u8; 4]);
/// assert_eq!(reply.len(), 4);
/// ```
pub use serde_bytes;
pub use tessera_sdk_macros::{Deserialize, Serialize};
/// The wit-bindgen runtime the generated bindings use.
#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

/// Everything an entity module needs in one `use`.
///
/// ```
/// use tessera_sdk::prelude::*;
/// let _ = (Address::new("counter", "c"), Duration::from_millis(5), Level::Info);
/// ```
pub mod prelude {
    pub use crate::{
        Activation, Address, Ctx, Entity, Error, Level, Sender, TimerId, export_entity,
    };
    pub use crate::{Deserialize, Serialize};
    pub use serde_bytes::ByteBuf;
    pub use std::time::Duration;
}

/// The bindings wit-bindgen generates from `wit/entity.wit` (`tessera:entity@0.2.0`). Authors never use them directly.
#[doc(hidden)]
#[allow(missing_docs, clippy::all)]
pub mod wit {
    wit_bindgen::generate!({
        world: "entity",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "__export_entity_world",
        default_bindings_module: "tessera_sdk::wit",
        runtime_path: "tessera_sdk::__wit_bindgen::rt",
    });
}

/// Exports an [`Entity`] type as this component's `tessera:entity/handler`.
///
/// Use it once per plugin crate. The instance lives in a guest-global slot between calls: it is
/// created by `activate`, dropped on `deactivate`, and a message that arrives with no live
/// instance activates one with [`Activation::Restarted`] first.
///
/// ```
/// use tessera_sdk::prelude::*;
///
/// struct Ping;
///
/// impl Entity for Ping {
///     type Msg = String;
///     type Reply = String;
///     fn activate(_: &mut Ctx, _: Activation) -> Self { Ping }
///     fn handle(&mut self, _: &mut Ctx, msg: String) -> Result<String, Error> { Ok(msg) }
/// }
///
/// export_entity!(Ping);
/// ```
///
/// A type that does not implement [`Entity`] is a compile error at the macro argument:
///
/// ```compile_fail,E0277
/// use tessera_sdk::prelude::*;
///
/// struct NotAnEntity;
///
/// export_entity!(NotAnEntity);
/// ```
#[macro_export]
macro_rules! export_entity {
    ($entity:ty) => {
        const _: () = {
            const fn assert_is_entity<E: $crate::Entity>() {}
            const _: () = assert_is_entity::<$entity>();

            struct TesseraExport;

            ::std::thread_local! {
                static TESSERA_SLOT: $crate::__rt::Slot<$entity> = const { $crate::__rt::Slot::new() };
            }

            impl $crate::wit::exports::tessera::entity::handler::Guest for TesseraExport {
                fn activate(
                    reason: $crate::wit::tessera::entity::types::Activation,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    TESSERA_SLOT.with(|slot| $crate::__rt::activate(slot, reason))
                }

                fn handle(
                    payload: ::std::vec::Vec<u8>,
                    sender: $crate::wit::tessera::entity::types::Sender,
                ) -> ::core::result::Result<::std::vec::Vec<u8>, $crate::wit::tessera::entity::types::Error> {
                    TESSERA_SLOT.with(|slot| $crate::__rt::handle(slot, &payload, sender))
                }

                fn deactivate() {
                    TESSERA_SLOT.with(|slot| $crate::__rt::deactivate(slot))
                }
            }

            $crate::wit::__export_entity_world!(TesseraExport with_types_in $crate::wit);
        };
    };
}
