//! One entity in a sandbox: the wasmtime engine, compiled-plugin cache, per-instance limits and
//! the host side of the WIT contract.
//!
//! [`Runtime`] owns the process's single `Engine` (pooling allocator, epoch interruption,
//! async), compiles each plugin once per content hash (cached on disk) and keeps one
//! `InstancePre` per plugin in a [`Plugin`]. [`EntityInstance`] is one live instance in its own
//! `Store`, with a memory cap and a per-message CPU deadline; it runs `activate`, `handle` and
//! `deactivate` and turns every guest failure into a typed [`MessageError`]. The entity layer
//! above decides when to call it; the [`Router`] it is given decides where `ask`s go, and the
//! message's `tell`s come back as [`Effects`] for the caller to carry out after the commit.
//!
//! Uses `tessera-contract` and `tessera-state` (the [`EntityState`](tessera_state::EntityState)
//! a guest reads and writes through). The entity layer above uses it.
//!
//! [`MessageError`]: tessera_contract::MessageError
//! [`Router`]: tessera_contract::Router

mod bare;
#[doc(hidden)]
mod bindings;
mod cache;
mod clock;
mod config;
mod engine;
mod gate;
mod guest_log;
mod guest_pool;
mod host;
mod host_v1;
mod instance;
mod limits;
mod message_scope;
mod plugin;
mod retire;
mod sender;
mod slots;

pub use bindings::Activation;
#[doc(hidden)]
pub use bindings::{Entity as EntityBindings, EntityPre, Sender as EntitySender};
pub use clock::{Clock, SystemClock};
pub use config::{GUEST_THREADS_MAX, RuntimeConfig};
pub use engine::{EntityContext, Runtime};
pub use gate::CallGate;
pub use guest_log::GUEST_LOG_LINE_BYTES_MAX;
pub use guest_pool::Weight;
pub use host::HostState;
pub use instance::{Effects, EntityInstance, HandleOutcome, ScheduledMessage};
pub use limits::{InstanceLimits, wall_bound_ms};
pub use plugin::{LoadError, PLUGIN_BYTES_MAX, PLUGIN_CACHE_ENTRIES_DEFAULT, Plugin, PluginCache};
pub use retire::{RETIRE_OFF_WORKER_GROWTH_BYTES, RETIRING_MAX};
pub use sender::Sender;
