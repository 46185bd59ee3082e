//! The replica's checkpoints: taking one every `checkpoint_interval_ops` applied ops (and
//! trimming the log below it), restoring the latest at a restart, installing one a peer sent
//! ([`Checkpoint`]), and the one a peer is sent: the latest, with the state machine's
//! [`StateMachine::transfer_image`] in place of its snapshot when snapshots are references.

use super::apply::entry_bytes;
use super::checkpoint::{Checkpoint, CheckpointError, decode_state, encode_state};
use super::client_table::ClientTable;
use super::config::{CHECKPOINT_BYTES_MAX, CHECKPOINT_LOG_BYTES};
use super::journal::Journal;
use super::log::Log;
use super::message::OpNumber;
use super::replica::{Action, Replica};
use super::state_machine::StateMachine;

impl<J: Journal, S: StateMachine> Replica<J, S> {
    /// Checkpoints the state just after applying `self.applied` and trims the log.
    ///
    /// A state larger than [`CHECKPOINT_BYTES_MAX`] is not checkpointed (no replica could
    /// transfer it): the state is what clients' commands made it, so every replica would reach
    /// the same size at the same op, and an assert here would stop them all at once, and again
    /// at every replay. The checkpoint is skipped instead, counted and logged; the previous
    /// one stays and the log is not trimmed past it. The state machine must bound its own size
    /// (the catalog does, with tenant quotas) so this never happens.
    pub(super) fn take_checkpoint(&mut self) {
        if self.journal.has_failed() {
            return;
        }
        let op = self.applied;
        self.applied_bytes = 0;
        let Some(entry_checksum) = self.log.checksum_at(op) else {
            panic!("the op just applied is in the log");
        };
        let state = self.encode_state();
        if state.len() as u64 > CHECKPOINT_BYTES_MAX {
            self.counters.checkpoints_skipped_oversized += 1;
            tracing::error!(
                op,
                state_bytes = state.len(),
                limit = CHECKPOINT_BYTES_MAX,
                "checkpoint skipped: the state is larger than a checkpoint may be"
            );
            return;
        }
        let checkpoint = Checkpoint::new(op, entry_checksum, state);
        self.journal.append_checkpoint(&checkpoint);
        self.outbox.push(Action::Checkpoint {
            op,
            state_checksum: checkpoint.state_checksum,
            installed: false,
        });
        self.checkpoint = checkpoint;
        self.transfer_cache = None;
        self.counters.checkpoints_taken += 1;
        self.durable_dirty = true;
        self.trim_log();
        // Durable before the machine is asked for another snapshot, which lets a machine that
        // keeps its own state forget all but the last two (see `StateMachine::snapshot`).
        self.make_durable();
    }

    fn encode_state(&self) -> Vec<u8> {
        encode_state(&self.clients, self.state_machine.snapshot())
    }

    /// Replaces the state machine and client table with the checkpoint's state, which becomes
    /// the applied state. The log is the caller's to adjust.
    pub(super) fn restore_checkpoint(
        &mut self,
        checkpoint: Checkpoint,
    ) -> Result<(), CheckpointError> {
        let (clients, machine) = decode_state(&checkpoint.state)?;
        self.state_machine.restore(&machine)?;
        self.adopt_state(checkpoint.op, checkpoint.entry_checksum, clients);
        Ok(())
    }

    /// Takes the state machine's state, just replaced, with `clients` as the applied state
    /// after `op` (whose entry's checksum is `entry_checksum`), and as the latest checkpoint.
    fn adopt_state(&mut self, op: OpNumber, entry_checksum: u64, clients: ClientTable) {
        self.clients = clients;
        self.applied = op;
        self.applied_bytes = 0;
        self.commit = self.commit.max(op);
        // Re-encoded from the state as restored: a checker compares what the replica holds, and
        // a machine that keeps its own state gives the reference to what it just made durable,
        // which is what the journal keeps, not the image a peer sent.
        let held = Checkpoint::new(op, entry_checksum, self.encode_state());
        self.outbox.push(Action::Checkpoint {
            op: held.op,
            state_checksum: held.state_checksum,
            installed: true,
        });
        self.checkpoint = held;
        self.transfer_cache = None;
    }

    /// Installs a checkpoint received from a peer (already verified): the state is replaced,
    /// the log keeps the entries above it if they chain to it and starts afresh from it
    /// otherwise, and the checkpoint is journaled before anything that depends on it is sent.
    pub(super) fn install_checkpoint(
        &mut self,
        checkpoint: Checkpoint,
    ) -> Result<(), CheckpointError> {
        assert!(
            checkpoint.op > self.applied,
            "only a newer checkpoint is installed"
        );
        let (op, entry_checksum) = (checkpoint.op, checkpoint.entry_checksum);
        self.restore_checkpoint(checkpoint)?;
        self.journal_installed(op, entry_checksum);
        Ok(())
    }

    /// Installs the image the state machine staged from a peer's stream (complete and
    /// verified), with `clients`, as the checkpoint after `op`; as
    /// [`Replica::install_checkpoint`] does otherwise.
    pub(super) fn install_staged_image(
        &mut self,
        op: OpNumber,
        entry_checksum: u64,
        clients: ClientTable,
    ) -> Result<(), CheckpointError> {
        assert!(op > self.applied, "only a newer checkpoint is installed");
        self.state_machine.install_staged_image()?;
        self.adopt_state(op, entry_checksum, clients);
        self.journal_installed(op, entry_checksum);
        Ok(())
    }

