//! Who may send what over the mesh. A certificate from the cluster CA lets a peer connect; it
//! does not make what the peer says true. Each [`PeerMessage`] is believed only from the node
//! the committed catalog (and the voters, which are configuration) says may send it, and only
//! as far as the catalog vouches for what it claims:
//!
//! - the metadata plane's protocol and a follower's entries only from a voter, the answer to a
//!   submitted command only from the primary of the view it names; a command only from the
//!   node it says submitted it — a member, or a node joining (its own `JoinMember` only) — and
//!   shard assignments only from a voter, where the coordinator runs;
//! - the coordinator's word (an allocation, a failed one, a handoff) only from the metadata
//!   primary, and an allocation or a handoff only as the committed allocation table has it;
//! - a shard's state only from the node the committed handoff moves it from, to this node, and
//!   its acknowledgement only from the node it moves to; envelopes only from a member, each
//!   with an allocation the catalog gave;
//! - a command to the coordinator only from a member (a completed handoff only from the node
//!   handing the shard off; a report of the partitions it leads only from the node it names,
//!   for partitions it is a committed replica of), progress reports only from members and
//!   voters;
//! - a partition group's frames only from one of the partition's committed replicas, to
//!   another (this node);
//! - a request to hold a plugin blob only from a voter or a member the catalog has committed
//!   (never held: the requester retries); a read of one from any node of the cluster, like
//!   following the catalog (a joining node fetches its plugins before its join commits); blob
//!   answers only as replies to this node's own requests, never as messages of their own;
//! - a query about this node's part of the cluster (a page of entity ids, its overview) only
//!   from a committed member (never held), its answers only as replies.
//!
//! [`judge`] is a pure function of the message, its sender and what this node knows
//! ([`Knowledge`]), tested rule by rule below. The mesh applies it where it dispatches
//! (`dispatch.rs`). A claim only a catalog this node has not applied yet could vouch for — a
//! generation above every one it knows, a voter that may be a primary it has not heard of, a
//! sender whose join this node has not applied yet — is [`Verdict::Hold`]: the mesh holds the
//! message until the catalog catches up or a bound runs out (`held.rs`), then refuses it, and
//! the sender retries what matters.

use super::peer_message::PeerMessage;
use tessera_consensus::group::{GroupId, GroupMessage};
use tessera_contract::{Allocation, NodeId, ShardKey};
use tessera_metadata::{
    CatalogMachine, Command, METADATA_GROUP, MemberState, PartitionReplicas, group_partition,
};
use tessera_sharding::{CoordinatorCommand, LinkMessage};

/// What the mesh does with a message from a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The sender may send it, and the catalog vouches for what it claims.
    Accept,
    /// Only a catalog this node has not applied yet could vouch for it: ask again later.
    Hold,
    /// The sender may not send it, or the catalog says otherwise: drop it and count it.
    Refuse,
}

/// The kind of a message between nodes that may be refused: what its refusals are counted
/// by. (A follower's request for entries never is: a node follows the catalog before its join
/// commits.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Replica,
    Submit,
    Reply,
    Entries,
    Checkpoint,
    Deliver,
    Delivered,
    AskReply,
    Allocated,
    AllocationFailed,
    ShardState,
    ShardStateInstalled,
    HandOff,
    Allocate,
    HandoffComplete,
    MoveShard,
    PartitionPrimaries,
    Progress,
    BlobRequest,
    BlobReply,
    Query,
    Answer,
}

impl Kind {
    /// Every kind, in the order `/metrics` lists them.
    pub(crate) const ALL: [Kind; 22] = [
        Kind::Replica,
        Kind::Submit,
        Kind::Reply,
        Kind::Entries,
        Kind::Checkpoint,
        Kind::Deliver,
        Kind::Delivered,
        Kind::AskReply,
        Kind::Allocated,
        Kind::AllocationFailed,
        Kind::ShardState,
        Kind::ShardStateInstalled,
        Kind::HandOff,
        Kind::Allocate,
        Kind::HandoffComplete,
        Kind::MoveShard,
        Kind::PartitionPrimaries,
        Kind::Progress,
        Kind::BlobRequest,
        Kind::BlobReply,
        Kind::Query,
        Kind::Answer,
    ];

