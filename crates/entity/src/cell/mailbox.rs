//! A cell's mailbox as its senders see it: the bounded channel to the cell's task, with a count
//! of the messages posted and not yet finished. A sender may run a message on its own task only
//! while that count is zero (nothing of anyone's is waiting), which is what keeps each sender's
//! messages in order whichever way they ran.

use super::CellShared;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::{mpsc, oneshot};

/// What a cell's mailbox carries.
pub(crate) enum CellMessage {
    /// A message for the entity.
    Deliver(tessera_contract::Envelope),
    /// Activate without a message (remember-entities respawn).
    Activate,
    /// Passivate after the messages ahead of this one.
    Passivate,
    /// Passivate and report when the cell is gone (handoff, shutdown); not a passivation for
    /// remember-entities, so the entity stays remembered.
    Stop(oneshot::Sender<()>),
    /// Give the instance back to the pool (deactivating it) but stay live: another entity
    /// needs the slot. The next message activates a fresh instance.
    Release,
}

/// The sending side of one cell's mailbox.
#[derive(Clone)]
pub(crate) struct Mailbox {
    sender: mpsc::Sender<CellMessage>,
    shared: Arc<CellShared>,
}

impl Mailbox {
    pub(super) fn new(sender: mpsc::Sender<CellMessage>, shared: Arc<CellShared>) -> Self {
        Mailbox { sender, shared }
    }

    /// Posts `message` if the mailbox has room.
    pub(crate) fn try_post(
        &self,
        message: CellMessage,
    ) -> Result<(), mpsc::error::TrySendError<CellMessage>> {
        // Counted before it is visible, so the cell never finishes a message not yet counted.
        self.shared.unfinished.fetch_add(1, Ordering::AcqRel);
        let sent = self.sender.try_send(message);
        if sent.is_err() {
            self.shared.unfinished.fetch_sub(1, Ordering::AcqRel);
        }
        sent
    }

    /// Posts `message`, waiting for room. False when the cell is gone.
    pub(crate) async fn post(&self, message: CellMessage) -> bool {
        self.shared.unfinished.fetch_add(1, Ordering::AcqRel);
        let sent = self.sender.send(message).await.is_ok();
        if !sent {
            self.shared.unfinished.fetch_sub(1, Ordering::AcqRel);
        }
        sent
    }

    /// Messages waiting in the mailbox now.
    pub(crate) fn depth(&self) -> usize {
        self.sender.max_capacity() - self.sender.capacity()
    }

    /// What the cell's task and the senders running its messages share.
    pub(crate) fn cell(&self) -> &Arc<CellShared> {
        &self.shared
    }
}
