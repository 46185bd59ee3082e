//! What the dashboard shows, in one answer (`GET /v1/overview`, admin token): the cluster view
//! (`member::view`), each node's counters and entities ([`NodeOverview`], from the same
//! snapshot `/metrics` renders), the types of every tenant with their live and remembered
//! entities summed over the nodes, and the shard moves in flight.
//!
//! The node that answers asks every other reachable member for its overview (a query over the
//! mesh, `member/queries.rs`) and waits at most [`OVERVIEW_PEER_TIMEOUT`] for each: a member
//! that does not answer is listed in `unanswered` with the reason, and the page shows what the
//! others said.

pub use super::member::query_data::NodeOverview;
use super::member::query_data::{PeerAnswer, PeerQuery};
use super::{ClusterStatus, Node, NodeError};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;
use tessera_metadata::MemberState;

/// How long the answering node waits for each other member's overview: short, so a page
/// polled every few seconds never hangs on a member that went away.
pub const OVERVIEW_PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// One type of a tenant, summed over the nodes that answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TypeOverview {
    /// The tenant.
    pub tenant: String,
    /// The type.
    #[serde(rename = "type")]
    pub entity_type: String,
    /// The active version.
    pub active_version: u32,
    /// Versions deployed.
    pub versions: usize,
    /// Whether started entities are remembered.
    pub remember: bool,
    /// Live entities, over the nodes that answered.
    pub live_entities: usize,
    /// Remembered entities, over the nodes that answered.
    pub remembered_entities: usize,
}

/// A shard being handed off.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShardMove {
    /// `tenant/type`.
    #[serde(rename = "type")]
    pub entity_type: String,
    /// The shard.
    pub shard: u32,
    /// The node handing it off.
    pub from: String,
    /// The node it moves to.
    pub to: String,
    /// The allocation's generation.
    pub generation: u64,
}

/// A member whose overview is missing, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unanswered {
    /// The member.
    pub node: String,
    /// Why it is missing.
    pub error: String,
}

/// The body of `GET /v1/overview`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Overview {
    /// The cluster as the answering node sees it.
    pub cluster: ClusterStatus,
    /// Each node's overview that came, by node id.
    pub nodes: Vec<NodeOverview>,
    /// The members whose overview did not come.
    pub unanswered: Vec<Unanswered>,
    /// Every tenant's types, by tenant and type.
    pub types: Vec<TypeOverview>,
    /// Shards being handed off now.
    pub moves: Vec<ShardMove>,
    /// Shards per entity type (the node's `sharding.num_shards`, the same on every node).
    pub num_shards: u32,
}

impl Node {
    /// This node's counters and entities.
    pub fn node_overview(&self) -> Result<NodeOverview, NodeError> {
        let snapshot = self.snapshot();
        let mut tenants = BTreeMap::new();
        for tenant in self.tenants() {
            let types = self.status(&tenant.name)?;
            tenants.insert(tenant.name, types);
        }
        Ok(NodeOverview {
            node: self.config.node_id.clone(),
            messages: snapshot.total("tessera_messages"),
            message_errors: snapshot.total("tessera_message_errors"),
            commits: snapshot.total("tessera_commit_write_sets"),
            outbox_depth: snapshot.total("tessera_outbox_depth"),
            reminders_pending: snapshot.total("tessera_reminders_pending"),
            throttled: snapshot.total("tessera_tells_throttled")
                + snapshot.total("tessera_asks_throttled")
                + snapshot.total("tessera_guest_calls_throttled"),
            quota_rejections: snapshot.total("tessera_quota_rejections"),
            tenants,
        })
    }

    /// The dashboard's answer: see the module's paragraph.
    pub async fn overview(&self) -> Result<Overview, NodeError> {
        let cluster = self.cluster_status().await?;
        let mut nodes = vec![self.node_overview()?];
        let mut unanswered = Vec::new();
        let mut peers = Vec::new();
        for member in &cluster.members {
            if member.record.node == self.config.node_id {
                continue;
            }
            let why = match member.record.state {
                MemberState::Down | MemberState::Removed | MemberState::Exiting => {
                    Some(format!("it is {}", member.record.state.as_str()))
                }
                _ if !member.reachable => Some("it is unreachable from here".to_string()),
                _ => None,
            };
            match why {
                Some(error) => unanswered.push(Unanswered {
                    node: member.record.node.clone(),
                    error,
                }),
                None => peers.push(member.record.node.clone()),
            }
        }
        for (node, answer) in self
            .ask_peers(peers, PeerQuery::Overview, OVERVIEW_PEER_TIMEOUT)
            .await
        {
            match answer {
                Ok(PeerAnswer::Overview(overview)) => nodes.push(overview),
                Ok(PeerAnswer::Refused { why }) => unanswered.push(Unanswered { node, error: why }),
                Ok(_) => unanswered.push(Unanswered {
                    node,
                    error: "it answered something else".into(),
                }),
                Err(error) => unanswered.push(Unanswered { node, error }),
            }
        }
        nodes.sort_by(|left, right| left.node.cmp(&right.node));
        unanswered.sort_by(|left, right| left.node.cmp(&right.node));
        Ok(Overview {
            types: self.types_overview(&nodes)?,
            moves: self.moves()?,
            num_shards: self.config.sharding.num_shards,
            cluster,
            nodes,
            unanswered,
        })
    }

    /// Every tenant's types from the catalog, with entities summed over `nodes`.
    fn types_overview(&self, nodes: &[NodeOverview]) -> Result<Vec<TypeOverview>, NodeError> {
        let mut types = Vec::new();
        for record in self.plane.store().entity_types(None)? {
            let counted = nodes
                .iter()
                .filter_map(|node| node.tenants.get(&record.tenant))
                .flatten()
                .filter(|status| status.entity_type == record.name);
            let (mut live_entities, mut remembered_entities) = (0, 0);
            for status in counted {
                live_entities += status.live_entities;
                remembered_entities += status.remembered_entities;
            }
            types.push(TypeOverview {
                remember: record
                    .active()
                    .is_some_and(|version| version.options.remember),
                active_version: record.active_version,
                versions: record.versions.len(),
                live_entities,
                remembered_entities,
                tenant: record.tenant,
                entity_type: record.name,
            });
        }
        types.sort_by(|left, right| {
            (&left.tenant, &left.entity_type).cmp(&(&right.tenant, &right.entity_type))
        });
        Ok(types)
    }

    /// The committed handoffs in flight, with where each shard goes.
    fn moves(&self) -> Result<Vec<ShardMove>, NodeError> {
        let store = self.plane.store();
        let table = store.shard_table()?;
        Ok(store
            .shard_handoffs()?
            .into_iter()
            .map(|(key, from)| {
                let to = table.get(&key);
                ShardMove {
                    entity_type: key.type_key.to_string(),
                    shard: key.shard,
                    from,
                    to: to
                        .map(|allocation| allocation.node.clone())
                        .unwrap_or_default(),
                    generation: to.map_or(0, |allocation| allocation.generation),
                }
            })
            .collect())
    }
}