    /// The kind of `message`, unless it is one no rule refuses.
    pub(crate) fn of(message: &PeerMessage) -> Option<Kind> {
        let kind = match message {
            PeerMessage::Group(frame) => match &frame.message {
                GroupMessage::Replica(_) => Kind::Replica,
                GroupMessage::Submit { .. } => Kind::Submit,
                GroupMessage::Reply(_) => Kind::Reply,
                GroupMessage::Follow { .. } => return None,
                GroupMessage::Entries { .. } => Kind::Entries,
                GroupMessage::Checkpoint { .. } => Kind::Checkpoint,
            },
            PeerMessage::Region(message) => match message {
                LinkMessage::Deliver { .. } => Kind::Deliver,
                LinkMessage::Delivered { .. } => Kind::Delivered,
                LinkMessage::AskReply { .. } => Kind::AskReply,
                LinkMessage::Allocated { .. } => Kind::Allocated,
                LinkMessage::AllocationFailed { .. } => Kind::AllocationFailed,
                LinkMessage::ShardState { .. } => Kind::ShardState,
                LinkMessage::ShardStateInstalled { .. } => Kind::ShardStateInstalled,
                LinkMessage::HandOff { .. } => Kind::HandOff,
            },
            PeerMessage::Coordinator(command) => match command {
                CoordinatorCommand::Allocate { .. } => Kind::Allocate,
                CoordinatorCommand::HandoffComplete { .. } => Kind::HandoffComplete,
                CoordinatorCommand::MoveShard { .. } => Kind::MoveShard,
                CoordinatorCommand::PartitionPrimaries { .. } => Kind::PartitionPrimaries,
            },
            PeerMessage::Progress { .. } => Kind::Progress,
            PeerMessage::BlobHold { .. } | PeerMessage::BlobRead { .. } => Kind::BlobRequest,
            PeerMessage::BlobChunk { .. }
            | PeerMessage::BlobHeld { .. }
            | PeerMessage::BlobMissing { .. } => Kind::BlobReply,
            PeerMessage::Query(_) => Kind::Query,
            PeerMessage::Answer(_) => Kind::Answer,
        };
        Some(kind)
    }

    /// The `reason` label its refusals are counted under in `tessera_peer_dropped_total`.
    pub(crate) fn refusal_label(self) -> &'static str {
        match self {
            Kind::Replica => "unauthorized_replica",
            Kind::Submit => "unauthorized_submit",
            Kind::Reply => "unauthorized_reply",
            Kind::Entries => "unauthorized_entries",
            Kind::Checkpoint => "unauthorized_checkpoint",
            Kind::Deliver => "unauthorized_deliver",
            Kind::Delivered => "unauthorized_delivered",
            Kind::AskReply => "unauthorized_ask_reply",
            Kind::Allocated => "unauthorized_allocated",
            Kind::AllocationFailed => "unauthorized_allocation_failed",
            Kind::ShardState => "unauthorized_shard_state",
            Kind::ShardStateInstalled => "unauthorized_shard_state_installed",
            Kind::HandOff => "unauthorized_hand_off",
            Kind::Allocate => "unauthorized_allocate",
            Kind::HandoffComplete => "unauthorized_handoff_complete",
            Kind::MoveShard => "unauthorized_move_shard",
            Kind::PartitionPrimaries => "unauthorized_partition_primaries",
            Kind::Progress => "unauthorized_progress",
            Kind::BlobRequest => "unauthorized_blob_request",
            Kind::BlobReply => "unauthorized_blob_reply",
            Kind::Query => "unauthorized_query",
            Kind::Answer => "unauthorized_answer",
        }
    }

    /// Its place in [`Kind::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// What the rules read of the catalog this node has applied. A catalog that cannot be read
