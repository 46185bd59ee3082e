//! `tessera up`: a ready development node in `./.tessera` with the example plugins deployed,
//! or with `--nodes 3` (or 5) a local cluster of that many processes — certificates, data
//! directories and logs under `./.tessera`, one credentials file — so every CLI command works
//! against it unchanged.

use super::build::build_plugin;
use super::credentials::{CREDENTIALS_FILE, Credentials, DEV_DATA_DIR};
use super::output::outln;
use super::serve::{fail, run_node, shutdown_signal, tokio_runtime};
use crate::node::{ClusterConfig, Node, NodeConfig};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};
use tessera_metadata::TypeOptions;

/// The tenant `tessera up` creates and deploys the examples to.
pub const DEV_TENANT: &str = "default";

/// An example plugin `tessera up` deploys.
struct Example {
    /// Its crate directory under the plugins directory.
    crate_dir: &'static str,
    /// The type it is deployed as.
    entity_type: &'static str,
    /// An entity to try and a message it takes, for the hint `up` prints.
    try_entity: &'static str,
    try_message: &'static str,
}

/// The example plugins `tessera up` deploys.
const DEV_PLUGINS: [Example; 2] = [
    Example {
        crate_dir: "counter",
        entity_type: "counter",
        try_entity: "counter/c1",
        try_message: r#"{"Add":1}"#,
    },
    Example {
        crate_dir: "bank-account",
        entity_type: "bank-account",
        try_entity: "bank-account/a",
        try_message: r#"{"Deposit":10}"#,
    },
];

/// The id of the local cluster `tessera up --nodes N` runs.
const DEV_CLUSTER_ID: &str = "dev";

/// How far above a node's HTTP port its cluster port is.
const CLUSTER_PORT_OFFSET: u16 = 100;

/// How long the other nodes get to stop once they were told to (with the signal `up` got),
/// before they are killed: a node's graceful stop takes well under a second when idle.
const CHILD_STOP_GRACE: Duration = Duration::from_secs(10);

/// `tessera up`.
#[derive(Debug, clap::Args)]
pub(crate) struct UpArgs {
    /// Where the HTTP API (of node 1) listens; node i listens on the next ports.
    #[arg(long, default_value = "127.0.0.1:7070")]
    http: SocketAddr,
    /// The directory holding the example plugin crates.
    #[arg(long, default_value = "plugins")]
    plugins: PathBuf,
    /// How many nodes: 1, or a local cluster of 3 or 5 processes.
    #[arg(long, default_value_t = 1)]
    nodes: u16,
}

/// One node of the local cluster.
struct DevNode {
    id: String,
    data_dir: PathBuf,
    http: SocketAddr,
    cluster: SocketAddr,
}

/// The nodes of a local cluster of `count`, with their certificates created (once).
fn dev_cluster(data_dir: &Path, http: SocketAddr, count: u16) -> Result<Vec<DevNode>, String> {
    let nodes: Vec<DevNode> = (0..count)
        .map(|index| {
            let port = |base: u16| base.checked_add(index);
            let http_port = port(http.port()).ok_or("the HTTP ports run past 65535")?;
            let cluster_port = http
                .port()
                .checked_add(CLUSTER_PORT_OFFSET)
                .and_then(port)
                .ok_or("the cluster ports run past 65535")?;
            let id = format!("n{}", index + 1);
            Ok(DevNode {
                data_dir: data_dir.join(&id),
                http: SocketAddr::new(http.ip(), http_port),
                cluster: SocketAddr::new(http.ip(), cluster_port),
                id,
            })
        })
        .collect::<Result<_, &str>>()?;
    let ids: Vec<&str> = nodes.iter().map(|node| node.id.as_str()).collect();
    tessera_cluster::create_dev_cluster(&data_dir.join("certs"), &ids)
        .map_err(|error| format!("cannot create the dev cluster's certificates: {error}"))?;
    Ok(nodes)
}

impl DevNode {
    fn cluster_config(&self, cluster: &[DevNode]) -> ClusterConfig {
        let voters = cluster.iter().map(|node| node.id.clone()).collect();
        let certs = self
            .data_dir
            .parent()
            .unwrap_or(Path::new("."))
            .join("certs");
        let mut config = ClusterConfig::new(DEV_CLUSTER_ID, self.cluster, certs, voters);
        config.seeds = cluster
            .iter()
            .map(|node| (node.id.clone(), node.cluster.into()))
            .collect();
        config
    }

    /// Node 1's configuration: `base` with this node's directory, address and cluster.
    fn config(&self, cluster: &[DevNode], base: NodeConfig) -> NodeConfig {
        NodeConfig {
            node_id: self.id.clone(),
            data_dir: self.data_dir.clone(),
            http: self.http,
            cluster: Some(self.cluster_config(cluster)),
            ..base
        }
    }

    /// Starts this node as `tessera node` in a child process, logging to `<data dir>.log`.
    fn spawn(&self, cluster: &[DevNode], admin_token: &str) -> Result<Child, String> {
        let exe = std::env::current_exe()
            .map_err(|error| format!("cannot find the tessera executable: {error}"))?;
        let log_path = self.data_dir.with_extension("log");
        if let Some(parent) = log_path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|error| format!("cannot create {}: {error}", parent.display()))?;
        }
        let log = std::fs::File::create(&log_path)
            .map_err(|error| format!("cannot create {}: {error}", log_path.display()))?;
        let config = self.cluster_config(cluster);
        let mut command = Command::new(exe);
        command
            .arg("node")
            .args(["--node-id", &self.id])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--http", &self.http.to_string()])
            .args(["--cluster-id", DEV_CLUSTER_ID])
            .args(["--cluster-listen", &self.cluster.to_string()])
            .arg("--certs-dir")
            .arg(&config.certs_dir)
            .args(["--voters", &config.voters.join(",")]);
        for (node, address) in &config.seeds {
            command.args(["--seed", &format!("{node}={address}")]);
        }
        command
            .env("TESSERA_ADMIN_TOKEN", admin_token)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|error| format!("cannot start node {}: {error}", self.id))
    }
}

