//! The `tessera` command line: author tools (`build`, `invoke`) and, with the node service,
//! the commands that run and talk to a node.

mod build;
mod invoke;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

pub use build::{BuildError, build_plugin};
pub use invoke::{InvokeOptions, invoke};

/// Tessera: sharded entities as sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "tessera", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compile a plugin crate to a component in target/plugins/<name>.wasm.
    Build(build::BuildArgs),
    /// Run an entity locally and print each reply as one JSON line.
    Invoke(invoke::InvokeArgs),
}

/// Parses the command line and runs the command.
pub fn run() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    match cli.command {
        Command::Build(args) => build::run(args),
        Command::Invoke(args) => invoke::run(args),
    }
}

/// One log line per event, filtered by `RUST_LOG` (default `info`), on stderr.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