    /// Journals the checkpoint just installed at `op` and adjusts the log to it: it keeps the
    /// entries above if they chain to it and starts afresh from it otherwise.
    fn journal_installed(&mut self, op: OpNumber, entry_checksum: u64) {
        self.journal.append_checkpoint(&self.checkpoint);
        if self.log.checksum_at(op) == Some(entry_checksum) {
            self.log.discard_through(op);
        } else {
            self.log = Log::from_checkpoint(op, entry_checksum, Vec::new());
        }
        self.repair_target = self.repair_target.max(op);
        self.counters.states_installed += 1;
        self.durable_dirty = true;
        self.trim_log();
        self.make_durable();
    }

    /// The checkpoint a peer is sent (state transfer, a follower): the latest, carrying the
    /// whole state. For a machine whose snapshots are references, the state is its
    /// [`StateMachine::transfer_image`], read while the state is the checkpoint's — so a
    /// replica that applied ops since its last checkpoint takes one first — encoded once per
    /// checkpoint and kept while peers ask for it (dropped after a view-change timeout without
    /// a request).
    pub fn transferable_checkpoint(&mut self) -> &Checkpoint {
        if !self.state_machine.snapshot_is_reference() {
            return &self.checkpoint;
        }
        let fresh = self
            .transfer_cache
            .as_ref()
            .is_some_and(|(cached, _)| cached.op == self.checkpoint.op);
        if !fresh {
            if self.checkpoint.op < self.applied {
                self.take_checkpoint();
            }
            let at_checkpoint = self.checkpoint.op > 0 && self.checkpoint.op == self.applied;
            self.transfer_cache = at_checkpoint.then(|| (self.image_checkpoint(), 0));
        }
        let now_ticks = self.now_ticks;
        match self.transfer_cache.as_mut() {
            Some((image, used_tick)) => {
                *used_tick = now_ticks;
                image
            }
            None => &self.checkpoint,
        }
    }

    /// The latest checkpoint with the machine's transfer image as its state (the state must be
    /// the checkpoint's).
    fn image_checkpoint(&self) -> Checkpoint {
        let Ok((clients, _)) = decode_state(&self.checkpoint.state) else {
            panic!("a checkpoint this replica encoded decodes");
        };
        let state = encode_state(&clients, self.state_machine.transfer_image());
        Checkpoint::new(self.checkpoint.op, self.checkpoint.entry_checksum, state)
    }

    /// Drops the transfer image once no peer asked for it for a view-change timeout: it may
    /// be as large as the state.
    pub(super) fn tick_transfer_cache(&mut self) {
        let idle = self.config.timeouts.view_change_timeout_ticks;
        if self
            .transfer_cache
            .as_ref()
            .is_some_and(|(_, used_tick)| self.now_ticks - used_tick >= idle)
        {
            self.transfer_cache = None;
        }
    }

    /// Discards entries more than one interval below the checkpoint, below it past
    /// [`CHECKPOINT_LOG_BYTES`] of operations, and more below it if the log would otherwise
    /// hold more than `log_entries_max` entries.
    pub(super) fn trim_log(&mut self) {
        let interval = self.config.checkpoint_interval_ops;
        self.log
            .discard_through(self.checkpoint.op.saturating_sub(interval));
        let mut kept = 0;
        let mut keep_from = self.checkpoint.op + 1;
        for entry in self.log.entries().iter().rev() {
            if entry.op > self.checkpoint.op {
                continue;
            }
            kept += entry_bytes(entry);
            if kept > CHECKPOINT_LOG_BYTES {
                break;
            }
            keep_from = entry.op;
        }
        self.log.discard_through(keep_from.saturating_sub(1));
        let excess = self.op().saturating_sub(self.config.log_entries_max());
        self.log.discard_through(excess.min(self.checkpoint.op));
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::{CHECKPOINT_INTERVAL_OPS_MIN, Config};
    use super::super::journal::InMemoryJournal;
    use super::super::message::{Message, Request};
    use super::super::state_machine::RestoreError;
    use super::*;

    /// A state machine whose state is one byte over the checkpoint bound, as a state grown by
    /// clients' commands could be.
    struct Oversized;

    impl StateMachine for Oversized {
        fn apply(&mut self, _operation: &[u8]) -> Vec<u8> {
            Vec::new()
        }

        fn snapshot(&self) -> Vec<u8> {
            vec![0; CHECKPOINT_BYTES_MAX as usize + 1]
        }

        fn restore(&mut self, _snapshot: &[u8]) -> Result<(), RestoreError> {
            Ok(())
        }
    }

    #[test]
    fn an_oversized_state_skips_its_checkpoint_and_the_replica_goes_on() {
        let mut config = Config::new(1, 0);
        config.checkpoint_interval_ops = CHECKPOINT_INTERVAL_OPS_MIN;
        let mut replica = Replica::format(config, InMemoryJournal::new(), Oversized)
            .expect("a valid configuration formats");
        let ops = CHECKPOINT_INTERVAL_OPS_MIN + 1;
        for request_number in 1..=ops {
            replica.on_message(Message::Request(Request {
                client: 1,
                request_number,
                operation: vec![1],
            }));
            for _ in 0..4 {
                replica.tick();
            }
        }
        assert_eq!(
            replica.commit(),
            ops,
            "every op committed past the checkpoint"
        );
        assert_eq!(replica.counters().checkpoints_skipped_oversized, 1);
        assert_eq!(replica.counters().checkpoints_taken, 0);
    }
}
