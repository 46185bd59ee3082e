//! Forwarding to other regions: an envelope for a remote shard goes to its owner as a
//! [`WireEnvelope`], hop-bounded, queued per owner and sent in batches (`batch`: at most
//! [`FORWARD_BATCH_MAX`](crate::link::FORWARD_BATCH_MAX) envelopes and
//! [`FORWARD_BATCH_BYTES_MAX`] bytes, so a batch always fits in one frame) when the region task
//! has handled what was ready or a batch is full (the seed's forward / batch-result shape: the
//! owner answers each batch with the envelopes it refused). An envelope that could never fit
//! in a batch is refused on its own, `payload_too_large`, and never joins one.
//! A local ask's (or state read's) reply port is kept, under a request id, until the owner's
//! reply message comes back, the ask's deadline passes, or the connection to the owner has
//! been lost for [`LOST_OWNER_GRACE`](crate::link::LOST_OWNER_GRACE) (a killed owner never answers: its asks end then, as
//! timeouts, instead of at their deadline).

use std::collections::HashMap;
use tokio::time::Instant;

use super::Shared;
use super::batch::{PeerBatch, Queued, encoded_bytes, envelope_too_large};
use super::route::{Caller, refuse};
use super::warnings::RegionWarning;
use crate::handoff::{Buffered, BufferedBody, ReplyRoute};
use crate::link::{
    FORWARD_BATCH_BYTES_MAX, FORWARD_HOPS_MAX, LinkError, LinkMessage, ReplyTo, WireBody,
    WireEnvelope, WireReply,
};
use tessera_contract::NodeId;
use tessera_contract::{Allocation, ErrorKind, MessageError, Reply, ReplyPort};

/// An ask forwarded to another region, waiting for its reply message.
struct PendingAsk {
    port: ReplyPort,
    deadline: Instant,
    /// The node it was sent to.
    owner: NodeId,
}

/// The asks a region forwarded and still waits on, and the next batch per peer (at most one
/// batch, [`FORWARD_BATCH_BYTES_MAX`] bytes, is held for a peer: a full one is sent at once).
pub(crate) struct Forwarder {
    pending_asks: HashMap<u64, PendingAsk>,
    next_request_id: u64,
    queued: HashMap<NodeId, PeerBatch>,
    next_batch: u64,
}

impl Forwarder {
    pub(crate) fn new() -> Self {
        Forwarder {
            pending_asks: HashMap::new(),
            next_request_id: 1,
            queued: HashMap::new(),
            next_batch: 1,
        }
    }

    /// A peer's per-envelope result for one batch: refusals are counted (the asks among them
    /// were answered by the peer).
    pub(crate) fn on_delivered(&self, shared: &Shared, refused: &[(u32, MessageError)]) {
        shared.stats.count_forwards_refused(refused.len() as u64);
    }

    /// Sends every queued batch.
    pub(crate) fn flush(&mut self, shared: &Shared) {
        let nodes: Vec<NodeId> = self.queued.keys().cloned().collect();
        for node in nodes {
            self.flush_node(shared, &node);
        }
    }

    fn flush_node(&mut self, shared: &Shared, node: &str) {
        let Some(queued) = self.queued.remove(node).map(PeerBatch::into_queued) else {
            return;
        };
        if queued.is_empty() {
            return;
        }
        let batch = self.next_batch;
        self.next_batch += 1;
        let count = queued.len();
        let (envelopes, asks): (Vec<WireEnvelope>, Vec<Option<u64>>) = queued
            .into_iter()
            .map(|queued| (queued.envelope, queued.local_ask))
            .unzip();
        let message = LinkMessage::Deliver {
            from: shared.node.clone(),
            batch,
            envelopes,
        };
        match shared.switchboard.try_send_to_region(node, message) {
            Ok(()) => shared.stats.count_forwarded(count as u64),
            Err(refused) => {
                let (link_error, message) = *refused;
                let why = format!("cannot forward to {node}: {link_error}");
                // When owners hold their shards' state, an owner out of reach means nobody
                // else can serve the shard: say so.
                let error = match (&link_error, &shared.shard_states) {
                    (LinkError::Unreachable(_), Some(_)) => MessageError::shard_unavailable(why),
                    _ => MessageError::unavailable(why),
                };
                let LinkMessage::Deliver { envelopes, .. } = message else {
                    return;
                };
                for (envelope, local_ask) in envelopes.into_iter().zip(asks) {
                    self.fail(shared, node, envelope, local_ask, &error);
                }
            }
        }
    }