/// vouches for nothing (`None`, and no generation given).
pub(crate) trait CommittedCatalog {
    /// `node`'s state, if it is a member.
    fn member_state(&self, node: &str) -> Option<MemberState>;
    /// Where `key` lives, if it was ever allocated.
    fn allocation(&self, key: &ShardKey) -> Option<Allocation>;
    /// The node handing `key` off, if a handoff of it is in flight.
    fn handoff_from(&self, key: &ShardKey) -> Option<NodeId>;
    /// The generation the next assignment takes: every lower one was given already.
    fn next_generation(&self) -> u64;
    /// `partition`'s placement, if it was ever placed.
    fn partition_placed(&self, partition: u32) -> Option<PartitionReplicas>;
}

/// What this node knows when it judges a message.
pub(crate) struct Knowledge<'a> {
    /// This node.
    pub(crate) node: &'a str,
    /// The metadata plane's voters (configuration, the same on every node).
    pub(crate) voters: &'a [NodeId],
    /// The metadata primary as this node's plane sees it now (none during a view change).
    pub(crate) primary: Option<&'a str>,
    /// The catalog as this node has applied it.
    pub(crate) catalog: &'a dyn CommittedCatalog,
}

/// Whether the catalog vouches for a claim: yes, no, or not yet (it claims a generation this
/// node has not applied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Vouched {
    Yes,
    NotYet,
    No,
}

impl Vouched {
    fn from_bool(yes: bool) -> Vouched {
        if yes { Vouched::Yes } else { Vouched::No }
    }

    /// Both must hold; a no wins over a not yet.
    fn and(self, other: impl FnOnce() -> Vouched) -> Vouched {
        match self {
            Vouched::No => Vouched::No,
            Vouched::Yes => other(),
            Vouched::NotYet => match other() {
                Vouched::No => Vouched::No,
                _ => Vouched::NotYet,
            },
        }
    }

    fn verdict(self) -> Verdict {
        match self {
            Vouched::Yes => Verdict::Accept,
            Vouched::NotYet => Verdict::Hold,
            Vouched::No => Verdict::Refuse,
        }
    }
}

/// Whether `from` may send `message`, as far as this node knows (see the module's rules).
pub(crate) fn judge(from: &str, message: &PeerMessage, known: &Knowledge<'_>) -> Verdict {
    let vouched = match message {
        PeerMessage::Group(frame) if frame.group == METADATA_GROUP => {
            plane(from, &frame.message, known)
        }
        PeerMessage::Group(frame) => partition(from, frame.group, known),
        PeerMessage::Region(message) => region(from, message, known),
        PeerMessage::Coordinator(command) => coordinator(from, command, known),
        PeerMessage::Progress { .. } if known.is_voter(from) => Vouched::Yes,
        PeerMessage::Progress { .. } => known.member(from),
        // Plugin bytes went to any follower inside the catalog's entries before: a node of the
        // cluster (its certificate says so) may read them before its join commits.
        PeerMessage::BlobRead { .. } => Vouched::Yes,
        PeerMessage::BlobHold { .. } if known.is_voter(from) => Vouched::Yes,
        // A request is answered now or not at all: a member not committed yet is refused.
        PeerMessage::BlobHold { .. } => Vouched::from_bool(known.member(from) == Vouched::Yes),
        PeerMessage::BlobChunk { .. }
        | PeerMessage::BlobHeld { .. }
        | PeerMessage::BlobMissing { .. } => Vouched::No,
        // A request is answered now or not at all: a member not committed yet is refused.
        PeerMessage::Query(_) => Vouched::from_bool(known.member(from) == Vouched::Yes),
        PeerMessage::Answer(_) => Vouched::No,
    };
    vouched.verdict()
}

