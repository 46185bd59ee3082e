//! State transfer in parts, for a machine that [`transfers_in_parts`]: the checkpoint a
//! lagging replica installs is streamed, never held whole by either side.
//!
//! The stream is the client table (its length first, eight bytes little-endian, then its
//! image) followed by the machine's image, read from a view of the checkpoint's state
//! ([`StateMachine::image_reader`]). The source keeps one [`ImageSession`] per replica that
//! fetches: the reader, where it is, and the last part sent (to send again). The receiver pulls
//! one part at a time by offset (`RequestImage`), checks each against the stream's running
//! checksum ([`stream_checksum`], which every part carries), stages the machine's bytes apart
//! from its live state ([`StateMachine::stage_image`]), and installs them once the last part
//! is in ([`Replica::install_staged_image`]). Memory on either side is a part and what the
//! machine buffers, whatever the state's size.
//!
//! A part 0 of a newer checkpoint, or of the same one from the transfer's source (which
//! started its stream again), restarts the transfer; a part whose checksum does not match is
//! dropped and asked for again. A session idle for a view-change timeout is closed (its reader
//! may pin the state it reads), and so is a transfer that made no progress for one.
//!
//! [`transfers_in_parts`]: StateMachine::transfers_in_parts

use super::client_table::{ClientTable, ClientTableImage};
use super::config::{CHECKPOINT_BYTES_MAX, STATE_CHUNK_BYTES_MAX};
use super::image_progress::{
    CLIENTS_LENGTH_BYTES, ImageSession, ImageTransfer, ReceivedPart, SentPart,
};
use super::journal::Journal;
use super::message::{Message, OpNumber, ReplicaIndex, stream_checksum};
use super::replica::Replica;
use super::state_machine::StateMachine;

impl<J: Journal, S: StateMachine> Replica<J, S> {
    /// Handles `RequestImage` and `ImagePart` (any other message is not this module's).
    pub(super) fn on_image_message(&mut self, message: Message) {
        match message {
            Message::RequestImage {
                replica,
                applied,
                op,
                offset,
            } => self.on_request_image(replica, applied, op, offset),
            Message::ImagePart {
                replica,
                op,
                entry_checksum,
                offset,
                bytes,
                checksum,
                last,
            } => {
                let part = ReceivedPart {
                    op,
                    entry_checksum,
                    offset,
                    bytes,
                    checksum,
                    last,
                };
                self.on_image_part(replica, part)
            }
            _ => {}
        }
    }

    /// Starts fetching a checkpoint stream from `source`, unless a transfer is under way.
    pub(super) fn request_image(&mut self, source: ReplicaIndex) {
        if !self.is_peer(source) || self.fetching_state() {
            return;
        }
        self.image_transfer = Some(ImageTransfer::new(source, self.now_ticks));
        self.send_image_request();
    }

    fn send_image_request(&mut self) {
        let (replica, applied, now_ticks) = (self.config.replica, self.applied, self.now_ticks);
        let Some(transfer) = self.image_transfer.as_mut() else {
            return;
        };
        transfer.requested_tick = now_ticks;
        let message = Message::RequestImage {
            replica,
            applied,
            op: transfer.op,
            offset: transfer.received,
        };
        let source = transfer.source;
        self.send(source, message);
    }

    /// Resends the outstanding part request, abandons a transfer that made no progress for a
    /// view-change timeout, and closes sessions no peer used for as long.
    pub(super) fn tick_image_transfer(&mut self) {
        let timeouts = self.config.timeouts;
        let now_ticks = self.now_ticks;
        self.image_sessions
            .retain(|session| now_ticks - session.used_tick < timeouts.view_change_timeout_ticks);
        let Some(transfer) = self.image_transfer.as_ref() else {
            return;
        };
        if now_ticks - transfer.progress_tick >= timeouts.view_change_timeout_ticks {
            self.image_transfer = None;
        } else if now_ticks >= transfer.requested_tick + timeouts.resend_interval_ticks {
            self.send_image_request();
        }
    }

    fn on_request_image(
        &mut self,
        replica: ReplicaIndex,
        applied: OpNumber,
        op: OpNumber,
        offset: u64,
    ) {
        if !self.is_peer(replica) || self.checkpoint.op <= applied {
            return self.ignore();
        }
        self.send_image_part(replica, op, offset);
    }

