//! Everything a node can be configured with, with defaults, from a TOML file.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tessera_cluster::PeerAddress;
use tessera_entity::EntityConfig;
use tessera_metadata::Quotas;
use tessera_runtime::RuntimeConfig;
use tessera_sharding::ShardingConfig;
use tessera_state::GroupCommitConfig;

/// Limits of the HTTP edge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiLimits {
    /// Largest request body except plugin uploads.
    pub request_body_bytes_max: usize,
    /// Largest plugin upload (a tenant's quota can only lower it).
    pub plugin_body_bytes_max: usize,
    /// Ask timeout when the client names none.
    pub ask_timeout_ms_default: u64,
    /// Longest ask timeout a client may ask for.
    pub ask_timeout_ms_max: u64,
    /// Connections served at once; near it, a newcomer sheds the oldest connection that is idle
    /// or never authenticated, and a connection past it is answered `503` and closed.
    pub connections_max: usize,
    /// Connections one client address may hold at once (an IPv6 client counts by its /64); one
    /// more from it is answered `503` and closed. Behind a proxy every client has the proxy's
    /// address: raise it to `connections_max` there.
    pub connections_per_address_max: usize,
    /// Of `connections_max`, the places kept for admin requests: when all others are busy, a
    /// connection admitted to them may make requests with the admin token only.
    pub admin_connections_reserved: usize,
    /// Time a client has to send a whole request head, from the moment the connection opens
    /// or the first byte of a later request arrives.
    pub header_read_timeout_ms: u64,
    /// Time a client has to send a whole request body, from the moment the edge starts
    /// reading it (`408 request_timeout` past it).
    pub body_read_timeout_ms: u64,
    /// Time a keep-alive connection may stay idle between requests before it is closed.
    pub idle_timeout_ms: u64,
    /// On shutdown, time requests in flight get to finish before their connections are cut.
    pub drain_timeout_ms: u64,
}

/// Most connections [`ApiLimits::connections_max`] may allow: each costs a task, a socket
/// and up to a 64 KiB read buffer.
pub const API_CONNECTIONS_MAX_LIMIT: usize = 1 << 20;

/// Longest any edge timeout may be: a bound of an hour is no bound against a slow client.
pub const API_TIMEOUT_MS_LIMIT: u64 = 3_600_000;

impl Default for ApiLimits {
    fn default() -> Self {
        ApiLimits {
            request_body_bytes_max: 1 << 20,
            plugin_body_bytes_max: 64 << 20,
            ask_timeout_ms_default: 5_000,
            ask_timeout_ms_max: 60_000,
            connections_max: 1024,
            connections_per_address_max: 128,
            admin_connections_reserved: 4,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
            drain_timeout_ms: 10_000,
        }
    }
}

impl ApiLimits {
    /// Checks the edge's bounds: every one nonzero and under its limit.
    pub fn validate(&self) -> Result<(), String> {
        if self.request_body_bytes_max == 0 || self.plugin_body_bytes_max == 0 {
            return Err("api body limits must be at least 1 byte".into());
        }
        if self.connections_max == 0 || self.connections_max > API_CONNECTIONS_MAX_LIMIT {
            return Err(format!(
                "api.connections_max must be 1 to {API_CONNECTIONS_MAX_LIMIT}"
            ));
        }
        if self.connections_per_address_max == 0
            || self.connections_per_address_max > API_CONNECTIONS_MAX_LIMIT
        {
            return Err(format!(
                "api.connections_per_address_max must be 1 to {API_CONNECTIONS_MAX_LIMIT}"
            ));
        }
        if self.admin_connections_reserved >= self.connections_max {
            return Err(format!(
                "api.admin_connections_reserved must be below api.connections_max ({})",
                self.connections_max
            ));
        }
        let timeouts = [
            ("header_read_timeout_ms", self.header_read_timeout_ms),
            ("body_read_timeout_ms", self.body_read_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("drain_timeout_ms", self.drain_timeout_ms),
        ];
        for (name, value) in timeouts {
            if value == 0 || value > API_TIMEOUT_MS_LIMIT {
                return Err(format!("api.{name} must be 1 to {API_TIMEOUT_MS_LIMIT} ms"));
            }
        }
        Ok(())
    }
}

/// A node's configuration.
///
/// ```
/// use tessera_host::node::NodeConfig;
/// let config: NodeConfig = toml::from_str("admin_token = \"a-long-enough-secret\"\n[entities]\nactive_entities_max = 5000\n").unwrap();
/// assert_eq!(config.entities.active_entities_max, Some(5000));
/// assert!(config.validate().is_ok());
/// ```
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// Holds `tessera.redb` and the compiled-plugin cache.
    pub data_dir: PathBuf,
    /// Where the HTTP API listens.
    pub http: SocketAddr,
    /// The admin token (or `TESSERA_ADMIN_TOKEN`); a node refuses to start without one.
    pub admin_token: Option<String>,
    /// The wasmtime engine.
    pub runtime: RuntimeConfig,
    /// The entity layer.
    pub entities: EntityConfig,
    /// The group committer.
    pub commit: GroupCommitConfig,
    /// Shards, the region and the coordinator. Its `max_active_entities` and
    /// `passivation_idle_timeout` are the node-wide defaults of the entity layer.
    pub sharding: ShardingConfig,
    /// This node's id in the cluster.
    pub node_id: String,
    /// The HTTP edge.
    pub api: ApiLimits,
    /// Quotas of tenants created without their own.
    pub default_quotas: Quotas,
    /// Compiled plugins kept in memory beyond those that types are bound to.
    pub plugin_cache_entries: usize,
    /// The most resolved routes each thread keeps for its messages by address (`Node::tell`,
    /// `Node::ask`); 0 keeps none [default: 1,024; at most 65,536].
    pub sender_routes_per_thread: usize,
    /// Set to run as one node of a cluster; left out, the node is a cluster of one.
    pub cluster: Option<ClusterConfig>,
}

