//! What the application receives and how requests meet their replies. [`Inbound`] is the
//! bounded queue of [`Incoming`] messages; a request arrives with a [`Responder`] that sends
//! the reply back over the connection it came on. `PendingRequests` holds the requests this
//! node sent, each by correlation id, until its reply comes, it times out, or the caller
//! gives up.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use super::error::SendError;
use super::frame::{self, Envelope};
use super::send_queue::{FrameSender, QueueRefused};
use super::stats::{TransportStats, bump};
use tessera_contract::NodeId;

/// One message from a peer.
#[derive(Debug)]
#[non_exhaustive]
pub struct Incoming<M> {
    /// The peer it came from, as its certificate names it.
    pub from: NodeId,
    /// The message.
    pub message: M,
    /// Present when the peer sent a request and waits for a reply.
    pub reply: Option<Responder<M>>,
}

/// The application's end of the transport: every message peers send, in arrival order per
/// peer. Bounded by `inbound_queue_max`; when full, further messages are dropped and
/// counted. Ends (`recv` returns `None`) when the transport closes.
///
/// ```no_run
/// # async fn serve(mut inbound: tessera_cluster::Inbound<String>) {
/// while let Some(incoming) = inbound.recv().await {
///     if let Some(responder) = incoming.reply {
///         let _ = responder.reply(&format!("echo {}", incoming.message));
///     }
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct Inbound<M> {
    pub(crate) receiver: mpsc::Receiver<Incoming<M>>,
}

impl<M> Inbound<M> {
    /// The next message, or `None` once the transport is closed.
    pub async fn recv(&mut self) -> Option<Incoming<M>> {
        self.receiver.recv().await
    }

    /// The next message if one is waiting.
    pub fn try_recv(&mut self) -> Option<Incoming<M>> {
        self.receiver.try_recv().ok()
    }
}

/// Sends the reply to one request. Dropping it without replying leaves the requester to
/// time out.
///
/// ```no_run
/// # fn answer(responder: tessera_cluster::Responder<u64>) {
/// responder.reply(&42).unwrap();
/// # }
/// ```
#[derive(Debug)]
pub struct Responder<M> {
    pub(crate) id: u64,
    pub(crate) peer: NodeId,
    pub(crate) queue: FrameSender,
    pub(crate) max_frame_bytes: usize,
    pub(crate) stats: Arc<TransportStats>,
    pub(crate) _message: std::marker::PhantomData<fn(M)>,
}

impl<M: Serialize> Responder<M> {
    /// Queues the reply on the connection the request came from. Fails like
    /// [`Transport::send`](super::Transport::send) when the queue is full or the peer gone.
    pub fn reply(self, message: &M) -> Result<(), SendError> {
        let body = frame::encode(
            &Envelope::Reply {
                id: self.id,
                message,
            },
            self.max_frame_bytes,
        )?;
        enqueue(&self.queue, &self.peer, body, &self.stats)
    }
}

/// Queues one frame for a peer, counting a full queue (in frames or in bytes).
pub(crate) fn enqueue(
    queue: &FrameSender,
    peer: &str,
    body: Bytes,
    stats: &TransportStats,
) -> Result<(), SendError> {
    queue.try_send(body).map_err(|refused| match refused {
        QueueRefused::Full => {
            bump(&stats.send_dropped_queue_full);
            SendError::QueueFull(peer.to_owned())
        }
        QueueRefused::Closed => SendError::Closed,
    })
}

/// Requests awaiting replies, each remembered with the peer it went to so only that peer
/// can answer it.
pub(crate) struct PendingRequests<M> {
    next_id: AtomicU64,
    waiting: Mutex<HashMap<u64, Waiting<M>>>,
    limit: usize,
}

struct Waiting<M> {
    peer: NodeId,
    reply: oneshot::Sender<M>,
}

/// The request is forgotten when this drops: on reply, timeout, or a cancelled caller.
pub(crate) struct PendingGuard<'a, M> {
    pending: &'a PendingRequests<M>,
    pub id: u64,
}

impl<M> Drop for PendingGuard<'_, M> {
    fn drop(&mut self) {
        self.pending.waiting().remove(&self.id);
    }
}

impl<M> PendingRequests<M> {
    pub fn new(limit: usize) -> PendingRequests<M> {
        PendingRequests {
            next_id: AtomicU64::new(1),
            waiting: Mutex::new(HashMap::new()),
            limit,
        }
    }

    fn waiting(&self) -> MutexGuard<'_, HashMap<u64, Waiting<M>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh correlation id for a request to `peer`, or `None` when too many are pending.
    pub fn register(&self, peer: &str) -> Option<(PendingGuard<'_, M>, oneshot::Receiver<M>)> {
        let mut waiting = self.waiting();
        if waiting.len() >= self.limit {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, receiver) = oneshot::channel();
        waiting.insert(
            id,
            Waiting {
                peer: peer.to_owned(),
                reply,
            },
        );
        Some((PendingGuard { pending: self, id }, receiver))
    }

    /// Hands a reply from `from` to its request. False when no request to `from` has this
    /// id (it timed out, or another peer claims it).
    pub fn complete(&self, id: u64, from: &str, message: M) -> bool {
        let mut waiting = self.waiting();
        if waiting.get(&id).is_none_or(|entry| entry.peer != from) {
            return false;
        }
        let Some(entry) = waiting.remove(&id) else {
            return false;
        };
        // The requester may have just given up; then the reply is simply not wanted.
        let _ = entry.reply.send(message);
        true
    }

    /// Forgets every request (the transport is closing); their callers see `Closed`.
    pub fn clear(&self) {
        self.waiting().clear();
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.waiting().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_reaches_its_request_only_from_its_peer() {
        let pending = PendingRequests::<u32>::new(4);
        let (guard, mut receiver) = pending.register("node-2").unwrap();
        assert!(!pending.complete(guard.id, "node-3", 1));
        assert!(!pending.complete(guard.id + 1, "node-2", 1));
        assert!(pending.complete(guard.id, "node-2", 7));
        assert_eq!(receiver.try_recv(), Ok(7));
        assert!(!pending.complete(guard.id, "node-2", 8));
    }

    #[test]
    fn pending_requests_are_bounded_and_forgotten_on_drop() {
        let pending = PendingRequests::<u32>::new(2);
        let first = pending.register("a").unwrap();
        let second = pending.register("a").unwrap();
        assert!(pending.register("a").is_none());
        drop(first);
        assert_eq!(pending.len(), 1);
        assert!(pending.register("a").is_some());
        drop(second);
        assert_eq!(pending.len(), 0);
    }
}
