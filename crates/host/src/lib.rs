//! Tessera's host: runs entities (virtual actors) as sandboxed WebAssembly components.
//!
//! The top of the crate order: [`api`] and [`cli`] speak to users; [`node`] builds every layer
//! in one pass and offers the operations; [`allocator`] is the memory allocator the binary
//! runs with.
//!
//! Uses every crate below it, each a layer the compiler keeps in order (a lower crate cannot
//! name a higher one): `tessera-sharding` decides where each entity lives and routes to it;
//! `tessera-entity` runs one entity at a time through its mailbox; `tessera-runtime` sandboxes
//! one instance in wasmtime; `tessera-state` keeps entity state durable in redb;
//! `tessera-metadata` is the catalog of tenants, types and shard allocations, changed by
//! replayable commands and replicated by `tessera-consensus` over `tessera-cluster`, the
//! mutually authenticated transport between nodes; `tessera-contract` is the vocabulary they
//! share, `tessera-codec` the lossless JSON/MessagePack transcoding of the edge and
//! `tessera-logs` how a warning that repeats per request is written once per kind and window.
//! No crate uses this one. `docs/architecture.md` draws the crates and walks one message through.

pub mod allocator;
pub mod api;
pub mod backup;
pub mod cli;
pub mod node;
