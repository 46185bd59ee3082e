//! The `tessera` binary: see `tessera --help`.

fn main() -> std::process::ExitCode {
    tessera_host::cli::run()
}