fn plane(from: &str, message: &GroupMessage, known: &Knowledge<'_>) -> Vouched {
    match message {
        GroupMessage::Replica(_)
        | GroupMessage::Entries { .. }
        | GroupMessage::Checkpoint { .. } => Vouched::from_bool(known.is_voter(from)),
        GroupMessage::Reply(reply) => {
            Vouched::from_bool(known.primary_of_view(reply.view) == Some(from))
        }
        // A node follows the catalog before its join commits: that is how it joins.
        GroupMessage::Follow { .. } => Vouched::Yes,
        GroupMessage::Submit { origin, request } => {
            Vouched::from_bool(origin == from).and(|| may_submit(from, &request.operation, known))
        }
    }
}

/// A partition group's frames only between its replicas — the replicas of the group's epoch:
/// the placed set for the current one, the set before for the one a move is leaving; a
/// partition or an epoch this node's catalog has not placed yet is not yet vouched for (the
/// placement may be committed and not applied here), an older epoch's never, nor a group that
/// is no partition's.
fn partition(from: &str, group: GroupId, known: &Knowledge<'_>) -> Vouched {
    let Some((partition, epoch)) = group_partition(group) else {
        return Vouched::No;
    };
    let Some(placed) = known.catalog.partition_placed(partition) else {
        return Vouched::NotYet;
    };
    let replicas = if epoch == placed.epoch {
        &placed.replicas
    } else if epoch + 1 == placed.epoch {
        &placed.previous
    } else if epoch > placed.epoch {
        return Vouched::NotYet;
    } else {
        return Vouched::No;
    };
    Vouched::from_bool(
        replicas.iter().any(|node| node == from) && replicas.iter().any(|node| node == known.node),
    )
}

/// A voter may submit any command; any other node its own join, and, once a member, any
/// command but the coordinator's (its seat and its shard decisions).
fn may_submit(from: &str, operation: &[u8], known: &Knowledge<'_>) -> Vouched {
    if known.is_voter(from) {
        return Vouched::Yes;
    }
    match CatalogMachine::decode_command(operation) {
        Some(Command::JoinMember { node, .. }) => Vouched::from_bool(node == from),
        Some(
            Command::SeatCoordinator { .. }
            | Command::AssignShards { .. }
            | Command::MoveShards { .. }
            | Command::CompleteHandoff { .. },
        ) => Vouched::No,
        Some(_) => known.member(from),
        None => Vouched::No,
    }
}

fn region(from: &str, message: &LinkMessage, known: &Knowledge<'_>) -> Vouched {
    match message {
        LinkMessage::Deliver {
            from: forwarder,
            envelopes,
            ..
        } => Vouched::from_bool(forwarder == from)
            .and(|| known.member(from))
            .and(|| {
                let mut vouched = Vouched::Yes;
                for envelope in envelopes {
                    vouched = vouched.and(|| known.routed_by(&envelope.key, &envelope.allocation));
                }
                vouched
            }),
        LinkMessage::Delivered { .. } | LinkMessage::AskReply { .. } => known.member(from),
        LinkMessage::Allocated { key, allocation } => known
            .coordinator(from)
            .and(|| known.allocated(key, allocation)),
        LinkMessage::AllocationFailed { .. } => known.coordinator(from),
        LinkMessage::HandOff { key, to } => known
            .coordinator(from)
            .and(|| known.moved(key, to.generation, known.node, &to.node)),
        LinkMessage::ShardState {
            key,
            generation,
            from: sender,
            ..
        } => Vouched::from_bool(sender == from)
            .and(|| known.moved(key, *generation, from, known.node)),
        LinkMessage::ShardStateInstalled {
            key, generation, ..
        } => known.moved(key, *generation, known.node, from),
    }
}

