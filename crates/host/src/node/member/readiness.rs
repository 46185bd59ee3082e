//! Whether this node should be sent traffic now (`GET /v1/ready`, a Kubernetes readiness
//! probe): its member is `up` in the catalog it has applied and, in a cluster, it is in contact
//! with a working metadata plane, so what it takes in can commit, and — with the partition
//! plane serving — the partitions are placed and this node runs the group of every partition
//! placed on it, so an entity it serves has a replica to commit through. A node that is
//! joining, leaving, cut off from a quorum, between views or before its partitions' groups
//! answers "not ready" with the reason.

use crate::node::{Node, NodeError};
use serde::Serialize;
use std::collections::BTreeSet;
use tessera_metadata::MemberState;

/// The oldest contact with a working metadata plane that still counts as ready: the
/// peer-down grace after which a peer is called unreachable (3 s), so a node is unready about
/// when its peers stop trusting it. Healthy nodes hear the plane every few ticks (10 ms each).
pub const READY_CONTACT_AGE_MS_MAX: u64 = 3_000;

/// The answer of `GET /v1/ready`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Readiness {
    /// Whether the node should be sent traffic.
    pub ready: bool,
    /// This node's member state in its applied catalog (none before its join is applied).
    pub state: Option<MemberState>,
    /// Milliseconds since it last knew itself part of a working metadata plane (none for a
    /// single node, whose word is always current, and during a view change).
    pub contact_age_ms: Option<u64>,
    /// Why it is not ready, in words; none when it is.
    pub reason: Option<String>,
}

impl Node {
    /// Whether this node is ready for traffic (see the module doc).
    ///
    /// ```no_run
    /// # async fn example(node: &tessera_host::node::Node) -> Result<(), tessera_host::node::NodeError> {
    /// if !node.readiness()?.ready {
    ///     eprintln!("not ready yet");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn readiness(&self) -> Result<Readiness, NodeError> {
        let state = self
            .plane
            .store()
            .members()?
            .into_iter()
            .find(|member| member.node == self.config.node_id)
            .map(|member| member.state);
        let contact_age_ms = self.plane.status().contact_age_ms;
        let reason = match (state, contact_age_ms) {
            (None, _) => Some("this node is not a member yet".to_string()),
            (Some(state), _) if state != MemberState::Up => {
                Some(format!("this node's member is {}, not up", state.as_str()))
            }
            _ if self.config.cluster.is_none() => None,
            (_, None) => Some("no contact with a working metadata plane (a view change)".into()),
            (_, Some(age)) if age > READY_CONTACT_AGE_MS_MAX => Some(format!(
                "no contact with a working metadata plane for {age} ms"
            )),
            _ => self.partitions_unready()?,
        };
        Ok(Readiness {
            ready: reason.is_none(),
            state,
            contact_age_ms,
            reason,
        })
    }

    /// Why the partition plane keeps this node from serving yet, if it does: no placement
    /// committed yet (it waits for its members), or a partition placed here whose group has
    /// not started.
    fn partitions_unready(&self) -> Result<Option<String>, NodeError> {
        let count = self.config.sharding.partitions.count();
        let Some(groups) = self.partitions.as_ref().filter(|_| count > 0) else {
            return Ok(None);
        };
        let placed = self.plane.store().partitions()?;
        // The cluster's family; a type's own factor's are placed on its first message.
        let first_placed = placed.range(..count).count();
        if first_placed < count as usize {
            return Ok(Some(format!(
                "{first_placed} of {count} partitions placed (the first placement waits for \
                 its members)"
            )));
        }
        let running: BTreeSet<u32> = groups.here().iter().map(|here| here.partition).collect();
        let waiting = placed
            .iter()
            .filter(|(partition, placed)| {
                placed.replicas.contains(&self.config.node_id) && !running.contains(partition)
            })
            .count();
        Ok((waiting > 0).then(|| {
            format!("{waiting} partitions placed on this node have not started their groups")
        }))
    }
}
