//! The membership view the coordinator reads: which nodes exist, their roles, their committed
//! life-cycle status (up, leaving, down, removed) and whether the failure detector can reach
//! them now. A test or the single-node host drives it through a [`Membership`] handle; in a
//! cluster the node feeds it from the committed members and the detector.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use tokio::sync::watch;

use tessera_contract::NodeId;

/// A member's committed life-cycle status, as far as shards care.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberStatus {
    /// Up: may own shards (while reachable).
    Up,
    /// Leaving (or exiting): gets no new shards and hands its shards off, with their state.
    Leaving,
    /// Declared down by an operator: keeps its shards (and their state) but serves nothing.
    Down,
    /// Removed by an operator: the state it held is declared lost; its shards may be given
    /// to others once its lease has run out.
    Removed,
}

/// One member of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// The node's id.
    pub node: NodeId,
    /// The roles it advertises (matched against `role_constraint`).
    pub roles: BTreeSet<String>,
    /// Its committed status.
    pub status: MemberStatus,
    /// Whether the failure detector reaches it now.
    pub reachable: bool,
}

impl Member {
    /// Up and reachable.
    pub fn is_up(&self) -> bool {
        self.status == MemberStatus::Up && self.reachable
    }

    /// Running and reachable (up or leaving): may serve the shards it owns.
    pub fn is_serving(&self) -> bool {
        matches!(self.status, MemberStatus::Up | MemberStatus::Leaving) && self.reachable
    }
}

/// Every known member, keyed by node id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberSet {
    members: BTreeMap<NodeId, Member>,
}

impl MemberSet {
    /// Nodes that may own shards: up, reachable and, if `role` is set, advertising it. Sorted.
    ///
    /// ```
    /// use tessera_sharding::Membership;
    /// let membership = Membership::new();
    /// membership.join("b", ["shard"]);
    /// membership.join("a", ["web"]);
    /// assert_eq!(membership.snapshot().eligible(None), vec!["a".to_string(), "b".to_string()]);
    /// assert_eq!(membership.snapshot().eligible(Some("shard")), vec!["b".to_string()]);
    /// ```
    pub fn eligible(&self, role: Option<&str>) -> Vec<NodeId> {
        self.members
            .values()
            .filter(|member| member.is_up())
            .filter(|member| role.is_none_or(|role| member.roles.contains(role)))
            .map(|member| member.node.clone())
            .collect()
    }

    /// Whether `node` may own shards.
    pub fn is_eligible(&self, node: &str, role: Option<&str>) -> bool {
        self.members.get(node).is_some_and(|member| {
            member.is_up() && role.is_none_or(|role| member.roles.contains(role))
        })
    }

    /// One member, if known.
    pub fn get(&self, node: &str) -> Option<&Member> {
        self.members.get(node)
    }

    /// All members, eligible or not.
    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }
}

/// A handle that changes the membership view; clones share it. Subscribers see each change.
///
/// ```
/// use tessera_sharding::Membership;
/// let membership = Membership::new();
/// membership.join("node-1", Vec::<String>::new());
/// membership.set_unreachable("node-1", true);
/// assert!(membership.snapshot().eligible(None).is_empty());
/// membership.leave("node-1");
/// assert_eq!(membership.snapshot().members().count(), 0);
/// ```
#[derive(Clone, Debug)]
pub struct Membership {
    sender: watch::Sender<MemberSet>,
}

impl Default for Membership {
    fn default() -> Self {
        Membership::new()
    }
}

impl Membership {
    /// An empty view.
    pub fn new() -> Self {
        Membership {
            sender: watch::Sender::new(MemberSet::default()),
        }
    }

    /// Adds (or re-adds as up) `node` with `roles`.
    pub fn join<R: Into<String>>(
        &self,
        node: impl Into<NodeId>,
        roles: impl IntoIterator<Item = R>,
    ) {
        let node = node.into();
        self.set_status(node, roles, MemberStatus::Up);
    }

    /// Records `node`'s committed status (adding it if new); its reachability is kept.
    pub fn set_status<R: Into<String>>(
        &self,
        node: impl Into<NodeId>,
        roles: impl IntoIterator<Item = R>,
        status: MemberStatus,
    ) {
        let node = node.into();
        let roles = roles.into_iter().map(Into::into).collect();
        self.sender.send_modify(|set| {
            let reachable = set.members.get(&node).is_none_or(|member| member.reachable);
            let member = Member {
                node: node.clone(),
                roles,
                status,
                reachable,
            };
            set.members.insert(node, member);
        });
    }

    /// Removes `node`.
    pub fn leave(&self, node: &str) {
        self.sender.send_modify(|set| {
            set.members.remove(node);
        });
    }

    /// Marks `node` unreachable (or reachable again).
    pub fn set_unreachable(&self, node: &str, unreachable: bool) {
        self.sender.send_modify(|set| {
            if let Some(member) = set.members.get_mut(node) {
                member.reachable = !unreachable;
            }
        });
    }

    /// The current view.
    pub fn snapshot(&self) -> MemberSet {
        self.sender.borrow().clone()
    }

    /// A receiver that wakes on every change.
    pub fn subscribe(&self) -> watch::Receiver<MemberSet> {
        self.sender.subscribe()
    }
}
