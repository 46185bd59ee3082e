//! How long a partition replica's restart takes after `kill -9` (its database not closed, so
//! redb repairs it on open), against the same restart after a clean close. A measurement run
//! by hand, two processes:
//!
//! ```text
//! cargo run --release -p tessera-benches --example partition_repair -- fill DIR MIB crash
//! cargo run --release -p tessera-benches --example partition_repair -- restart DIR [empty-first]
//! ```
//!
//! `fill` writes MIB of entity state through a partition machine, takes a checkpoint, writes
//! 1 MiB more (not checkpointed) and exits without closing the database (`crash`) or after
//! closing it (`clean`); `restart` opens the database, empties the machine and restores the
//! checkpoint, as a node's group driver does, and prints how long that took (and when the
//! emptying, which the restore then undoes, was done).

use std::path::Path;
use std::time::Instant;
use tessera_consensus::state_machine::StateMachine;
use tessera_contract::EntityAddress;
use tessera_state::WriteSet;
use tessera_state::partition::{PartitionMachine, PartitionOp, PartitionResult};

const VALUE_BYTES: usize = 4096;

fn write(machine: &mut PartitionMachine, id: u64, stamp: u64) {
    let entity = EntityAddress::new("bench", "blob", format!("e{id}"));
    let expect = machine.stamp(&entity).expect("a stamp");
    let mut writes = WriteSet::new(entity);
    writes.put("value", vec![(stamp % 251) as u8; VALUE_BYTES]);
    let op = PartitionOp::write(writes, expect, stamp, 1_000, Vec::new()).expect("replicable");
    let result = PartitionResult::decode(&machine.apply(&op.encode()));
    assert_eq!(result, PartitionResult::Applied { reply: Vec::new() });
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = Path::new(args.get(1).expect("a directory"));
    let database = dir.join("p0.redb");
    let checkpoint = dir.join("checkpoint");
    match args.first().map(String::as_str) {
        Some("fill") => {
            let mib: u64 = args.get(2).and_then(|mib| mib.parse().ok()).expect("MiB");
            let mut machine = PartitionMachine::open(&database).expect("opens");
            let entities = (mib << 20) / VALUE_BYTES as u64;
            for id in 0..entities {
                write(&mut machine, id, id + 1);
            }
            std::fs::write(&checkpoint, machine.snapshot()).expect("the checkpoint is kept");
            for id in 0..256 {
                write(&mut machine, id, entities + id + 1);
            }
            if args.get(3).map(String::as_str) == Some("crash") {
                std::process::exit(0);
            }
        }
        Some("restart") => {
            let reference = std::fs::read(&checkpoint).expect("the checkpoint");
            let start = Instant::now();
            let mut machine = PartitionMachine::open(&database).expect("opens");
            let opened = start.elapsed();
            // As the group driver does (`GroupMachine::restarting`, then `restarted`); with
            // `empty-first`, as it did before: every row emptied, then the savepoint restored.
            if args.get(2).map(String::as_str) == Some("empty-first") {
                machine.clear().expect("empties");
            } else {
                machine.forget();
            }
            let cleared = start.elapsed();
            machine.restore(&reference).expect("restores");
            machine.settle().expect("settles");
            let ms = |took: std::time::Duration| took.as_secs_f64() * 1e3;
            println!(
                "opened in {:.1} ms, emptied or forgotten by {:.1} ms, restarted in {:.1} ms",
                ms(opened),
                ms(cleared),
                ms(start.elapsed())
            );
        }
        _ => panic!("fill DIR MIB crash|clean, or restart DIR [empty-first]"),
    }
}
