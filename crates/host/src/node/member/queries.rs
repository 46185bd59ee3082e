//! Questions one node asks another about the other's own part of the cluster, answered from
//! that node's database and counters: a page of the entity ids it answers for (`listing.rs`)
//! and its overview for the dashboard (`overview.rs`). A [`PeerQuery`] travels as a request
//! over the mesh and is answered with a [`PeerAnswer`] (both in `query_data.rs`).
//!
//! The dispatcher hands an accepted query to a bounded queue ([`QUERIES_QUEUED_MAX`]) that
//! the node drains once it is built ([`answer_queries`]), at most [`QUERIES_ANSWERING_MAX`] at
//! once; a query that finds the queue full is refused at once, so the node that asked fails
//! its request (`unavailable`) instead of waiting for its timeout.

use super::peer_message::PeerMessage;
use super::query_data::{PeerAnswer, PeerQuery};
use crate::node::{Node, NodeError};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tessera_cluster::Responder;
use tessera_contract::NodeId;
use tokio::sync::{Semaphore, mpsc};

/// Queries waiting for the node to answer them; past it a query is refused at once.
pub(crate) const QUERIES_QUEUED_MAX: usize = 32;

/// Queries a node answers at once (each a database read or a counter snapshot); the others
/// wait in the queue.
pub(crate) const QUERIES_ANSWERING_MAX: usize = 4;

/// A query with the responder its answer goes back by.
pub(crate) type Asked = (PeerQuery, Responder<PeerMessage>);

/// The queue between the dispatcher and the node.
pub(crate) fn queue() -> (mpsc::Sender<Asked>, mpsc::Receiver<Asked>) {
    mpsc::channel(QUERIES_QUEUED_MAX)
}

/// Refuses a query at once, telling its sender why.
pub(crate) fn refuse(reply: Responder<PeerMessage>, why: String) {
    let _ = reply.reply(&PeerMessage::Answer(PeerAnswer::Refused { why }));
}

/// Answers the queued queries until the node is dropped or the queue closes.
pub(crate) async fn answer_queries(node: Weak<Node>, mut queries: mpsc::Receiver<Asked>) {
    let answering = Arc::new(Semaphore::new(QUERIES_ANSWERING_MAX));
    while let Some((query, reply)) = queries.recv().await {
        let Ok(permit) = answering.clone().acquire_owned().await else {
            return;
        };
        let Some(node) = node.upgrade() else { return };
        tokio::spawn(async move {
            let answer = match node.answer_query(query).await {
                Ok(answer) => answer,
                Err(error) => PeerAnswer::Refused {
                    why: error.to_string(),
                },
            };
            drop((permit, node));
            if let Err(error) = reply.reply(&PeerMessage::Answer(answer)) {
                tracing::debug!(%error, "a query's answer could not be sent");
            }
        });
    }
}

impl Node {
    async fn answer_query(&self, query: PeerQuery) -> Result<PeerAnswer, NodeError> {
        Ok(match query {
            PeerQuery::ListEntities(request) => {
                PeerAnswer::EntitiesListed(self.listing.answer(request).await?)
            }
            PeerQuery::Overview => PeerAnswer::Overview(self.node_overview()?),
        })
    }

    /// Asks each of `peers` `query` at once, waiting up to `timeout` for each; the answers
    /// (or why there is none) by peer, in the order they came.
    pub(in crate::node) async fn ask_peers(
        &self,
        peers: impl IntoIterator<Item = NodeId>,
        query: PeerQuery,
        timeout: Duration,
    ) -> Vec<(NodeId, Result<PeerAnswer, String>)> {
        let Some(mesh) = &self.mesh else {
            return Vec::new();
        };
        let mut asks = tokio::task::JoinSet::new();
        for peer in peers {
            let (mesh, message) = (mesh.clone(), PeerMessage::Query(query.clone()));
            asks.spawn(async move {
                let answer = match mesh.request(&peer, &message, timeout).await {
                    Ok(PeerMessage::Answer(answer)) => Ok(answer),
                    Ok(_) => Err("it answered something else".to_string()),
                    Err(error) => Err(error.to_string()),
                };
                (peer, answer)
            });
        }
        let mut answers = Vec::new();
        while let Some(joined) = asks.join_next().await {
            if let Ok(answer) = joined {
                answers.push(answer);
            }
        }
        answers
    }
}
