//! The messages regions and the coordinator exchange, and the [`Switchboard`] that carries
//! them. Every message here is plain serde data — a reply travels back as a message keyed by
//! request id, never as a channel — so the in-process channels can become network connections
//! without changing the region or the coordinator.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;

use tessera_contract::{
    Allocation, EntityAddress, MessageError, MessageMeta, NodeId, Reply, ShardKey,
};
use tessera_state::ShardPart;

/// Where the reply to a forwarded ask goes: the asking node's pending-ask table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyTo {
    /// The node that asked.
    pub node: NodeId,
    /// The request id in its pending-ask table.
    pub request_id: u64,
    /// How long the asker still waits, so the owner does not keep a reply path open longer.
    pub timeout_ms: u64,
}

/// What a forwarded envelope carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireBody {
    /// A message for the entity; `reply_to` is set for an ask.
    Message {
        /// The MessagePack payload.
        #[serde(with = "serde_bytes")]
        payload: Vec<u8>,
        /// Origin and call chain (the deadline travels as `reply_to.timeout_ms`).
        meta: MessageMeta,
        /// The asker, for an ask.
        reply_to: Option<ReplyTo>,
    },
    /// A request for the entity's committed state, answered to `reply_to` like an ask.
    ReadState {
        /// The asker.
        reply_to: ReplyTo,
    },
    /// A request to passivate the entity.
    Passivate,
}

/// An envelope travelling from one region to another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireEnvelope {
    /// The target entity.
    pub address: EntityAddress,
    /// Its shard (computed once, by the first region).
    pub key: ShardKey,
    /// The allocation the sender routed by; a receiver that knows an older one learns from it.
    pub allocation: Allocation,
    /// Regions this envelope has passed through; bounded by [`FORWARD_HOPS_MAX`].
    pub hops: u8,
    /// Message or passivation.
    pub body: WireBody,
}

/// Forwards an envelope may take before it is refused. Allocations only move forward in
/// generation, so a correct route settles in two hops; more means tables disagree badly.
pub const FORWARD_HOPS_MAX: u8 = 4;

/// A reply on the wire (`Reply` with the payload as MessagePack `bin`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireReply {
    /// The entity's reply.
    Ok(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Why the message failed.
    Err(MessageError),
}

impl From<Reply> for WireReply {
    fn from(reply: Reply) -> Self {
        match reply {
            Ok(bytes) => WireReply::Ok(bytes),
            Err(error) => WireReply::Err(error),
        }
    }
}

impl From<WireReply> for Reply {
    fn from(reply: WireReply) -> Self {
        match reply {
            WireReply::Ok(bytes) => Ok(bytes),
            WireReply::Err(error) => Err(error),
        }
    }
}

/// Envelopes one region forwards to another in one message, at most.
pub const FORWARD_BATCH_MAX: usize = 256;

/// Bytes of envelopes one forwarding batch carries, at most: the sum of their MessagePack
/// encodings, counted as they are queued. A batch crosses between nodes as one frame, and a
/// frame over the transport's limit (the mesh's is 80 MiB) is refused whole; bounded well below
/// it, a batch always fits, so one tenant's large messages cannot fail the other envelopes
/// that share their batch. It also bounds what a region holds queued for one peer.
pub const FORWARD_BATCH_BYTES_MAX: usize = 8 << 20;

/// The largest payload a forwarded message may carry. Its envelope — the payload with its
/// address, origin and call chain — must fit in one batch on its own; a client's message,
/// whose address and origin take a few hundred bytes, fits whenever its payload is at most
/// this. A message that could never fit is refused alone, at once, with `payload_too_large`.
pub const FORWARD_PAYLOAD_BYTES_MAX: usize =
    FORWARD_BATCH_BYTES_MAX - FORWARD_ENVELOPE_BYTES_RESERVED;

/// What an envelope beside its payload may take within [`FORWARD_BATCH_BYTES_MAX`] for
/// [`FORWARD_PAYLOAD_BYTES_MAX`] to hold: an entity id of at most 256 bytes, tenant and type
/// names, the shard key, the allocation and the asker's node, an idempotency key of at most
/// 128 bytes, and MessagePack's field names need far less.
const FORWARD_ENVELOPE_BYTES_RESERVED: usize = 64 << 10;

