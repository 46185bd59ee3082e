//! What nodes ask each other about their own part of the cluster, as it crosses the mesh: a
//! [`PeerQuery`] (a page of entity ids, `listing.rs`; a node's overview, `overview.rs`) and
//! its [`PeerAnswer`]. Kept apart from the code that asks (`listing.rs`, `overview.rs`) and
//! the code that answers (`queries.rs`), which all name these types.

use crate::node::TypeStatus;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A question for a peer about its own part of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerQuery {
    /// One page of the entity ids the receiver answers for.
    ListEntities(ListRequest),
    /// The receiver's counters and entities, for the dashboard.
    Overview,
}

/// The answer to a [`PeerQuery`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerAnswer {
    /// The receiver's page.
    EntitiesListed(ListAnswer),
    /// The receiver's overview.
    Overview(NodeOverview),
    /// The receiver could not answer.
    Refused {
        /// Why.
        why: String,
    },
}

/// What one node is asked for: one page of the ids it answers for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListRequest {
    /// The tenant (from the token of the request the asking node took).
    pub tenant: String,
    /// The entity type.
    pub entity_type: String,
    /// Ids strictly after this one.
    pub after: Option<String>,
    /// At most this many ids (at most `ENTITY_LIST_LIMIT_MAX`, `listing.rs`).
    pub limit: u32,
    /// Whether to count every id the node answers for too.
    pub count: bool,
}

/// One node's page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListAnswer {
    /// Its first `limit` ids after the cursor, ascending.
    pub ids: Vec<String>,
    /// Every id it answers for, when asked.
    pub total: Option<u64>,
}

/// One node's counters (since it started) and entities, for the dashboard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeOverview {
    /// The node.
    pub node: String,
    /// Messages handled (`tessera_messages`).
    pub messages: u64,
    /// Messages that failed (`tessera_message_errors`).
    pub message_errors: u64,
    /// Message write sets committed (`tessera_commit_write_sets`).
    pub commits: u64,
    /// Committed tells not yet acknowledged (`tessera_outbox_depth`).
    pub outbox_depth: u64,
    /// Durable reminders waiting to fire (`tessera_reminders_pending`).
    pub reminders_pending: u64,
    /// Calls that waited for their tenant's rate or gate: tells, asks and guest calls
    /// throttled (`tessera_*_throttled`).
    pub throttled: u64,
    /// Messages and uploads refused by a tenant quota (`tessera_quota_rejections`).
    pub quota_rejections: u64,
    /// Per tenant, its types with this node's live and remembered entities.
    pub tenants: BTreeMap<String, Vec<TypeStatus>>,
}
