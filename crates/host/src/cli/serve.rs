//! `tessera node`: a node for production (config file, admin token required, cluster flags),
//! and the serve loop it shares with `tessera up`.

use crate::node::{ClusterConfig, Node, NodeConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tessera_cluster::PeerAddress;

/// `tessera node`. Every flag may instead come from the environment variable named in its
/// help (`TESSERA_NODE_ID`, ...), as a container or a Kubernetes StatefulSet sets them; a flag
/// wins over its variable.
#[derive(Debug, clap::Args)]
pub(crate) struct NodeArgs {
    /// The data directory, created if missing [default: the config's, else ./.tessera].
    #[arg(long, env = "TESSERA_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Where the HTTP API listens [default: the config's, else 127.0.0.1:7070].
    #[arg(long, env = "TESSERA_HTTP")]
    http: Option<SocketAddr>,
    /// A TOML configuration file (see NodeConfig).
    #[arg(long, env = "TESSERA_CONFIG")]
    config: Option<PathBuf>,
    /// This node's id [default: the config's, else node-1].
    #[arg(long, env = "TESSERA_NODE_ID")]
    node_id: Option<String>,
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// The cluster flags of `tessera node`; each overrides the config's `[cluster]` section, and
/// `--cluster-listen` alone makes a node without one a cluster node.
#[derive(Debug, Default, clap::Args)]
pub(crate) struct ClusterArgs {
    /// Where this node listens for the other nodes of its cluster.
    #[arg(long, env = "TESSERA_CLUSTER_LISTEN")]
    cluster_listen: Option<SocketAddr>,
    /// The address other nodes dial to reach this one, host:port with an IP address or a DNS
    /// name [default: --cluster-listen].
    #[arg(long, env = "TESSERA_CLUSTER_ADVERTISE")]
    cluster_advertise: Option<PeerAddress>,
    /// The cluster's id; nodes of another cluster are refused [default: tessera].
    #[arg(long, env = "TESSERA_CLUSTER_ID")]
    cluster_id: Option<String>,
    /// The nodes that replicate the catalog (1, 3 or 5), comma-separated, the same on every
    /// node.
    #[arg(long, env = "TESSERA_VOTERS", value_delimiter = ',')]
    voters: Vec<String>,
    /// A node to reach first, as id=host:port, the host an IP address or a DNS name resolved at
    /// each dial (repeat it, or comma-separate them in the variable; every other voter needs
    /// one; this node's own is skipped, so every node may be given the same list).
    #[arg(long = "seed", env = "TESSERA_SEEDS", value_delimiter = ',', value_parser = parse_seed)]
    seeds: Vec<(String, PeerAddress)>,
    /// The directory with the cluster CA and this node's certificate (`tessera certs create`)
    /// [default: <data dir>/certs].
    #[arg(long, env = "TESSERA_CERTS_DIR")]
    certs_dir: Option<PathBuf>,
    /// A role this node advertises (repeat it, or comma-separate them in the variable); shards
    /// of a role-constrained sharding config go only to nodes advertising that role.
    #[arg(long = "role", env = "TESSERA_ROLES", value_delimiter = ',')]
    roles: Vec<String>,
}

fn parse_seed(seed: &str) -> Result<(String, PeerAddress), String> {
    let (node, address) = seed
        .split_once('=')
        .ok_or_else(|| format!("a seed is id=host:port, not {seed:?}"))?;
    let address = address
        .parse()
        .map_err(|error| format!("seed {node}: {error}"))?;
    Ok((node.to_string(), address))
}

impl ClusterArgs {
    /// Applies the flags to `config`.
    fn apply(self, config: &mut NodeConfig) -> Result<(), String> {
        let mut cluster = match (config.cluster.take(), self.cluster_listen) {
            (Some(cluster), _) => cluster,
            (None, Some(listen)) => {
                ClusterConfig::new("tessera", listen, config.data_dir.join("certs"), Vec::new())
            }
            (None, None) => {
                if self.cluster_advertise.is_some()
                    || self.cluster_id.is_some()
                    || !self.voters.is_empty()
                    || !self.seeds.is_empty()
                    || self.certs_dir.is_some()
                    || !self.roles.is_empty()
                {
                    return Err(
                        "cluster flags need --cluster-listen (or a [cluster] section)".into(),
                    );
                }
                return Ok(());
            }
        };
        if let Some(listen) = self.cluster_listen {
            cluster.listen = listen;
        }
        if let Some(advertise) = self.cluster_advertise {
            cluster.advertise = Some(advertise);
        }
        if let Some(id) = self.cluster_id {
            cluster.id = id;
        }
        if !self.voters.is_empty() {
            cluster.voters = self.voters;
        }
        if cluster.voters.is_empty() {
            cluster.voters = vec![config.node_id.clone()];
        }
        cluster.seeds.extend(self.seeds);
        if let Some(certs_dir) = self.certs_dir {
            cluster.certs_dir = certs_dir;
        }
        if !self.roles.is_empty() {
            cluster.roles = self.roles;
        }
        config.cluster = Some(cluster);
        Ok(())
    }
}

pub(super) fn tokio_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the async runtime: {error}"))
}

pub(super) fn fail(message: impl std::fmt::Display) -> ExitCode {
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
    if let Some(node_id) = args.node_id {
        config.node_id = node_id;
    }
    if let Err(error) = args.cluster.apply(&mut config) {
        return fail(error);
    }
    if config.admin_token.is_none() {
        config.admin_token = std::env::var("TESSERA_ADMIN_TOKEN").ok();
    }
    if config.admin_token.is_none() {
        return fail("no admin token: set admin_token in the config file or TESSERA_ADMIN_TOKEN");
    }
    let telemetry = match super::telemetry::start(&config.node_id) {
        Ok(telemetry) => telemetry,
        Err(error) => return fail(error),
    };
    let runtime = match tokio_runtime() {
        Ok(runtime) => runtime,
        Err(error) => return fail(error),
    };
    let ran = runtime.block_on(run_node(config, shutdown_signal(), async |_, _| Ok(())));
    drop(runtime);
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(error),
    }
}

/// Opens the node, binds its listener, runs `ready` with both, serves until `stop` completes
/// ([`shutdown_signal`], or more), then stops accepting, leaves its cluster (a non-voting
/// member) and shuts the node down.
pub(super) async fn run_node(
    config: NodeConfig,
    stop: impl Future<Output = ()> + Send + 'static,
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
    let served = crate::api::serve(node.clone(), listener, stop).await;
    tracing::info!("stopping the node");
    if let Err(error) = node.leave().await {
        tracing::warn!(%error, "the node could not leave its cluster gracefully");
    }
    node.shutdown().await;
    served.map_err(|error| format!("the HTTP server failed: {error}"))
}

/// Completes on Ctrl-C (SIGINT) or SIGTERM.
pub(super) async fn shutdown_signal() {
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
