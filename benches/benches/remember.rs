//! Remember-entities write throughput: the write-behind queue group-committing into redb
//! (through the node's one state writer),
//! beside the seed's file store, which appends and fsyncs one record at a time. The ratio of
//! the two is printed at the end; the target is at least 50x and 100,000 records/s.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::fs::OpenOptions;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_contract::TypeKey;
use tessera_state::remember::{RememberConfig, RememberOp, RememberWriter, RememberedId};
use tessera_state::{GroupCommitConfig, LocalState, StateStore};

/// Records per measured write-behind iteration: queued at once, then flushed.
const WRITE_BEHIND_RECORDS: usize = 20_000;
/// Records per measured baseline iteration (each one fsync'd, so far fewer).
const BASELINE_RECORDS: usize = 200;
/// The final ratio run writes this many iterations' worth of records in one go.
const RATIO_RUN_MULTIPLIER: usize = 5;
/// Shards the records are spread over, as entity ids would be.
const SHARDS: u32 = 128;

struct WriteBehind {
    runtime: tokio::runtime::Runtime,
    writer: RememberWriter,
    next_id: u64,
    _directory: tempfile::TempDir,
}

impl WriteBehind {
    fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("benchmark runtime");
        let directory = tempfile::tempdir().expect("temporary directory");
        let store = StateStore::open(&directory.path().join("node.redb")).expect("redb");
        // The queue holds the largest run whole: this measures how fast queued records become
        // durable, not how a producer that outruns the writer is refused.
        let config = RememberConfig {
            queue_capacity: WRITE_BEHIND_RECORDS * RATIO_RUN_MULTIPLIER,
            ..RememberConfig::default()
        };
        let writer = runtime.block_on(async {
            let state = LocalState::new(store, GroupCommitConfig::default());
            RememberWriter::start(Arc::new(state), &config)
        });
        WriteBehind {
            runtime,
            writer,
            next_id: 0,
            _directory: directory,
        }
    }

    /// Queues `count` new ids and waits until they are durable.
    fn run(&mut self, count: usize) -> Duration {
        let type_key = TypeKey::new("bench", "counter");
        let mut events = self.writer.subscribe();
        let started = Instant::now();
        for _ in 0..count {
            let id = self.next_id;
            self.next_id += 1;
            self.writer.record(RememberOp::Started(RememberedId {
                type_key: type_key.clone(),
                shard: (id % u64::from(SHARDS)) as u32,
                id: format!("entity-{id}"),
            }));
        }
        self.runtime
            .block_on(self.writer.flush())
            .expect("records durable");
        let elapsed = started.elapsed();
        assert!(
            events.try_recv().is_err(),
            "no record may be refused or fail"
        );
        elapsed
    }
}

struct FsyncPerRecord {
    file: std::fs::File,
    next_id: u64,
    _directory: tempfile::TempDir,
}

impl FsyncPerRecord {
    fn new() -> Self {
        let directory = tempfile::tempdir().expect("temporary directory");
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(directory.path().join("shard.log"))
            .expect("log file");
        FsyncPerRecord {
            file,
            next_id: 0,
            _directory: directory,
        }
    }

    /// Appends `count` records, fsyncing after each, as the seed's file store does.
    fn run(&mut self, count: usize) -> Duration {
        let started = Instant::now();
        for _ in 0..count {
            let id = self.next_id;
            self.next_id += 1;
            writeln!(self.file, "S entity-{id}").expect("append");
            self.file.sync_data().expect("fsync");
        }
        started.elapsed()
    }
}

fn per_second(records: usize, elapsed: Duration) -> f64 {
    records as f64 / elapsed.as_secs_f64()
}

fn remember(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("remember");
    group.sample_size(10);

    let mut write_behind = WriteBehind::new();
    group.throughput(Throughput::Elements(WRITE_BEHIND_RECORDS as u64));
    group.bench_function("write_behind_redb_group_commit", |bencher| {
        bencher.iter_custom(|iterations| {
            (0..iterations)
                .map(|_| write_behind.run(WRITE_BEHIND_RECORDS))
                .sum()
        })
    });

    let mut baseline = FsyncPerRecord::new();
    group.throughput(Throughput::Elements(BASELINE_RECORDS as u64));
    group.bench_function("baseline_fsync_per_record_append", |bencher| {
        bencher.iter_custom(|iterations| {
            (0..iterations)
                .map(|_| baseline.run(BASELINE_RECORDS))
                .sum()
        })
    });
    group.finish();

    // One direct measurement of each, for the ratio the criterion report does not print.
    let fast_records = WRITE_BEHIND_RECORDS * RATIO_RUN_MULTIPLIER;
    let fast = per_second(fast_records, write_behind.run(fast_records));
    let slow_records = BASELINE_RECORDS * RATIO_RUN_MULTIPLIER;
    let slow = per_second(slow_records, baseline.run(slow_records));
    println!(
        "remember: write-behind {fast:.0} records/s, fsync per record {slow:.0} records/s, \
         ratio {:.1}x (target >= 50x and >= 100000 records/s)",
        fast / slow
    );
}

criterion_group!(benches, remember);
criterion_main!(benches);
