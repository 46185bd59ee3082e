//! The `tessera` command line: author tools (`build`, `invoke`), the commands that run a node
//! (`node`, `up`) and the client commands that talk to one over HTTP (`deploy`, `ask`, ...;
//! see `docs/cli.md` for their exit codes), which find their node and token through `login`'s
//! profiles or `up`'s credentials file.

mod backup;
mod build;
mod client;
mod cluster;
mod commands;
mod credentials;
mod invoke;
mod login;
mod output;
mod profiles;
mod progress;
mod serve;
mod telemetry;
mod up;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

pub use build::{BuildError, build_plugin};
pub use credentials::Credentials;
pub use invoke::{InvokeOptions, invoke};
pub use profiles::{CliConfig, DEFAULT_PROFILE, config_path, validate_profile};

/// Tessera: sharded entities as sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "tessera", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compile a plugin crate to a component in <its target dir>/plugins/<name>.wasm.
    Build(build::BuildArgs),
    /// Run an entity locally and print each reply as one JSON line.
    Invoke(invoke::InvokeArgs),
    /// Run a node (admin token from --config or TESSERA_ADMIN_TOKEN).
    Node(serve::NodeArgs),
    /// Run a development node (or with --nodes 3 a local cluster) in ./.tessera with the example
    /// plugins deployed.
    Up(up::UpArgs),
    /// Check a node's URL and a token, and keep both in a profile of the user's config so
    /// client commands work from any directory.
    Login(login::LoginArgs),
    /// Upload a component as a new version of an entity type.
    Deploy(commands::DeployArgs),
    /// List the tenant's entity types.
    Types(commands::PlainArgs),
    /// Make an earlier (or later) version of a type active.
    Rollback(commands::RollbackArgs),
    /// Send a one-way message to an entity.
    Tell(commands::MessageArgs),
    /// Send a message to an entity and print its reply.
    Ask(commands::MessageArgs),
    /// Passivate an entity.
    Passivate(commands::EntityArgs),
    /// Show an entity's committed state.
    State(commands::EntityArgs),
    /// Per entity type: active version, live and remembered entities.
    Status(commands::PlainArgs),
    /// List the ids of a type's entities (with state or remembered), one page at a time.
    Entities(commands::EntitiesArgs),
    /// Create, list and show tenants (admin token).
    Tenant(commands::TenantArgs),
    /// The cluster as a node sees it (admin token).
    Cluster(cluster::ClusterArgs),
    /// The partition groups a node runs: primaries, views, commits, replicas' lag (admin).
    Partition(cluster::PartitionArgs),
    /// Create the cluster CA and node certificates for mutual TLS between nodes.
    Certs(cluster::CertsArgs),
    /// Write a consistent backup of a running cluster (or, with --tenant, of one tenant).
    Backup(backup::BackupArgs),
    /// Restore a backup into an empty cluster (or, with --tenant, import a tenant export).
    Restore(backup::RestoreArgs),
}

/// Parses the command line and runs the command.
pub fn run() -> ExitCode {
    run_from(std::env::args_os())
}

/// Parses `args` (the program name first) and runs the command: `tessera` in a process that
/// has other arguments of its own, such as a test's child process.
///
/// ```no_run
/// let exit = tessera_host::cli::run_from(["tessera", "certs", "create", "--nodes", "n1"]);
/// # let _ = exit;
/// ```
pub fn run_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    init_tracing();
    let cli = Cli::parse_from(args);
    match cli.command {
        Command::Build(args) => build::run(args),
        Command::Invoke(args) => invoke::run(args),
        Command::Node(args) => serve::node(args),
        Command::Up(args) => up::up(args),
        Command::Login(args) => login::login(args),
        Command::Deploy(args) => commands::deploy(args),
        Command::Types(args) => commands::types(args),
        Command::Rollback(args) => commands::rollback(args),
        Command::Tell(args) => commands::tell(args),
        Command::Ask(args) => commands::ask(args),
        Command::Passivate(args) => commands::passivate(args),
        Command::State(args) => commands::state(args),
        Command::Status(args) => commands::status(args),
        Command::Entities(args) => commands::entities(args),
        Command::Tenant(args) => commands::tenant(args),
        Command::Cluster(args) => cluster::cluster(args),
        Command::Partition(args) => cluster::partition(args),
        Command::Certs(args) => cluster::certs(args),
        Command::Backup(args) => backup::backup(args),
        Command::Restore(args) => backup::restore(args),
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
