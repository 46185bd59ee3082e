//! Tessera's host: runs entities (virtual actors) as sandboxed WebAssembly components.
//!
//! Layers, top to bottom (a lower layer never imports a higher one): [`api`] and [`cli`] speak
//! to users; [`node`] builds every layer in one pass and offers the operations; [`sharding`]
//! decides where each entity lives and routes to it; [`entity`] runs one entity at a time
//! through its mailbox; [`runtime`] sandboxes one instance in wasmtime; [`state`] keeps entity
//! state durable in redb; [`metadata`] is the catalog of tenants, types and shard allocations,
//! changed by replayable commands. [`contract`] is the vocabulary they share, [`codec`] the
//! lossless JSON/MessagePack transcoding of the edge, [`consensus`] the replication core
//! the cluster uses, and [`cluster`] the mutually authenticated transport between nodes;
//! [`allocator`] is the memory allocator the binary runs with.
//! `docs/architecture.md` draws the layers and walks one message through.

pub mod allocator;
pub mod api;
pub mod cli;
pub mod cluster;
pub mod codec;
pub mod consensus;
pub mod contract;
pub mod entity;
pub mod metadata;
pub mod node;
pub mod runtime;
pub mod sharding;
pub mod state;

#[cfg(test)]
mod import_cycles;
#[cfg(test)]
mod layer_order;
