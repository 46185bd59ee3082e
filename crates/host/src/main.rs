//! The `tessera` binary: see `tessera --help`.

/// mimalloc: a message's short-lived allocations (its envelope, its boxed guest call, the
/// reply) cost a fraction of what they cost with the system allocator (`docs/performance.md`).
#[global_allocator]
static ALLOCATOR: tessera_host::allocator::Mimalloc = tessera_host::allocator::Mimalloc;

fn main() -> std::process::ExitCode {
    tessera_host::cli::run()
}
