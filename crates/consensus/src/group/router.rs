//! Where a node's incoming group frames go: each to the inbound queue of the group it names,
//! once that group runs here (is *materialised*). A frame for a group not running here yet —
//! between the commit of a placement that gives this node a replica and the node starting it —
//! is *parked*: kept, bounded per group ([`PARKED_FRAMES_PER_GROUP_MAX`]), across groups
//! ([`PARKED_GROUPS_MAX`]) and in bytes ([`PARKED_BYTES_MAX`]), and handed to the group, in
//! arrival order, when it materialises. A group removed from this node discards what was
//! parked for it. What does not fit is dropped and counted: VSR resends what matters (a
//! primary retransmits its prepares, a view change is asked for again).
//!
//! ```
//! use tessera_consensus::group::{GroupFrame, GroupId, GroupMessage, GroupRouter};
//! use tessera_consensus::message::Message;
//!
//! let router = GroupRouter::default();
//! let frame = GroupFrame {
//!     group: GroupId(9),
//!     message: GroupMessage::Replica(Message::Commit { view: 1, commit: 4 }),
//! };
//! router.route("n2".into(), frame.clone()); // group 9 does not run here yet: parked
//! let (sender, mut inbound) = tokio::sync::mpsc::channel(16);
//! router.materialise(GroupId(9), sender);
//! assert_eq!(inbound.try_recv().unwrap(), ("n2".to_string(), frame));
//! assert_eq!(router.stats().parked_delivered, 1);
//! ```

use super::frame::{GroupFrame, GroupId, GroupMessage};
use crate::message::{Entry, Message};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use tokio::sync::mpsc;

/// Frames parked for one group, at most: a few round trips of a primary's prepares and
/// heartbeats, enough for a replica that starts a moment after its peers.
pub const PARKED_FRAMES_PER_GROUP_MAX: usize = 64;

/// Groups frames may be parked for at once, at most (a peer naming many groups this node
/// will never run cannot make it keep frames for all of them).
pub const PARKED_GROUPS_MAX: usize = 256;

/// Bytes of parked frames' payloads (operations, log entries, state) across every group, at
/// most: what parking may cost in memory however large the frames.
pub const PARKED_BYTES_MAX: usize = 16 << 20;

/// The bytes a frame's payload holds (its operations, entries or state), plus a fixed
/// overhead for the rest: what parking it costs.
fn frame_bytes(frame: &GroupFrame) -> usize {
    const OVERHEAD_BYTES: usize = 64;
    let entries = |entries: &[Entry]| -> usize {
        entries
            .iter()
            .flat_map(|entry| &entry.requests)
            .map(|request| request.operation.len() + OVERHEAD_BYTES)
            .sum()
    };
    OVERHEAD_BYTES
        + match &frame.message {
            GroupMessage::Replica(message) => match message {
                Message::Request(request) => request.operation.len(),
                Message::Prepare { entry, .. } => entries(std::slice::from_ref(entry)),
                Message::DoViewChange { log, .. } | Message::StartView { log, .. } => {
                    entries(&log.entries)
                }
                Message::RecoveryResponse { log: Some(log), .. } => entries(&log.entries),
                Message::StateChunk { bytes, .. } | Message::ImagePart { bytes, .. } => bytes.len(),
                _ => 0,
            },
            GroupMessage::Submit { origin, request } => origin.len() + request.operation.len(),
            GroupMessage::Reply(reply) => reply.result.as_ref().map_or(0, Vec::len),
            GroupMessage::Entries { entries: list, .. } => entries(list),
            GroupMessage::Checkpoint { checkpoint, .. } => checkpoint.state.len(),
            GroupMessage::Follow { .. } => 0,
        }
}

