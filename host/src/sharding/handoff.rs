//! What a region holds while it cannot deliver: buffered envelopes (with where their replies
//! go) in a bounded per-shard buffer, used both while a shard's allocation is in flight and
//! while the shard is handed off to a new owner. Envelopes leave a buffer in the order they
//! entered it, which is what keeps one sender's messages in order across a move.

use std::collections::VecDeque;
use tokio::time::Instant;

use crate::envelope::{EntityAddress, ReplyPort};
use crate::sharding::allocation::{Allocation, ShardKey};
use crate::sharding::link::ReplyTo;

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
        /// Where its reply goes.
        reply: ReplyRoute,
    },
    /// Passivate the entity.
    Passivate,
}

/// One envelope a region holds or routes.
#[derive(Debug)]
pub struct Buffered {
    /// The target entity.
    pub address: EntityAddress,
    /// Its shard.
    pub key: ShardKey,
    /// Regions it has passed through.
    pub hops: u8,
    /// Message or passivation.
    pub body: BufferedBody,
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

/// A shard this region is handing off: where it goes and what arrived meanwhile.
#[derive(Debug)]
pub struct Handoff {
    /// The shard.
    pub key: ShardKey,
    /// The new home.
    pub to: Allocation,
    /// Envelopes that arrived during the handoff.
    pub buffer: ShardBuffer,
}
