//! The partition machine: writes apply only against the stamp they read, a resubmitted write
//! applies once, barriers see changes, and snapshots restore the same state.

use super::*;
use crate::WriteSet;
use tessera_consensus::state_machine::StateMachine;
use tessera_contract::EntityAddress;

fn counter() -> EntityAddress {
    EntityAddress::new("t", "counter", "c1")
}

fn put(machine: &mut PartitionMachine, expect: u64, stamp: u64, value: u8) -> PartitionResult {
    let mut writes = WriteSet::new(counter());
    writes.put("value", vec![value]);
    let op = PartitionOp::write(&writes, expect, stamp, vec![value]).expect("replicable");
    PartitionResult::decode(&machine.apply(&op.encode()))
}

#[test]
fn a_write_applies_only_against_the_stamp_it_read_and_once() {
    let mut machine = PartitionMachine::default();
    assert_eq!(
        put(&mut machine, 0, 5, 1),
        PartitionResult::Applied { reply: vec![1] }
    );
    // Resubmitted (a retry after a lost answer): answered as applied, not applied again.
    assert_eq!(
        put(&mut machine, 0, 5, 1),
        PartitionResult::Applied { reply: vec![1] }
    );
    assert_eq!(machine.stamp(&counter()), 5);
    // Computed from the copy before stamp 5 (a deposed primary's): refused, nothing changes.
    assert_eq!(
        put(&mut machine, 0, 6, 9),
        PartitionResult::Conflict { stamp: 5 }
    );
    assert_eq!(machine.get(&counter(), "value"), Some(&[1u8][..]));
    assert_eq!(
        put(&mut machine, 5, 7, 2),
        PartitionResult::Applied { reply: vec![2] }
    );
    assert_eq!(machine.get(&counter(), "value"), Some(&[2u8][..]));
}

#[test]
fn a_barrier_commits_only_if_the_state_read_is_still_current() {
    let mut machine = PartitionMachine::default();
    put(&mut machine, 0, 5, 1);
    let check = |machine: &mut PartitionMachine, expect| {
        let op = PartitionOp::Check {
            entity: counter(),
            expect,
            reply: vec![expect as u8],
        };
        PartitionResult::decode(&machine.apply(&op.encode()))
    };
    assert_eq!(
        check(&mut machine, 5),
        PartitionResult::Checked { reply: vec![5] }
    );
    assert_eq!(
        check(&mut machine, 0),
        PartitionResult::Conflict { stamp: 5 }
    );
}

#[test]
fn removed_keys_keep_the_stamp_and_garbage_changes_nothing() {
    let mut machine = PartitionMachine::default();
    put(&mut machine, 0, 5, 1);
    let mut writes = WriteSet::new(counter());
    writes.delete("value");
    writes.set_version(3);
    let op = PartitionOp::write(&writes, 5, 6, Vec::new()).expect("replicable");
    machine.apply(&op.encode());
    assert_eq!(machine.get(&counter(), "value"), None);
    assert_eq!(machine.version(&counter()), Some(3));
    // A write computed when the entity was new cannot apply after the removal either.
    assert_eq!(
        put(&mut machine, 0, 8, 4),
        PartitionResult::Conflict { stamp: 6 }
    );
    let before = machine.clone();
    assert!(matches!(
        PartitionResult::decode(&machine.apply(&[0xc1, 0x00])),
        PartitionResult::Malformed(_)
    ));
    assert_eq!(machine, before);
}

#[test]
fn a_write_with_messaging_or_a_zero_stamp_is_not_replicable() {
    let mut writes = WriteSet::new(counter());
    writes.put("value", vec![1]);
    assert_eq!(
        PartitionOp::write(&writes, 0, 0, Vec::new()),
        Err(WriteNotReplicable::ZeroStamp)
    );
    writes.messaging_mut().cancels.push(1);
    assert_eq!(
        PartitionOp::write(&writes, 0, 1, Vec::new()),
        Err(WriteNotReplicable::Messaging)
    );
}

#[test]
fn a_snapshot_restores_the_same_state_and_garbage_leaves_it_unchanged() {
    let mut machine = PartitionMachine::default();
    put(&mut machine, 0, 5, 1);
    put(&mut machine, 5, 6, 2);
    let mut copy = PartitionMachine::default();
    copy.restore(&machine.snapshot())
        .expect("a snapshot restores");
    assert_eq!(copy, machine);
    assert_eq!(copy.snapshot(), machine.snapshot());
    assert!(copy.restore(&[0xc1]).is_err());
    assert_eq!(copy, machine);
}