/// What the router did with frames, since the node started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterStats {
    /// Frames handed to a running group's queue.
    pub delivered: u64,
    /// Frames parked for a group not running here.
    pub parked: u64,
    /// Parked frames handed to their group when it materialised.
    pub parked_delivered: u64,
    /// Frames dropped because a bound on parking was reached.
    pub parked_dropped: u64,
    /// Parked frames discarded with their group's removal.
    pub parked_discarded: u64,
    /// Frames dropped because a running group's queue was full.
    pub queue_full: u64,
}

/// A node's routing of group frames (see the module).
#[derive(Default)]
pub struct GroupRouter {
    inner: Mutex<Routes>,
}

#[derive(Default)]
struct Routes {
    running: HashMap<GroupId, mpsc::Sender<(String, GroupFrame)>>,
    /// Parked frames by group: sender, frame, and what parking it costs (`frame_bytes`).
    parked: BTreeMap<GroupId, VecDeque<(String, GroupFrame, usize)>>,
    parked_bytes: usize,
    stats: RouterStats,
}

impl GroupRouter {
    /// Hands a frame from `from` to its group, or parks it (see the module).
    pub fn route(&self, from: String, frame: GroupFrame) {
        let mut routes = self.lock();
        if let Some(queue) = routes.running.get(&frame.group) {
            match queue.try_send((from, frame)) {
                Ok(()) => routes.stats.delivered += 1,
                Err(mpsc::error::TrySendError::Full(_)) => routes.stats.queue_full += 1,
                // The group stopped without being removed: it runs here no more.
                Err(mpsc::error::TrySendError::Closed((from, frame))) => {
                    let group = frame.group;
                    routes.running.remove(&group);
                    routes.park(from, frame);
                }
            }
            return;
        }
        routes.park(from, frame);
    }

    /// `group` now runs here, reading `queue`: what was parked for it goes first, in arrival
    /// order (what does not fit in the queue is dropped and counted).
    pub fn materialise(&self, group: GroupId, queue: mpsc::Sender<(String, GroupFrame)>) {
        let mut routes = self.lock();
        let parked = routes.parked.remove(&group).unwrap_or_default();
        for (from, frame, bytes) in parked {
            routes.parked_bytes -= bytes;
            match queue.try_send((from, frame)) {
                Ok(()) => routes.stats.parked_delivered += 1,
                Err(_) => routes.stats.parked_dropped += 1,
            }
        }
        routes.running.insert(group, queue);
    }

    /// `group` runs here no more (its replica was moved away): frames parked for it are
    /// discarded, and later ones are parked again only if it is placed here again.
    pub fn remove(&self, group: GroupId) {
        let mut routes = self.lock();
        routes.running.remove(&group);
        if let Some(parked) = routes.parked.remove(&group) {
            routes.stats.parked_discarded += parked.len() as u64;
            let bytes: usize = parked.iter().map(|(_, _, bytes)| bytes).sum();
            routes.parked_bytes -= bytes;
        }
    }

    /// Frames parked now, over every group, and their bytes.
    pub fn parked_now(&self) -> (usize, usize) {
        let routes = self.lock();
        let frames = routes.parked.values().map(VecDeque::len).sum();
        (frames, routes.parked_bytes)
    }

    /// The counts since the node started.
    pub fn stats(&self) -> RouterStats {
        self.lock().stats
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Routes {
    fn park(&mut self, from: String, frame: GroupFrame) {
        let bytes = frame_bytes(&frame);
        let new_group = !self.parked.contains_key(&frame.group);
        let full = (new_group && self.parked.len() >= PARKED_GROUPS_MAX)
            || self.parked_bytes + bytes > PARKED_BYTES_MAX
            || self
                .parked
                .get(&frame.group)
                .is_some_and(|parked| parked.len() >= PARKED_FRAMES_PER_GROUP_MAX);
        if full {
            self.stats.parked_dropped += 1;
            return;
        }
        self.parked_bytes += bytes;
        self.stats.parked += 1;
        self.parked
            .entry(frame.group)
            .or_default()
            .push_back((from, frame, bytes));
    }
}

#[cfg(test)]
#[path = "router_tests.rs"]
mod tests;
