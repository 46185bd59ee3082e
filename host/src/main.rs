//! The `tessera` binary: see `tessera --help`.

/// mimalloc: a message's short-lived allocations (its envelope, its boxed run, the reply) cost
/// a fraction of what they cost with the system allocator (`docs/performance.md`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tessera_host::cli::run()
}
