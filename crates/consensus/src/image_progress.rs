//! What a state transfer in parts keeps while it runs (`image_transfer.rs` runs it): on the
//! source, one [`ImageSession`] per fetching peer; on the receiver, the [`ImageTransfer`].

use super::message::{OpNumber, ReplicaIndex};
use super::state_machine::ImageReader;

/// Bytes of the client table's length at the start of a stream.
pub(super) const CLIENTS_LENGTH_BYTES: usize = 8;

/// A part as sent.
#[derive(Clone)]
pub(super) struct SentPart {
    pub(super) offset: u64,
    pub(super) bytes: Vec<u8>,
    pub(super) checksum: u64,
    pub(super) last: bool,
}

/// One replica's fetch of this replica's checkpoint, on the source.
pub(super) struct ImageSession {
    pub(super) to: ReplicaIndex,
    pub(super) op: OpNumber,
    pub(super) entry_checksum: u64,
    /// The client table's length and image, sent before the machine's image.
    pub(super) clients: Vec<u8>,
    /// Dropped once the last part is read (it may pin the state it reads); the last part
    /// can still be sent again.
    pub(super) reader: Option<Box<dyn ImageReader>>,
    /// Where the next part starts.
    pub(super) next_offset: u64,
    pub(super) sent: SentPart,
    pub(super) used_tick: u64,
}

/// A fetch of a peer's checkpoint stream, on the receiver.
pub(super) struct ImageTransfer {
    pub(super) source: ReplicaIndex,
    /// The checkpoint streamed (op 0 until the first part).
    pub(super) op: OpNumber,
    pub(super) entry_checksum: u64,
    /// Stream bytes received and their checksum.
    pub(super) received: u64,
    pub(super) checksum: Option<u64>,
    /// The client table's length and image, as received so far.
    pub(super) clients: Vec<u8>,
    /// Machine image bytes staged.
    pub(super) staged: u64,
    pub(super) progress_tick: u64,
    pub(super) requested_tick: u64,
}

impl ImageTransfer {
    pub(super) fn new(source: ReplicaIndex, now_ticks: u64) -> ImageTransfer {
        ImageTransfer {
            source,
            op: 0,
            entry_checksum: 0,
            received: 0,
            checksum: None,
            clients: Vec::new(),
            staged: 0,
            progress_tick: now_ticks,
            requested_tick: now_ticks,
        }
    }

    /// The client table's declared length, once its eight bytes are in.
    pub(super) fn clients_length(&self) -> Option<u64> {
        let length = self.clients.get(..CLIENTS_LENGTH_BYTES)?;
        Some(u64::from_le_bytes(<[u8; 8]>::try_from(length).ok()?))
    }
}

/// A part of the stream, as received.
pub(super) struct ReceivedPart {
    pub(super) op: OpNumber,
    pub(super) entry_checksum: u64,
    pub(super) offset: u64,
    pub(super) bytes: Vec<u8>,
    pub(super) checksum: u64,
    pub(super) last: bool,
}