    /// Answers one envelope that could not be sent.
    fn fail(
        &mut self,
        shared: &Shared,
        node: &str,
        envelope: WireEnvelope,
        local_ask: Option<u64>,
        error: &MessageError,
    ) {
        let remote = match &envelope.body {
            WireBody::Message {
                reply_to: Some(reply_to),
                ..
            }
            | WireBody::ReadState { reply_to } => Some(reply_to.clone()),
            _ => None,
        };
        let one_way = local_ask.is_none() && remote.is_none();
        shared.stats.count_refused(error.kind, one_way);
        if let Some(pending) = local_ask.and_then(|id| self.pending_asks.remove(&id)) {
            let _ = pending.port.send(Err(error.clone()));
        } else if let Some(reply_to) = remote {
            let reply = LinkMessage::AskReply {
                request_id: reply_to.request_id,
                reply: WireReply::Err(error.clone()),
            };
            let _ = shared.switchboard.send_to_region(&reply_to.node, reply);
        } else {
            let kind = RegionWarning::ForwardedTellDropped {
                node: node.to_string(),
                error: RegionWarning::error_kind(error),
            };
            if shared.warnings.first_in_window(&kind) {
                tracing::warn!(%node, %error, "forwarded tell dropped");
            }
        }
    }

    /// Hands a remote reply to the ask that waits for it (if it still does).
    pub(crate) fn answer(&mut self, request_id: u64, reply: Reply) {
        if let Some(pending) = self.pending_asks.remove(&request_id) {
            let _ = pending.port.send(reply);
        }
    }

    /// Answers the asks whose deadline passed with a timeout and forgets them. They were sent,
    /// so their outcome is unknown: a dropped port would read as a refusal (`unavailable`,
    /// which a client may retry) whenever this tick beats the asker's own timer.
    pub(crate) fn forget_expired(&mut self, now: Instant) {
        let expired: Vec<u64> = self
            .pending_asks
            .iter()
            .filter(|(_, pending)| pending.deadline <= now)
            .map(|(request_id, _)| *request_id)
            .collect();
        for request_id in expired {
            if let Some(pending) = self.pending_asks.remove(&request_id) {
                let _ = pending.port.send(Err(outcome_unknown(
                    "no reply from the owner by the ask's deadline",
                )));
            }
        }
    }

    /// Ends the asks sent to an owner in `lost` (whose connection has been lost for
    /// `LOST_OWNER_GRACE`) with a timeout: they may have run there, and no reply is coming.
    /// Returns how many ended.
    pub(crate) fn end_asks_to_lost(&mut self, lost: &[NodeId]) -> u64 {
        if lost.is_empty() {
            return 0;
        }
        let orphaned: Vec<u64> = self
            .pending_asks
            .iter()
            .filter(|(_, pending)| lost.contains(&pending.owner))
            .map(|(request_id, _)| *request_id)
            .collect();
        let count = orphaned.len() as u64;
        for request_id in orphaned {
            if let Some(pending) = self.pending_asks.remove(&request_id) {
                let why = format!(
                    "the connection to the owner, node {}, was lost and has not come back",
                    pending.owner
                );
                let _ = pending.port.send(Err(outcome_unknown(&why)));
            }
        }
        count
    }

    /// Whether an ask waits for a reply from another region.
    pub(crate) fn has_pending_asks(&self) -> bool {
        !self.pending_asks.is_empty()
    }

    /// Sends `item` to the region of `allocation.node`, keeping a local ask's port until its
    /// reply comes back. On failure the envelope is answered and counted.
    pub(crate) fn forward(
        &mut self,
        shared: &Shared,
        item: Buffered,
        allocation: Allocation,
        caller: Caller,
    ) -> Result<(), MessageError> {
        if item.hops >= FORWARD_HOPS_MAX {
            let error = MessageError::unavailable(format!(
                "shard {} was forwarded {} times without reaching its owner",
                item.key(),
                item.hops
            ));
            refuse(shared, item, error.clone(), caller);
            return Err(error);
        }
        if item.body.is_answered_here() && self.pending_asks.len() >= shared.config.command_buffer {
            let error = MessageError::unavailable(format!(
                "{} asks already wait for remote replies (command_buffer)",
                self.pending_asks.len()
            ));
            refuse(shared, item, error.clone(), caller);
            return Err(error);
        }
        let key = item.key();
        let Buffered {
            address,
            hops,
            body,
            ..
        } = item;
        let request_id = self.next_request_id;
        let (wire_body, local_port) = match body {
            BufferedBody::Passivate => (WireBody::Passivate, None),
            BufferedBody::Message {
                payload,
                meta,
                reply,
            } => {
                let (reply_to, local_port) = wire_reply(shared, reply, request_id);
                let body = WireBody::Message {
                    payload,
                    meta,
                    reply_to,
                };
                (body, local_port)
            }
            BufferedBody::ReadState { reply } => match wire_reply(shared, reply, request_id) {
                (Some(reply_to), local_port) => (WireBody::ReadState { reply_to }, local_port),
                // Nobody waits for the state: nothing to read.
                (None, _) => return Ok(()),
            },
        };
        let node = allocation.node.clone();
        let envelope = WireEnvelope {
            address,
            key,
            allocation,
            hops: hops + 1,
            body: wire_body,
        };
        let local_ask = local_port.map(|(port, deadline)| {
            self.next_request_id += 1;
            self.pending_asks.insert(
                request_id,
                PendingAsk {
                    port,
                    deadline,
                    owner: node.clone(),
                },
            );
            request_id
        });
        let bytes = encoded_bytes(&envelope);
        if bytes > FORWARD_BATCH_BYTES_MAX {
            let error = envelope_too_large(&envelope.address, bytes);
            self.fail(shared, &node, envelope, local_ask, &error);
            return Err(error);
        }
        self.queue(
            shared,
            &node,
            Queued {
                envelope,
                local_ask,
            },
            bytes,
        );
        Ok(())
    }