fn coordinator(from: &str, command: &CoordinatorCommand, known: &Knowledge<'_>) -> Vouched {
    match command {
        CoordinatorCommand::Allocate { requester, .. } => {
            Vouched::from_bool(requester == from).and(|| known.member(from))
        }
        CoordinatorCommand::HandoffComplete { key, generation } => {
            let from_here = known.catalog.handoff_from(key).as_deref() == Some(from);
            let of_this_move = known
                .catalog
                .allocation(key)
                .is_some_and(|allocation| allocation.generation == *generation);
            Vouched::from_bool(from_here && of_this_move)
        }
        // An operator's move, through the member whose API took it.
        CoordinatorCommand::MoveShard { .. } => known.member(from),
        // A member's own report, of partitions it is a committed replica of.
        CoordinatorCommand::PartitionPrimaries { node, led } => Vouched::from_bool(node == from)
            .and(|| known.member(from))
            .and(|| {
                led.iter()
                    .fold(Vouched::Yes, |vouched, (partition, epoch, _)| {
                        vouched.and(|| match known.catalog.partition_placed(*partition) {
                            None => Vouched::NotYet,
                            Some(placed) if *epoch > placed.epoch => Vouched::NotYet,
                            // A group of this epoch or the one before (a move not finished).
                            Some(placed) => Vouched::from_bool(
                                placed
                                    .replicas
                                    .iter()
                                    .chain(&placed.previous)
                                    .any(|r| r == from),
                            ),
                        })
                    })
            }),
    }
}

impl Knowledge<'_> {
    fn is_voter(&self, node: &str) -> bool {
        self.voters.iter().any(|voter| voter == node)
    }

    /// A node this catalog does not know as a member may have joined in a command it has not
    /// applied yet (it talks to the primary first); a removed one never becomes one again.
    fn member(&self, node: &str) -> Vouched {
        if self.catalog.member_state(node).is_some() {
            Vouched::Yes
        } else {
            Vouched::NotYet
        }
    }

    /// The primary of `view`: its voter in turn.
    fn primary_of_view(&self, view: u64) -> Option<&str> {
        let count = self.voters.len() as u64;
        if count == 0 {
            return None;
        }
        self.voters.get((view % count) as usize).map(String::as_str)
    }

    /// The coordinator runs on the metadata primary. A voter this node does not know as the
    /// primary may be one it has not heard of yet.
    fn coordinator(&self, from: &str) -> Vouched {
        if !self.is_voter(from) {
            Vouched::No
        } else if self.primary == Some(from) {
            Vouched::Yes
        } else {
            Vouched::NotYet
        }
    }

    /// A generation this node has not applied yet may be vouched for later.
    fn not_given_yet(&self, generation: u64) -> Vouched {
        if generation >= self.catalog.next_generation() {
            Vouched::NotYet
        } else {
            Vouched::No
        }
    }

    /// The coordinator's allocation of `key`: the committed one, exactly.
    fn allocated(&self, key: &ShardKey, claimed: &Allocation) -> Vouched {
        if self.catalog.allocation(key).as_ref() == Some(claimed) {
            Vouched::Yes
        } else {
            self.not_given_yet(claimed.generation)
        }
    }

    /// The allocation a forwarded envelope was routed by: the committed one, or an older one
    /// of the same shard (the sender had not heard of the newer yet; a region keeps the newer
    /// it knows). A generation the catalog gave to no allocation of this shard is forged.
    fn routed_by(&self, key: &ShardKey, claimed: &Allocation) -> Vouched {
        match self.catalog.allocation(key) {
            Some(committed) if committed == *claimed => Vouched::Yes,
            Some(committed) if committed.generation > claimed.generation => Vouched::Yes,
            _ => self.not_given_yet(claimed.generation),
        }
    }

    /// The committed move of `key` at `generation`, from `losing` to `new_owner`, still in
    /// flight.
    fn moved(&self, key: &ShardKey, generation: u64, losing: &str, new_owner: &str) -> Vouched {
        let committed = self.catalog.allocation(key);
        let to_new_owner = committed
            .as_ref()
            .is_some_and(|allocation| allocation.node == new_owner)
            && committed.as_ref().map(|allocation| allocation.generation) == Some(generation);
        if to_new_owner && self.catalog.handoff_from(key).as_deref() == Some(losing) {
            Vouched::Yes
        } else {
            self.not_given_yet(generation)
        }
    }
}

#[cfg(test)]
mod tests;