    /// Sends `to` the part of its stream at `offset` of the checkpoint at `op`: the last part
    /// again, or the next; anything else starts a new stream of the latest checkpoint (taken
    /// first if this replica applied ops since), and sends its part 0.
    pub(super) fn send_image_part(&mut self, to: ReplicaIndex, op: OpNumber, offset: u64) {
        let chunk_bytes = self.config.state_chunk_bytes;
        let now_ticks = self.now_ticks;
        let index = self
            .image_sessions
            .iter()
            .position(|session| session.to == to);
        let resumes = index.is_some_and(|index| {
            let session = &self.image_sessions[index];
            session.op == op
                && (offset == session.sent.offset
                    || (offset == session.next_offset && !session.sent.last))
        });
        let index = match index {
            Some(index) if resumes => index,
            _ => {
                self.image_sessions.retain(|session| session.to != to);
                let Some(session) = self.open_image_session(to) else {
                    return;
                };
                self.image_sessions.push(session);
                self.image_sessions.len() - 1
            }
        };
        let session = &mut self.image_sessions[index];
        session.used_tick = now_ticks;
        // A new session holds no part yet (an empty, unfinished placeholder): read part 0.
        let unread = session.sent.bytes.is_empty() && !session.sent.last;
        if offset != session.sent.offset || unread {
            match next_part(session, chunk_bytes) {
                Ok(part) => session.sent = part,
                Err(error) => {
                    tracing::error!(%error, "the checkpoint's image could not be read for a peer");
                    self.image_sessions.remove(index);
                    return;
                }
            }
        }
        let session = &self.image_sessions[index];
        let message = Message::ImagePart {
            replica: self.config.replica,
            op: session.op,
            entry_checksum: session.entry_checksum,
            offset: session.sent.offset,
            bytes: session.sent.bytes.clone(),
            checksum: session.sent.checksum,
            last: session.sent.last,
        };
        self.send(to, message);
    }

    /// A new stream of the latest checkpoint for `to`, positioned before its part 0.
    fn open_image_session(&mut self, to: ReplicaIndex) -> Option<ImageSession> {
        if self.checkpoint.op < self.applied {
            self.take_checkpoint();
        }
        if self.checkpoint.op == 0 || self.checkpoint.op != self.applied {
            return None;
        }
        let reader = match self.state_machine.image_reader() {
            Ok(reader) => reader,
            Err(error) => {
                tracing::error!(%error, "the checkpoint's image could not be opened for a peer");
                return None;
            }
        };
        let table = rmp_serde::to_vec(&self.clients.image())
            .unwrap_or_else(|error| panic!("a client table always encodes: {error}"));
        let mut clients = (table.len() as u64).to_le_bytes().to_vec();
        clients.extend(table);
        Some(ImageSession {
            to,
            op: self.checkpoint.op,
            entry_checksum: self.checkpoint.entry_checksum,
            clients,
            reader: Some(reader),
            next_offset: 0,
            // Not a part sent: the first call reads part 0 in its place.
            sent: SentPart {
                offset: 0,
                bytes: Vec::new(),
                checksum: 0,
                last: false,
            },
            used_tick: self.now_ticks,
        })
    }

