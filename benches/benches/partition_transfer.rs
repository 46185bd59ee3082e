//! What a state transfer costs the two partition machines at its ends (issue 34, item 6): a
//! source on a file holding `S` MiB of entity state sends it to a receiver on a file of its own
//! that holds an older copy, as the replicas do for a peer that lost its disk or fell behind
//! the log — now streamed: read in 64 KiB parts from a view of the source's state
//! (`StateMachine::image_reader`), each part staged by the receiver
//! (`StateMachine::stage_image`) and the staged tables swapped in at the end
//! (`StateMachine::install_staged_image`); against the baseline of before: the source encodes
//! its whole image (`StateMachine::transfer_image`), the receiver gathers the same 64 KiB
//! chunks into one buffer and restores it (`StateMachine::restore`). Same thread, same files,
//! same rows, the two ways alternating; after each, the receiver's rows are checked equal to
//! the source's.
//!
//! Then a move of the same partition, sealed: the new group's machine filled with its rows and
//! opened — now streamed twice a piece at a time and staged at the open
//! (`PartitionState::fill`), against the baseline of before: the whole image, filled in
//! pieces, assembled and installed at the open.
//!
//! Besides time, the peak resident memory each way adds to the process (`VmHWM`, reset
//! through `/proc/self/clear_refs` before each), which is the point: the baseline holds the
//! image several times over; the stream holds a part and the databases' caches.
//!
//! Run: `cargo bench -p tessera-benches --bench partition_transfer` (or name the sizes in MiB:
//! `-- 64 256`; `-- --test` runs one small round). Not a criterion timing benchmark: it prints
//! the table, medians of its rounds.

use std::time::{Duration, Instant};
use tessera_benches::partition_group::filler;
use tessera_consensus::message::{checksum_bytes, checksum_bytes_from};
use tessera_consensus::state_machine::StateMachine;
use tessera_contract::EntityAddress;
use tessera_state::WriteSet;
use tessera_state::partition::{FILL_BYTES_MAX, PartitionMachine, PartitionOp, PartitionResult};

/// Bytes of state per entity.
const VALUE_BYTES: usize = 4096;
/// Bytes per part or chunk: the replicas' `STATE_CHUNK_BYTES_MAX`.
const PART_BYTES: usize = 64 * 1024;
/// Rounds per size; each round transfers both ways once.
const ROUNDS: usize = 3;

/// Writes a fresh value to `entities` entities of `machine`, counting writes in `writes`.
fn fill(machine: &mut PartitionMachine, entities: u64, writes: &mut u64) {
    for id in 0..entities {
        let entity = EntityAddress::new("bench", "blob", format!("e{id}"));
        let expect = machine.stamp(&entity).expect("a stamp");
        *writes += 1;
        let mut set = WriteSet::new(entity);
        set.put("value", filler(*writes, VALUE_BYTES));
        let op = PartitionOp::write(set, expect, *writes, 1_000, Vec::new()).expect("replicable");
        let result = PartitionResult::decode(&machine.apply(&op.encode()));
        assert_eq!(result, PartitionResult::Applied { reply: Vec::new() });
    }
}

/// A line of `/proc/self/status`, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

/// Runs `transfer`, and how long it took and how much the process's peak resident memory
/// rose above where it stood before, in MiB.
fn measured(transfer: impl FnOnce()) -> (Duration, f64) {
    // Freed heap given back first, so the resident size before is what is live (glibc keeps
    // freed memory otherwise, and the next way would reuse it without the peak rising).
    // SAFETY: `malloc_trim` only releases free memory of the allocator; it touches nothing live.
    unsafe {
        libc::malloc_trim(0);
    }
    // "5" resets the peak to the current resident size (Linux 4.0 and later).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = status_kib("VmRSS:");
    let start = Instant::now();
    transfer();
    let took = start.elapsed();
    let peak = status_kib("VmHWM:");
    (took, peak.saturating_sub(before) as f64 / 1024.0)
}

/// The baseline: the whole image encoded, gathered chunk by chunk, restored.
fn whole(source: &PartitionMachine, receiver: &mut PartitionMachine) {
    let image = source.transfer_image();
    let mut gathered = Vec::new();
    for chunk in image.chunks(PART_BYTES) {
        gathered.extend_from_slice(chunk);
    }
    drop(image);
    receiver.restore(&gathered).expect("the image restores");
}

/// A move of before: the sealed replica's whole image, filled in pieces of 256 KiB into the new
/// group's machine, which assembles and installs it at the open.
fn move_whole(source: &PartitionMachine, new: &mut PartitionMachine) {
    let image = source.image().expect("an image");
    let checksum = checksum_bytes(&image);
    let mut pieces = 0;
    for (index, bytes) in image.chunks(FILL_BYTES_MAX).enumerate() {
        pieces = index as u32 + 1;
        let fill = PartitionOp::Fill {
            checksum,
            index: index as u32,
            bytes: bytes.to_vec(),
        };
        new.apply(&fill.encode());
    }
    drop(image);
    let opened = new.apply(&PartitionOp::Open { checksum, pieces }.encode());
    assert_eq!(
        PartitionResult::decode(&opened),
        PartitionResult::Applied { reply: Vec::new() }
    );
}

