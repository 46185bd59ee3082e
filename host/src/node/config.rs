//! Everything a node can be configured with, with defaults, from a TOML file.

use crate::entity::EntityConfig;
use crate::metadata::Quotas;
use crate::runtime::RuntimeConfig;
use crate::sharding::ShardingConfig;
use crate::state::GroupCommitConfig;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

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
}

impl Default for ApiLimits {
    fn default() -> Self {
        ApiLimits {
            request_body_bytes_max: 1 << 20,
            plugin_body_bytes_max: 64 << 20,
            ask_timeout_ms_default: 5_000,
            ask_timeout_ms_max: 60_000,
        }
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
            plugin_cache_entries: crate::runtime::PLUGIN_CACHE_ENTRIES_DEFAULT,
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
        if self.node_id.is_empty() {
            return Err("node_id must not be empty".into());
        }
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
        if self.api.request_body_bytes_max == 0 || self.api.plugin_body_bytes_max == 0 {
            return Err("api body limits must be at least 1 byte".into());
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