    fn on_image_part(&mut self, replica: ReplicaIndex, part: ReceivedPart) {
        let well_formed = self.is_peer(replica)
            && part.op > 0
            && part.bytes.len() <= STATE_CHUNK_BYTES_MAX
            && (!part.bytes.is_empty() || part.last);
        if !well_formed || part.op <= self.applied {
            return self.ignore();
        }
        let now_ticks = self.now_ticks;
        let transfer = self
            .image_transfer
            .get_or_insert_with(|| ImageTransfer::new(replica, now_ticks));
        let continues = transfer.source == replica
            && transfer.op == part.op
            && transfer.entry_checksum == part.entry_checksum
            && part.offset == transfer.received;
        let restarts = part.offset == 0
            && (transfer.op == 0
                || part.op > transfer.op
                || (part.op == transfer.op && replica == transfer.source));
        if !continues && !restarts {
            return self.ignore();
        }
        let previous = if continues { transfer.checksum } else { None };
        let checksum = stream_checksum(part.op, part.entry_checksum, previous, &part.bytes);
        if checksum != part.checksum && !self.config.canaries.install_unverified_state {
            self.counters.states_rejected += 1;
            return self.send_image_request();
        }
        if !continues {
            *transfer = ImageTransfer::new(replica, now_ticks);
            transfer.op = part.op;
            transfer.entry_checksum = part.entry_checksum;
        }
        transfer.received += part.bytes.len() as u64;
        transfer.checksum = Some(part.checksum);
        transfer.progress_tick = now_ticks;
        let staged = self.stage_part(!continues, &part.bytes);
        if let Err(error) = staged {
            tracing::warn!(%error, "a streamed checkpoint was refused: fetching it again");
            return self.refuse_image(replica);
        }
        if part.last {
            return self.finish_image_transfer(replica);
        }
        self.send_image_request();
    }

    /// Takes a part's bytes into the transfer: the client table's first, then the machine's
    /// (staged by the machine; `first` starts its image anew).
    fn stage_part(&mut self, first: bool, bytes: &[u8]) -> Result<(), String> {
        let Some(transfer) = self.image_transfer.as_mut() else {
            return Ok(());
        };
        if first {
            self.state_machine
                .stage_image(0, &[])
                .map_err(|error| error.to_string())?;
        }
        let mut rest = bytes;
        while !rest.is_empty() {
            let wanted = match transfer.clients_length() {
                None => CLIENTS_LENGTH_BYTES,
                Some(length) if length > CHECKPOINT_BYTES_MAX => {
                    return Err(format!("a client table of {length} bytes"));
                }
                Some(length) => CLIENTS_LENGTH_BYTES + length as usize,
            };
            if transfer.clients.len() < wanted {
                let take = (wanted - transfer.clients.len()).min(rest.len());
                transfer.clients.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                continue;
            }
            self.state_machine
                .stage_image(transfer.staged, rest)
                .map_err(|error| error.to_string())?;
            transfer.staged += rest.len() as u64;
            break;
        }
        Ok(())
    }

    /// Counts a refused stream and starts fetching it again from `source`.
    fn refuse_image(&mut self, source: ReplicaIndex) {
        self.counters.states_rejected += 1;
        self.image_transfer = None;
        self.request_image(source);
    }

    fn finish_image_transfer(&mut self, source: ReplicaIndex) {
        let Some(transfer) = self.image_transfer.take() else {
            return;
        };
        if self.journal.has_failed() {
            return;
        }
        let clients = transfer
            .clients
            .get(CLIENTS_LENGTH_BYTES..)
            .filter(|table| Some(table.len() as u64) == transfer.clients_length())
            .and_then(|table| rmp_serde::from_slice::<ClientTableImage>(table).ok())
            .and_then(ClientTable::from_image);
        let Some(clients) = clients else {
            return self.refuse_image(source);
        };
        if self
            .install_staged_image(transfer.op, transfer.entry_checksum, clients)
            .is_err()
        {
            return self.refuse_image(source);
        }
        self.after_state_installed();
    }
}

/// Reads the session's next part, of at most `max` bytes: the client table's rest first.
fn next_part(session: &mut ImageSession, max: usize) -> Result<SentPart, String> {
    let offset = session.next_offset;
    let clients_sent = usize::try_from(offset).map_or(session.clients.len(), |sent| {
        sent.min(session.clients.len())
    });
    let mut bytes = session.clients[clients_sent..].to_vec();
    bytes.truncate(max);
    let wanted = max - bytes.len();
    let mut last = false;
    if wanted > 0 {
        let reader = session
            .reader
            .as_mut()
            .ok_or("the image was read to its end")?;
        let read = reader.read(wanted)?;
        last = read.len() < wanted;
        bytes.extend(read);
    }
    if last {
        session.reader = None;
    }
    let previous = (offset > 0).then_some(session.sent.checksum);
    let checksum = stream_checksum(session.op, session.entry_checksum, previous, &bytes);
    session.next_offset = offset + bytes.len() as u64;
    Ok(SentPart {
        offset,
        bytes,
        checksum,
        last,
    })
}
