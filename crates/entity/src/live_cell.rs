//! [`LiveCell`]: a sender's direct handle on one live cell, for a sender that keeps sending to
//! the same entity (the layer above holds one per route it resolved). It runs
//! a message on the caller's task without looking the cell up in the directory — no hashing of
//! the address, no directory lock — for as long as the cell lives; once the cell has left the
//! directory (passivated, stopped, evicted) it says so, and the sender goes through
//! [`Entities`](super::Entities) again.

use super::ClaimedRun;
use super::cell::CellShared;
use super::core::Core;
use std::sync::Arc;
use tessera_contract::Envelope;

/// A direct handle on one live cell ([`Entities::live_cell`](super::Entities::live_cell)).
#[derive(Clone)]
pub struct LiveCell {
    pub(super) cell: Arc<CellShared>,
    pub(super) core: Arc<Core>,
}

impl LiveCell {
    /// Whether the cell is still in the directory. Once false it stays false: get a new
    /// handle.
    pub fn is_live(&self) -> bool {
        !self.cell.is_gone()
    }

    /// `envelope` claimed to run on the caller's task, when the cell is live, idle (nothing
    /// waiting or running) and ready (its instance up on the active version) — the local fast
    /// path of [`Entities::deliver_here`](super::Entities::deliver_here), without the
    /// directory. The claim holds the entity until the message is done: run it
    /// ([`ClaimedRun::run`]). Gives the envelope back otherwise: deliver it through the
    /// directory, which queues it in order.
    pub fn run_here(&self, envelope: Envelope) -> Result<ClaimedRun<'_>, Envelope> {
        if self.cell.is_gone() {
            return Err(envelope);
        }
        let run = self.cell.claim(envelope)?;
        self.cell.used_at(self.core.next_use());
        Ok(run)
    }
}
