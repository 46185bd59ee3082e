//! What a partition checkpoint costs (issue 34, item 6): a partition machine on a file holding
//! `S` MiB of entity state, 1 MiB of it overwritten before each checkpoint (an interval's
//! writes), takes a checkpoint as the partition plane does now — a durable savepoint of its
//! own database, the journal given a ten-byte reference (`StateMachine::snapshot`) — against
//! the baseline of what a checkpoint cost before: the database synced, every row encoded into
//! one image, the image appended to a journal file and synced (the old checkpoint also copied
//! the image again when the journal compacted, which the baseline leaves out, so it is the old
//! cost's lower bound). Beside them, what reading the whole image costs right after the
//! checkpoint (`StateMachine::transfer_image`, which a follower is sent; a state transfer
//! streams it in parts instead, `partition_transfer`); and a restart as a node's group driver does it — the
//! database opened and the journal's checkpoint restored: now a savepoint rolled back to
//! (its rows emptied only when nothing is restored), before every row of the image written
//! again over emptied tables (the journal's read of the image left out).
//! Same thread, same file, same rows, rounds alternating.
//!
//! Run: `cargo bench -p tessera-benches --bench partition_checkpoint` (or name the sizes in MiB:
//! `-- 8 64`; `-- --test` runs one small round). Not a criterion timing benchmark: it prints
//! the table, medians of its rounds.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};
use tessera_benches::partition_group::filler;
use tessera_consensus::state_machine::StateMachine;
use tessera_contract::EntityAddress;
use tessera_state::WriteSet;
use tessera_state::partition::{PartitionMachine, PartitionOp, PartitionResult};

/// Bytes of state per entity.
const VALUE_BYTES: usize = 4096;
/// Entities overwritten before each checkpoint: 1 MiB.
const CHURN_ENTITIES: u64 = 256;
/// Rounds per size; each round times everything once.
const ROUNDS: usize = 7;

/// The bench's machine and the writes it has applied.
struct Filled {
    machine: PartitionMachine,
    writes: u64,
}

impl Filled {
    /// Writes a fresh value to entity `id`.
    fn write(&mut self, id: u64) {
        let entity = EntityAddress::new("bench", "blob", format!("e{id}"));
        let expect = self.machine.stamp(&entity).expect("a stamp");
        self.writes += 1;
        let mut writes = WriteSet::new(entity);
        writes.put("value", filler(self.writes, VALUE_BYTES));
        let op =
            PartitionOp::write(writes, expect, self.writes, 1_000, Vec::new()).expect("replicable");
        let result = PartitionResult::decode(&self.machine.apply(&op.encode()));
        assert_eq!(result, PartitionResult::Applied { reply: Vec::new() });
    }

    /// An interval's writes: [`CHURN_ENTITIES`] entities overwritten.
    fn churn(&mut self) {
        for id in 0..CHURN_ENTITIES {
            self.write(id);
        }
    }
}

/// Makes every applied write durable, as the old checkpoint's database sync did.
fn sync(machine: &PartitionMachine) {
    let transaction = machine
        .store()
        .database()
        .begin_write()
        .expect("a write transaction");
    transaction.commit().expect("the database syncs");
}

/// The checkpoint of before: the database synced, then the whole image appended to a journal
/// file and synced.
fn whole_image_checkpoint(machine: &PartitionMachine, journal: &mut std::fs::File) -> usize {
    sync(machine);
    let image = machine.image().expect("an image");
    journal
        .write_all(&image)
        .expect("the journal takes the image");
    journal.sync_data().expect("the journal syncs");
    image.len()
}

/// Closes the machine and restarts it on `path` as a node's group driver does: opened,
/// forgotten, `checkpoint` restored, settled (a whole image restored writes every row over
/// emptied tables). How long the restart took.
fn restart(filled: &mut Filled, path: &Path, checkpoint: &[u8]) -> Duration {
    let placeholder = PartitionMachine::in_memory().expect("an in-memory machine");
    drop(std::mem::replace(&mut filled.machine, placeholder));
    let start = Instant::now();
    let mut machine = PartitionMachine::open(path).expect("the partition database opens");
    machine.forget();
    machine
        .restore(checkpoint)
        .expect("the checkpoint restores");
    machine.settle().expect("the machine settles");
    let took = start.elapsed();
    filled.machine = machine;
    took
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|arg| arg == "--test");
    let mut sizes: Vec<u64> = args.iter().filter_map(|arg| arg.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = if smoke { vec![2] } else { vec![8, 64] };
    }
    let rounds = if smoke { 1 } else { ROUNDS };
    println!(
        "| state | checkpoint now | before | now / before | restart now | restart before | now / before | whole image read |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for mib in sizes {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("p0.redb");
        let machine = PartitionMachine::open(&path).expect("the partition database opens");
        let mut filled = Filled { machine, writes: 0 };
        for id in 0..(mib << 20) / VALUE_BYTES as u64 {
            filled.write(id);
        }
        sync(&filled.machine);
        let mut journal = std::fs::File::create(dir.path().join("journal")).expect("a journal");
        let (mut now, mut before, mut transfer) = (Vec::new(), Vec::new(), Vec::new());
        let (mut restart_now, mut restart_before) = (Vec::new(), Vec::new());
        let (mut image_bytes, mut reference_bytes) = (0, 0);
        for _ in 0..rounds {
            filled.churn();
            let start = Instant::now();
            let reference = filled.machine.snapshot();
            now.push(start.elapsed());
            reference_bytes = reference.len();

            let start = Instant::now();
            let image = filled.machine.transfer_image();
            transfer.push(start.elapsed());

            let rows = filled.machine.image().expect("an image");
            restart_now.push(restart(&mut filled, &path, &reference));
            assert_eq!(filled.machine.image().expect("an image"), rows);
            restart_before.push(restart(&mut filled, &path, &rows));
            sync(&filled.machine);
            assert!(image.len() >= rows.len(), "the image holds every row");

            filled.churn();
            let start = Instant::now();
            image_bytes = whole_image_checkpoint(&filled.machine, &mut journal);
            before.push(start.elapsed());
        }
        let ms = |samples: Vec<Duration>| median(samples).as_secs_f64() * 1e3;
        let (now, before, transfer) = (ms(now), ms(before), ms(transfer));
        let (restart_now, restart_before) = (ms(restart_now), ms(restart_before));
        println!(
            "| {mib} MiB ({:.1} MiB image) | {now:.2} ms ({reference_bytes} bytes journaled) | {before:.1} ms | {:.3} | {restart_now:.1} ms | {restart_before:.1} ms | {:.3} | {transfer:.1} ms |",
            image_bytes as f64 / f64::from(1 << 20),
            now / before,
            restart_now / restart_before,
        );
    }
}