/// A message to a region, from a peer region or the coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LinkMessage {
    /// Envelopes forwarded by a peer region, in the order they must run (at most
    /// [`FORWARD_BATCH_MAX`] of them and [`FORWARD_BATCH_BYTES_MAX`] bytes). Answered with
    /// [`LinkMessage::Delivered`].
    Deliver {
        /// The forwarding node, where the batch result goes.
        from: NodeId,
        /// The batch's number at the sender.
        batch: u64,
        /// The envelopes.
        envelopes: Vec<WireEnvelope>,
    },
    /// The per-envelope result of a [`LinkMessage::Deliver`] batch: every envelope not listed
    /// was accepted (delivered to its entity's mailbox, buffered, or forwarded on); those
    /// listed, by their index in the batch, were refused with the error (an ask's asker was
    /// answered with it too).
    Delivered {
        /// The batch's number.
        batch: u64,
        /// Envelopes accepted.
        accepted: u32,
        /// Envelopes refused: `(index in the batch, why)`.
        refused: Vec<(u32, MessageError)>,
    },
    /// The reply to an ask this region forwarded.
    AskReply {
        /// The request id from [`ReplyTo`].
        request_id: u64,
        /// The outcome.
        reply: WireReply,
    },
    /// The coordinator's answer to an allocation request, or news of a settled move.
    Allocated {
        /// The shard.
        key: ShardKey,
        /// Its home.
        allocation: Allocation,
    },
    /// The coordinator could not allocate the shard.
    AllocationFailed {
        /// The shard.
        key: ShardKey,
        /// Why.
        reason: String,
        /// The shard's owner is down or cut off and its state is there (answered
        /// `shard_unavailable`), rather than no member being eligible (`unavailable`).
        state_unavailable: bool,
    },
    /// One part of `key`'s durable state, from its previous owner during a handoff. The
    /// receiver installs it durably and answers [`LinkMessage::ShardStateInstalled`]; it
    /// serves the shard only once it learns the allocation, which comes after the last part.
    ShardState {
        /// The shard.
        key: ShardKey,
        /// The generation of the move.
        generation: u64,
        /// The node handing the shard off (where the answer goes).
        from: NodeId,
        /// The part.
        part: ShardPart,
    },
    /// The answer to [`LinkMessage::ShardState`].
    ShardStateInstalled {
        /// The shard.
        key: ShardKey,
        /// The generation of the move.
        generation: u64,
        /// Which part.
        index: u32,
        /// Why it was not installed, if it was not.
        error: Option<String>,
    },
    /// The coordinator moves `key` away from this region: stop its entities, then hand the
    /// buffered messages to `to`.
    HandOff {
        /// The shard.
        key: ShardKey,
        /// Its new home.
        to: Allocation,
    },
}

/// A command to the coordinator from a region (or an operator); plain data so it can cross a
/// network.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoordinatorCommand {
    /// Where does `key` live? Answered to `requester` with [`LinkMessage::Allocated`] or
    /// [`LinkMessage::AllocationFailed`].
    Allocate {
        /// The shard.
        key: ShardKey,
        /// The region asking.
        requester: NodeId,
    },
    /// The losing region finished handing `key` off (entities stopped, buffer drained).
    HandoffComplete {
        /// The shard.
        key: ShardKey,
        /// The generation of the move.
        generation: u64,
    },
    /// Moves `key` to `to` (an operator's or a test's move; a graceful handoff).
    MoveShard {
        /// The shard.
        key: ShardKey,
        /// The new owner; must be eligible.
        to: NodeId,
    },
    /// With the partition plane serving: the partitions whose groups `node` leads, each with
    /// its view, sent every [`PRIMARY_REPORT_INTERVAL`] (empty when it leads none). A
    /// partition's shards follow its primary; a node silent for longer than
    /// [`PRIMARY_REPORT_SILENCE`] gives up its partitioned shards without a handoff.
    PartitionPrimaries {
        /// The reporting node.
        node: NodeId,
        /// `(partition, epoch, view)` for each serving group it is the primary of — the
        /// replica set's epoch and the group's view in it — at most
        /// [`PARTITIONS_MAX`](tessera_metadata::PARTITIONS_MAX).
        led: Vec<(u32, u64, u64)>,
    },
}

/// How often a node with the partition plane serving tells the coordinator which partitions'
/// groups it leads: a primary elected by a view change is heard of within this.
pub const PRIMARY_REPORT_INTERVAL: Duration = Duration::from_millis(200);

