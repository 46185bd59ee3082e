//! Listing a type's entities across the cluster: the ids that have state or are remembered, in
//! id order, one bounded page at a time (`GET /v1/types/{type}/entities`, `tessera entities`).
//!
//! Each node answers for the shards its applied catalog gives it, except those still being
//! handed to it, and for those it is handing off (its copy is whole until the handoff
//! completes), so each shard is counted once: [`EntityListing::answer`] reads one page
//! of them from its own database and the replicas of the partitions it holds
//! (`tessera_state`'s listing). The node that takes the request
//! asks every other node that owns or hands off a shard of the type (a query over the mesh,
//! `member/queries.rs`), and merges the pages:
//! each is that node's first `limit` ids after the cursor, so the first `limit` of their union
//! are the cluster's. An id held on both sides of a handoff is listed once. A node that does
//! not answer fails the request (`unavailable`, retryable): a page never silently leaves out
//! a node's entities.

pub use super::member::query_data::{ListAnswer, ListRequest};
use super::member::query_data::{PeerAnswer, PeerQuery};
use super::{Node, NodeError};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tessera_contract::{ENTITY_ID_BYTES_MAX, MessageError, NodeId, ShardId, ShardKey, TypeKey};
use tessera_metadata::MetadataStore;
use tessera_sharding::{FnvExtractor, ShardExtractor};
use tessera_state::partition::RoutedState;
use tessera_state::{StateStore, entity_count_across, entity_ids_across};

/// The most ids one page lists: a page of the longest ids stays far below the mesh's frame
/// limit and a client's patience, and a node reads about this many rows per source for it.
pub const ENTITY_LIST_LIMIT_MAX: usize = 1000;

/// The page size when the request names none.
pub const ENTITY_LIST_LIMIT_DEFAULT: usize = 100;

/// One page of a type's entity ids, as the API answers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EntityPage {
    /// The entity type.
    #[serde(rename = "type")]
    pub entity_type: String,
    /// The ids, ascending (byte order), each once.
    pub ids: Vec<String>,
    /// How many ids this page holds.
    pub count: usize,
    /// Every id of the type across the cluster, counted on the first page only (a request
    /// without `after`), so walking all pages costs one count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// The cursor for the next page (the last id here) while the page is full; `None` once
    /// there is no more.
    pub next_after: Option<String>,
}

/// A node's side of listing: reads its own pages, for the API and for its peers.
pub(crate) struct EntityListing {
    state: StateStore,
    /// The partitions whose replicas this node holds: their entities are listed with its own
    /// (for the shards it answers for).
    partitions: Arc<RoutedState>,
    catalog: MetadataStore,
    /// This node, in a cluster; `None` for a single node, which answers for every shard.
    node: Option<NodeId>,
    extractor: FnvExtractor,
}

impl EntityListing {
    pub(crate) fn new(
        state: StateStore,
        partitions: Arc<RoutedState>,
        catalog: MetadataStore,
        node: Option<NodeId>,
        num_shards: u32,
    ) -> Arc<EntityListing> {
        Arc::new(EntityListing {
            state,
            partitions,
            catalog,
            node,
            extractor: FnvExtractor::new(num_shards),
        })
    }

    /// This node's page for `request`, read off the async threads.
    pub(crate) async fn answer(
        self: &Arc<Self>,
        request: ListRequest,
    ) -> Result<ListAnswer, NodeError> {
        let listing = self.clone();
        tokio::task::spawn_blocking(move || listing.read(&request))
            .await
            .map_err(|error| {
                NodeError::Message(MessageError::unavailable(format!(
                    "the listing read stopped: {error}"
                )))
            })?
    }

    fn read(&self, request: &ListRequest) -> Result<ListAnswer, NodeError> {
        let type_key = TypeKey::new(request.tenant.clone(), request.entity_type.clone());
        let shards = self.shards_answered(&type_key)?;
        let answers_for = |id: &str| match &shards {
            None => true,
            Some(shards) => shards.contains(&self.extractor.shard_of(id)),
        };
        let limit = (request.limit as usize).min(ENTITY_LIST_LIMIT_MAX);
        let mut stores = vec![self.state.clone()];
        stores.extend(self.partitions.held_stores());
        let after = request.after.as_deref();
        let ids = entity_ids_across(&stores, &type_key, after, limit, &answers_for)?;
        let total = match request.count {
            true => Some(entity_count_across(&stores, &type_key, &answers_for)?),
            false => None,
        };
        Ok(ListAnswer { ids, total })
    }

    /// The shards of `type_key` this node answers for (`None`: every one, on a single node).
    fn shards_answered(&self, type_key: &TypeKey) -> Result<Option<BTreeSet<ShardId>>, NodeError> {
        let Some(node) = &self.node else {
            return Ok(None);
        };
        // A shard in a handoff is answered for by the node handing it off (its copy is whole),
        // never by both sides: each shard is counted once.
        let handoffs: BTreeMap<ShardKey, NodeId> = self
            .catalog
            .shard_handoffs()?
            .into_iter()
            .filter(|(key, _)| key.type_key == *type_key)
            .collect();
        let mut shards: BTreeSet<ShardId> = self
            .catalog
            .shard_table()?
            .into_iter()
            .filter(|(key, allocation)| {
                key.type_key == *type_key
                    && allocation.node == *node
                    && handoffs.get(key).is_none_or(|from| from == node)
            })
            .map(|(key, _)| key.shard)
            .collect();
        shards.extend(
            handoffs
                .into_iter()
                .filter(|(_, from)| from == node)
                .map(|(key, _)| key.shard),
        );
        Ok(Some(shards))
    }
}

