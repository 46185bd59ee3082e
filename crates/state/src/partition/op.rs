//! The operations a partition group orders and what applying one answers.

use crate::remember::RememberOp;
use crate::shard_transfer::ShardPart;
use crate::write_set::WriteSet;
use serde::{Deserialize, Serialize};
use tessera_contract::{EntityAddress, TypeKey};
use thiserror::Error;

/// An operation of a partition group, as the primary submits it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartitionOp {
    /// A message's outcome: its whole write set — state changes, the plugin version it ran
    /// on, and its messaging (outbox entries, reminders, cancels, the receipt or client key of
    /// the message, acknowledged outbox entries, counters) — applied only if the entity's
    /// stamp is still `expect`, the stamp of the copy the message ran against; once applied
    /// the entity's stamp is `stamp`. `reply` is what the primary answers the message with,
    /// returned by the apply so a retried submission gets it back.
    Write {
        /// The stamp the message read (0: the entity was never written).
        expect: u64,
        /// This write's stamp: unique among the partition's writes, never 0.
        stamp: u64,
        /// When the primary committed it (ms since the epoch): the time receipts and client
        /// keys are recorded at, the same on every replica.
        at_ms: u64,
        /// The message's writes; their entity is the one written.
        writes: WriteSet,
        /// The message's reply.
        #[serde(with = "serde_bytes")]
        reply: Vec<u8>,
    },
    /// Messaging writes that do not depend on the entity's state — outbox entries its
    /// receivers acknowledged, a given-up reminder's cancel — applied whatever the entity's
    /// stamp, which they leave as it is. Applying one twice changes nothing more. Writes that
    /// change state keys or the version are refused as [`PartitionResult::Malformed`].
    Settle {
        /// When the primary committed it (ms since the epoch).
        at_ms: u64,
        /// The writes; their entity is the one written.
        writes: WriteSet,
    },
    /// A read's barrier: commits as [`PartitionResult::Checked`] if `entity`'s stamp is still
    /// `expect`, so the state the message read was current when the barrier committed.
    Check {
        /// The entity read.
        entity: EntityAddress,
        /// The stamp the message read.
        expect: u64,
        /// The message's reply.
        #[serde(with = "serde_bytes")]
        reply: Vec<u8>,
    },
    /// Changes to the remembered ids of the partition's entities (`remember_entities`: the
    /// entities started again when their shard comes up), applied in order whatever the
    /// stamps: a new owner of a shard reads them from its replica.
    Remember {
        /// The changes, in the order they were made.
        ops: Vec<RememberOp>,
    },
    /// One part of a shard's rows restored from a backup (`tessera restore`) into the
    /// partition: its entities' rows and remembered ids are written as a handoff's part would
    /// write them, and each entity's stamp becomes `stamp`, so an instance built from what
    /// was there before cannot commit. The restoring node checked the part belongs to the
    /// shard; a part carrying pieces of a value larger than a part is refused as
    /// [`PartitionResult::Malformed`] (not restorable into the plane yet).
    Install {
        /// The stamp every entity of the part takes: unique among the partition's writes,
        /// never 0.
        stamp: u64,
        /// The entity type the shard is of.
        type_key: TypeKey,
        /// The shard.
        shard: u32,
        /// The rows.
        part: ShardPart,
    },
    /// Seals the group for a move (`moving`): every entity op after it is refused as
    /// [`PartitionResult::Sealed`], so the state is final. Sealing twice changes nothing; a
    /// group still filling refuses it ([`PartitionResult::Filling`]).
    Seal,
    /// One piece of a sealed replica's image, for a move's new group while it fills: staged
    /// under the image's checksum. An open group refuses it ([`PartitionResult::Opened`]).
    Fill {
        /// The checksum of the whole image ([`checksum_bytes`](tessera_consensus::message::checksum_bytes)).
        checksum: u64,
        /// The piece's place in the image, from 0.
        index: u32,
        /// The piece, at most [`FILL_BYTES_MAX`](super::FILL_BYTES_MAX).
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
    /// Opens a move's new group: its state becomes the image of `pieces` pieces staged under
    /// `checksum`, and it serves. Refused as [`PartitionResult::Filling`] while a piece is
    /// missing or the whole does not match; an open group answers it as applied.
    Open {
        /// The image's checksum.
        checksum: u64,
        /// How many pieces it has.
        pieces: u32,
    },
}

/// What applying a [`PartitionOp`] answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartitionResult {
    /// The write was applied (now or by an earlier submission of the same stamp).
    Applied {
        /// The message's reply.
        #[serde(with = "serde_bytes")]
        reply: Vec<u8>,
    },
    /// The barrier found the state the message read still current.
    Checked {
        /// The message's reply.
        #[serde(with = "serde_bytes")]
        reply: Vec<u8>,
    },
    /// The entity changed since the message read it: nothing was applied; run the message
    /// again against the current state.
    Conflict {
        /// The entity's stamp now.
        stamp: u64,
    },
    /// The operation is not one this machine can apply: nothing was applied.
    Malformed(String),
    /// This replica's storage failed: its copy is no longer the others', and the group stops
    /// on this node.
    StorageFailed(String),
    /// The group is sealed: its partition moved to a new group, where the op must go.
    Sealed,
    /// The group is a move's new group that has not opened yet: nothing was applied.
    Filling,
    /// The group is open: a fill is not taken.
    Opened,
}

/// A write set that a partition op cannot carry.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteNotReplicable {
    /// Stamp 0 means "never written" and cannot name a write.
    #[error("a write's stamp must not be 0")]
    ZeroStamp,
}

impl PartitionOp {
    /// The op that replicates `writes`, computed from the copy whose stamp for the entity was
    /// `expect`, as the write `stamp` committed at `at_ms`, answering `reply`.
    ///
    /// ```
    /// use tessera_contract::EntityAddress;
    /// use tessera_state::WriteSet;
    /// use tessera_state::partition::PartitionOp;
    /// let mut writes = WriteSet::new(EntityAddress::new("t", "counter", "c1"));
    /// writes.put("value", 1u64.to_le_bytes().to_vec());
    /// let op = PartitionOp::write(writes, 0, 7, 1_000, b"1".to_vec()).unwrap();
    /// assert!(matches!(op, PartitionOp::Write { expect: 0, stamp: 7, .. }));
    /// ```
    pub fn write(
        writes: WriteSet,
        expect: u64,
        stamp: u64,
        at_ms: u64,
        reply: Vec<u8>,
    ) -> Result<PartitionOp, WriteNotReplicable> {
        if stamp == 0 {
            return Err(WriteNotReplicable::ZeroStamp);
        }
        Ok(PartitionOp::Write {
            expect,
            stamp,
            at_ms,
            writes,
            reply,
        })
    }

    /// The bytes a group orders.
    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec(self)
            .unwrap_or_else(|error| panic!("a partition op always encodes: {error}"))
    }
}

impl PartitionResult {
    /// The bytes an apply returns.
    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec(self)
            .unwrap_or_else(|error| panic!("a partition result always encodes: {error}"))
    }

    /// Reads an apply's bytes; bytes no machine returns read as [`PartitionResult::Malformed`].
    pub fn decode(bytes: &[u8]) -> PartitionResult {
        rmp_serde::from_slice(bytes).unwrap_or_else(|error| {
            PartitionResult::Malformed(format!("a result that does not decode: {error}"))
        })
    }
}
