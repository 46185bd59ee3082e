//! A partition machine's checkpoints carry no state: the snapshot is a reference to a
//! savepoint of its own database, which a restart rolls back to whatever was applied after it;
//! a peer installs an image of a checkpoint as the same checkpoint; a reference the database
//! does not hold is refused; only the last two checkpoints are kept, and the file stops growing.

use super::*;
use crate::WriteSet;
use tessera_consensus::state_machine::StateMachine;
use tessera_contract::EntityAddress;

fn counter(id: u32) -> EntityAddress {
    EntityAddress::new("t", "counter", format!("c{id}"))
}

/// Writes `value` to counter `id` (each counter written once per test).
fn put(machine: &mut PartitionMachine, id: u32, value: u8) {
    let mut writes = WriteSet::new(counter(id));
    writes.put("value", vec![value; 1024]);
    let expect = machine.stamp(&counter(id)).expect("a stamp");
    let stamp = (u64::from(id) << 16) + u64::from(value) + 1;
    let op = PartitionOp::write(writes, expect, stamp, 1_000, vec![]).expect("replicable");
    let result = PartitionResult::decode(&machine.apply(&op.encode()));
    assert_eq!(result, PartitionResult::Applied { reply: vec![] });
}

fn image(machine: &PartitionMachine) -> Vec<u8> {
    machine.image().expect("an image")
}

#[test]
fn a_checkpoint_is_a_reference_and_a_restart_rolls_back_to_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("p0.redb");
    let mut machine = PartitionMachine::open(&path).expect("opens");
    for id in 0..64 {
        put(&mut machine, id, 1);
    }
    let reference = machine.snapshot();
    assert!(
        reference.len() <= 16,
        "a checkpoint of 64 KiB of state is {} bytes",
        reference.len()
    );
    let at_checkpoint = image(&machine);
    for id in 0..8 {
        put(&mut machine, id, 2);
    }
    put(&mut machine, 99, 3);
    let later = image(&machine);
    drop(machine);

    // Restarted as the group driver starts it: emptied, then the journal's checkpoint restored.
    let mut restarted = PartitionMachine::open(&path).expect("opens again");
    restarted.clear().expect("clears");
    restarted
        .restore(&reference)
        .expect("the reference restores");
    assert_eq!(
        image(&restarted),
        at_checkpoint,
        "exactly the checkpoint's rows"
    );
    // The journal's log above the checkpoint applies again to the same state.
    for id in 0..8 {
        put(&mut restarted, id, 2);
    }
    put(&mut restarted, 99, 3);
    assert_eq!(image(&restarted), later);
    assert_eq!(
        restarted.snapshot(),
        {
            let mut again = PartitionMachine::in_memory().expect("a machine");
            for id in 0..64 {
                put(&mut again, id, 1);
            }
            for id in 0..8 {
                put(&mut again, id, 2);
            }
            put(&mut again, 99, 3);
            again.snapshot()
        },
        "replicas that applied the same requests reference their checkpoints alike"
    );
}

#[test]
fn a_peer_installs_the_image_of_a_checkpoint_as_the_same_checkpoint() {
    let mut source = PartitionMachine::in_memory().expect("a machine");
    for id in 0..16 {
        put(&mut source, id, 1);
    }
    // The replica reads the image right after a checkpoint.
    let reference = source.snapshot();
    let at_checkpoint = image(&source);
    let sent = source.transfer_image();
    assert!(source.snapshot_is_reference());
    assert!(sent.len() > 16 * 1024, "the image holds every row");

    let mut peer = PartitionMachine::in_memory().expect("a machine");
    put(&mut peer, 40, 9);
    peer.restore(&sent).expect("the image installs");
    assert_eq!(image(&peer), at_checkpoint, "the checkpoint's rows");
    assert_eq!(
        peer.snapshot(),
        reference,
        "the same checkpoint as the source's"
    );
    // Garbage and truncated snapshots are refused and change nothing.
    for bad in [
        &sent[..5],
        &[0xc1, 9, 0, 0, 0, 0, 0, 0, 0, 0][..],
        &[0xc1, 0x00][..],
    ] {
        assert!(peer.restore(bad).is_err());
        assert_eq!(image(&peer), at_checkpoint);
    }
}