impl Node {
    /// Up to `limit` (at most [`ENTITY_LIST_LIMIT_MAX`]) ids of `tenant`'s `entity_type` that
    /// have state or are remembered, strictly after `after`, in id order, from every node of
    /// the cluster (see the module's paragraph); the first page (no `after`) counts them all.
    ///
    /// ```no_run
    /// # async fn demo(node: &tessera_host::node::Node) -> Result<(), tessera_host::node::NodeError> {
    /// let first = node.list_entities("default", "counter", None, 100).await?;
    /// if let Some(after) = first.next_after {
    ///     let second = node.list_entities("default", "counter", Some(after), 100).await?;
    ///     println!("{} more", second.count);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_entities(
        &self,
        tenant: &str,
        entity_type: &str,
        after: Option<String>,
        limit: usize,
    ) -> Result<EntityPage, NodeError> {
        if limit == 0 || limit > ENTITY_LIST_LIMIT_MAX {
            return Err(NodeError::BadRequest(format!(
                "limit must be between 1 and {ENTITY_LIST_LIMIT_MAX}"
            )));
        }
        if after
            .as_ref()
            .is_some_and(|after| after.len() > ENTITY_ID_BYTES_MAX)
        {
            return Err(NodeError::BadRequest(format!(
                "after is an entity id: at most {ENTITY_ID_BYTES_MAX} bytes"
            )));
        }
        self.entity_type(tenant, entity_type)?;
        let request = ListRequest {
            tenant: tenant.to_string(),
            entity_type: entity_type.to_string(),
            count: after.is_none(),
            after,
            limit: limit as u32,
        };
        let mut answers = vec![self.listing.answer(request.clone()).await?];
        answers.extend(self.ask_peers_to_list(&request).await?);
        Ok(merge(entity_type, answers, limit))
    }

    /// The pages of every other node that owns or hands off a shard of the type.
    async fn ask_peers_to_list(&self, request: &ListRequest) -> Result<Vec<ListAnswer>, NodeError> {
        if self.mesh.is_none() {
            return Ok(Vec::new());
        }
        let type_key = TypeKey::new(request.tenant.clone(), request.entity_type.clone());
        let store = self.plane.store();
        let mut peers: BTreeSet<NodeId> = store
            .shard_table()?
            .into_iter()
            .filter(|(key, _)| key.type_key == type_key)
            .map(|(_, allocation)| allocation.node)
            .collect();
        peers.extend(
            store
                .shard_handoffs()?
                .into_iter()
                .filter(|(key, _)| key.type_key == type_key)
                .map(|(_, from)| from),
        );
        peers.remove(&self.config.node_id);
        let timeout = Duration::from_millis(self.config.api.ask_timeout_ms_default);
        let query = PeerQuery::ListEntities(request.clone());
        let mut answers = Vec::new();
        for (peer, answer) in self.ask_peers(peers, query, timeout).await {
            match answer {
                Ok(PeerAnswer::EntitiesListed(answer)) => answers.push(answer),
                Ok(PeerAnswer::Refused { why }) => {
                    return Err(unavailable(format!("{peer} could not list: {why}")));
                }
                Ok(_) => return Err(unavailable(format!("{peer} answered something else"))),
                Err(why) => return Err(unavailable(format!("{peer} did not answer: {why}"))),
            }
        }
        Ok(answers)
    }
}

fn unavailable(why: String) -> NodeError {
    NodeError::Message(MessageError::unavailable(format!(
        "the entities of this type could not be listed ({why}); try again"
    )))
}

/// The cluster's page out of the nodes' pages: their first `limit` ids, each once.
fn merge(entity_type: &str, answers: Vec<ListAnswer>, limit: usize) -> EntityPage {
    let mut total = None;
    let mut ids = BTreeSet::new();
    for answer in answers {
        if let Some(count) = answer.total {
            total = Some(total.unwrap_or(0) + count);
        }
        ids.extend(answer.ids);
    }
    let ids: Vec<String> = ids.into_iter().take(limit).collect();
    let next_after = ids.last().filter(|_| ids.len() == limit).cloned();
    EntityPage {
        entity_type: entity_type.to_string(),
        count: ids.len(),
        total,
        next_after,
        ids,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(ids: &[&str], total: Option<u64>) -> ListAnswer {
        ListAnswer {
            ids: ids.iter().map(|id| id.to_string()).collect(),
            total,
        }
    }

    /// The merged page is the first `limit` of the union, in order, each id once, with the
    /// totals added up and a cursor while the page is full.
    #[test]
    fn pages_merge_in_order_and_cut_at_the_limit() {
        let answers = vec![
            answer(&["a", "d", "f"], Some(3)),
            answer(&["b", "c", "d"], Some(5)),
        ];
        let page = merge("counter", answers, 4);
        assert_eq!(page.ids, ["a", "b", "c", "d"]);
        assert_eq!(page.count, 4);
        assert_eq!(page.total, Some(8));
        assert_eq!(page.next_after.as_deref(), Some("d"));

        let last = merge("counter", vec![answer(&["x"], None)], 4);
        assert_eq!(
            (last.ids.len(), last.total, last.next_after),
            (1, None, None)
        );
    }
}
