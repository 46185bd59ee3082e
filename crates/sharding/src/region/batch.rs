//! One peer's next forwarding batch: the envelopes queued for it, in order, with the bytes of
//! their MessagePack counted as they join (counted, not kept: the payload is not copied). A
//! batch is sent at [`FORWARD_BATCH_MAX`] envelopes or [`FORWARD_BATCH_BYTES_MAX`] bytes, so it
//! always fits in one frame between nodes; a message that could never fit in one is refused
//! alone, before it is queued ([`too_large_to_forward`], [`envelope_too_large`]).

use std::io;

use crate::handoff::{Buffered, BufferedBody};
use crate::link::{
    FORWARD_BATCH_BYTES_MAX, FORWARD_BATCH_MAX, FORWARD_PAYLOAD_BYTES_MAX, WireEnvelope,
};
use tessera_contract::{EntityAddress, ErrorKind, MessageError};

/// An envelope queued for a peer, and the local ask it answers (if any).
pub(super) struct Queued {
    pub(super) envelope: WireEnvelope,
    pub(super) local_ask: Option<u64>,
}

/// The envelopes queued for one peer: at most [`FORWARD_BATCH_MAX`] of them and
/// [`FORWARD_BATCH_BYTES_MAX`] bytes.
#[derive(Default)]
pub(super) struct PeerBatch {
    queued: Vec<Queued>,
    bytes: usize,
}

impl PeerBatch {
    /// Whether an envelope of `bytes` still fits in the batch.
    pub(super) fn has_room_for(&self, bytes: usize) -> bool {
        self.bytes + bytes <= FORWARD_BATCH_BYTES_MAX
    }

    /// Adds an envelope of `bytes` (which [`has_room_for`](Self::has_room_for) it).
    pub(super) fn push(&mut self, queued: Queued, bytes: usize) {
        debug_assert!(
            self.has_room_for(bytes),
            "a batch is sent before it would pass its byte bound"
        );
        self.queued.push(queued);
        self.bytes += bytes;
    }

    /// Whether the batch must go now: at its envelope bound, or with no room for more bytes.
    pub(super) fn is_full(&self) -> bool {
        self.queued.len() >= FORWARD_BATCH_MAX || self.bytes >= FORWARD_BATCH_BYTES_MAX
    }

    /// The envelopes, in the order they joined.
    pub(super) fn into_queued(self) -> Vec<Queued> {
        self.queued
    }
}

/// The bytes `envelope` takes in a batch: its MessagePack, as the batch carries it.
pub(super) fn encoded_bytes(envelope: &WireEnvelope) -> usize {
    let mut counter = ByteCounter(0);
    // Plain data always encodes; should it not, the envelope is too large to forward.
    match rmp_serde::encode::write_named(&mut counter, envelope) {
        Ok(()) => counter.0,
        Err(_) => usize::MAX,
    }
}

/// The refusal of an envelope that alone would take a batch past its byte bound.
pub(super) fn envelope_too_large(address: &EntityAddress, bytes: usize) -> MessageError {
    MessageError::new(
        ErrorKind::PayloadTooLarge,
        format!(
            "the message to {address} takes {bytes} bytes with its address and call chain; a \
             message forwarded to another node may take at most {FORWARD_BATCH_BYTES_MAX}"
        ),
    )
}

/// The refusal of a message whose payload could never be forwarded, before it is handed to
/// the region task; `None` for any other.
pub(super) fn too_large_to_forward(item: &Buffered) -> Option<MessageError> {
    let BufferedBody::Message { payload, .. } = &item.body else {
        return None;
    };
    (payload.len() > FORWARD_PAYLOAD_BYTES_MAX).then(|| {
        MessageError::new(
            ErrorKind::PayloadTooLarge,
            format!(
                "the message to {} is {} bytes; a message forwarded to another node carries \
                 at most {FORWARD_PAYLOAD_BYTES_MAX}",
                item.address,
                payload.len()
            ),
        )
    })
}

/// A writer that counts the bytes written to it and keeps none.
struct ByteCounter(usize);

impl io::Write for ByteCounter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::{ReplyTo, WireBody};
    use tessera_contract::{Allocation, MessageMeta, Origin, ShardKey, TypeKey};

    fn envelope(payload_bytes: usize) -> WireEnvelope {
        let counter = TypeKey::new("acme", "counter");
        WireEnvelope {
            address: counter.entity("c-1"),
            key: ShardKey::new(counter.clone(), 3),
            allocation: Allocation {
                node: "node-1".into(),
                generation: 9,
            },
            hops: 1,
            body: WireBody::Message {
                payload: vec![7; payload_bytes],
                meta: MessageMeta {
                    origin: Some(Box::new(Origin::Client {
                        key: "k".repeat(128),
                    })),
                    chain: vec![counter.entity("c-0")],
                    deadline: None,
                    trace: Some(Box::new(tessera_contract::MessageTrace::new(
                        tessera_contract::TraceContext::from_traceparent(
                            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                        ),
                    ))),
                },
                reply_to: Some(ReplyTo {
                    node: "node-0".into(),
                    request_id: 4,
                    timeout_ms: 5_000,
                }),
            },
        }
    }

    #[test]
    fn an_envelope_is_counted_as_it_is_encoded() {
        for payload_bytes in [0, 1, 300, 70_000, 1 << 20] {
            let envelope = envelope(payload_bytes);
            let encoded = rmp_serde::to_vec_named(&envelope).unwrap();
            assert_eq!(encoded_bytes(&envelope), encoded.len(), "{payload_bytes}");
        }
        let largest = envelope(FORWARD_PAYLOAD_BYTES_MAX);
        assert!(
            encoded_bytes(&largest) <= FORWARD_BATCH_BYTES_MAX,
            "a payload at the bound fits in a batch with what surrounds it"
        );
    }

    #[test]
    fn a_batch_is_full_at_its_envelope_or_byte_bound() {
        let mut batch = PeerBatch::default();
        let third = FORWARD_BATCH_BYTES_MAX / 3;
        for _ in 0..3 {
            assert!(batch.has_room_for(third));
            let queued = Queued {
                envelope: envelope(0),
                local_ask: None,
            };
            batch.push(queued, third);
        }
        assert!(
            !batch.has_room_for(third),
            "a fourth third would pass the bound"
        );
        assert!(!batch.is_full(), "a byte short of the bound");
        let mut counted = PeerBatch::default();
        for _ in 0..FORWARD_BATCH_MAX {
            assert!(!counted.is_full());
            let queued = Queued {
                envelope: envelope(0),
                local_ask: None,
            };
            counted.push(queued, 1);
        }
        assert!(counted.is_full());
    }
}
