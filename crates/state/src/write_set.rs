//! The writes one message makes, kept apart until they are committed or discarded.

use super::messaging::MessagingWrites;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tessera_contract::EntityAddress;

/// One pending change to a state key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StateChange {
    /// Set the key to these bytes.
    Put(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Remove the key.
    Delete,
}

/// Every `put`/`delete` an entity made while handling one message, plus the plugin version it
/// ran on and its messaging effects (outbox tells, reminders, the receipt of the message it
/// handled), all committed in one transaction. Reads inside the message consult it first
/// (read-your-writes).
///
/// ```
/// use tessera_contract::EntityAddress;
/// use tessera_state::{StateChange, WriteSet};
/// let mut writes = WriteSet::new(EntityAddress::new("t", "counter", "c1"));
/// writes.put("value", vec![1]);
/// writes.delete("old");
/// assert_eq!(writes.pending("value"), Some(&StateChange::Put(vec![1])));
/// assert_eq!(writes.len(), 2);
/// ```
///
/// It encodes (serde) as a partition group orders it: the whole outcome of a message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteSet {
    entity: EntityAddress,
    changes: BTreeMap<String, StateChange>,
    version: Option<u32>,
    /// Boxed and made on first use: most write sets carry no messaging. (Encoded even when
    /// `None`: MessagePack structs are positional, so no field may be skipped.)
    messaging: Option<Box<MessagingWrites>>,
    /// The stamps of the copy the message ran against and of this commit, when the writes
    /// depend on the entity's state (see [`WriteStamps`]).
    stamps: Option<WriteStamps>,
}

/// Where a message's writes stand in its entity's history: the stamp of the copy it ran
/// against (0: never written) and the stamp this commit gives the entity (never 0, unique
/// among the entity's writes). A replicated partition applies the writes only if the entity's
/// stamp is still `read`, so a copy that missed a write — a deposed primary's, a second
/// node's — cannot commit; a node's local store, single by its lease, ignores them. Writes
/// that do not depend on the entity's state (an outbox acknowledgement, a given-up reminder's
/// cancel) carry none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteStamps {
    /// The stamp of the copy the message read.
    pub read: u64,
    /// The stamp this commit gives the entity.
    pub written: u64,
}

/// What [`WriteSet::messaging`] shows when nothing was added.
static NO_MESSAGING: MessagingWrites = MessagingWrites::EMPTY;

impl WriteSet {
    /// An empty write set for `entity`.
    pub fn new(entity: EntityAddress) -> Self {
        WriteSet {
            entity,
            changes: BTreeMap::new(),
            version: None,
            messaging: None,
            stamps: None,
        }
    }

    /// Records where these writes stand in the entity's history (see [`WriteStamps`]).
    pub fn set_stamps(&mut self, stamps: WriteStamps) {
        self.stamps = Some(stamps);
    }

    /// Where these writes stand in the entity's history, if they depend on its state.
    pub fn stamps(&self) -> Option<WriteStamps> {
        self.stamps
    }

    /// The entity these writes belong to.
    pub fn entity(&self) -> &EntityAddress {
        &self.entity
    }

    /// Records `key = value`.
    pub fn put(&mut self, key: impl Into<String>, value: Vec<u8>) {
        self.changes.insert(key.into(), StateChange::Put(value));
    }

    /// Records the removal of `key`.
    pub fn delete(&mut self, key: impl Into<String>) {
        self.changes.insert(key.into(), StateChange::Delete);
    }

    /// The pending change to `key`, if this message made one.
    pub fn pending(&self, key: &str) -> Option<&StateChange> {
        self.changes.get(key)
    }

    /// Records that the entity now runs on plugin `version` (committed with the writes).
    pub fn set_version(&mut self, version: u32) {
        self.version = Some(version);
    }

    /// The plugin version to record, if it changed.
    pub fn version(&self) -> Option<u32> {
        self.version
    }

    /// The messaging effects committed with these writes.
    pub fn messaging(&self) -> &MessagingWrites {
        self.messaging.as_deref().unwrap_or(&NO_MESSAGING)
    }

    /// The messaging effects, to add to.
    pub fn messaging_mut(&mut self) -> &mut MessagingWrites {
        self.messaging.get_or_insert_default()
    }

    /// Whether the entity's state keys or version change (not only its messaging).
    pub fn touches_state(&self) -> bool {
        !self.changes.is_empty() || self.version.is_some()
    }

    /// The changes, in key order.
    pub fn changes(&self) -> impl Iterator<Item = (&str, &StateChange)> {
        self.changes
            .iter()
            .map(|(key, change)| (key.as_str(), change))
    }

    /// Number of changed keys.
    pub fn len(&self) -> usize {
        self.changes.len()
    }

    /// True when nothing needs committing: no change, no version, no messaging.
    pub fn is_empty(&self) -> bool {
        !self.touches_state() && self.messaging().is_empty()
    }

    /// Bytes the state changes carry (keys plus values), for quotas.
    pub fn payload_bytes(&self) -> usize {
        self.changes
            .iter()
            .map(|(key, change)| match change {
                StateChange::Put(value) => key.len() + value.len(),
                StateChange::Delete => key.len(),
            })
            .sum()
    }

    /// Bytes the whole commit carries (state and messaging), for batch limits.
    pub fn commit_bytes(&self) -> usize {
        self.payload_bytes() + self.messaging().payload_bytes()
    }

    /// Drops every pending change (a failed message).
    pub fn clear(&mut self) {
        self.changes.clear();
        self.version = None;
        self.messaging = None;
        self.stamps = None;
    }
}