/// How a node joins a cluster of processes.
///
/// ```
/// use tessera_host::node::ClusterConfig;
/// let config: ClusterConfig = toml::from_str(r#"
///     id = "dev"
///     listen = "127.0.0.1:7101"
///     certs_dir = ".tessera/certs"
///     voters = ["n1", "n2", "n3"]
///     [seeds]
///     n1 = "127.0.0.1:7101"
///     n2 = "127.0.0.1:7102"
///     n3 = "127.0.0.1:7103"
/// "#).unwrap();
/// assert!(config.validate("n2").is_ok());
/// assert!(config.validate("n9").is_ok()); // a non-voting member
/// assert!(config.validate("N9").is_err());
/// ```
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The cluster's id: a node refuses peers of another cluster.
    pub id: String,
    /// Where this node listens for its peers.
    pub listen: SocketAddr,
    /// The address peers dial to reach this node, `host:port` with an IP address or a DNS
    /// name resolved at each dial (a StatefulSet pod's stable name) [default: `listen`].
    #[serde(default)]
    pub advertise: Option<PeerAddress>,
    /// Holds the cluster CA certificate and this node's certificate and key
    /// (`tessera certs create`).
    pub certs_dir: PathBuf,
    /// The nodes that replicate the catalog (1, 3 or 5), the same list on every node. A node
    /// not in the list is a non-voting member: it follows the catalog from the voters.
    pub voters: Vec<String>,
    /// Cluster addresses of nodes to reach first, by node id: every other voter for a voter,
    /// at least one voter for a non-voting member. Other members (and voters) are learned
    /// from the catalog. Each is `host:port`, the host an IP address or a DNS name resolved
    /// at each dial.
    #[serde(default)]
    pub seeds: std::collections::BTreeMap<String, PeerAddress>,
    /// Real time per metadata-plane protocol tick.
    #[serde(default = "default_tick_ms")]
    pub tick_ms: u64,
    /// How long start-up waits for a quorum of voters to commit this node's join.
    #[serde(default = "default_join_timeout_ms")]
    pub join_timeout_ms: u64,
    /// How long a graceful leave waits for this node's shards to be handed off. A leave that
    /// does not finish in time leaves the member `leaving` (it never throws state away).
    #[serde(default = "default_leave_timeout_ms")]
    pub leave_timeout_ms: u64,
    /// Ops between the checkpoints of the metadata plane and of every partition group
    /// [default: the consensus layer's, 1,024]. The log holds about two intervals; a node
    /// further behind catches up by state transfer. Small values are for tests: a partition
    /// checkpoint holds the partition's whole state, so a small interval re-encodes it often
    /// (restoring 48 MiB into a plane took 42 s at 8 against 11 s at the default).
    #[serde(default)]
    pub checkpoint_interval_ops: Option<u64>,
    /// The roles this node advertises (matched against `sharding.role_constraint` when shards
    /// are placed) [default: the role constraint itself, if set].
    #[serde(default)]
    pub roles: Vec<String>,
}

fn default_tick_ms() -> u64 {
    10
}

fn default_join_timeout_ms() -> u64 {
    120_000
}

fn default_leave_timeout_ms() -> u64 {
    60_000
}

