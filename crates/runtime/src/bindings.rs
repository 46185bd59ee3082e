//! Rust bindings generated from the WIT contract, host side: `wit/entity.wit`
//! (`tessera:entity@0.2.0`, what the SDK builds against) and `wit/0.1.0/entity.wit`
//! (`tessera:entity@0.1.0`, kept so components built against it run unchanged). Both worlds
//! are linked into one linker; a component is bound to the world it exports
//! ([`crate::plugin::Pre`]).

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "entity",
    imports: { default: async | trappable },
    exports: { default: async },
});

pub use tessera::entity::types::{Activation, Address, Error as GuestError, LogLevel, Sender};

/// The bindings of the 0.1.0 world: its own types, converted to and from the 0.2.0 ones at
/// the boundary (`host_v1`).
pub mod v1 {
    wasmtime::component::bindgen!({
        path: "../../wit/0.1.0",
        world: "entity",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}