#[test]
fn a_reference_the_database_does_not_hold_is_refused_and_only_two_are_kept() {
    let mut machine = PartitionMachine::in_memory().expect("a machine");
    put(&mut machine, 0, 1);
    let first = machine.snapshot();
    put(&mut machine, 1, 1);
    let second = machine.snapshot();
    put(&mut machine, 2, 1);
    let third = machine.snapshot();
    let now = image(&machine);
    let error = machine
        .restore(&first)
        .expect_err("the first checkpoint was forgotten");
    assert!(error.to_string().contains("holds no checkpoint"), "{error}");
    assert_eq!(image(&machine), now, "a refused restore changes nothing");
    let mut other = PartitionMachine::in_memory().expect("a machine");
    assert!(
        other.restore(&third).is_err(),
        "another database's checkpoint"
    );
    machine
        .restore(&second)
        .expect("the one before the last is kept");
    assert_eq!(machine.get(&counter(2), "value"), Ok(None));
    assert!(machine.get(&counter(1), "value").expect("reads").is_some());
}

#[test]
fn a_partition_file_stops_growing_while_its_rows_are_overwritten_between_checkpoints() {
    // 1 MiB of rows overwritten again and again, a checkpoint after each pass. A savepoint keeps
    // the pages it references from reuse, so a machine that kept its savepoints would grow the
    // file with every pass; one that forgets all but two reaches a size and stays there.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("p0.redb");
    let mut machine = PartitionMachine::open(&path).expect("opens");
    let mut pass = 0u8;
    let mut overwrite = |passes: u8, machine: &mut PartitionMachine| {
        for _ in 0..passes {
            pass += 1;
            for id in 0..256 {
                put(machine, id, pass);
            }
            machine.snapshot();
        }
        std::fs::metadata(&path).expect("the file").len()
    };
    let settled = overwrite(32, &mut machine);
    let later = overwrite(64, &mut machine);
    assert!(
        later <= settled + (settled >> 3),
        "the partition's file grew from {settled} to {later} bytes for 1 MiB of state"
    );
}

#[test]
fn a_restart_empties_the_rows_only_when_no_checkpoint_replaces_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("p0.redb");
    let mut machine = PartitionMachine::open(&path).expect("opens");
    for id in 0..16 {
        put(&mut machine, id, 1);
    }
    let reference = machine.snapshot();
    let at_checkpoint = image(&machine);
    put(&mut machine, 99, 2);
    drop(machine);

    // A journal with a checkpoint: forgotten, restored, settled — the checkpoint's rows.
    let mut restarted = PartitionMachine::open(&path).expect("opens");
    restarted.forget();
    restarted.restore(&reference).expect("restores");
    restarted.settle().expect("settles");
    assert_eq!(image(&restarted), at_checkpoint);
    drop(restarted);

    // A journal without one: forgotten and settled, the machine is empty.
    let empty = image(&PartitionMachine::in_memory().expect("a machine"));
    let mut restarted = PartitionMachine::open(&path).expect("opens");
    restarted.forget();
    restarted.settle().expect("settles");
    assert_eq!(image(&restarted), empty);
    drop(restarted);

    // Nor does an op the journal's log replays before any settle (a group of one commits its
    // log as it opens) apply to the old rows: it applies to the empty state, as it first did.
    let mut machine = PartitionMachine::open(&path).expect("opens");
    for id in 0..16 {
        put(&mut machine, id, 1);
    }
    drop(machine);
    let mut restarted = PartitionMachine::open(&path).expect("opens");
    restarted.forget();
    let mut writes = WriteSet::new(counter(0));
    writes.put("value", vec![3]);
    let first_write = PartitionOp::write(writes, 0, 1, 1_000, vec![]).expect("replicable");
    assert_eq!(
        PartitionResult::decode(&restarted.apply(&first_write.encode())),
        PartitionResult::Applied { reply: vec![] },
        "it applies against the empty state's stamp, 0"
    );
    assert_eq!(
        restarted.get(&counter(0), "value").expect("get"),
        Some(vec![3])
    );
    assert_eq!(restarted.get(&counter(1), "value").expect("get"), None);
}
