//! Rust bindings generated from `wit/entity.wit`, host side.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "entity",
    imports: { default: async | trappable },
    exports: { default: async },
});

pub use tessera::entity::types::{Activation, Address, Error as GuestError, LogLevel};