/// A node whose primaries report the coordinator has not heard for this long is taken to be
/// gone for its partitioned shards: they go to their partitions' primaries at once, not by a
/// handoff it would never answer. Safety does not rest on it (a stale copy cannot commit).
pub const PRIMARY_REPORT_SILENCE: Duration = Duration::from_millis(1000);

/// How long the connection to an owner may stay lost before the asks forwarded to it end
/// (outcome unknown) and the mesh refuses sends to it at once: a reconnect within it still
/// brings their replies; past it the owner is taken for dead, as the coordinator takes a
/// partition primary silent for as long ([`PRIMARY_REPORT_SILENCE`]) and moves its shards,
/// so a client's retry finds the next owner.
pub const LOST_OWNER_GRACE: Duration = Duration::from_secs(1);

/// Why a link could not take a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// No region or coordinator is reachable under that name.
    #[error("node {0} is not reachable")]
    Unreachable(String),
    /// The receiver's bounded inbox is full.
    #[error("inbox of {0} is full")]
    Full(String),
}

/// The regions and coordinator of other processes, reached over the cluster transport (the
/// node layer implements it). Sending never waits: a message that cannot be queued comes back
/// with the reason.
pub trait RemoteLinks: Send + Sync + 'static {
    /// Queues `message` for the region of `node`.
    fn send_to_region(&self, node: &str, message: LinkMessage) -> Result<(), Box<Refused>>;
    /// Queues `command` for the coordinator, wherever it runs now.
    fn send_to_coordinator(&self, command: CoordinatorCommand) -> Result<(), LinkError>;
    /// The other nodes whose regions may be reached, sorted.
    fn regions(&self) -> Vec<NodeId>;
    /// Nodes whose connection was lost at least `at_least` ago and is not back, sorted: what
    /// they were sent and have not answered may never be answered. None by default (links
    /// that never lose a connection).
    fn regions_lost_for(&self, at_least: std::time::Duration) -> Vec<NodeId> {
        let _ = at_least;
        Vec::new()
    }
}

/// A link message that could not be sent, and why.
pub type Refused = (LinkError, LinkMessage);

/// Routes link messages between the regions and the coordinator of one process and, when a
/// [`RemoteLinks`] is set, to those of other processes. A local region or coordinator is
/// always preferred; regions and the coordinator never know which one they talk to.
///
/// ```
/// use tessera_sharding::Switchboard;
/// let switchboard = Switchboard::new();
/// assert!(switchboard.regions().is_empty());
/// ```
#[derive(Default)]
pub struct Switchboard {
    regions: RwLock<HashMap<NodeId, mpsc::Sender<LinkMessage>>>,
    coordinator: RwLock<Option<mpsc::Sender<CoordinatorCommand>>>,
    remote: OnceLock<Arc<dyn RemoteLinks>>,
}

impl std::fmt::Debug for Switchboard {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Switchboard")
            .field("regions", &self.regions())
            .field("remote", &self.remote.get().is_some())
            .finish()
    }
}

impl Switchboard {
    /// An empty switchboard.
    pub fn new() -> Self {
        Switchboard::default()
    }

    /// Connects the region of `node` (replacing an earlier one, e.g. after a restart).
    pub fn connect_region(&self, node: NodeId, inbox: mpsc::Sender<LinkMessage>) {
        let mut regions = self.regions.write().unwrap_or_else(|p| p.into_inner());
        regions.insert(node, inbox);
    }

    /// Disconnects the region of `node`.
    pub fn disconnect_region(&self, node: &str) {
        let mut regions = self.regions.write().unwrap_or_else(|p| p.into_inner());
        regions.remove(node);
    }

    /// Connects the coordinator.
    pub fn connect_coordinator(&self, inbox: mpsc::Sender<CoordinatorCommand>) {
        let mut coordinator = self.coordinator.write().unwrap_or_else(|p| p.into_inner());
        *coordinator = Some(inbox);
    }

    /// Disconnects the coordinator if `inbox` is still the one connected (this node stopped
    /// running it; commands go to the remote one from now on).
    pub fn disconnect_coordinator_if(&self, inbox: &mpsc::Sender<CoordinatorCommand>) {
        let mut coordinator = self.coordinator.write().unwrap_or_else(|p| p.into_inner());
        if coordinator
            .as_ref()
            .is_some_and(|current| current.same_channel(inbox))
        {
            *coordinator = None;
        }
    }