impl ClusterConfig {
    /// A cluster section with no seeds and the default tick and join timeout.
    pub fn new(
        id: impl Into<String>,
        listen: SocketAddr,
        certs_dir: impl Into<PathBuf>,
        voters: Vec<String>,
    ) -> ClusterConfig {
        ClusterConfig {
            id: id.into(),
            listen,
            advertise: None,
            certs_dir: certs_dir.into(),
            voters,
            seeds: std::collections::BTreeMap::new(),
            tick_ms: default_tick_ms(),
            join_timeout_ms: default_join_timeout_ms(),
            leave_timeout_ms: default_leave_timeout_ms(),
            checkpoint_interval_ops: None,
            roles: Vec::new(),
        }
    }

    /// The address peers dial to reach this node.
    pub fn advertised(&self) -> PeerAddress {
        self.advertise
            .clone()
            .unwrap_or_else(|| PeerAddress::from(self.listen))
    }

    /// Checks the section for the node named `node_id`.
    pub fn validate(&self, node_id: &str) -> Result<(), String> {
        tessera_cluster::validate_node_id(node_id)
            .map_err(|error| format!("node_id in a cluster: {error}"))?;
        if self.id.is_empty() || self.id.len() > 64 {
            return Err("cluster.id must be 1 to 64 bytes".into());
        }
        if ![1, 3, 5].contains(&self.voters.len()) {
            return Err(format!(
                "cluster.voters must name 1, 3 or 5 nodes, not {}",
                self.voters.len()
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for voter in &self.voters {
            tessera_cluster::validate_node_id(voter)
                .map_err(|error| format!("cluster.voters: {error}"))?;
            if !seen.insert(voter) {
                return Err(format!("cluster.voters names {voter} twice"));
            }
        }
        let is_voter = self.voters.iter().any(|voter| voter == node_id);
        if is_voter {
            // A voter needs the others from its first tick: they form the quorum.
            if let Some(voter) = self
                .voters
                .iter()
                .find(|voter| *voter != node_id && !self.seeds.contains_key(*voter))
            {
                return Err(format!(
                    "cluster.seeds must give the address of voter {voter}"
                ));
            }
        } else if !self
            .voters
            .iter()
            .any(|voter| self.seeds.contains_key(voter))
        {
            // A non-voter learns the rest from the catalog once it follows one voter.
            return Err("cluster.seeds must give the address of at least one voter".into());
        }
        for seed in self.seeds.keys() {
            tessera_cluster::validate_node_id(seed)
                .map_err(|error| format!("cluster.seeds: {error}"))?;
        }
        use tessera_consensus::config::{CHECKPOINT_INTERVAL_OPS_MAX, CHECKPOINT_INTERVAL_OPS_MIN};
        if self.checkpoint_interval_ops.is_some_and(|interval| {
            !(CHECKPOINT_INTERVAL_OPS_MIN..=CHECKPOINT_INTERVAL_OPS_MAX).contains(&interval)
        }) {
            return Err(format!(
                "cluster.checkpoint_interval_ops must be {CHECKPOINT_INTERVAL_OPS_MIN} to \
                 {CHECKPOINT_INTERVAL_OPS_MAX}"
            ));
        }
        if self.roles.len() > tessera_metadata::MEMBER_ROLES_MAX {
            return Err(format!(
                "cluster.roles names {} roles; at most {}",
                self.roles.len(),
                tessera_metadata::MEMBER_ROLES_MAX
            ));
        }
        if self.tick_ms == 0 || self.tick_ms > 1_000 {
            return Err("cluster.tick_ms must be 1 to 1000".into());
        }
        if self.join_timeout_ms == 0 || self.join_timeout_ms > API_TIMEOUT_MS_LIMIT {
            return Err(format!(
                "cluster.join_timeout_ms must be 1 to {API_TIMEOUT_MS_LIMIT}"
            ));
        }
        if self.leave_timeout_ms == 0 || self.leave_timeout_ms > API_TIMEOUT_MS_LIMIT {
            return Err(format!(
                "cluster.leave_timeout_ms must be 1 to {API_TIMEOUT_MS_LIMIT}"
            ));
        }
        Ok(())
    }
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            data_dir: PathBuf::from(".tessera"),
            http: SocketAddr::from(([127, 0, 0, 1], 7070)),
            admin_token: None,
            runtime: RuntimeConfig::default(),
            entities: EntityConfig::default(),
            commit: GroupCommitConfig::default(),
            sharding: ShardingConfig::default(),
            node_id: "node-1".into(),
            api: ApiLimits::default(),
            default_quotas: Quotas::default(),
            plugin_cache_entries: tessera_runtime::PLUGIN_CACHE_ENTRIES_DEFAULT,
            sender_routes_per_thread: super::SENDER_ROUTES_PER_THREAD,
            cluster: None,
        }
    }
}

impl NodeConfig {
    /// Reads a TOML configuration file.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        toml::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))
    }

