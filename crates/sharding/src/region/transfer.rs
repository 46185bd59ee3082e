//! Moving a shard's durable state during a handoff between nodes. The losing region, once the
//! shard's entities stopped, reads the shard's rows ([`ShardStates::export`]) and sends them to
//! the new owner one part at a time, each acknowledged after the receiver made it durable; a
//! part not acknowledged within the request timeout is sent again (installing is idempotent,
//! and part 0 clears what the receiver held). Only after the last acknowledgement does the
//! losing region drain its buffered envelopes to the new owner and report the handoff
//! complete, so the new owner never serves before it has the state; then it discards its copy.
//!
//! The receiving side refuses — and counts — a part for a type it does not know, for a shard it
//! serves or is handing off itself, or naming entities outside the shard.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::homes::{Home, RegisteredType};
use super::{Internal, Shared};
use crate::link::LinkMessage;
use tessera_contract::{Allocation, NodeId, ShardKey};
use tessera_state::{ShardPart, ShardScope};

/// A shard's state on its way out.
struct Outgoing {
    to: Allocation,
    parts: Vec<ShardPart>,
    /// The part waiting for its acknowledgement.
    next: usize,
    sent_at: Instant,
}

/// What a shard's state transfer reports to the region task.
pub(crate) enum Progress {
    /// More parts to go, or an answer that changes nothing.
    Pending,
    /// The new owner holds every part: drain the buffer and complete the handoff.
    Installed,
}

/// The transfers this region is sending.
#[derive(Default)]
pub(crate) struct Transfers {
    outgoing: HashMap<ShardKey, Outgoing>,
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
    /// Reads `key`'s state for `to` off the region task (after the remembered ids queued for
    /// it are durable); the parts come back as [`Internal::Exported`].
    pub(crate) fn export(
        shared: &Arc<Shared>,
        ty: &RegisteredType,
        key: ShardKey,
        to: Allocation,
        internal: mpsc::Sender<Internal>,
    ) {
        let Some(states) = shared.shard_states.clone() else {
            return;
        };
        let scope = scope(ty, &key);
        let remember = shared.remember.clone();
        tokio::spawn(async move {
            if let Some(writer) = remember
                && let Err(error) = writer.flush().await
            {
                tracing::warn!(%key, %error, "remembered ids not flushed before a handoff");
            }
            let exported = tokio::task::spawn_blocking(move || states.export(&scope))
                .await
                .unwrap_or_else(|error| {
                    Err(tessera_state::StoreError::Io(format!(
                        "the export task failed: {error}"
                    )))
                });
            let _ = internal.send(Internal::Exported(key, to, exported)).await;
        });
    }

    /// Starts sending `parts` of `key` to `to`, replacing an earlier transfer of the shard.
    pub(crate) fn start(
        &mut self,
        shared: &Shared,
        key: ShardKey,
        to: Allocation,
        parts: Vec<ShardPart>,
    ) {
        let outgoing = Outgoing {
            to,
            parts,
            next: 0,
            sent_at: Instant::now(),
        };
        send_part(shared, &key, &outgoing);
        self.outgoing.insert(key, outgoing);
    }

    /// Forgets the transfer of `key` (its target changed, or it finished).
    pub(crate) fn cancel(&mut self, key: &ShardKey) {
        self.outgoing.remove(key);
    }

    /// Whether `key`'s state is being sent.
    pub(crate) fn is_sending(&self, key: &ShardKey) -> bool {
        self.outgoing.contains_key(key)
    }

    /// The new owner answered part `index`.
    pub(crate) fn on_installed(
        &mut self,
        shared: &Shared,
        key: &ShardKey,
        generation: u64,
        index: u32,
        error: Option<String>,
    ) -> Progress {
        let Some(outgoing) = self.outgoing.get_mut(key) else {
            return Progress::Pending;
        };
        if outgoing.to.generation != generation || outgoing.next != index as usize {
            return Progress::Pending;
        }
        if let Some(error) = error {
            // Sent again on a later tick: the receiver may be catching up (a type it has not
            // applied yet) or short of disk for a moment.
            tracing::warn!(%key, to = %outgoing.to.node, index, %error, "shard state part refused");
            return Progress::Pending;
        }
        outgoing.next += 1;
        if outgoing.next == outgoing.parts.len() {
            self.outgoing.remove(key);
            return Progress::Installed;
        }
        outgoing.sent_at = Instant::now();
        send_part(shared, key, outgoing);
        Progress::Pending
    }

    /// Sends again every part that waited longer than the request timeout.
    pub(crate) fn retry(&mut self, shared: &Shared, now: Instant) {
        let timeout = shared.config.request_timeout;
        for (key, outgoing) in &mut self.outgoing {
            if now.duration_since(outgoing.sent_at) >= timeout {
                outgoing.sent_at = now;
                send_part(shared, key, outgoing);
            }
        }
    }
}

fn send_part(shared: &Shared, key: &ShardKey, outgoing: &Outgoing) {
    let Some(part) = outgoing.parts.get(outgoing.next) else {
        return;
    };
    let message = LinkMessage::ShardState {
        key: key.clone(),
        generation: outgoing.to.generation,
        from: shared.node.clone(),
        part: part.clone(),
    };
    match shared
        .switchboard
        .send_to_region(&outgoing.to.node, message)
    {
        Ok(()) => {
            shared
                .stats
                .shard_parts_sent
                .fetch_add(1, Ordering::Relaxed);
        }
        Err(error) => {
            tracing::debug!(%key, to = %outgoing.to.node, %error, "shard state part not sent; retrying");
        }
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