/// A move now: the sealed rows streamed twice a piece at a time (the checksum, then the fills,
/// as `PartitionState::fill` does), the new machine staging them at the open.
fn move_streamed(source: &PartitionMachine, new: &mut PartitionMachine) {
    let mut reader = source.image_reader().expect("a reader");
    let (mut checksum, mut pieces) = (None, 0u32);
    loop {
        let piece = reader.read(FILL_BYTES_MAX).expect("a piece");
        checksum = Some(checksum_bytes_from(checksum, &piece));
        pieces += 1;
        if piece.len() < FILL_BYTES_MAX {
            break;
        }
    }
    let checksum = checksum.unwrap_or_default();
    let mut reader = source.image_reader().expect("a reader");
    for index in 0..pieces {
        let bytes = reader.read(FILL_BYTES_MAX).expect("a piece");
        new.apply(
            &PartitionOp::Fill {
                checksum,
                index,
                bytes,
            }
            .encode(),
        );
    }
    let opened = new.apply(&PartitionOp::Open { checksum, pieces }.encode());
    assert_eq!(
        PartitionResult::decode(&opened),
        PartitionResult::Applied { reply: Vec::new() }
    );
}

/// The stream: read part by part, each staged, then installed.
fn streamed(source: &PartitionMachine, receiver: &mut PartitionMachine) {
    let mut reader = source.image_reader().expect("a reader");
    let mut offset = 0;
    loop {
        let part = reader.read(PART_BYTES).expect("a part");
        receiver
            .stage_image(offset, &part)
            .expect("the part stages");
        offset += part.len() as u64;
        if part.len() < PART_BYTES {
            break;
        }
    }
    receiver
        .install_staged_image()
        .expect("the staged image installs");
}

fn median(mut samples: Vec<(Duration, f64)>) -> (f64, f64) {
    samples.sort_by_key(|sample| sample.0);
    let time = samples[samples.len() / 2].0.as_secs_f64() * 1e3;
    let memory = samples.iter().map(|(_, mib)| *mib).fold(0.0, f64::max);
    (time, memory)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|arg| arg == "--test");
    let mut sizes: Vec<u64> = args.iter().filter_map(|arg| arg.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = if smoke { vec![2] } else { vec![64, 256] };
    }
    let rounds = if smoke { 1 } else { ROUNDS };
    println!(
        "| state | what | streamed | whole image (before) | streamed / whole | peak memory added, streamed | whole |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for mib in sizes {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut source =
            PartitionMachine::open(&dir.path().join("source.redb")).expect("the source opens");
        let mut receiver =
            PartitionMachine::open(&dir.path().join("receiver.redb")).expect("the receiver opens");
        let entities = (mib << 20) / VALUE_BYTES as u64;
        let (mut source_writes, mut receiver_writes) = (0, 0);
        fill(&mut source, entities, &mut source_writes);
        fill(&mut receiver, entities / 2, &mut receiver_writes);
        source.snapshot();
        let expected = source.image().expect("an image");
        let last = EntityAddress::new("bench", "blob", format!("e{}", entities - 1));
        let (mut now, mut before) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            now.push(measured(|| streamed(&source, &mut receiver)));
            assert!(
                receiver.image().expect("an image") == expected,
                "streamed rows equal"
            );
            receiver.snapshot();
            before.push(measured(|| whole(&source, &mut receiver)));
            assert!(
                receiver.image().expect("an image") == expected,
                "whole rows equal"
            );
            receiver.snapshot();
        }
        let (now, now_memory) = median(now);
        let (before, before_memory) = median(before);
        println!(
            "| {mib} MiB | state transfer | {now:.0} ms | {before:.0} ms | {:.2} | {now_memory:.0} MiB | {before_memory:.0} MiB |",
            now / before
        );
        // A move: the source sealed, each round filling a fresh new group's machine.
        source.apply(&PartitionOp::Seal.encode());
        let (mut now, mut before) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let path = |way: &str| dir.path().join(format!("new-{way}-{round}.redb"));
            let mut new = PartitionMachine::open(&path("streamed"))
                .and_then(PartitionMachine::filling)
                .expect("a new group's machine");
            now.push(measured(|| move_streamed(&source, &mut new)));
            assert_eq!(
                new.get(&last, "value").ok(),
                source.get(&last, "value").ok()
            );
            drop(new);
            let mut new = PartitionMachine::open(&path("whole"))
                .and_then(PartitionMachine::filling)
                .expect("a new group's machine");
            before.push(measured(|| move_whole(&source, &mut new)));
            assert_eq!(
                new.get(&last, "value").ok(),
                source.get(&last, "value").ok()
            );
        }
        let (now, now_memory) = median(now);
        let (before, before_memory) = median(before);
        println!(
            "| {mib} MiB | move (fill and open) | {now:.0} ms | {before:.0} ms | {:.2} | {now_memory:.0} MiB | {before_memory:.0} MiB |",
            now / before
        );
    }
}