    /// Checks every value is usable.
    pub fn validate(&self) -> Result<(), String> {
        self.runtime.validate()?;
        self.sharding
            .validate()
            .map_err(|error| format!("sharding: {error}"))?;
        // The node joins the catalog's members under this id.
        tessera_metadata::validate_name(&self.node_id)
            .map_err(|error| format!("node_id: {error}"))?;
        self.default_quotas
            .validate()
            .map_err(|error| format!("default_quotas: {error}"))?;
        if self.commit.queue_capacity == 0 || self.commit.batch_write_sets_max == 0 {
            return Err(
                "commit.queue_capacity and commit.batch_write_sets_max must be at least 1".into(),
            );
        }
        if self.entities.active_entities_max == Some(0) {
            return Err("entities.active_entities_max must be at least 1 (or left out)".into());
        }
        self.api.validate()?;
        if self.sender_routes_per_thread > super::SENDER_ROUTES_PER_THREAD_LIMIT {
            return Err(format!(
                "sender_routes_per_thread must be at most {}",
                super::SENDER_ROUTES_PER_THREAD_LIMIT
            ));
        }
        if let Some(cluster) = &self.cluster {
            cluster.validate(&self.node_id)?;
        }
        if self
            .admin_token
            .as_deref()
            .is_some_and(|token| token.len() < 16)
        {
            return Err("admin_token must be at least 16 characters".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_bounds_are_checked() {
        assert!(ApiLimits::default().validate().is_ok());
        let zero_connections = ApiLimits {
            connections_max: 0,
            ..ApiLimits::default()
        };
        assert!(zero_connections.validate().is_err());
        let zero_timeout = ApiLimits {
            body_read_timeout_ms: 0,
            ..ApiLimits::default()
        };
        assert!(zero_timeout.validate().is_err());
        let huge_timeout = ApiLimits {
            idle_timeout_ms: API_TIMEOUT_MS_LIMIT + 1,
            ..ApiLimits::default()
        };
        let error = NodeConfig {
            api: huge_timeout,
            ..NodeConfig::default()
        }
        .validate()
        .unwrap_err();
        assert!(error.contains("idle_timeout_ms"), "{error}");
    }

    #[test]
    fn connection_shares_are_checked() {
        let per_address = |connections_per_address_max| ApiLimits {
            connections_per_address_max,
            ..ApiLimits::default()
        };
        assert!(per_address(0).validate().is_err());
        assert!(
            per_address(API_CONNECTIONS_MAX_LIMIT + 1)
                .validate()
                .is_err()
        );
        assert!(per_address(1).validate().is_ok());
        let reserved = |admin_connections_reserved| ApiLimits {
            connections_max: 8,
            admin_connections_reserved,
            ..ApiLimits::default()
        };
        assert!(reserved(0).validate().is_ok(), "no reserve");
        assert!(reserved(7).validate().is_ok());
        let error = reserved(8).validate().unwrap_err();
        assert!(error.contains("admin_connections_reserved"), "{error}");
    }

    #[test]
    fn edge_bounds_default_when_left_out() {
        let limits: ApiLimits = toml::from_str("connections_max = 2\n").unwrap();
        assert_eq!(limits.connections_max, 2);
        assert_eq!(limits.header_read_timeout_ms, 10_000);
        assert_eq!(limits.drain_timeout_ms, 10_000);
    }

    #[test]
    fn sender_routes_are_bounded() {
        let config: NodeConfig = toml::from_str("sender_routes_per_thread = 0\n").unwrap();
        assert_eq!(config.sender_routes_per_thread, 0);
        assert!(config.validate().is_ok(), "0 keeps no routes");
        let too_many = NodeConfig {
            sender_routes_per_thread: crate::node::SENDER_ROUTES_PER_THREAD_LIMIT + 1,
            ..NodeConfig::default()
        };
        let error = too_many.validate().unwrap_err();
        assert!(error.contains("sender_routes_per_thread"), "{error}");
        assert_eq!(
            NodeConfig::default().sender_routes_per_thread,
            crate::node::SENDER_ROUTES_PER_THREAD
        );
    }

    #[test]
    fn a_node_id_that_cannot_name_a_member_is_a_config_error() {
        for bad in ["", "node one", "node/1"] {
            let config = NodeConfig {
                node_id: bad.into(),
                ..NodeConfig::default()
            };
            let error = config.validate().unwrap_err();
            assert!(error.starts_with("node_id:"), "{bad:?}: {error}");
        }
        assert!(NodeConfig::default().validate().is_ok());
    }
}
