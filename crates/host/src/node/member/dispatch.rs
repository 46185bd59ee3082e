//! The one place where what peers send enters the node. Each received [`PeerMessage`] is first
//! judged (`authority.rs`): refused ones are dropped and counted by kind
//! (`tessera_peer_dropped_total{reason="unauthorized_<kind>"}`), those only a catalog this node
//! has not applied yet could vouch for are held (`held.rs`) and judged again as the plane
//! moves, and the rest go to their owner without waiting — the plane's frames to the plane,
//! the regions' messages to this node's region, commands to the coordinator if it runs here,
//! requests for plugin blobs to the blob transfer (`blob_transfer.rs`) and queries to the node
//! (`queries.rs`), with the responder
//! their answer goes back by. A full queue drops the message and counts it; every sender
//! retries what matters.

use super::authority::{CommittedCatalog, Kind, Knowledge, Verdict, judge};
use super::blob_transfer::BlobTransfer;
use super::held::{Held, Released};
use super::mesh::{Mesh, bump};
use super::peer_message::PeerMessage;
use super::queries::{self, Asked};
use std::cell::OnceCell;
use std::sync::{Arc, Weak};
use std::time::Instant as StdInstant;
use tessera_cluster::{Inbound, Responder};
use tessera_contract::{Allocation, NodeId, ShardKey};
use tessera_metadata::{CommittedRead, MemberState, MetadataStore, PlaneStatus};
use tessera_sharding::Switchboard;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Where received messages go, and what they are judged by.
pub(crate) struct DispatchParts {
    /// This node's region and, while it runs here, the coordinator.
    pub(crate) switchboard: Weak<Switchboard>,
    /// The catalog this node has applied: what peers' claims are checked against.
    pub(crate) catalog: MetadataStore,
    /// The plane's status: the primary, and a change whenever a command is applied.
    pub(crate) status: watch::Receiver<PlaneStatus>,
    /// Where peers' requests for plugin blobs go.
    pub(crate) blobs: Arc<BlobTransfer>,
    /// Where peers' queries go (`queries.rs`), for the node to answer.
    pub(crate) queries: mpsc::Sender<Asked>,
}

impl Mesh {
    /// Judges every received message and hands it to its owner until the transport closes
    /// (see the module's paragraph).
    pub(crate) async fn dispatch(
        self: Arc<Mesh>,
        mut inbound: Inbound<PeerMessage>,
        parts: DispatchParts,
    ) {
        let weak = Arc::downgrade(&self);
        drop(self);
        let mut held: Held<PeerMessage> = Held::default();
        // Told of every move of the plane, apart from the status the judge reads.
        let mut plane_moves = parts.status.clone();
        let mut plane_running = true;
        loop {
            let deadline = held.next_deadline();
            tokio::select! {
                incoming = inbound.recv() => {
                    let Some(incoming) = incoming else { return };
                    let Some(mesh) = weak.upgrade() else { return };
                    if let Some(reply) = incoming.reply {
                        mesh.receive_request(&parts, incoming.from, incoming.message, reply);
                    } else {
                        mesh.receive(&mut held, &parts, incoming.from, incoming.message);
                    }
                }
                changed = plane_moves.changed(), if plane_running && !held.is_empty() => {
                    plane_running = changed.is_ok();
                    let Some(mesh) = weak.upgrade() else { return };
                    mesh.release(&mut held, &parts);
                }
                () = sleep_until(deadline), if deadline.is_some() => {
                    let Some(mesh) = weak.upgrade() else { return };
                    mesh.release(&mut held, &parts);
                }
            }
        }
    }

    fn receive(
        &self,
        held: &mut Held<PeerMessage>,
        parts: &DispatchParts,
        from: NodeId,
        message: PeerMessage,
    ) {
        // A region's or the coordinator's message waits behind those of its sender held
        // before it, so a peer's messages keep their order.
        let ordered = matches!(
            message,
            PeerMessage::Region(_) | PeerMessage::Coordinator(_)
        );
        let verdict = if ordered && held.holds_for(&from) {
            Verdict::Hold
        } else {
            self.judge(parts, &from, &message)
        };
        match verdict {
            Verdict::Accept => self.deliver(parts, from, message),
            Verdict::Refuse => self.refuse(&from, &message),
            Verdict::Hold => {
                if held.hold(&from, message, Instant::now()).is_err() {
                    bump(&self.counters.hold_full);
                    tracing::debug!(%from, "a message waiting for the catalog dropped: too many wait");
                }
            }
        }
    }

    /// A request waits for its answer: judged now, never held (a refused one is dropped, and
    /// its sender times out and asks another peer).
    fn receive_request(
        &self,
        parts: &DispatchParts,
        from: NodeId,
        message: PeerMessage,
        reply: Responder<PeerMessage>,
    ) {
        if self.judge(parts, &from, &message) != Verdict::Accept {
            self.refuse(&from, &message);
            if let PeerMessage::BlobHold { sha256, .. } | PeerMessage::BlobRead { sha256, .. } =
                &message
            {
                // Answered at once, so the requester asks another node instead of timing out.
                let _ = reply.reply(&PeerMessage::BlobMissing {
                    sha256: sha256.clone(),
                    why: format!("{} does not take this request from {from}", self.node),
                });
            } else if let PeerMessage::Query(_) = &message {
                let why = format!("{} does not take this query from {from}", self.node);
                queries::refuse(reply, why);
            }
            return;
        }
        match message {
            PeerMessage::BlobRead { sha256, chunk } => {
                parts.blobs.serve_read(&sha256, chunk, reply)
            }
            PeerMessage::BlobHold { sha256, size_bytes } => {
                parts.blobs.hold(from, sha256, size_bytes, reply)
            }
            PeerMessage::Query(query) => {
                if let Err(error) = parts.queries.try_send((query, reply)) {
                    let why = format!("{} has too many queries to answer", self.node);
                    queries::refuse(error.into_inner().1, why);
                }
            }
            // Nothing else is sent as a request; what is, is handled as a message.
            message => self.deliver(parts, from, message),
        }
    }

