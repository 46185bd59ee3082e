//! The state machine every replica of a partition group runs: committed [`PartitionOp`]s
//! applied in op order to the partition's entities.

use super::op::{PartitionOp, PartitionResult, ReplicatedChange};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tessera_consensus::state_machine::{RestoreError, StateMachine};
use tessera_contract::EntityAddress;

/// One entity's copy: the stamp of the last write applied to it, the plugin version it last
/// committed under, and its state keys. Kept after its last key is removed, so its stamp goes
/// on: a write computed before the removal must still find another stamp.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct EntityCopy {
    stamp: u64,
    version: Option<u32>,
    keys: BTreeMap<String, serde_bytes::ByteBuf>,
}

/// A partition's entities as the group's committed ops left them.
///
/// ```
/// use tessera_consensus::state_machine::StateMachine;
/// use tessera_contract::EntityAddress;
/// use tessera_state::WriteSet;
/// use tessera_state::partition::{PartitionMachine, PartitionOp, PartitionResult};
///
/// let counter = EntityAddress::new("t", "counter", "c1");
/// let mut machine = PartitionMachine::default();
/// let mut writes = WriteSet::new(counter.clone());
/// writes.put("value", vec![1]);
/// let op = PartitionOp::write(&writes, machine.stamp(&counter), 11, vec![1]).unwrap();
/// let first = PartitionResult::decode(&machine.apply(&op.encode()));
/// assert_eq!(first, PartitionResult::Applied { reply: vec![1] });
/// // The same message run again against the copy it first read is refused: it is stale.
/// let stale = PartitionOp::write(&writes, 0, 12, vec![1]).unwrap();
/// let second = PartitionResult::decode(&machine.apply(&stale.encode()));
/// assert_eq!(second, PartitionResult::Conflict { stamp: 11 });
/// assert_eq!(machine.get(&counter, "value"), Some(&[1u8][..]));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionMachine {
    entities: BTreeMap<EntityAddress, EntityCopy>,
}

impl PartitionMachine {
    /// The committed value of `key` for `entity`.
    pub fn get(&self, entity: &EntityAddress, key: &str) -> Option<&[u8]> {
        self.entities
            .get(entity)?
            .keys
            .get(key)
            .map(|value| value.as_slice())
    }

    /// The stamp of the last write applied to `entity`; 0 if it was never written.
    pub fn stamp(&self, entity: &EntityAddress) -> u64 {
        self.entities.get(entity).map_or(0, |copy| copy.stamp)
    }

    /// The plugin version `entity` last committed under.
    pub fn version(&self, entity: &EntityAddress) -> Option<u32> {
        self.entities.get(entity).and_then(|copy| copy.version)
    }

    /// Entities ever written.
    pub fn entity_count(&self) -> usize {
        self.entities.len()
    }

    /// Applies a decoded op (see [`StateMachine::apply`]).
    pub(super) fn apply_op(&mut self, op: PartitionOp) -> PartitionResult {
        match op {
            PartitionOp::Write {
                entity,
                expect,
                stamp,
                changes,
                version,
                reply,
            } => {
                if stamp == 0 {
                    return PartitionResult::Malformed("a write's stamp must not be 0".into());
                }
                let current = self.stamp(&entity);
                if current == stamp {
                    return PartitionResult::Applied { reply };
                }
                if current != expect {
                    return PartitionResult::Conflict { stamp: current };
                }
                let copy = self.entities.entry(entity).or_default();
                apply_changes(copy, changes);
                copy.stamp = stamp;
                copy.version = version.or(copy.version);
                PartitionResult::Applied { reply }
            }
            PartitionOp::Check {
                entity,
                expect,
                reply,
            } => match self.stamp(&entity) {
                current if current == expect => PartitionResult::Checked { reply },
                current => PartitionResult::Conflict { stamp: current },
            },
        }
    }
}

fn apply_changes(copy: &mut EntityCopy, changes: Vec<ReplicatedChange>) {
    for ReplicatedChange { key, value } in changes {
        match value {
            Some(value) => copy.keys.insert(key, value),
            None => copy.keys.remove(&key),
        };
    }
}

impl StateMachine for PartitionMachine {
    fn apply(&mut self, operation: &[u8]) -> Vec<u8> {
        let result = match rmp_serde::from_slice::<PartitionOp>(operation) {
            Ok(op) => self.apply_op(op),
            Err(error) => {
                PartitionResult::Malformed(format!("an op that does not decode: {error}"))
            }
        };
        result.encode()
    }

    fn snapshot(&self) -> Vec<u8> {
        let entities: Vec<(&EntityAddress, &EntityCopy)> = self.entities.iter().collect();
        rmp_serde::to_vec(&entities)
            .unwrap_or_else(|error| panic!("a partition's entities always encode: {error}"))
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), RestoreError> {
        let entities: Vec<(EntityAddress, EntityCopy)> = rmp_serde::from_slice(snapshot)
            .map_err(|error| RestoreError::Malformed(error.to_string()))?;
        self.entities = entities.into_iter().collect();
        Ok(())
    }
}
