//! What the benchmarks in `benches/` share: the raw wasmtime baseline ([`baseline`]) that the
//! runtime's and the region's benchmarks are judged against. Benchmarks only; never part of the
//! `tessera` binary.

pub mod baseline;
