//! Routing one envelope under its shard's slot lock — the one decision both a sender (the local
//! fast path) and the region task make: deliver to the local entity, hold in the slot's buffer,
//! start an allocation, or hand it to the region task for forwarding. Also how a failed
//! envelope is answered (or, for a tell, counted and logged once per kind: `warnings`).

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::homes::{Home, RegisteredType};
use super::warnings::RegionWarning;
use super::{Shared, state_read};
use crate::handoff::{Buffered, BufferedBody, ReplyRoute, ShardBuffer};
use crate::link::{LinkMessage, ReplyTo, WireReply};
use tessera_contract::{
    Allocation, Envelope, ErrorKind, MessageError, Reply, ReplyPort, ShardId, ShardKey, TypeKey,
};
use tessera_entity::ClaimedRun;
use tessera_state::remember::RememberWriter;

/// What routing one envelope decided.
pub(crate) enum Routed {
    /// Delivered to a local mailbox, or held in the slot's buffer.
    Done,
    /// For a [`Caller::WaitingHere`]: the local entity was idle and the message is claimed
    /// for the sender to run, once the slot lock is released ([`ClaimedRun::run`]).
    RunHere(ClaimedRun<'static>),
    /// The slot was unknown; it now waits for an allocation with the envelope held, and the
    /// region task must ask the coordinator.
    Allocate(ShardKey),
    /// The shard lives on another node: the region task forwards the envelope.
    Remote(Buffered, Allocation),
}

/// Who is waiting on a routing call, and so hears of a refusal from it: the sender, or no one
/// (an envelope drained from a buffer or forwarded by a peer), when only the counters and the
/// envelope's reply port learn of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Caller {
    /// The sender, waiting on this call.
    Waiting,
    /// The sender, waiting on this call on its own task, which may also run a local entity's
    /// message there (the message comes back claimed: [`Routed::RunHere`]).
    WaitingHere,
    /// No one waits on this call.
    Absent,
}

/// Routes `item` by the slot `home` of its shard (locked by the caller). On `Err` the envelope
/// has been answered with the error already (asks) and counted.
pub(crate) fn route_in_slot(
    shared: &Shared,
    ty: &RegisteredType,
    home: &mut Home,
    item: Buffered,
    caller: Caller,
) -> Result<Routed, MessageError> {
    match home {
        Home::Local { .. } => deliver_local(shared, ty, item, caller)
            .map(|run| run.map_or(Routed::Done, Routed::RunHere)),
        Home::Remote(allocation) => Ok(Routed::Remote(item, allocation.clone())),
        Home::Allocating { buffer, .. } => hold(shared, buffer, item, "allocation", caller),
        Home::HandingOff { buffer, .. } => hold(shared, buffer, item, "handoff", caller),
        Home::Unknown => {
            let key = item.key();
            let mut buffer = ShardBuffer::new(shared.config.allocation_buffer);
            // A fresh buffer has room for one: `allocation_buffer` is validated non-zero.
            let pushed = buffer.push(item);
            debug_assert!(
                pushed.is_ok(),
                "a fresh shard buffer takes its first envelope"
            );
            *home = Home::Allocating {
                since: Instant::now(),
                buffer,
            };
            Ok(Routed::Allocate(key))
        }
    }
}

fn hold(
    shared: &Shared,
    buffer: &mut ShardBuffer,
    item: Buffered,
    phase: &str,
    caller: Caller,
) -> Result<Routed, MessageError> {
    match buffer.push(item) {
        Ok(()) => Ok(Routed::Done),
        Err(item) => {
            let error = overflow(&item.key(), phase);
            refuse(shared, *item, error.clone(), caller);
            Err(error)
        }
    }
}

/// Hands `item` to the entity layer of this node; for a [`Caller::WaitingHere`], possibly as
/// a run for the sender to drive.
fn deliver_local(
    shared: &Shared,
    ty: &RegisteredType,
    item: Buffered,
    caller: Caller,
) -> Result<Option<ClaimedRun<'static>>, MessageError> {
    if let Some(error) = local_refusal(shared, ty, item.shard) {
        refuse(shared, item, error.clone(), caller);
        return Err(error);
    }
    let Buffered {
        address,
        shard,
        body,
        ..
    } = item;
    let (payload, mut meta, reply) = match body {
        BufferedBody::Passivate => {
            shared.local.passivate(&address);
            return Ok(None);
        }
        BufferedBody::ReadState { reply } => {
            if let (Some(port), _) = reply_port(shared, reply) {
                state_read::answer_here(shared, address, port);
            }
            return Ok(None);
        }
        BufferedBody::Message {
            payload,
            meta,
            reply,
        } => (payload, meta, reply),
    };
    let (port, deadline) = reply_port(shared, reply);
    if deadline.is_some() {
        meta.deadline = deadline;
    }
    let tell = port.is_none();
    let envelope = Envelope {
        payload,
        meta,
        reply: port,
    };
    let delivered = if caller == Caller::WaitingHere {
        shared.local.deliver_here(address, shard, envelope)
    } else {
        shared
            .local
            .deliver(address, shard, envelope)
            .map(|()| None)
    };
    delivered.map_err(|refused| {
        let (error, envelope) = *refused;
        shared
            .stats
            .count_refused(error.kind, tell && caller == Caller::Absent);
        envelope.answer(Err(error.clone()));
        error
    })
}

/// Why this node may not deliver to its own entities of `ty` in `shard` now — it holds no
/// lease, or the shard failed closed after a remember-store error —; `None` when it may.
pub(crate) fn local_refusal(
    shared: &Shared,
    ty: &RegisteredType,
    shard: ShardId,
) -> Option<MessageError> {
    if !shared.lease.is_valid_now() {
        return Some(no_lease(shared));
    }
    if ty.remembers()
        && let Some(writer) = &shared.remember
        && writer.has_failed_shards()
    {
        return failed_shard(writer, ty, shard);
    }
    None
}

