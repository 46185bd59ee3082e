//! Tessera's host: runs entities (virtual actors) as sandboxed WebAssembly components.
//!
//! Layers, top to bottom (a lower layer never imports a higher one): [`api`] and [`cli`] speak
//! to users; [`metadata`] holds tenants, types and plugin versions as replayable commands;
//! [`sharding`] decides where each entity lives; [`entity`] runs one entity at a time through
//! its mailbox; [`runtime`] sandboxes one instance in wasmtime; [`state`] keeps entity state
//! durable in redb. [`envelope`] is the vocabulary they share, [`metrics`] what they count,
//! [`node`] assembles them, and [`consensus`] is the replication core the cluster will use.

pub mod api;
pub mod cli;
pub mod codec;
pub mod consensus;
pub mod contract;
pub mod entity;
pub mod metadata;
pub mod node;
pub mod runtime;
pub mod sharding;
pub mod state;
