//! Wire types of the replication protocol: client requests and replies, log entries (each
//! chained to its parent by a checksum), and the messages replicas exchange. Everything here is
//! plain data; the protocol logic lives in [`super::replica`].

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Index of a replica in the cluster configuration, `0..replica_count`.
pub type ReplicaIndex = u8;
/// Identity of a client session.
pub type ClientId = u64;
/// A view number: views are numbered from 0 and the primary of view `v` is `v % replica_count`.
pub type ViewNumber = u64;
/// A position in the replicated log; the first operation is op 1, op 0 is the empty log.
pub type OpNumber = u64;

/// Checksum of the (empty) log before op 1, the parent of the first entry.
pub const CHECKSUM_ROOT: u64 = 0x5653_525f_524f_4f54;

/// One client operation as submitted: who sent it, its per-client sequence number and the opaque
/// operation that the state machine understands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The client session that sent this request.
    pub client: ClientId,
    /// Per-client sequence number, increasing by one per new request; retries reuse it.
    pub request_number: u64,
    /// The operation, encoded for the state machine: MessagePack `bin` on the wire and in the
    /// journal (an array of integers before protocol version 4, still read from old journals).
    #[serde(with = "serde_bytes")]
    pub operation: Vec<u8>,
}

/// The reply to one request, sent by the primary once the request's op has committed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// The client session the reply is for.
    pub client: ClientId,
    /// The request number being answered.
    pub request_number: u64,
    /// The view the primary was in, so the client learns who the primary is.
    pub view: ViewNumber,
    /// The state machine's result, or why the request was not executed.
    pub result: Result<Vec<u8>, ReplyError>,
}

/// Why a request was answered without being executed.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ReplyError {
    /// The client's session was evicted from the client table (`CLIENT_SESSIONS_MAX`), so the
    /// cluster can no longer tell a retry from a new request; the client must open a new
    /// session (a new client id) and find out itself whether its last request took effect.
    #[error("the client session was evicted")]
    SessionEvicted,
}

/// One slot of the replicated log: a batch of requests ordered at `op`, prepared in `view`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Position in the log.
    pub op: OpNumber,
    /// The view whose primary prepared this entry.
    pub view: ViewNumber,
    /// Checksum of the entry at `op - 1` ([`CHECKSUM_ROOT`] for op 1): the hash chain.
    pub parent: u64,
    /// The requests of this batch, executed in order.
    pub requests: Vec<Request>,
    /// Checksum over every field above; see [`Entry::compute_checksum`].
    pub checksum: u64,
}

impl Entry {
    /// Builds an entry and seals it with its checksum.
    pub fn new(op: OpNumber, view: ViewNumber, parent: u64, requests: Vec<Request>) -> Entry {
        let mut entry = Entry {
            op,
            view,
            parent,
            requests,
            checksum: 0,
        };
        entry.checksum = entry.compute_checksum();
        entry
    }

    /// FNV-1a (64 bit) over every field except `checksum`. 64 bits keep accidental collisions
    /// between distinct entries negligible across the simulator's millions of entries; it is not
    /// meant to resist an adversary (VSR tolerates crashes, not lies).
    pub fn compute_checksum(&self) -> u64 {
        let mut hash = Fnv64::new();
        hash.write_u64(self.op);
        hash.write_u64(self.view);
        hash.write_u64(self.parent);
        hash.write_u64(self.requests.len() as u64);
        for request in &self.requests {
            hash.write_u64(request.client);
            hash.write_u64(request.request_number);
            hash.write_u64(request.operation.len() as u64);
            hash.write(&request.operation);
        }
        hash.finish()
    }

    /// Whether the stored checksum matches the contents (false for a torn or corrupt entry).
    pub fn is_intact(&self) -> bool {
        self.checksum == self.compute_checksum()
    }
}

/// Whether `log` is a well-formed log: ops 1, 2, ... in order, every entry intact and chained to
/// the one before it.
pub fn is_chained_log(log: &[Entry]) -> bool {
    is_chained_from(0, CHECKSUM_ROOT, log)
}

