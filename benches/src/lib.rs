//! What the benchmarks in `benches/` share: the raw wasmtime baseline ([`baseline`]) that the
//! runtime's and the region's benchmarks are judged against, and the in-process partition
//! groups ([`partition_group`]) the partition plane's benchmarks run. Benchmarks only; never
//! part of the `tessera` binary.

pub mod baseline;
pub mod partition_group;
