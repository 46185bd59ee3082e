//! Where a partition machine's apply time goes around checkpoints: 16,384 small writes to 64
//! entities, a checkpoint every 1,024, under four ways of checkpointing (a read transaction held
//! open from one checkpoint to the next — "pin" — is what a first version did). Run by
//! hand: `cargo run --release -p tessera-benches --example partition_apply_cost`.

use redb::ReadableDatabase;
use std::time::Instant;
use tessera_consensus::state_machine::StateMachine;
use tessera_contract::EntityAddress;
use tessera_state::WriteSet;
use tessera_state::partition::{PartitionMachine, PartitionOp, PartitionResult};

fn write(machine: &mut PartitionMachine, id: u64, stamp: u64) {
    let entity = EntityAddress::new("bench", "counter", format!("c{id}"));
    let expect = machine.stamp(&entity).expect("a stamp");
    let mut writes = WriteSet::new(entity);
    writes.put("value", stamp.to_le_bytes().repeat(2));
    let op = PartitionOp::write(writes, expect, stamp, 1_000, Vec::new()).expect("replicable");
    let result = PartitionResult::decode(&machine.apply(&op.encode()));
    assert_eq!(result, PartitionResult::Applied { reply: Vec::new() });
}

fn main() {
    for way in [
        "sync only",
        "pin + sync",
        "savepoint only",
        "snapshot (the machine's savepoint)",
    ] {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut machine = PartitionMachine::open(&dir.path().join("p0.redb")).expect("opens");
        let mut pinned = None;
        let mut savepoints: Vec<u64> = Vec::new();
        let start = Instant::now();
        for stamp in 1..=16_384u64 {
            write(&mut machine, stamp % 64, stamp);
            if stamp % 1024 != 0 {
                continue;
            }
            let database = machine.store().database().clone();
            match way {
                "sync only" => database
                    .begin_write()
                    .expect("the database answers")
                    .commit()
                    .expect("the database answers"),
                "pin + sync" => {
                    drop(pinned.take());
                    database
                        .begin_write()
                        .expect("the database answers")
                        .commit()
                        .expect("the database answers");
                    pinned = Some(database.begin_read().expect("the database answers"));
                }
                "savepoint only" => {
                    let transaction = database.begin_write().expect("the database answers");
                    savepoints.push(
                        transaction
                            .persistent_savepoint()
                            .expect("the database answers"),
                    );
                    if savepoints.len() > 2 {
                        transaction
                            .delete_persistent_savepoint(savepoints.remove(0))
                            .expect("the database answers");
                    }
                    transaction.commit().expect("the database answers");
                }
                _ => {
                    machine.snapshot();
                }
            }
        }
        drop(pinned);
        println!(
            "{way}: {:.1} µs a write",
            start.elapsed().as_secs_f64() * 1e6 / 16_384.0
        );
    }
}