/// Whether `entries` are ops `base + 1, base + 2, ...` in order, every entry intact and chained
/// to the one before it, the first to `base_checksum`.
pub fn is_chained_from(base: OpNumber, base_checksum: u64, entries: &[Entry]) -> bool {
    let mut parent = base_checksum;
    for (index, entry) in entries.iter().enumerate() {
        if entry.op != base + index as u64 + 1 || entry.parent != parent || !entry.is_intact() {
            return false;
        }
        parent = entry.checksum;
    }
    true
}

/// The part of a log a replica still holds and sends in view-change and recovery messages:
/// the entries above `base`, where `base` is an op the sender has already committed (at or
/// below its checkpoint) and `base_checksum` the checksum of the entry at `base`
/// ([`CHECKSUM_ROOT`] for op 0).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogSuffix {
    /// The committed op just below the first entry.
    pub base: OpNumber,
    /// The checksum of the entry at `base`.
    pub base_checksum: u64,
    /// Ops `base + 1..=base + entries.len()`.
    pub entries: Vec<Entry>,
}

impl LogSuffix {
    /// A suffix starting at the root (the whole log).
    pub fn from_root(entries: Vec<Entry>) -> LogSuffix {
        LogSuffix {
            base: 0,
            base_checksum: CHECKSUM_ROOT,
            entries,
        }
    }

    /// The op of the last entry (`base` when empty).
    pub fn op(&self) -> OpNumber {
        self.base + self.entries.len() as OpNumber
    }

    /// Whether the entries are intact and chained to the base.
    pub fn is_chained(&self) -> bool {
        is_chained_from(self.base, self.base_checksum, &self.entries)
    }

    /// The checksum of the entry at `op`, if the suffix covers it (its base included).
    pub fn checksum_at(&self, op: OpNumber) -> Option<u64> {
        if op == self.base {
            return Some(self.base_checksum);
        }
        let index = op.checked_sub(self.base + 1)?;
        self.entries.get(index as usize).map(|entry| entry.checksum)
    }
}

/// FNV-1a (64 bit) over a sequence of words, for small fixed-layout records such as the
/// superblock.
pub(crate) fn checksum_words(words: &[u64]) -> u64 {
    checksum_words_and_bytes(words, &[])
}

/// FNV-1a (64 bit) over `bytes`: a cheap check that bytes which travelled in pieces came
/// together whole (not a defence against a forger: frames come from authenticated peers).
///
/// ```
/// use tessera_consensus::message::checksum_bytes;
/// assert_ne!(checksum_bytes(b"whole"), checksum_bytes(b"whale"));
/// ```
pub fn checksum_bytes(bytes: &[u8]) -> u64 {
    checksum_words_and_bytes(&[], bytes)
}

/// [`checksum_bytes`] carried on over `bytes` from `previous`, the checksum of the bytes before
/// them (`None` at the start), so bytes that come in pieces are checked without being joined.
///
/// ```
/// use tessera_consensus::message::{checksum_bytes, checksum_bytes_from};
/// let first = checksum_bytes_from(None, b"who");
/// assert_eq!(checksum_bytes_from(Some(first), b"le"), checksum_bytes(b"whole"));
/// ```
pub fn checksum_bytes_from(previous: Option<u64>, bytes: &[u8]) -> u64 {
    let mut hash = previous.map_or_else(Fnv64::new, Fnv64);
    hash.write(bytes);
    hash.finish()
}

/// FNV-1a (64 bit) over a sequence of words followed by bytes (a checkpoint's op, entry
/// checksum and state).
pub(crate) fn checksum_words_and_bytes(words: &[u64], bytes: &[u8]) -> u64 {
    let mut hash = Fnv64::new();
    for word in words {
        hash.write_u64(*word);
    }
    hash.write(bytes);
    hash.finish()
}

/// A checkpoint stream's checksum: FNV-1a over `op` and `entry_checksum` and then the stream's
/// bytes, carried on from `previous` (the checksum through the bytes before `bytes`, `None` at
/// the stream's start).
pub(crate) fn stream_checksum(
    op: OpNumber,
    entry_checksum: u64,
    previous: Option<u64>,
    bytes: &[u8],
) -> u64 {
    let mut hash = previous.map_or_else(
        || {
            let mut hash = Fnv64::new();
            hash.write_u64(op);
            hash.write_u64(entry_checksum);
            hash
        },
        Fnv64,
    );
    hash.write(bytes);
    hash.finish()
}

