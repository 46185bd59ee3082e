//! Forwarding to other regions: an envelope for a remote shard goes to its owner as a
//! [`WireEnvelope`], hop-bounded; a local ask's reply port is kept, under a request id, until
//! the owner's reply message comes back or the ask's deadline passes.

use std::collections::HashMap;
use tokio::time::Instant;

use super::Shared;
use super::route::{Waiting, refuse};
use crate::contract::{Allocation, MessageError, Reply, ReplyPort};
use crate::sharding::handoff::{Buffered, BufferedBody, ReplyRoute};
use crate::sharding::link::{
    FORWARD_HOPS_MAX, LinkError, LinkMessage, ReplyTo, WireBody, WireEnvelope, WireReply,
};

/// An ask forwarded to another region, waiting for its reply message.
struct PendingAsk {
    port: ReplyPort,
    deadline: Instant,
}

/// The asks a region forwarded and still waits on.
pub(crate) struct Forwarder {
    pending_asks: HashMap<u64, PendingAsk>,
    next_request_id: u64,
}

impl Forwarder {
    pub(crate) fn new() -> Self {
        Forwarder {
            pending_asks: HashMap::new(),
            next_request_id: 1,
        }
    }

    /// Hands a remote reply to the ask that waits for it (if it still does).
    pub(crate) fn answer(&mut self, request_id: u64, reply: Reply) {
        if let Some(pending) = self.pending_asks.remove(&request_id) {
            let _ = pending.port.send(reply);
        }
    }

    /// Drops the ports of asks whose deadline passed (their askers gave up).
    pub(crate) fn forget_expired(&mut self, now: Instant) {
        self.pending_asks
            .retain(|_, pending| pending.deadline > now);
    }

    /// Sends `item` to the region of `allocation.node`, keeping a local ask's port until its
    /// reply comes back. On failure the envelope is answered and counted.
    pub(crate) fn forward(
        &mut self,
        shared: &Shared,
        item: Buffered,
        allocation: Allocation,
        waiting: Waiting,
    ) -> Result<(), MessageError> {
        if item.hops >= FORWARD_HOPS_MAX {
            let error = MessageError::unavailable(format!(
                "shard {} was forwarded {} times without reaching its owner",
                item.key(),
                item.hops
            ));
            refuse(shared, item, error.clone(), waiting);
            return Err(error);
        }
        let local_ask = matches!(
            &item.body,
            BufferedBody::Message {
                reply: ReplyRoute::Local { .. },
                ..
            }
        );
        if local_ask && self.pending_asks.len() >= shared.config.command_buffer {
            let error = MessageError::unavailable(format!(
                "{} asks already wait for remote replies (command_buffer)",
                self.pending_asks.len()
            ));
            refuse(shared, item, error.clone(), waiting);
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
                let (reply_to, local_port) = match reply {
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
                };
                let body = WireBody::Message {
                    payload,
                    meta,
                    reply_to,
                };
                (body, local_port)
            }
        };
        let one_way = matches!(
            &wire_body,
            WireBody::Passivate | WireBody::Message { reply_to: None, .. }
        );
        let node = allocation.node.clone();
        let envelope = WireEnvelope {
            address,
            key,
            allocation,
            hops: hops + 1,
            body: wire_body,
        };
        match shared
            .switchboard
            .try_send_to_region(&node, LinkMessage::Deliver(envelope))
        {
            Ok(()) => {
                shared.stats.count_forwarded();
                if let Some((port, deadline)) = local_port {
                    self.next_request_id += 1;
                    self.pending_asks
                        .insert(request_id, PendingAsk { port, deadline });
                }
                Ok(())
            }
            Err(refused) => {
                let (link_error, message) = *refused;
                let why = format!("cannot forward to {node}: {link_error}");
                // When owners hold their shards' state, an owner out of reach means nobody
                // else can serve the shard: say so.
                let error = match (&link_error, &shared.shard_states) {
                    (LinkError::Unreachable(_), Some(_)) => MessageError::shard_unavailable(why),
                    _ => MessageError::unavailable(why),
                };
                shared
                    .stats
                    .count_refused(error.kind, one_way && waiting == Waiting::Nobody);
                match (local_port, message) {
                    (Some((port, _)), _) => {
                        let _ = port.send(Err(error.clone()));
                    }
                    (
                        None,
                        LinkMessage::Deliver(WireEnvelope {
                            body:
                                WireBody::Message {
                                    reply_to: Some(reply_to),
                                    ..
                                },
                            ..
                        }),
                    ) => {
                        let reply = LinkMessage::AskReply {
                            request_id: reply_to.request_id,
                            reply: WireReply::Err(error.clone()),
                        };
                        let _ = shared.switchboard.send_to_region(&reply_to.node, reply);
                    }
                    _ => tracing::warn!(%node, %error, "forwarded tell dropped"),
                }
                Err(error)
            }
        }
    }
}
