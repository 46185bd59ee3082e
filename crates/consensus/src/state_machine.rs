//! What a replica replicates: a deterministic [`StateMachine`] fed committed operations in op
//! order and able to snapshot and restore its state (for checkpoints and state transfer), and
//! [`KeyValue`], a small key-value store used by the tests and the simulator.
//!
//! A machine's snapshot is either its whole state (the default: the replica's journal then
//! holds it) or, for a machine that keeps its state durable in a store of its own, a small
//! reference to the state it made durable ([`StateMachine::snapshot_is_reference`]): the
//! journal's checkpoint then costs the same however large the state, and only a peer that
//! installs the state is sent all of it ([`StateMachine::transfer_image`]). A machine whose
//! state may be large sends and installs it as a stream instead ([`StateMachine::transfers_in_parts`]):
//! read in bounded parts from a view of the checkpoint's state ([`ImageReader`]) and staged
//! apart from the live state until the last part is in, so neither side holds it in memory.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A deterministic state machine: the same operations in the same order give the same results
/// on every replica. Operations are opaque bytes; a malformed one must yield an error result,
/// never a panic, since any client can submit it.
pub trait StateMachine {
    /// Executes one committed operation and returns its result for the client.
    fn apply(&mut self, operation: &[u8]) -> Vec<u8>;

    /// Encodes the state for a checkpoint, which the replica journals. Deterministic: replicas
    /// in the same state produce the same bytes, since checkpoints are compared by checksum.
    ///
    /// A machine whose [`StateMachine::snapshot_is_reference`] is true makes its state durable
    /// here, in its own store, and returns only what it needs to find that state again: its
    /// [`StateMachine::restore`] after a restart must bring back exactly the state of the last
    /// snapshot whose bytes it is given, whatever it applied after it. The replica makes each
    /// checkpoint durable in its journal before it takes the next, so such a machine needs to
    /// keep only the state of its last two snapshots.
    fn snapshot(&self) -> Vec<u8>;

    /// Replaces the whole state with a [`StateMachine::snapshot`] or a
    /// [`StateMachine::transfer_image`]. The bytes come from disk or a peer (checksummed, but
    /// decoding must still never panic); on error the state is left unchanged.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), RestoreError>;

    /// Whether a snapshot only refers to state the machine keeps durable itself (see
    /// [`StateMachine::snapshot`]); then a peer that installs the state is sent
    /// [`StateMachine::transfer_image`] instead. False by default: the snapshot is the state.
    fn snapshot_is_reference(&self) -> bool {
        false
    }

    /// The whole state as it stands, for a peer that installs it, when snapshots are
    /// references. The replica asks for it only while the state is its last snapshot's (it
    /// checkpoints first if it applied anything since). Deterministic, as snapshots are. By
    /// default the snapshot, which carries the state.
    fn transfer_image(&self) -> Vec<u8> {
        self.snapshot()
    }

    /// Whether a peer that installs the state is sent it as a stream of bounded parts, read
    /// by [`StateMachine::image_reader`] and installed by [`StateMachine::stage_image`] and
    /// [`StateMachine::install_staged_image`], instead of one [`StateMachine::transfer_image`].
    /// False by default.
    fn transfers_in_parts(&self) -> bool {
        false
    }

    /// A reader of the state's image as it stands — the replica asks only while the state is
    /// its last checkpoint's — which goes on reading that state while the machine applies more
    /// (a read transaction, say). Deterministic, as snapshots are. Needed when
    /// [`StateMachine::transfers_in_parts`].
    fn image_reader(&self) -> Result<Box<dyn ImageReader>, String> {
        Err("this state machine does not transfer its state in parts".into())
    }

    /// Takes the bytes of an image stream (from a peer's [`StateMachine::image_reader`]) that
    /// start at `offset`, and stages them apart from the live state, which they leave
    /// unchanged. Offset 0 starts a new image, dropping whatever was staged; otherwise the
    /// bytes follow those staged last. An error (bytes that do not decode) leaves the live
    /// state unchanged; the stream is then started again. Needed when
    /// [`StateMachine::transfers_in_parts`].
    fn stage_image(&mut self, offset: u64, bytes: &[u8]) -> Result<(), RestoreError> {
        let _ = (offset, bytes);
        Err(RestoreError::Malformed(
            "this state machine does not transfer its state in parts".into(),
        ))
    }

    /// Replaces the whole state with the staged image, which the stream has ended. On error
    /// (an image cut short) the state is left unchanged.
    fn install_staged_image(&mut self) -> Result<(), RestoreError> {
        Err(RestoreError::Malformed(
            "this state machine does not transfer its state in parts".into(),
        ))
    }
}