/// Tells each child node to stop (SIGTERM: a Ctrl-C in the terminal reached them too, but a
/// signal to this process alone did not), gives them [`CHILD_STOP_GRACE`] to leave cleanly, and
/// kills the ones still running, saying so.
fn stop_children(children: &mut Vec<Child>) {
    for child in children.iter() {
        terminate(child.id());
    }
    let deadline = Instant::now() + CHILD_STOP_GRACE;
    for child in children.iter_mut() {
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    eprintln!(
                        "node process {} did not stop within {CHILD_STOP_GRACE:?}: killed",
                        child.id()
                    );
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    children.clear();
}

/// Sends SIGTERM to process `pid` (a child node: the graceful stop `tessera node` takes).
#[cfg(unix)]
fn terminate(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) with a child's pid and a valid signal number touches no memory.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
}

/// Without Unix signals a child node cannot be asked to stop: it is killed after the grace.
#[cfg(not(unix))]
fn terminate(_pid: u32) {}

pub(crate) fn up(args: UpArgs) -> ExitCode {
    if ![1, 3, 5].contains(&args.nodes) {
        return fail(format!(
            "--nodes must be 1, 3 or 5 (the metadata plane's voters), not {}",
            args.nodes
        ));
    }
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
    let mut config = NodeConfig {
        data_dir: data_dir.clone(),
        http: args.http,
        admin_token: Some(admin_token.clone()),
        ..NodeConfig::default()
    };
    let mut others = Vec::new();
    if args.nodes > 1 {
        let cluster = match dev_cluster(&data_dir, args.http, args.nodes) {
            Ok(cluster) => cluster,
            Err(error) => return fail(error),
        };
        // Node 1 runs in this process; the others are child processes started first, so the
        // voters can form a quorum while node 1 opens.
        for node in cluster.iter().skip(1) {
            match node.spawn(&cluster, &admin_token) {
                Ok(child) => others.push(child),
                Err(error) => {
                    stop_children(&mut others);
                    return fail(error);
                }
            }
        }
        config = cluster[0].config(&cluster, config);
    }
    let runtime = match tokio_runtime() {
        Ok(runtime) => runtime,
        Err(error) => {
            stop_children(&mut others);
            return fail(error);
        }
    };
    // The signal that stops this node stops the others at the same moment, so that they
    // leave together rather than one by one (nor after a grace).
    let pids: Vec<u32> = others.iter().map(Child::id).collect();
    let stop = async move {
        shutdown_signal().await;
        for pid in pids {
            terminate(pid);
        }
    };
    let deployed: Vec<&str> = plugins.iter().map(|(name, _)| name.as_str()).collect();
    let hints = try_hints(&deployed);
    let served = runtime.block_on(run_node(config, stop, async |node, address| {
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
        if args.nodes > 1 {
            outln!(
                "{} nodes: this process is n1; the others log to {}/n<i>.log",
                args.nodes,
                data_dir.display()
            );
        }
        outln!(
            "Dashboard: {}/ui (log in with admin_token from {})",
            credentials.url,
            credentials_path.display()
        );
        for hint in &hints {
            outln!("{hint}");
        }
        outln!("Ctrl-C stops the node.");
        Ok(())
    }));
    stop_children(&mut others);
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
    for example in DEV_PLUGINS {
        let crate_dir = plugins_dir.join(example.crate_dir);
        let wasm =
            build_plugin(&crate_dir, None).and_then(|path| std::fs::read(path).map_err(Into::into));
        match wasm {
            Ok(bytes) => built.push((example.entity_type.to_string(), bytes)),
            Err(error) => eprintln!("cannot build {}: {error}", crate_dir.display()),
        }
    }
    built
}

/// What `up` suggests trying, naming only types it deployed: a message to the first example
/// among them and its state, or, with none, how to deploy one.
fn try_hints(deployed: &[&str]) -> Vec<String> {
    let example = DEV_PLUGINS
        .iter()
        .find(|example| deployed.contains(&example.entity_type));
    match example {
        Some(example) => vec![
            "Try:".to_string(),
            format!(
                "  tessera ask {} '{}'",
                example.try_entity, example.try_message
            ),
            format!("  tessera state {}", example.try_entity),
            format!("  tessera entities {}", example.entity_type),
            "  tessera status".to_string(),
        ],
        None => vec![
            "No entity types deployed: build one with `tessera build <crate dir>` and deploy it \
             with `tessera deploy <wasm> --type <name>`."
                .to_string(),
        ],
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_name_only_deployed_types() {
        let both = try_hints(&["counter", "bank-account"]).join("\n");
        assert!(both.contains("tessera ask counter/c1"), "{both}");
        let bank = try_hints(&["bank-account"]).join("\n");
        assert!(bank.contains("tessera ask bank-account/a"), "{bank}");
        assert!(!bank.contains("counter"), "{bank}");
        let none = try_hints(&[]).join("\n");
        assert!(!none.contains("tessera ask"), "{none}");
        assert!(none.contains("tessera deploy"), "{none}");
    }
}