/// The refusal of a node that holds no lease.
#[cold]
fn no_lease(shared: &Shared) -> MessageError {
    MessageError::shard_unavailable(format!(
        "node {} holds no lease on its shards: it is cut off from the cluster's majority (or \
         was declared down), so it may no longer be their only server",
        shared.node
    ))
}

/// The refusal of a shard failed closed by remember-entities, if `shard` is one.
#[cold]
fn failed_shard(
    writer: &RememberWriter,
    ty: &RegisteredType,
    shard: ShardId,
) -> Option<MessageError> {
    let key = ShardKey::new(ty.key.clone(), shard);
    let reason = writer.failure_of(&key)?;
    Some(MessageError::unavailable(format!(
        "shard {key} is failed (remember-entities fail-closed) after a store error: {reason}"
    )))
}

/// The port an answer goes into, and when its asker stops waiting: the asker's own port for
/// an ask made here; for one forwarded from another node, a port whose answer travels back
/// as a message; none for a tell.
fn reply_port(
    shared: &Shared,
    reply: ReplyRoute,
) -> (Option<ReplyPort>, Option<std::time::Instant>) {
    match reply {
        ReplyRoute::None => (None, None),
        ReplyRoute::Local { port, deadline } => (Some(port), Some(deadline.into_std())),
        ReplyRoute::Remote(reply_to) => {
            let remaining = std::time::Duration::from_millis(reply_to.timeout_ms);
            let deadline = std::time::Instant::now().checked_add(remaining);
            (Some(remote_reply_port(shared, reply_to)), deadline)
        }
    }
}

/// A reply port whose answer travels back to the asking region as a message.
fn remote_reply_port(shared: &Shared, reply_to: ReplyTo) -> ReplyPort {
    let (port, receiver) = oneshot::channel::<Reply>();
    let switchboard = Arc::clone(&shared.switchboard);
    let warnings = Arc::clone(&shared.warnings);
    tokio::spawn(async move {
        let timeout = Duration::from_millis(reply_to.timeout_ms);
        let reply = match tokio::time::timeout(timeout, receiver).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(MessageError::unavailable(
                "the entity dropped the message without replying",
            )),
            // The asker has given up by now; it will not read this reply.
            Err(_) => return,
        };
        let message = LinkMessage::AskReply {
            request_id: reply_to.request_id,
            reply: WireReply::from(reply),
        };
        if let Err(error) = switchboard.send_to_region(&reply_to.node, message) {
            let kind = RegionWarning::AskReplyLost {
                node: reply_to.node.clone(),
                error: RegionWarning::error_kind(&error),
            };
            if warnings.first_in_window(&kind) {
                tracing::warn!(node = %reply_to.node, %error, "ask reply could not be sent");
            }
        }
    });
    port
}

/// Refuses `item`: a sender waiting on the call hears the error from it; otherwise it is
/// [`fail`]ed.
pub(crate) fn refuse(shared: &Shared, item: Buffered, error: MessageError, caller: Caller) {
    match caller {
        Caller::Waiting | Caller::WaitingHere => {
            shared.stats.count_refused(error.kind, false);
            if let Some(ReplyRoute::Local { port, .. }) = item.body.into_reply() {
                let _ = port.send(Err(error));
            }
        }
        Caller::Absent => fail(shared, item, error),
    }
}

/// Answers a failed envelope where its reply goes and counts it; a failed tell can only be
/// counted and logged.
pub(crate) fn fail(shared: &Shared, item: Buffered, error: MessageError) {
    shared
        .stats
        .count_refused(error.kind, item.body.is_one_way());
    match item.body.into_reply() {
        Some(ReplyRoute::Local { port, .. }) => {
            let _ = port.send(Err(error));
        }
        Some(ReplyRoute::Remote(reply_to)) => {
            let message = LinkMessage::AskReply {
                request_id: reply_to.request_id,
                reply: WireReply::Err(error),
            };
            if let Err(link_error) = shared.switchboard.send_to_region(&reply_to.node, message) {
                let kind = RegionWarning::FailureReplyLost {
                    node: reply_to.node.clone(),
                    error: RegionWarning::error_kind(&link_error),
                };
                if shared.warnings.first_in_window(&kind) {
                    tracing::warn!(node = %reply_to.node, %link_error, "failure reply lost");
                }
            }
        }
        _ => {
            let kind = RegionWarning::TellDropped {
                error: RegionWarning::error_kind(&error),
            };
            if shared.warnings.first_in_window(&kind) {
                tracing::warn!(node = %shared.node, address = %item.address, %error, "tell dropped");
            }
        }
    }
}

/// Fails every envelope of `buffer` with `error`.
pub(crate) fn fail_all(shared: &Shared, buffer: &mut ShardBuffer, error: &MessageError) {
    for item in buffer.drain() {
        fail(shared, item, error.clone());
    }
}

pub(crate) fn overflow(key: &ShardKey, phase: &str) -> MessageError {
    MessageError::new(
        ErrorKind::BufferOverflow,
        format!("shard {key}: {phase} buffer full (allocation_buffer)"),
    )
}

pub(crate) fn not_registered(type_key: &TypeKey) -> MessageError {
    MessageError::new(
        ErrorKind::EntityTypeNotRegistered,
        format!("entity type {type_key} is not registered on this region"),
    )
}

pub(crate) fn stopped() -> MessageError {
    MessageError::unavailable("the sharding region has stopped")
}