/// Reads a machine's image as a stream of bytes, part by part, from the state it was opened
/// on (see [`StateMachine::image_reader`]).
pub trait ImageReader: Send {
    /// The next bytes of the image: `max` of them, fewer only at its end, none once it has
    /// all been read.
    fn read(&mut self, max: usize) -> Result<Vec<u8>, String>;
}

/// Why a snapshot could not be restored.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RestoreError {
    /// The bytes are not a snapshot of this state machine.
    #[error("snapshot does not decode: {0}")]
    Malformed(String),
}

/// An operation of the key-value store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyValueOperation {
    /// Sets `key` to `value`; the result is the previous value.
    Put {
        /// The key.
        key: u64,
        /// The new value.
        value: u64,
    },
    /// Reads `key`.
    Get {
        /// The key.
        key: u64,
    },
}

/// The result of a key-value operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyValueResult {
    /// The value before a put, or the value read by a get.
    Value(Option<u64>),
    /// The operation bytes did not decode.
    Malformed,
}

impl KeyValueOperation {
    /// Encodes the operation for a [`super::message::Request`].
    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec(self).unwrap_or_default()
    }
}

impl KeyValueResult {
    /// Decodes a result; anything undecodable reads as [`KeyValueResult::Malformed`].
    pub fn decode(bytes: &[u8]) -> KeyValueResult {
        rmp_serde::from_slice(bytes).unwrap_or(KeyValueResult::Malformed)
    }
}

/// An in-memory key-value store of `u64` keys and values.
///
/// ```
/// use tessera_consensus::state_machine::{KeyValue, KeyValueOperation, KeyValueResult, StateMachine};
///
/// let mut store = KeyValue::default();
/// store.apply(&KeyValueOperation::Put { key: 1, value: 10 }.encode());
/// let result = store.apply(&KeyValueOperation::Get { key: 1 }.encode());
/// assert_eq!(KeyValueResult::decode(&result), KeyValueResult::Value(Some(10)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyValue {
    values: BTreeMap<u64, u64>,
}

impl KeyValue {
    /// The current value of `key`.
    pub fn get(&self, key: u64) -> Option<u64> {
        self.values.get(&key).copied()
    }
}

impl StateMachine for KeyValue {
    fn apply(&mut self, operation: &[u8]) -> Vec<u8> {
        let result = match rmp_serde::from_slice::<KeyValueOperation>(operation) {
            Ok(KeyValueOperation::Put { key, value }) => {
                KeyValueResult::Value(self.values.insert(key, value))
            }
            Ok(KeyValueOperation::Get { key }) => KeyValueResult::Value(self.get(key)),
            Err(_) => KeyValueResult::Malformed,
        };
        rmp_serde::to_vec(&result).unwrap_or_default()
    }

    fn snapshot(&self) -> Vec<u8> {
        let pairs: Vec<(u64, u64)> = self
            .values
            .iter()
            .map(|(key, value)| (*key, *value))
            .collect();
        rmp_serde::to_vec(&pairs)
            .unwrap_or_else(|error| panic!("pairs of u64 always encode: {error}"))
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), RestoreError> {
        let pairs: Vec<(u64, u64)> = rmp_serde::from_slice(snapshot)
            .map_err(|error| RestoreError::Malformed(error.to_string()))?;
        self.values = pairs.into_iter().collect();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_returns_the_previous_value_and_garbage_is_rejected() {
        let mut store = KeyValue::default();
        let first = store.apply(&KeyValueOperation::Put { key: 3, value: 1 }.encode());
        let second = store.apply(&KeyValueOperation::Put { key: 3, value: 2 }.encode());
        assert_eq!(KeyValueResult::decode(&first), KeyValueResult::Value(None));
        assert_eq!(
            KeyValueResult::decode(&second),
            KeyValueResult::Value(Some(1))
        );
        assert_eq!(
            KeyValueResult::decode(&store.apply(&[0xc1])),
            KeyValueResult::Malformed
        );
        assert_eq!(store.get(3), Some(2));
    }

    #[test]
    fn a_snapshot_restores_the_same_state_and_garbage_leaves_it_unchanged() {
        let mut store = KeyValue::default();
        for key in 0..5 {
            store.apply(
                &KeyValueOperation::Put {
                    key,
                    value: key * 7,
                }
                .encode(),
            );
        }
        let mut copy = KeyValue::default();
        copy.restore(&store.snapshot())
            .expect("a snapshot restores");
        assert_eq!(copy, store);
        assert_eq!(
            copy.snapshot(),
            store.snapshot(),
            "snapshots are deterministic"
        );
        assert!(copy.restore(&[0xc1, 0x00]).is_err());
        assert_eq!(copy, store);
    }
}