    /// Whether the coordinator runs in this process.
    pub fn has_local_coordinator(&self) -> bool {
        let coordinator = self.coordinator.read().unwrap_or_else(|p| p.into_inner());
        coordinator.as_ref().is_some_and(|inbox| !inbox.is_closed())
    }

    /// Sets the way to other processes' regions and coordinator (once; a second call is
    /// refused with `false`).
    pub fn set_remote(&self, remote: Arc<dyn RemoteLinks>) -> bool {
        self.remote.set(remote).is_ok()
    }

    /// Region nodes reachable from here, local and remote, sorted.
    pub fn regions(&self) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = {
            let regions = self.regions.read().unwrap_or_else(|p| p.into_inner());
            regions.keys().cloned().collect()
        };
        if let Some(remote) = self.remote.get() {
            nodes.extend(remote.regions());
        }
        nodes.sort();
        nodes.dedup();
        nodes
    }

    /// Remote regions whose connection was lost at least `at_least` ago and is not back,
    /// sorted ([`RemoteLinks::regions_lost_for`]; a region in this process is never lost).
    pub fn regions_lost_for(&self, at_least: std::time::Duration) -> Vec<NodeId> {
        self.remote
            .get()
            .map(|remote| remote.regions_lost_for(at_least))
            .unwrap_or_default()
    }

    /// Sends `message` to the region of `node` in this process only (a message that came
    /// over the transport is never sent on to another process from here).
    pub fn deliver_local(&self, node: &str, message: LinkMessage) -> Result<(), Box<Refused>> {
        let inbox = {
            let regions = self.regions.read().unwrap_or_else(|p| p.into_inner());
            regions.get(node).cloned()
        };
        let Some(inbox) = inbox else {
            return Err(Box::new((
                LinkError::Unreachable(node.to_string()),
                message,
            )));
        };
        inbox.try_send(message).map_err(|error| {
            Box::new(match error {
                mpsc::error::TrySendError::Full(message) => {
                    (LinkError::Full(node.to_string()), message)
                }
                mpsc::error::TrySendError::Closed(message) => {
                    (LinkError::Unreachable(node.to_string()), message)
                }
            })
        })
    }

    /// Sends `command` to the coordinator of this process only.
    pub fn command_local(&self, command: CoordinatorCommand) -> Result<(), LinkError> {
        let inbox = {
            let coordinator = self.coordinator.read().unwrap_or_else(|p| p.into_inner());
            coordinator.clone()
        };
        let inbox = inbox.ok_or_else(|| LinkError::Unreachable("coordinator".to_string()))?;
        inbox.try_send(command).map_err(|error| match error {
            mpsc::error::TrySendError::Full(_) => LinkError::Full("coordinator".to_string()),
            mpsc::error::TrySendError::Closed(_) => {
                LinkError::Unreachable("coordinator".to_string())
            }
        })
    }

    /// Sends `message` to the region of `node` without waiting.
    pub fn send_to_region(&self, node: &str, message: LinkMessage) -> Result<(), LinkError> {
        self.try_send_to_region(node, message)
            .map_err(|refused| refused.0)
    }

    /// Sends `message` to the region of `node` without waiting; on failure the message comes
    /// back with the reason, so the caller can answer whoever waits on it.
    pub fn try_send_to_region(&self, node: &str, message: LinkMessage) -> Result<(), Box<Refused>> {
        let is_local = {
            let regions = self.regions.read().unwrap_or_else(|p| p.into_inner());
            regions.contains_key(node)
        };
        match self.remote.get() {
            Some(remote) if !is_local => remote.send_to_region(node, message),
            _ => self.deliver_local(node, message),
        }
    }

    /// Sends `message` to the coordinator without waiting: the one in this process if it
    /// runs here, else the remote one.
    pub fn send_to_coordinator(&self, message: CoordinatorCommand) -> Result<(), LinkError> {
        match self.remote.get() {
            Some(remote) if !self.has_local_coordinator() => remote.send_to_coordinator(message),
            _ => self.command_local(message),
        }
    }
}

impl Switchboard {
    /// Disconnects the region of `node` if `inbox` is still the one connected (a restarted
    /// region may already have replaced it).
    pub fn disconnect_region_if(&self, node: &str, inbox: &mpsc::Sender<LinkMessage>) {
        let mut regions = self.regions.write().unwrap_or_else(|p| p.into_inner());
        if regions
            .get(node)
            .is_some_and(|current| current.same_channel(inbox))
        {
            regions.remove(node);
        }
    }
}
