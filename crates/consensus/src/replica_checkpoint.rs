//! The replica's checkpoints: taking one every `checkpoint_interval_ops` applied ops (and
//! trimming the log below it), restoring the latest at a restart, and installing one a peer
//! sent ([`Checkpoint`]).

use super::apply::entry_bytes;
use super::checkpoint::{Checkpoint, CheckpointError, decode_state, encode_state};
use super::config::{CHECKPOINT_BYTES_MAX, CHECKPOINT_LOG_BYTES};
use super::journal::Journal;
use super::log::Log;
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
        self.counters.checkpoints_taken += 1;
        self.durable_dirty = true;
        self.trim_log();
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
        self.clients = clients;
        self.applied = checkpoint.op;
        self.applied_bytes = 0;
        self.commit = self.commit.max(checkpoint.op);
        // Recomputed from the state as restored, so a checker compares what the replica holds.
        let state_checksum = Checkpoint::compute_state_checksum(
            checkpoint.op,
            checkpoint.entry_checksum,
            &self.encode_state(),
        );
        self.outbox.push(Action::Checkpoint {
            op: checkpoint.op,
            state_checksum,
            installed: true,
        });
        self.checkpoint = checkpoint;
        Ok(())
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
        Ok(())
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