    /// Adds an envelope of `bytes` to `node`'s batch, sending the batch first if the envelope
    /// would take it past its byte bound, and after if that filled it.
    fn queue(&mut self, shared: &Shared, node: &str, queued: Queued, bytes: usize) {
        if self
            .queued
            .get(node)
            .is_some_and(|batch| !batch.has_room_for(bytes))
        {
            self.flush_node(shared, node);
        }
        let batch = self.queued.entry(node.to_string()).or_default();
        batch.push(queued, bytes);
        if batch.is_full() {
            self.flush_node(shared, node);
        }
    }
}

impl Drop for Forwarder {
    /// The region stopped: asks still waiting were sent, so they end with an unknown outcome,
    /// never a refusal.
    fn drop(&mut self) {
        for (_, pending) in self.pending_asks.drain() {
            let _ = pending.port.send(Err(outcome_unknown(
                "the region stopped before the owner replied",
            )));
        }
    }
}

/// The error of a forwarded ask that got no reply: a timeout, as the message may have run.
fn outcome_unknown(why: &str) -> MessageError {
    MessageError::new(
        ErrorKind::Timeout,
        format!("{why}; the message may have run"),
    )
}

/// Where the owner's answer to an envelope goes: the asker named by a forwarded ask, or this
/// node under `request_id` for an ask made here (whose port and deadline are kept until the
/// answer comes); nowhere for a tell.
fn wire_reply(
    shared: &Shared,
    reply: ReplyRoute,
    request_id: u64,
) -> (Option<ReplyTo>, Option<(ReplyPort, Instant)>) {
    match reply {
        ReplyRoute::None => (None, None),
        ReplyRoute::Remote(reply_to) => (Some(reply_to), None),
        ReplyRoute::Local { port, deadline } => {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let reply_to = ReplyTo {
                node: shared.node.clone(),
                request_id,
                timeout_ms: u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
            };
            (Some(reply_to), Some((port, deadline)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::sync::oneshot;

    fn pending(
        forwarder: &mut Forwarder,
        request_id: u64,
        deadline: Instant,
    ) -> oneshot::Receiver<Reply> {
        pending_at(forwarder, request_id, deadline, "n2")
    }

    fn pending_at(
        forwarder: &mut Forwarder,
        request_id: u64,
        deadline: Instant,
        owner: &str,
    ) -> oneshot::Receiver<Reply> {
        let (port, receiver) = oneshot::channel();
        let owner = owner.to_string();
        forwarder.pending_asks.insert(
            request_id,
            PendingAsk {
                port,
                deadline,
                owner,
            },
        );
        receiver
    }

    /// A killed owner never answers: the asks sent to it end as soon as its connection has
    /// been lost for the grace, as timeouts (they may have run), long before their deadline;
    /// asks to other owners still wait.
    #[tokio::test]
    async fn asks_to_an_owner_whose_connection_was_lost_end_with_an_unknown_outcome() {
        let mut forwarder = Forwarder::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut to_lost = pending_at(&mut forwarder, 1, deadline, "n2");
        let mut also_to_lost = pending_at(&mut forwarder, 2, deadline, "n2");
        let mut to_other = pending_at(&mut forwarder, 3, deadline, "n3");

        assert_eq!(forwarder.end_asks_to_lost(&[]), 0, "no owner lost");
        assert!(to_lost.try_recv().is_err(), "nothing lost, nothing ends");

        assert_eq!(forwarder.end_asks_to_lost(&["n2".to_string()]), 2);
        for receiver in [&mut to_lost, &mut also_to_lost] {
            let answer = receiver
                .try_recv()
                .expect("the ask to the lost owner ended");
            let error = answer.expect_err("an error");
            assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
            assert!(error.message.contains("n2"), "{error}");
        }
        assert!(to_other.try_recv().is_err(), "an ask to n3 still waits");
        assert!(forwarder.has_pending_asks());
    }

    /// A sent ask past its deadline may have run: its asker must hear a timeout (an unknown
    /// outcome), never `unavailable`, which a client takes as "not run" and sends again.
    #[tokio::test]
    async fn an_expired_forwarded_ask_ends_with_an_unknown_outcome_not_a_refusal() {
        let mut forwarder = Forwarder::new();
        let now = Instant::now();
        let mut expired = pending(&mut forwarder, 1, now);
        let mut waiting = pending(&mut forwarder, 2, now + Duration::from_secs(60));
        forwarder.forget_expired(now);
        let answer = expired.try_recv().expect("the expired ask was answered");
        let error = answer.expect_err("an error");
        assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
        assert!(
            waiting.try_recv().is_err(),
            "an ask within its deadline still waits"
        );

        drop(forwarder);
        let answer = waiting
            .try_recv()
            .expect("a stopped region answers what waits");
        assert_eq!(answer.expect_err("an error").kind, ErrorKind::Timeout);
    }
}
