//! The partition machine as one member of a partition's VSR group runs it (the group driver
//! of `tessera-consensus`): what it applied is told to the member's observer — each entity a
//! committed write changed, in order — so a node learns of writes to entities it does not
//! serve (a backup's cache, a primary-to-be); and the tick and timers its group runs with.

use super::machine::PartitionMachine;
use super::op::{PartitionOp, PartitionResult};
use std::collections::VecDeque;
use tessera_consensus::config::Timeouts;
use tessera_consensus::group::GroupMachine;
use tessera_consensus::state_machine::{ImageReader, RestoreError, StateMachine};
use tessera_contract::EntityAddress;

/// A partition group's tick, in ticks of the cluster's (a node's `cluster.tick_ms`, 10 ms by
/// default): a node runs dozens of partition groups, and each tick wakes each of them, which
/// an idle node paid for more than for anything else (`docs/partitions.md`, "What one group
/// costs"). Commits are not tick-driven: a primary tells its backups of a commit at once.
pub const PARTITION_TICK_FACTOR: u32 = 10;

/// A partition group's protocol timers, in its ticks (100 ms by default): a heartbeat every
/// tick, a view change after 300 ms of silence (400 ms per view change tried) — the
/// metadata plane's 300 and 400 ms — and resends every tick.
pub const PARTITION_TIMEOUTS: Timeouts = Timeouts {
    heartbeat_interval_ticks: 1,
    primary_silence_timeout_ticks: 3,
    view_change_timeout_ticks: 4,
    resend_interval_ticks: 1,
};

/// Applied writes held for the observer, at most: the driver takes them after every
/// handler, so this only bounds a machine run without a driver (the simulator). Past it the
/// oldest are dropped and counted.
pub const UNOBSERVED_WRITES_MAX: usize = 4096;

/// What a member's observer hears of one applied operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartitionApplied {
    /// A write changed `entity`; its stamp is now `stamp`.
    Written {
        /// The entity.
        entity: EntityAddress,
        /// Its new stamp.
        stamp: u64,
    },
    /// The whole state was replaced by a checkpoint (state transfer): every entity may have
    /// changed.
    Restored,
}

/// A partition group member's state machine: the [`PartitionMachine`] and what it applied
/// that the observer has not heard of yet.
///
/// ```
/// use tessera_consensus::group::GroupMachine;
/// use tessera_consensus::state_machine::StateMachine;
/// use tessera_contract::EntityAddress;
/// use tessera_state::WriteSet;
/// use tessera_state::partition::{PartitionApplied, PartitionMachine, PartitionOp, PartitionReplica};
///
/// let mut replica = PartitionReplica::new(PartitionMachine::in_memory().unwrap());
/// let counter = EntityAddress::new("t", "counter", "c1");
/// let mut writes = WriteSet::new(counter.clone());
/// writes.put("value", vec![1]);
/// replica.apply(&PartitionOp::write(writes, 0, 3, 1_000, vec![1]).unwrap().encode());
/// assert_eq!(replica.take_applied(), [PartitionApplied::Written { entity: counter, stamp: 3 }]);
/// ```
#[derive(Debug)]
pub struct PartitionReplica {
    machine: PartitionMachine,
    unobserved: VecDeque<PartitionApplied>,
    /// Applied writes dropped unobserved (past [`UNOBSERVED_WRITES_MAX`]).
    dropped: u64,
}

impl PartitionReplica {
    /// A member's replica applying to `machine`.
    pub fn new(machine: PartitionMachine) -> Self {
        PartitionReplica {
            machine,
            unobserved: VecDeque::new(),
            dropped: 0,
        }
    }

    /// The partition's state as this member applied it.
    pub fn machine(&self) -> &PartitionMachine {
        &self.machine
    }

    /// Applied writes dropped before an observer heard of them.
    pub fn dropped_unobserved(&self) -> u64 {
        self.dropped
    }

    fn note(&mut self, applied: PartitionApplied) {
        if self.unobserved.len() == UNOBSERVED_WRITES_MAX {
            self.unobserved.pop_front();
            self.dropped += 1;
        }
        self.unobserved.push_back(applied);
    }
}

impl StateMachine for PartitionReplica {
    fn apply(&mut self, operation: &[u8]) -> Vec<u8> {
        let op = match rmp_serde::from_slice::<PartitionOp>(operation) {
            Ok(op) => op,
            Err(error) => {
                let reason = format!("an op that does not decode: {error}");
                return PartitionResult::Malformed(reason).encode();
            }
        };
        let written: Vec<(EntityAddress, u64)> = match &op {
            PartitionOp::Write { writes, stamp, .. } => vec![(writes.entity().clone(), *stamp)],
            PartitionOp::Install {
                stamp,
                type_key,
                part,
                ..
            } => part
                .entities
                .iter()
                .map(|record| {
                    let entity = EntityAddress::new(
                        type_key.tenant.as_str(),
                        type_key.entity_type.as_str(),
                        record.id.as_str(),
                    );
                    (entity, *stamp)
                })
                .collect(),
            PartitionOp::Settle { .. }
            | PartitionOp::Check { .. }
            | PartitionOp::Remember { .. }
            | PartitionOp::Seal
            | PartitionOp::Fill { .. }
            | PartitionOp::Open { .. } => Vec::new(),
        };
        let opens = matches!(op, PartitionOp::Open { .. });
        let result = self.machine.apply_op(op);
        if let PartitionResult::Applied { .. } = &result {
            for (entity, stamp) in written {
                self.note(PartitionApplied::Written { entity, stamp });
            }
            if opens {
                self.note(PartitionApplied::Restored);
            }
        }
        result.encode()
    }

    fn snapshot(&self) -> Vec<u8> {
        self.machine.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), RestoreError> {
        self.machine.restore(snapshot)?;
        self.note(PartitionApplied::Restored);
        Ok(())
    }

    fn snapshot_is_reference(&self) -> bool {
        self.machine.snapshot_is_reference()
    }

    fn transfer_image(&self) -> Vec<u8> {
        self.machine.transfer_image()
    }

    fn transfers_in_parts(&self) -> bool {
        self.machine.transfers_in_parts()
    }

    fn image_reader(&self) -> Result<Box<dyn ImageReader>, String> {
        self.machine.image_reader()
    }

    fn stage_image(&mut self, offset: u64, bytes: &[u8]) -> Result<(), RestoreError> {
        self.machine.stage_image(offset, bytes)
    }

    fn install_staged_image(&mut self) -> Result<(), RestoreError> {
        self.machine.install_staged_image()?;
        self.note(PartitionApplied::Restored);
        Ok(())
    }
}

impl GroupMachine for PartitionReplica {
    type Applied = PartitionApplied;

    fn reset(&mut self) -> Result<(), RestoreError> {
        self.machine
            .clear()
            .map_err(|error| RestoreError::Malformed(format!("storage: {error}")))?;
        self.unobserved.clear();
        self.dropped = 0;
        Ok(())
    }

    fn restarting(&mut self) -> Result<(), RestoreError> {
        self.machine.forget();
        self.unobserved.clear();
        self.dropped = 0;
        Ok(())
    }

    fn restarted(&mut self) -> Result<(), RestoreError> {
        self.machine
            .settle()
            .map_err(|error| RestoreError::Malformed(format!("storage: {error}")))
    }

    fn take_applied(&mut self) -> Vec<PartitionApplied> {
        self.unobserved.drain(..).collect()
    }

    fn fault(&self) -> Option<&str> {
        self.machine.fault()
    }
}
