//! Moving a shard's durable state during a handoff between nodes. The losing region, once the
//! shard's entities stopped, starts a task ([`send`]) that streams the shard's rows from a
//! snapshot ([`ShardStates::export`]) to the new owner one part at a time, each acknowledged
//! after the receiver made it durable; a part not acknowledged within the request timeout is
//! sent again (installing is idempotent, and part 0 clears what the receiver held). Only after
//! the last acknowledgement does the losing region drain its buffered envelopes to the new
//! owner and report the handoff complete, so the new owner never serves before it has the
//! state; then it discards its copy.
//!
//! The receiving side refuses — and counts — a part for a type it does not know, for a shard it
//! serves or is handing off itself, or naming entities outside the shard.

mod send;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;

use super::homes::{Home, RegisteredType};
use super::{Internal, Shared};
use crate::link::LinkMessage;
use send::{Answer, Sending};
use tessera_contract::{Allocation, NodeId, ShardKey};
use tessera_state::{ShardPart, ShardScope};

pub use send::TRANSFER_STALL_ATTEMPTS;

/// Answers from the new owner queued for a transfer's task; it waits for one part's at a time,
/// so more are duplicates (dropped when full: the part is sent again).
const ANSWERS_QUEUED_MAX: usize = 16;

/// Transfers a region sends at once; the others wait for a turn before opening their snapshot.
/// With one part in flight each, a region holds at most this many times
/// [`TRANSFER_BYTES_IN_FLIGHT_MAX`](tessera_state::TRANSFER_BYTES_IN_FLIGHT_MAX) of outgoing
/// shard state (16 MiB) however many shards it hands off together (a node leaving hands off
/// all of its shards), and no peer's send queue fills with parts.
pub const TRANSFERS_SENDING_MAX: usize = 4;

/// A shard's state on its way out: the task sending it.
struct Outgoing {
    to: Allocation,
    answers: mpsc::Sender<Answer>,
    task: JoinHandle<()>,
}

impl Drop for Outgoing {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The transfers this region is sending.
pub(crate) struct Transfers {
    outgoing: HashMap<ShardKey, Outgoing>,
    /// Turns to send, [`TRANSFERS_SENDING_MAX`] of them.
    turns: Arc<Semaphore>,
}

impl Default for Transfers {
    fn default() -> Self {
        Transfers {
            outgoing: HashMap::new(),
            turns: Arc::new(Semaphore::new(TRANSFERS_SENDING_MAX)),
        }
    }
}

/// The shard's scope as the state layer sees it: the type's shard function names its ids.
pub(crate) fn scope(ty: &RegisteredType, key: &ShardKey) -> ShardScope {
    let extractor = ty.extractor.clone();
    let shard = key.shard;
    ShardScope {
        type_key: key.type_key.clone(),
        shard,
        contains: Arc::new(move |id: &str| extractor.shard_of(id) == shard),
    }
}

impl Transfers {
    /// Starts sending `key`'s state to `to` (after the remembered ids queued for it are
    /// durable), replacing an earlier transfer of the shard; [`Internal::Transferred`] says
    /// when the new owner holds all of it.
    pub(crate) fn start(
        &mut self,
        shared: &Arc<Shared>,
        ty: &RegisteredType,
        key: ShardKey,
        to: Allocation,
        internal: mpsc::Sender<Internal>,
    ) {
        let Some(states) = shared.shard_states.clone() else {
            return;
        };
        let (answers, receiver) = mpsc::channel(ANSWERS_QUEUED_MAX);
        let sending = Sending {
            shared: shared.clone(),
            states,
            scope: scope(ty, &key),
            key: key.clone(),
            to: to.clone(),
            answers: receiver,
            failed: 0,
        };
        let done = (key.clone(), to.clone());
        let turns = self.turns.clone();
        let task = tokio::spawn(async move {
            // The semaphore is never closed; without a turn, sending anyway is still correct.
            let _turn = turns.acquire_owned().await;
            sending.run().await;
            let _ = internal.send(Internal::Transferred(done.0, done.1)).await;
        });
        let outgoing = Outgoing { to, answers, task };
        self.outgoing.insert(key, outgoing);
    }

    /// Stops the transfer of `key` (its target changed).
    pub(crate) fn cancel(&mut self, key: &ShardKey) {
        self.outgoing.remove(key);
    }

    /// Whether `key`'s state is being sent.
    /// The shards whose state is being sent.
    pub(crate) fn sending(&self) -> Vec<ShardKey> {
        self.outgoing.keys().cloned().collect()
    }

    pub(crate) fn is_sending(&self, key: &ShardKey) -> bool {
        self.outgoing.contains_key(key)
    }

    /// The new owner answered part `index`: handed to the transfer's task.
    pub(crate) fn on_installed(
        &self,
        key: &ShardKey,
        generation: u64,
        index: u32,
        error: Option<String>,
    ) {
        if let Some(outgoing) = self.outgoing.get(key) {
            let answer = Answer {
                generation,
                index,
                error,
            };
            let _ = outgoing.answers.try_send(answer);
        }
    }

    /// The transfer of `key` to `to` ended with every part installed: whether it is still the
    /// shard's transfer (then it is forgotten and the handoff may finish).
    pub(crate) fn finished(&mut self, key: &ShardKey, to: &Allocation) -> bool {
        if self
            .outgoing
            .get(key)
            .is_none_or(|outgoing| &outgoing.to != to)
        {
            return false;
        }
        self.outgoing.remove(key);
        true
    }
}

/// Takes a part of a shard's state from the node handing it off: installs it durably and
/// answers, or refuses it (counted) when it cannot be this node's to take.
pub(crate) fn receive(
    shared: &Arc<Shared>,
    ty: Option<Arc<RegisteredType>>,
    key: ShardKey,
    generation: u64,
    from: NodeId,
    part: ShardPart,
) {
    let index = part.index;
    let refuse = |why: String| {
        shared
            .stats
            .shard_parts_refused
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%key, %from, index, %why, "shard state part refused");
        answer(shared, &from, key.clone(), generation, index, Some(why));
    };
    let (Some(ty), Some(states)) = (ty, shared.shard_states.clone()) else {
        refuse(format!(
            "entity type {} is not bound on node {} yet",
            key.type_key, shared.node
        ));
        return;
    };
    match ty.slot(key.shard).as_deref() {
        None => {
            refuse(format!("shard {} is outside its type", key.shard));
            return;
        }
        Some(Home::Local { .. } | Home::HandingOff { .. }) => {
            refuse(format!("node {} serves shard {key} itself", shared.node));
            return;
        }
        Some(_) => {}
    }
    let scope = scope(&ty, &key);
    if let Err(error) = part.check(&scope) {
        refuse(error.to_string());
        return;
    }
    let shared = shared.clone();
    let installing = states.install(scope, generation, part);
    tokio::spawn(async move {
        let error = match installing.await {
            Ok(()) => {
                shared
                    .stats
                    .shard_parts_installed
                    .fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(error) => Some(error.to_string()),
        };
        answer(&shared, &from, key, generation, index, error);
    });
}

fn answer(
    shared: &Shared,
    to: &str,
    key: ShardKey,
    generation: u64,
    index: u32,
    error: Option<String>,
) {
    let message = LinkMessage::ShardStateInstalled {
        key,
        generation,
        index,
        error,
    };
    if let Err(error) = shared.switchboard.send_to_region(to, message) {
        // The sender sends the part again after its timeout.
        tracing::debug!(%to, %error, "shard state acknowledgement not sent");
    }
}
