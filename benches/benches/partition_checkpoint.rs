//! What a partition checkpoint costs (issue 34, item 6): a partition machine on a file holding
//! `S` MiB of entity state takes a checkpoint as the partition plane does now — a savepoint of
//! its own database, the journal given a ten-byte reference
//! (`StateMachine::snapshot`) — against the baseline of what a checkpoint cost before: every
//! row encoded into one image, appended to a journal file and synced (the old checkpoint also
//! synced the database once and copied the image again when the journal compacted, which the
//! baseline leaves out, so it is the old cost's lower bound). Beside them, what a peer's state
//! transfer costs the source now, once per transfer: the image read from the checkpoint's pinned
//! read transaction (`StateMachine::transfer_image`). Same thread, same machine, same rows,
//! rounds alternating.
//!
//! Run: `cargo bench -p tessera-benches --bench partition_checkpoint` (or name the sizes in MiB:
//! `-- 8 64`; `-- --test` runs one small round).

use std::io::Write;
use std::time::{Duration, Instant};
use tessera_consensus::state_machine::StateMachine;
use tessera_contract::EntityAddress;
use tessera_state::WriteSet;
use tessera_state::partition::{PartitionMachine, PartitionOp, PartitionResult};

/// Bytes of state per entity.
const VALUE_BYTES: usize = 4096;
/// Rounds per size; each round times all three once.
const ROUNDS: usize = 7;

/// Bytes that do not repeat from one entity to the next (so nothing compresses them away).
fn filler(seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..VALUE_BYTES)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// A machine on a file in `dir` holding `bytes` of entity state.
fn filled(dir: &std::path::Path, bytes: usize) -> PartitionMachine {
    let mut machine =
        PartitionMachine::open(&dir.join("p0.redb")).expect("the partition database opens");
    for id in 0..(bytes / VALUE_BYTES) as u64 {
        let entity = EntityAddress::new("bench", "blob", format!("e{id}"));
        let mut writes = WriteSet::new(entity);
        writes.put("value", filler(id));
        let op = PartitionOp::write(writes, 0, id + 1, 1_000, Vec::new()).expect("replicable");
        let result = PartitionResult::decode(&machine.apply(&op.encode()));
        assert_eq!(result, PartitionResult::Applied { reply: Vec::new() });
    }
    machine
}

/// The checkpoint of before: the whole image, appended to a journal file and synced.
fn whole_image_checkpoint(machine: &PartitionMachine, journal: &mut std::fs::File) -> usize {
    let image = machine.image().expect("an image");
    journal
        .write_all(&image)
        .expect("the journal takes the image");
    journal.sync_data().expect("the journal syncs");
    image.len()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|arg| arg == "--test");
    let mut sizes: Vec<usize> = args.iter().filter_map(|arg| arg.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = if smoke { vec![1] } else { vec![8, 64] };
    }
    let rounds = if smoke { 1 } else { ROUNDS };
    println!(
        "| state | checkpoint now (savepoint + reference) | before (whole image + journal sync) | now / before | image bytes | transfer image now |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for mib in sizes {
        let dir = tempfile::tempdir().expect("temp dir");
        let machine = filled(dir.path(), mib << 20);
        let mut journal = std::fs::File::create(dir.path().join("journal")).expect("a journal");
        let (mut now, mut before, mut transfer) = (Vec::new(), Vec::new(), Vec::new());
        let mut image_bytes = 0;
        let mut reference_bytes = 0;
        for _ in 0..rounds {
            let start = Instant::now();
            reference_bytes = machine.snapshot().len();
            now.push(start.elapsed());
            let start = Instant::now();
            image_bytes = whole_image_checkpoint(&machine, &mut journal);
            before.push(start.elapsed());
            let start = Instant::now();
            let image = machine
                .transfer_image()
                .expect("a partition machine sends an image");
            transfer.push(start.elapsed());
            assert!(
                image.len() >= image_bytes,
                "the transfer image holds every row"
            );
        }
        let (now, before, transfer) = (median(now), median(before), median(transfer));
        println!(
            "| {mib} MiB | {:.2} ms ({reference_bytes} bytes journaled) | {:.1} ms | {:.4} | {:.1} MiB | {:.1} ms |",
            now.as_secs_f64() * 1e3,
            before.as_secs_f64() * 1e3,
            now.as_secs_f64() / before.as_secs_f64(),
            image_bytes as f64 / f64::from(1 << 20),
            transfer.as_secs_f64() * 1e3,
        );
    }
}
