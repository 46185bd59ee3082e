//! The cluster commands: `tessera cluster status` (one request to a node, admin token) and
//! `tessera certs create` (local files: the cluster CA and node certificates that mutual TLS
//! between nodes needs).

use super::client::{Client, ClientArgs, ClientError, Role, segment};
use super::output::outln;
use serde_json::Value as Json;
use std::path::PathBuf;
use std::process::ExitCode;

/// `tessera cluster ...` (admin token).
#[derive(Debug, clap::Args)]
pub(crate) struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, clap::Subcommand)]
enum ClusterCommand {
    /// Members with their state, roles and shards; voters, primary, view and commit number.
    Status,
    /// The partition groups the node runs (as `tessera partition status`).
    Partitions,
    /// Declare a member down (crashed or cut off for good): it owns no new shards and its
    /// next join is refused until it is removed.
    Down {
        /// The member's node id.
        node: String,
    },
    /// Bring a leaving member back up (its leave could not hand its shards off): it serves
    /// what it owns and may own new shards again.
    Up {
        /// The member's node id.
        node: String,
    },
    /// Remove a down or exiting member; it may join again later as a new member. This
    /// declares the state of the shards it owns lost: once its lease has run out they restart
    /// empty on other nodes. Refused without `--state-lost`.
    Remove {
        /// The member's node id.
        node: String,
        /// Confirms that the state of the shards the member owns is lost.
        #[arg(long)]
        state_lost: bool,
    },
}

/// `tessera partition ...` (admin token).
#[derive(Debug, clap::Args)]
pub(crate) struct PartitionArgs {
    #[command(subcommand)]
    command: PartitionCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, clap::Subcommand)]
enum PartitionCommand {
    /// The partition groups the node runs: each partition's primary, view, commit, contact
    /// age, replicas and (where the node is the primary) each replica's lag.
    Status,
}

/// `tessera certs ...` (no node needed).
#[derive(Debug, clap::Args)]
pub(crate) struct CertsArgs {
    #[command(subcommand)]
    command: CertsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum CertsCommand {
    /// Create the cluster CA (if the directory has none) and a certificate for each node that
    /// has none. Existing files are kept; key files are readable by their owner only.
    Create {
        /// Where the PEM files go.
        #[arg(long, default_value = ".tessera/certs")]
        dir: PathBuf,
        /// Node ids, comma-separated (each one lowercase DNS label).
        #[arg(long, value_delimiter = ',', required = true)]
        nodes: Vec<String>,
    },
}

pub(crate) fn partition(args: PartitionArgs) -> ExitCode {
    let result = match args.command {
        PartitionCommand::Status => partitions(&args.client),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => error.report(),
    }
}

pub(crate) fn cluster(args: ClusterArgs) -> ExitCode {
    let result = match args.command {
        ClusterCommand::Status => status(&args.client),
        ClusterCommand::Partitions => partitions(&args.client),
        ClusterCommand::Down { node } => act(&args.client, &node, "down"),
        ClusterCommand::Up { node } => act(&args.client, &node, "up"),
        ClusterCommand::Remove {
            node,
            state_lost: false,
        } => Err(ClientError::Usage(format!(
            "removing {node} declares the state of the shards it owns lost (they restart empty \
             on other nodes): add --state-lost to confirm"
        ))),
        ClusterCommand::Remove { node, .. } => act(&args.client, &node, "remove?state_lost=true"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => error.report(),
    }
}

fn act(client_args: &ClientArgs, node: &str, action: &str) -> Result<(), ClientError> {
    let path = format!("/v1/cluster/members/{}/{action}", segment(node));
    let member = Client::new(client_args, Role::Admin)?.json(
        ureq::http::Method::POST,
        &path,
        &Json::Null,
    )?;
    if client_args.json {
        outln!("{member}");
    } else {
        let state = member["state"].as_str().unwrap_or("-");
        outln!("{node} is {state}");
        if action.starts_with("remove") {
            outln!(
                "the state of {node}'s shards is declared lost: once its lease has run out \
                 (about 6.5 s) they restart empty on other nodes"
            );
        }
    }
    Ok(())
}

fn status(client_args: &ClientArgs) -> Result<(), ClientError> {
    let status = Client::new(client_args, Role::Admin)?.get("/v1/cluster")?;
    if client_args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&status).unwrap_or_else(|_| status.to_string())
        );
        return Ok(());
    }
    let text = |value: &Json| value.as_str().unwrap_or("-").to_string();
    outln!(
        "answered by {}; primary {}; view {}; commit {}; {}",
        text(&status["node"]),
        text(&status["primary"]),
        status["view"],
        status["commit"],
        contact_age(&status)
    );
    let voters: Vec<String> = status["voters"]
        .as_array()
        .map(|voters| voters.iter().map(text).collect())
        .unwrap_or_default();
    outln!("voters: {}", voters.join(", "));
    outln!(
        "{:<20} {:<9} {:<10} {:<7} {:<6} {:<22} {}",
        "NODE",
        "STATE",
        "REACHABLE",
        "SHARDS",
        "LAG",
        "API",
        "ROLES"
    );
    for member in status["members"].as_array().cloned().unwrap_or_default() {
        let roles: Vec<String> = member["roles"]
            .as_array()
            .map(|roles| roles.iter().map(text).collect())
            .unwrap_or_default();
        let reachable = if member["reachable"].as_bool().unwrap_or(true) {
            "yes"
        } else {
            "no"
        };
        let lag = member["lag"]
            .as_u64()
            .map_or_else(|| "-".to_string(), |lag| lag.to_string());
        outln!(
            "{:<20} {:<9} {:<10} {:<7} {:<6} {:<22} {}",
            text(&member["node"]),
            text(&member["state"]),
            reachable,
            member["shards"].as_u64().unwrap_or(0),
            lag,
            text(&member["api_address"]),
            roles.join(",")
        );
    }
    let partitions = status["partitions"].as_array().cloned().unwrap_or_default();
    if !partitions.is_empty() {
        outln!(
            "{:<10} {:<11} {:<20} {:<6} {:<8} {:<12} REPLICAS (preferred primary first)",
            "PARTITION",
            "GENERATION",
            "PRIMARY",
            "VIEW",
            "COMMIT",
            "LAG"
        );
        for partition in partitions {
            let replicas: Vec<String> = partition["replicas"]
                .as_array()
                .map(|replicas| replicas.iter().map(text).collect())
                .unwrap_or_default();
            // The group as the answering node's replica sees it; `-` where it holds none.
            let group = &partition["group"];
            let number = |value: &Json| value.as_u64().map_or("-".into(), |n| n.to_string());
            let moving: Vec<String> = partition["moving_from"]
                .as_array()
                .map(|nodes| nodes.iter().map(text).collect())
                .unwrap_or_default();
            let moving = if moving.is_empty() {
                String::new()
            } else {
                format!(
                    " (epoch {}, moving from {})",
                    partition["epoch"],
                    moving.join(", ")
                )
            };
            outln!(
                "{:<10} {:<11} {:<20} {:<6} {:<8} {:<12} {}{moving}",
                partition["partition"].to_string(),
                partition["generation"].to_string(),
                text(&group["primary"]),
                number(&group["view"]),
                number(&group["commit"]),
                lag(&group["lag"]),
                replicas.join(", ")
            );
        }
    }
    Ok(())
}

