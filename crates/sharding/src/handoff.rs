//! What a region holds while it cannot deliver: buffered envelopes (with where their replies
//! go) in a bounded per-shard buffer, used both while a shard's allocation is in flight and
//! while the shard is handed off to a new owner. Envelopes leave a buffer in the order they
//! entered it, which is what keeps one sender's messages in order across a move.

use std::collections::VecDeque;
use tokio::time::Instant;

use crate::link::ReplyTo;
use tessera_contract::{EntityAddress, MessageMeta, ReplyPort, ShardId, ShardKey};

/// Where the reply to a buffered message goes.
#[derive(Debug)]
pub enum ReplyRoute {
    /// A tell: no reply.
    None,
    /// An ask made on this node: the caller's port and its deadline.
    Local {
        /// The caller's port.
        port: ReplyPort,
        /// When the caller stops waiting.
        deadline: Instant,
    },
    /// An ask forwarded from another node.
    Remote(ReplyTo),
}

/// What a buffered envelope asks for.
#[derive(Debug)]
pub enum BufferedBody {
    /// A message to the entity.
    Message {
        /// The MessagePack payload.
        payload: Vec<u8>,
        /// Origin and call chain.
        meta: MessageMeta,
        /// Where its reply goes.
        reply: ReplyRoute,
    },
    /// Read the entity's committed state where its shard lives; answered like an ask, with
    /// the state as its reply (`region::state_read`). Its reply goes somewhere, never `None`.
    ReadState {
        /// Where the state goes.
        reply: ReplyRoute,
    },
    /// Passivate the entity.
    Passivate,
}

impl BufferedBody {
    /// Whether nobody waits for an answer (a tell or a passivation).
    pub fn is_one_way(&self) -> bool {
        matches!(
            self,
            BufferedBody::Message {
                reply: ReplyRoute::None,
                ..
            } | BufferedBody::ReadState {
                reply: ReplyRoute::None
            } | BufferedBody::Passivate
        )
    }

    /// Whether a sender on this node waits for the answer (an ask or a state read made here).
    pub fn is_answered_here(&self) -> bool {
        matches!(
            self,
            BufferedBody::Message {
                reply: ReplyRoute::Local { .. },
                ..
            } | BufferedBody::ReadState {
                reply: ReplyRoute::Local { .. }
            }
        )
    }

    /// Where the answer goes, if anywhere (a passivation has none).
    pub fn into_reply(self) -> Option<ReplyRoute> {
        match self {
            BufferedBody::Message { reply, .. } | BufferedBody::ReadState { reply } => Some(reply),
            BufferedBody::Passivate => None,
        }
    }
}

/// One envelope a region holds or routes.
#[derive(Debug)]
pub struct Buffered {
    /// The target entity.
    pub address: EntityAddress,
    /// Its shard within the entity's type.
    pub shard: ShardId,
    /// Regions it has passed through.
    pub hops: u8,
    /// Message or passivation.
    pub body: BufferedBody,
}

impl Buffered {
    /// The shard key of the target (allocates; off the local fast path).
    pub fn key(&self) -> ShardKey {
        ShardKey::new(self.address.type_key(), self.shard)
    }
}

/// A bounded FIFO of envelopes for one shard.
#[derive(Debug)]
pub struct ShardBuffer {
    items: VecDeque<Buffered>,
    capacity: usize,
}

impl ShardBuffer {
    /// An empty buffer holding at most `capacity` envelopes (`allocation_buffer`).
    pub fn new(capacity: usize) -> Self {
        ShardBuffer {
            items: VecDeque::new(),
            capacity,
        }
    }

    /// Appends `item`, or gives it back when the buffer is full.
    pub fn push(&mut self, item: Buffered) -> Result<(), Box<Buffered>> {
        if self.items.len() >= self.capacity {
            return Err(Box::new(item));
        }
        self.items.push_back(item);
        debug_assert!(self.items.len() <= self.capacity);
        Ok(())
    }

    /// Takes every envelope, oldest first.
    pub fn drain(&mut self) -> impl Iterator<Item = Buffered> + '_ {
        self.items.drain(..)
    }

    /// Envelopes held.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}