struct Fnv64(u64);

impl Fnv64 {
    fn new() -> Fnv64 {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.write(&value.to_le_bytes());
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Everything a replica receives: a client request or a message from another replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    /// A client asks the primary to execute an operation.
    Request(Request),
    /// The primary orders `entry`; `commit` piggybacks the primary's commit number.
    Prepare {
        /// The primary's view.
        view: ViewNumber,
        /// The entry being prepared (or retransmitted for repair).
        entry: Entry,
        /// The primary's commit number.
        commit: OpNumber,
    },
    /// A backup has durably appended every op up to and including `op` in `view`.
    PrepareOk {
        /// The view of the acknowledged log.
        view: ViewNumber,
        /// The backup's highest contiguous op.
        op: OpNumber,
        /// The acknowledging backup.
        replica: ReplicaIndex,
    },
    /// Heartbeat from the primary carrying its commit number; a backup answers with prepare-ok,
    /// which tells the primary it is still heard.
    Commit {
        /// The primary's view.
        view: ViewNumber,
        /// The primary's commit number.
        commit: OpNumber,
    },
    /// `replica` suspects the primary and wants to move to `view`.
    StartViewChange {
        /// The proposed view.
        view: ViewNumber,
        /// The sender.
        replica: ReplicaIndex,
    },
    /// `replica` hands its log to the primary of `view`.
    DoViewChange {
        /// The new view.
        view: ViewNumber,
        /// The sender.
        replica: ReplicaIndex,
        /// The last view in which the sender's status was normal.
        log_view: ViewNumber,
        /// The sender's log.
        log: LogSuffix,
        /// The sender's commit number.
        commit: OpNumber,
        /// The sender started on an empty journal and has not yet held a view's log: it may
        /// have forgotten ops it acknowledged, so its vote counts toward a quorum only when
        /// every replica voted.
        forgetful: bool,
    },
    /// The new primary installs `log` as the log of `view`.
    StartView {
        /// The new view.
        view: ViewNumber,
        /// The authoritative log of the view.
        log: LogSuffix,
        /// The primary's commit number.
        commit: OpNumber,
    },
    /// A replica that saw a newer view asks its primary for the view's log.
    RequestStartView {
        /// The view the sender wants to join.
        view: ViewNumber,
        /// The sender.
        replica: ReplicaIndex,
    },
    /// A backup asks the primary to resend `count` prepares starting at `op_first`.
    RequestPrepares {
        /// The view both are in.
        view: ViewNumber,
        /// The sender.
        replica: ReplicaIndex,
        /// The first missing op.
        op_first: OpNumber,
        /// How many ops are missing (clamped by the primary).
        count: u64,
    },
    /// A restarted replica asks for the current view before it votes again.
    Recovery {
        /// The sender.
        replica: ReplicaIndex,
        /// Fresh per recovery attempt, so stale answers are told apart.
        nonce: u64,
    },
    /// The answer to [`Message::Recovery`].
    RecoveryResponse {
        /// The responder's view.
        view: ViewNumber,
        /// The responder.
        replica: ReplicaIndex,
        /// The nonce of the request being answered.
        nonce: u64,
        /// The responder's status in `view`.
        status: Status,
        /// The responder's log, present only from the normal primary of `view`.
        log: Option<LogSuffix>,
        /// The responder's commit number.
        commit: OpNumber,
        /// The responder holds no durable promise: it never voted in a view change nor
        /// acknowledged an op (a first start, or a disk that was lost).
        empty: bool,
    },
    /// A replica that needs ops its peers no longer hold asks for a chunk of a checkpoint.
    RequestState {
        /// The sender.
        replica: ReplicaIndex,
        /// The highest op the sender has applied: only a newer checkpoint helps it.
        applied: OpNumber,
        /// The checkpoint being assembled (its op and state checksum), 0 and 0 for none.
        op: OpNumber,
        /// The state checksum of that checkpoint.
        state_checksum: u64,
        /// The byte offset wanted.
        offset: u64,
    },
    /// A chunk of the sender's latest checkpoint.
    StateChunk {
        /// The sender.
        replica: ReplicaIndex,
        /// The checkpoint's op.
        op: OpNumber,
        /// The checksum of the entry at `op`.
        entry_checksum: u64,
        /// The checksum of the whole checkpoint (op, entry checksum and state bytes).
        state_checksum: u64,
        /// The length of the whole encoded state.
        state_bytes: u64,
        /// Where `bytes` starts in it.
        offset: u64,
        /// At most `state_chunk_bytes` of it.
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
    /// A replica whose machine transfers its state in parts asks for the part of a peer's
    /// checkpoint image that starts at `offset`.
    RequestImage {
        /// The sender.
        replica: ReplicaIndex,
        /// The highest op the sender has applied: only a newer checkpoint helps it.
        applied: OpNumber,
        /// The checkpoint being streamed (0: none yet; any part 0 will do).
        op: OpNumber,
        /// The byte offset wanted in its stream.
        offset: u64,
    },
    /// A part of the stream of the sender's checkpoint at `op`: the client table (its length
    /// first, eight bytes little-endian), then the machine's image.
    ImagePart {
        /// The sender.
        replica: ReplicaIndex,
        /// The checkpoint's op.
        op: OpNumber,
        /// The checksum of the entry at `op`.
        entry_checksum: u64,
        /// Where `bytes` starts in the stream.
        offset: u64,
        /// At most `state_chunk_bytes` of it; empty only in a last part.
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
        /// The stream's checksum through the end of `bytes`: FNV-1a over `op`,
        /// `entry_checksum` and every byte of the stream so far.
        checksum: u64,
        /// Whether the stream ends with this part.
        last: bool,
    },
}

/// The protocol status of a replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    /// Processing requests (primary) or prepares (backup) in its view.
    Normal,
    /// Electing a new primary.
    ViewChange,
    /// Restarted from its journal, not yet allowed to vote.
    Recovering,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request as journals written before protocol version 4 hold it: the operation an
    /// array of integers.
    #[derive(Serialize)]
    struct RequestBefore4 {
        client: ClientId,
        request_number: u64,
        operation: Vec<u8>,
    }

    /// The operation travels as bytes (about its own length, where an array of integers took
    /// up to twice it and was decoded one integer at a time), and a request from an older
    /// journal still reads.
    #[test]
    fn an_operation_is_encoded_as_bytes_and_an_older_journals_array_still_decodes() {
        let operation: Vec<u8> = (0..4_096u32).map(|index| (index % 256) as u8).collect();
        let request = Request {
            client: 7,
            request_number: 9,
            operation: operation.clone(),
        };
        let encoded = rmp_serde::to_vec(&request).expect("encodes");
        assert!(
            encoded.len() < operation.len() + 32,
            "{} bytes for an operation of {}",
            encoded.len(),
            operation.len()
        );
        assert_eq!(
            rmp_serde::from_slice::<Request>(&encoded).ok(),
            Some(request.clone())
        );

        let before = RequestBefore4 {
            client: 7,
            request_number: 9,
            operation,
        };
        let old = rmp_serde::to_vec(&before).expect("encodes");
        assert!(
            old.len() > encoded.len() + 1_000,
            "the array took more room"
        );
        assert_eq!(rmp_serde::from_slice::<Request>(&old).ok(), Some(request));
    }

    fn request(number: u64) -> Request {
        Request {
            client: 7,
            request_number: number,
            operation: vec![1, 2, 3],
        }
    }

    #[test]
    fn checksum_detects_a_changed_byte_and_the_chain_detects_a_wrong_parent() {
        let first = Entry::new(1, 0, CHECKSUM_ROOT, vec![request(1)]);
        let second = Entry::new(2, 0, first.checksum, vec![request(2)]);
        assert!(is_chained_log(&[first.clone(), second.clone()]));

        let mut torn = second.clone();
        torn.requests[0].operation[0] ^= 1;
        assert!(!torn.is_intact());
        assert!(!is_chained_log(&[first.clone(), torn]));

        let orphan = Entry::new(2, 0, 12345, vec![request(2)]);
        assert!(!is_chained_log(&[first, orphan]));
        assert!(!is_chained_log(&[second]));
    }
}
