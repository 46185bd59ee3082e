//! `tessera node` (a node for production: config file, admin token required) and `tessera up`
//! (a ready development node in `./.tessera` with the example plugins deployed).

use super::build::build_plugin;
use super::credentials::{CREDENTIALS_FILE, Credentials, DEV_DATA_DIR};
use super::output::outln;
use crate::metadata::TypeOptions;
use crate::node::{Node, NodeConfig};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// The tenant `tessera up` creates and deploys the examples to.
pub const DEV_TENANT: &str = "default";

/// The example plugins `tessera up` deploys: `(crate dir under plugins/, type name)`.
const DEV_PLUGINS: [(&str, &str); 2] = [("counter", "counter"), ("bank-account", "bank-account")];

/// `tessera node`.
#[derive(Debug, clap::Args)]
pub(crate) struct NodeArgs {
    /// The data directory [default: the config's, else ./.tessera].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Where the HTTP API listens [default: the config's, else 127.0.0.1:7070].
    #[arg(long)]
    http: Option<SocketAddr>,
    /// A TOML configuration file (see NodeConfig).
    #[arg(long)]
    config: Option<PathBuf>,
}

/// `tessera up`.
#[derive(Debug, clap::Args)]
pub(crate) struct UpArgs {
    /// Where the HTTP API listens.
    #[arg(long, default_value = "127.0.0.1:7070")]
    http: SocketAddr,
    /// The directory holding the example plugin crates.
    #[arg(long, default_value = "plugins")]
    plugins: PathBuf,
}

fn tokio_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the async runtime: {error}"))
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

pub(crate) fn node(args: NodeArgs) -> ExitCode {
    let mut config = match &args.config {
        Some(path) => match NodeConfig::load(path) {
            Ok(config) => config,
            Err(error) => return fail(error),
        },
        None => NodeConfig::default(),
    };
    if let Some(data_dir) = args.data_dir {
        config.data_dir = data_dir;
    }
    if let Some(http) = args.http {
        config.http = http;
    }
    if config.admin_token.is_none() {
        config.admin_token = std::env::var("TESSERA_ADMIN_TOKEN").ok();
    }
    if config.admin_token.is_none() {
        return fail("no admin token: set admin_token in the config file or TESSERA_ADMIN_TOKEN");
    }
    let runtime = match tokio_runtime() {
        Ok(runtime) => runtime,
        Err(error) => return fail(error),
    };
    match runtime.block_on(run_node(config, async |_, _| Ok(()))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(error),
    }
}

/// Opens the node, binds its listener, runs `ready` with both, serves until SIGINT or
/// SIGTERM, then stops accepting and shuts the node down.
async fn run_node(
    config: NodeConfig,
    ready: impl AsyncFnOnce(&Arc<Node>, SocketAddr) -> Result<(), String>,
) -> Result<(), String> {
    let node = Node::open(config.clone())
        .await
        .map_err(|error| error.to_string())?;
    let listener = tokio::net::TcpListener::bind(config.http)
        .await
        .map_err(|error| format!("cannot listen on {}: {error}", config.http))?;
    let address = listener
        .local_addr()
        .map_err(|error| format!("cannot read the listening address: {error}"))?;
    if let Err(error) = ready(&node, address).await {
        node.shutdown().await;
        return Err(error);
    }
    tracing::info!(%address, data_dir = %config.data_dir.display(), "serving the HTTP API");
    let served = crate::api::serve(node.clone(), listener, shutdown_signal()).await;
    tracing::info!("stopping the node");
    node.shutdown().await;
    served.map_err(|error| format!("the HTTP server failed: {error}"))
}

/// Completes on Ctrl-C (SIGINT) or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub(crate) fn up(args: UpArgs) -> ExitCode {
    let data_dir = PathBuf::from(DEV_DATA_DIR);
    let credentials_path = data_dir.join(CREDENTIALS_FILE);
    let mut credentials = match Credentials::load(&credentials_path) {
        Ok(credentials) => credentials.unwrap_or_default(),
        Err(error) => return fail(error),
    };
    let admin_token = std::env::var("TESSERA_ADMIN_TOKEN")
        .ok()
        .or(credentials.admin_token.clone())
        .unwrap_or_else(|| format!("tsa_{}", hex::encode(rand::random::<[u8; 24]>())));
    let plugins = build_examples(&args.plugins);
    let config = NodeConfig {
        data_dir: data_dir.clone(),
        http: args.http,
        admin_token: Some(admin_token.clone()),
        ..NodeConfig::default()
    };
    let runtime = match tokio_runtime() {
        Ok(runtime) => runtime,
        Err(error) => return fail(error),
    };
    let served = runtime.block_on(run_node(config, async |node, address| {
        let tenant_token = prepare(node, &plugins).await?;
        let host = match address.ip() {
            ip if ip.is_unspecified() => "127.0.0.1".to_string(),
            ip => ip.to_string(),
        };
        credentials.url = format!("http://{host}:{}", address.port());
        credentials.admin_token = Some(admin_token);
        credentials.tenant = Some(DEV_TENANT.into());
        if tenant_token.is_some() {
            credentials.tenant_token = tenant_token;
        }
        credentials.save(&credentials_path)?;
        outln!(
            "Tessera is up at {} (data in {}, tokens in {})",
            credentials.url,
            data_dir.display(),
            credentials_path.display()
        );
        outln!("Try:");
        outln!("  tessera ask counter/c1 '{{\"Add\":1}}'");
        outln!("  tessera state counter/c1");
        outln!("  tessera status");
        outln!("Ctrl-C stops the node.");
        Ok(())
    }));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(error),
    }
}

/// Builds the example plugins; an absent plugins directory is said in one line.
fn build_examples(plugins_dir: &Path) -> Vec<(String, Vec<u8>)> {
    if !plugins_dir.is_dir() {
        eprintln!(
            "no plugins directory at {}: starting without example types",
            plugins_dir.display()
        );
        return Vec::new();
    }
    let mut built = Vec::new();
    for (crate_name, entity_type) in DEV_PLUGINS {
        let wasm = build_plugin(&plugins_dir.join(crate_name), Path::new("target/plugins"))
            .and_then(|path| std::fs::read(path).map_err(Into::into));
        match wasm {
            Ok(bytes) => built.push((entity_type.to_string(), bytes)),
            Err(error) => eprintln!("cannot build plugins/{crate_name}: {error}"),
        }
    }
    built
}

/// Creates the dev tenant if missing (returning its new token) and deploys every example
/// whose bytes differ from its type's active version.
async fn prepare(node: &Node, plugins: &[(String, Vec<u8>)]) -> Result<Option<String>, String> {
    let token = match node.tenant(DEV_TENANT) {
        Ok(_) => None,
        Err(_) => {
            let (_, token) = node
                .create_tenant(DEV_TENANT, None)
                .await
                .map_err(|error| error.to_string())?;
            Some(token)
        }
    };
    for (entity_type, bytes) in plugins {
        let sha256 = hex::encode(Sha256::digest(bytes));
        let current = node.entity_type(DEV_TENANT, entity_type).ok();
        if current
            .as_ref()
            .and_then(|record| record.active())
            .is_some_and(|version| version.sha256 == sha256)
        {
            continue;
        }
        let version = node
            .deploy(
                DEV_TENANT,
                entity_type,
                bytes.clone(),
                TypeOptions::default(),
            )
            .await
            .map_err(|error| format!("cannot deploy {entity_type}: {error}"))?;
        outln!("deployed {entity_type} version {}", version.version);
    }
    Ok(token)
}