    /// Judges held messages again (the plane moved, or one ran out of time).
    fn release(&self, held: &mut Held<PeerMessage>, parts: &DispatchParts) {
        let released = held.release(Instant::now(), |from, message| {
            self.judge(parts, from, message)
        });
        for released in released {
            match released {
                Released::Accepted(from, message) => self.deliver(parts, from, message),
                Released::Refused(from, message) => self.refuse(&from, &message),
            }
        }
    }

    fn judge(&self, parts: &DispatchParts, from: &str, message: &PeerMessage) -> Verdict {
        let primary = parts.status.borrow().primary.clone();
        let catalog = CatalogAsApplied::new(&parts.catalog);
        let known = Knowledge {
            node: &self.node,
            voters: &self.voters,
            primary: primary.as_deref(),
            catalog: &catalog,
        };
        judge(from, message, &known)
    }

    fn refuse(&self, from: &str, message: &PeerMessage) {
        if let Some(kind) = Kind::of(message) {
            bump(&self.counters.unauthorized[kind.index()]);
            tracing::debug!(%from, reason = kind.refusal_label(), "a peer's message refused");
        }
    }

    /// Hands a message its sender may send to its owner.
    fn deliver(&self, parts: &DispatchParts, from: NodeId, message: PeerMessage) {
        let Some(switchboard) = parts.switchboard.upgrade() else {
            return; // the node is stopping
        };
        match message {
            PeerMessage::Group(frame) => self.groups.route(from, frame),
            PeerMessage::Region(message) => {
                if let Err(refused) = switchboard.deliver_local(&self.node, message) {
                    bump(&self.counters.region_dropped);
                    tracing::debug!(%from, error = %refused.0, "region message dropped");
                }
            }
            PeerMessage::Progress { commit } => self.note_progress(from, commit, StdInstant::now()),
            // Requests come with a responder (`receive_request`); answers as replies only.
            PeerMessage::BlobHold { .. }
            | PeerMessage::BlobRead { .. }
            | PeerMessage::BlobChunk { .. }
            | PeerMessage::BlobHeld { .. }
            | PeerMessage::BlobMissing { .. }
            | PeerMessage::Query(_)
            | PeerMessage::Answer(_) => self.refuse(&from, &message),
            PeerMessage::Coordinator(command) => {
                if !switchboard.has_local_coordinator()
                    || switchboard.command_local(command).is_err()
                {
                    bump(&self.counters.coordinator_misdirected);
                }
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The catalog this node has applied, read through one transaction opened on the first
/// question (most plane frames ask none). A catalog that cannot be read vouches for nothing.
struct CatalogAsApplied<'a> {
    store: &'a MetadataStore,
    read: OnceCell<Option<CommittedRead>>,
}

impl<'a> CatalogAsApplied<'a> {
    fn new(store: &'a MetadataStore) -> Self {
        CatalogAsApplied {
            store,
            read: OnceCell::new(),
        }
    }

    fn read(&self) -> Option<&CommittedRead> {
        self.read
            .get_or_init(|| match self.store.committed() {
                Ok(read) => Some(read),
                Err(error) => {
                    tracing::warn!(%error, "the catalog could not be read to judge a peer's message");
                    None
                }
            })
            .as_ref()
    }

    fn ask<T>(
        &self,
        question: impl FnOnce(&CommittedRead) -> Result<T, tessera_metadata::MetadataError>,
    ) -> Option<T> {
        match question(self.read()?) {
            Ok(answer) => Some(answer),
            Err(error) => {
                tracing::warn!(%error, "the catalog could not be read to judge a peer's message");
                None
            }
        }
    }
}

impl CommittedCatalog for CatalogAsApplied<'_> {
    fn member_state(&self, node: &str) -> Option<MemberState> {
        self.ask(|read| read.member_state(node)).flatten()
    }

    fn allocation(&self, key: &ShardKey) -> Option<Allocation> {
        self.ask(|read| read.allocation(key)).flatten()
    }

    fn handoff_from(&self, key: &ShardKey) -> Option<NodeId> {
        self.ask(|read| read.handoff_from(key)).flatten()
    }

    fn next_generation(&self) -> u64 {
        // Unreadable: every generation is one this node has not applied, so nothing that
        // claims one is acted on, and what waits is refused when its time is up.
        self.ask(CommittedRead::next_generation).unwrap_or(0)
    }

    fn partition_placed(&self, partition: u32) -> Option<tessera_metadata::PartitionReplicas> {
        self.ask(|read| read.partition(partition)).flatten()
    }
}
