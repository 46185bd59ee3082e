//! Reading an entity's committed state where it lives. A state read entering any node
//! ([`RegionHandle::read_state`](super::RegionHandle::read_state), in `send`) is routed like an
//! ask — to the owner of the entity's shard (forwarded to another node as a
//! [`WireBody::ReadState`](crate::link::WireBody::ReadState)), held in the slot's buffer while
//! the shard is allocated or handed off, refused as an ask is while the owner is cut off
//! (`shard_unavailable`) or no answer comes in time. Here is the owner's side: its region
//! answers from its entity layer ([`LocalEntities::read_state`](crate::LocalEntities::read_state)),
//! off the slot's lock, with the entries as MessagePack in the reply, which the reader decodes.
//! So a read through any node sees what the owner holds, never another node's stale or empty
//! copy.

use serde::{Deserialize, Serialize};

use super::Shared;
use tessera_contract::{EntityAddress, ErrorKind, MessageError, ReplyPort};

/// The most keys one state read returns, so that reading an entity with very many keys cannot
/// exhaust host memory.
pub const STATE_READ_ENTRIES_MAX: usize = 10_000;

/// The most bytes (keys plus values) one state read returns. The answer to a read forwarded
/// from another node travels back in one frame between nodes (at most 80 MiB), so it is bounded
/// well below that; a larger state is refused with `reply_too_large`, wherever it is read.
pub const STATE_READ_BYTES_MAX: usize = 32 << 20;

/// One committed key and its value, as a state read's answer carries them.
#[derive(Serialize, Deserialize)]
struct Entry {
    key: String,
    #[serde(with = "serde_bytes")]
    value: Vec<u8>,
}

/// Answers `port` with the committed state of `address`, which this node's entity layer reads
/// off the caller's task (the caller holds the shard's slot lock, and this node owns it).
pub(super) fn answer_here(shared: &Shared, address: EntityAddress, port: ReplyPort) {
    let reading = shared
        .local
        .read_state(address.clone(), STATE_READ_ENTRIES_MAX);
    tokio::spawn(async move {
        let answer = reading.await.and_then(|entries| encode(&address, entries));
        let _ = port.send(answer);
    });
}

/// `entries` as a state read's answer, or `reply_too_large` past [`STATE_READ_BYTES_MAX`].
fn encode(
    address: &EntityAddress,
    entries: Vec<(String, Vec<u8>)>,
) -> Result<Vec<u8>, MessageError> {
    let bytes: usize = entries
        .iter()
        .map(|(key, value)| key.len() + value.len())
        .sum();
    if bytes > STATE_READ_BYTES_MAX {
        return Err(MessageError::new(
            ErrorKind::ReplyTooLarge,
            format!(
                "the state of {address} holds {bytes} bytes in its first {} keys; a state read \
                 returns at most {STATE_READ_BYTES_MAX}",
                entries.len()
            ),
        ));
    }
    let entries: Vec<Entry> = entries
        .into_iter()
        .map(|(key, value)| Entry { key, value })
        .collect();
    rmp_serde::to_vec_named(&entries).map_err(|error| {
        MessageError::new(
            ErrorKind::Internal,
            format!("the state of {address} could not be encoded: {error}"),
        )
    })
}

/// A state read's answer (from this node or a peer) as keys and values.
pub(super) fn decode(answer: &[u8]) -> Result<Vec<(String, Vec<u8>)>, MessageError> {
    let entries: Vec<Entry> = rmp_serde::from_slice(answer).map_err(|error| {
        MessageError::new(
            ErrorKind::Internal,
            format!("a state read's answer is malformed: {error}"),
        )
    })?;
    Ok(entries
        .into_iter()
        .map(|entry| (entry.key, entry.value))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_survive_the_answer_and_too_many_bytes_are_refused() {
        let address = EntityAddress::new("acme", "counter", "c-1");
        let entries = vec![
            ("a".to_string(), vec![1, 2, 3]),
            ("b".to_string(), Vec::new()),
        ];
        let answer = encode(&address, entries.clone()).unwrap();
        assert_eq!(decode(&answer).unwrap(), entries);
        let huge = vec![("big".to_string(), vec![0; STATE_READ_BYTES_MAX])];
        let refused = encode(&address, huge).unwrap_err();
        assert_eq!(refused.kind, ErrorKind::ReplyTooLarge);
        assert_eq!(
            decode(b"\xc1").unwrap_err().kind,
            ErrorKind::Internal,
            "a malformed answer is an error, not a panic"
        );
    }
}