fn partitions(client_args: &ClientArgs) -> Result<(), ClientError> {
    let answer = Client::new(client_args, Role::Admin)?.get("/v1/cluster/partitions")?;
    if client_args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&answer).unwrap_or_else(|_| answer.to_string())
        );
        return Ok(());
    }
    let text = |value: &Json| value.as_str().unwrap_or("-").to_string();
    let groups = answer["partitions"].as_array().cloned().unwrap_or_default();
    if groups.is_empty() {
        outln!(
            "{} runs no partition group (the partition plane is off, or places none here)",
            text(&answer["node"])
        );
        return Ok(());
    }
    outln!("partition groups on {}:", text(&answer["node"]));
    outln!(
        "{:<10} {:<20} {:<6} {:<8} {:<12} {:<12} REPLICAS",
        "PARTITION",
        "PRIMARY",
        "VIEW",
        "COMMIT",
        "CONTACT",
        "LAG"
    );
    for group in groups {
        let status = &group["status"];
        let replicas: Vec<String> = group["replicas"]
            .as_array()
            .map(|replicas| replicas.iter().map(text).collect())
            .unwrap_or_default();
        let contact = status["contact_age_ms"]
            .as_u64()
            .map_or_else(|| "none".to_string(), |age| format!("{age} ms ago"));
        let moved = match group["phase"].as_str() {
            Some("serving") | None => String::new(),
            Some("filling") => format!(
                " (epoch {}: a move's new group, taking its state)",
                group["epoch"]
            ),
            Some("sealed") => format!(
                " (epoch {}: sealed, the group a move leaves)",
                group["epoch"]
            ),
            Some(phase) => format!(" (epoch {}: {phase})", group["epoch"]),
        };
        outln!(
            "{:<10} {:<20} {:<6} {:<8} {:<12} {:<12} {}{moved}",
            group["partition"].to_string(),
            text(&status["primary"]),
            status["view"].to_string(),
            status["commit"].to_string(),
            contact,
            lag(&status["lag"]),
            replicas.join(", ")
        );
    }
    Ok(())
}

/// A primary's lag column: ops each voter has not acknowledged, in voter order (`?`: none
/// acknowledged in this view yet); `-` where the node is not the primary.
fn lag(lags: &Json) -> String {
    let lags = lags.as_array().map(Vec::as_slice).unwrap_or_default();
    if lags.is_empty() {
        return "-".into();
    }
    let each: Vec<String> = lags
        .iter()
        .map(|lag| {
            lag.as_u64()
                .map_or_else(|| "?".into(), |ops| ops.to_string())
        })
        .collect();
    each.join("/")
}

pub(crate) fn certs(args: CertsArgs) -> ExitCode {
    match args.command {
        CertsCommand::Create { dir, nodes } => {
            let ids: Vec<&str> = nodes.iter().map(String::as_str).collect();
            match tessera_cluster::create_dev_cluster(&dir, &ids) {
                Ok(()) => {
                    outln!(
                        "certificates for {} in {} (CA: {})",
                        nodes.join(", "),
                        dir.display(),
                        dir.join(tessera_cluster::CA_CERT_FILE).display()
                    );
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("error: {error}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// How old the answering node's word on the primary is, in words.
fn contact_age(status: &Json) -> String {
    if status["voters"]
        .as_array()
        .is_some_and(|voters| voters.len() <= 1)
    {
        return "a single node".to_string();
    }
    match status["contact_age_ms"].as_u64() {
        Some(age) if age < CONTACT_CURRENT_MS => "in contact".to_string(),
        Some(age) => format!(
            "STALE: no contact with a quorum for {:.1} s, this node's word may be out of date",
            age as f64 / 1000.0
        ),
        None => "no working plane known (a view change is under way)".to_string(),
    }
}

/// Contact younger than this counts as current (a few heartbeats).
const CONTACT_CURRENT_MS: u64 = 1_000;
