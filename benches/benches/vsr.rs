//! VSR commit throughput and latency: three replicas in one process over in-memory links
//! (a FIFO queue, no network), each measured beside its baseline in the same run:
//! batching on vs off, and the durable file journal (on this machine's disk, one fdatasync per
//! handler) vs the in-memory journal.
//!
//! `cargo bench -p tessera-benches --bench vsr` prints criterion's numbers, then a table of
//! commits per second, commit latency (p50/p99, one client) and the ratios.

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use tessera_consensus::config::{BATCH_REQUESTS_MAX, Config};
use tessera_consensus::durable::FileJournal;
use tessera_consensus::journal::{InMemoryJournal, Journal};
use tessera_consensus::message::{Message, Request};
use tessera_consensus::replica::{Action, Replica};
use tessera_consensus::state_machine::{KeyValue, KeyValueOperation};

/// Replicas in the measured cluster.
const REPLICA_COUNT: u8 = 3;
/// Concurrent clients for the throughput runs (each with one request outstanding).
const CLIENT_COUNT: u64 = 64;
/// Requests committed per throughput iteration in memory.
const MEMORY_REQUESTS_PER_ITERATION: u64 = 2_048;
/// Requests committed per throughput iteration on disk: fewer, since each costs fsyncs.
const DISK_REQUESTS_PER_ITERATION: u64 = 256;
/// `fdatasync` calls timed for the disk baseline.
const FSYNC_SAMPLES: usize = 100;
/// Sequential requests timed one by one for the latency runs.
const LATENCY_SAMPLES: usize = 300;

#[derive(Clone, Copy, Debug)]
enum Storage {
    Memory,
    Disk,
}

#[derive(Clone, Copy, Debug)]
struct Setup {
    storage: Storage,
    batching: bool,
}

impl Setup {
    fn requests_per_iteration(&self) -> u64 {
        match self.storage {
            Storage::Memory => MEMORY_REQUESTS_PER_ITERATION,
            Storage::Disk => DISK_REQUESTS_PER_ITERATION,
        }
    }

    fn name(&self) -> String {
        let storage = match self.storage {
            Storage::Memory => "memory",
            Storage::Disk => "disk",
        };
        let batching = if self.batching {
            "batched"
        } else {
            "unbatched"
        };
        format!("{storage}/{batching}")
    }
}

/// Three replicas whose messages are delivered in order through one queue.
struct Cluster<J: Journal> {
    replicas: Vec<Replica<J, KeyValue>>,
    queue: VecDeque<(u8, Message)>,
    replies: Vec<u64>,
}

impl<J: Journal> Cluster<J> {
    fn new(journals: Vec<J>, batching: bool) -> Cluster<J> {
        let replicas = journals
            .into_iter()
            .enumerate()
            .map(|(index, journal)| {
                let mut config = Config::new(REPLICA_COUNT, index as u8);
                config.batch_requests_max = if batching { BATCH_REQUESTS_MAX } else { 1 };
                Replica::format(config, journal, KeyValue::default()).expect("valid configuration")
            })
            .collect();
        Cluster {
            replicas,
            queue: VecDeque::new(),
            replies: Vec::new(),
        }
    }

    fn submit(&mut self, client: u64, request_number: u64) {
        let operation = KeyValueOperation::Put {
            key: client,
            value: request_number,
        }
        .encode();
        let request = Request {
            client,
            request_number,
            operation,
        };
        self.queue.push_back((0, Message::Request(request)));
    }

    /// Delivers messages until the queue is empty or a reply arrives; returns the clients
    /// answered.
    fn run_until_replies(&mut self) -> Vec<u64> {
        while self.replies.is_empty() {
            let Some((to, message)) = self.queue.pop_front() else {
                break;
            };
            for action in self.replicas[usize::from(to)].on_message(message) {
                match action {
                    Action::Send { to, message } => self.queue.push_back((to, message)),
                    Action::Reply(reply) => self.replies.push(reply.client),
                    Action::Applied { .. } | Action::Checkpoint { .. } => {}
                }
            }
        }
        std::mem::take(&mut self.replies)
    }
}

fn journals(storage: Storage) -> (Vec<Box<dyn Journal>>, Option<tempfile::TempDir>) {
    match storage {
        Storage::Memory => {
            let journals =
                (0..REPLICA_COUNT).map(|_| Box::new(InMemoryJournal::new()) as Box<dyn Journal>);
            (journals.collect(), None)
        }
        Storage::Disk => {
            let directory = tempfile::tempdir().expect("temporary directory");
            let journals = (0..REPLICA_COUNT).map(|index| {
                let path = directory.path().join(format!("replica-{index}.journal"));
                Box::new(FileJournal::open(&path).expect("journal file")) as Box<dyn Journal>
            });
            (journals.collect(), Some(directory))
        }
    }
}

fn cluster(setup: Setup) -> (Cluster<Box<dyn Journal>>, Option<tempfile::TempDir>) {
    let (journals, directory) = journals(setup.storage);
    (Cluster::new(journals, setup.batching), directory)
}

/// Commits `setup.requests_per_iteration()` requests from `CLIENT_COUNT` closed-loop clients;
/// returns the time taken.
fn commit_closed_loop(setup: Setup) -> Duration {
    let (mut cluster, _directory) = cluster(setup);
    let mut next_request = vec![1u64; CLIENT_COUNT as usize];
    let started = Instant::now();
    for client in 0..CLIENT_COUNT {
        cluster.submit(client, 1);
    }
    let mut committed = 0;
    while committed < setup.requests_per_iteration() {
        let answered = cluster.run_until_replies();
        assert!(!answered.is_empty(), "the cluster stalled");
        for client in answered {
            committed += 1;
            let number = &mut next_request[client as usize];
            *number += 1;
            cluster.submit(client, *number);
        }
    }
    black_box(&cluster.replicas[0]);
    started.elapsed()
}

/// Times `LATENCY_SAMPLES` requests of one client, each from submission to reply.
fn commit_latencies(setup: Setup) -> Vec<Duration> {
    let (mut cluster, _directory) = cluster(setup);
    (1..=LATENCY_SAMPLES as u64)
        .map(|number| {
            let started = Instant::now();
            cluster.submit(0, number);
            assert_eq!(
                cluster.run_until_replies(),
                vec![0],
                "one reply per request"
            );
            started.elapsed()
        })
        .collect()
}

const SETUPS: [Setup; 4] = [
    Setup {
        storage: Storage::Memory,
        batching: false,
    },
    Setup {
        storage: Storage::Memory,
        batching: true,
    },
    Setup {
        storage: Storage::Disk,
        batching: false,
    },
    Setup {
        storage: Storage::Disk,
        batching: true,
    },
];

fn bench_commits(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("vsr_commit");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    for setup in SETUPS {
        group.throughput(Throughput::Elements(setup.requests_per_iteration()));
        group.bench_function(setup.name(), |bencher| {
            bencher
                .iter_custom(|iterations| (0..iterations).map(|_| commit_closed_loop(setup)).sum());
        });
    }
    group.finish();
}

struct Measured {
    commits_per_second: f64,
    latency_p50: Duration,
    latency_p99: Duration,
}

fn measure(setup: Setup) -> Measured {
    let runs = 3;
    let total: Duration = (0..runs).map(|_| commit_closed_loop(setup)).sum();
    let commits_per_second = (setup.requests_per_iteration() * runs) as f64 / total.as_secs_f64();
    let mut latencies = commit_latencies(setup);
    latencies.sort_unstable();
    Measured {
        commits_per_second,
        latency_p50: latencies[latencies.len() / 2],
        latency_p99: latencies[latencies.len() * 99 / 100],
    }
}

fn print_ratios() {
    println!(
        "\n{:<20} {:>14} {:>14} {:>14}",
        "setup", "commits/s", "latency p50", "latency p99"
    );
    let measured: Vec<Measured> = SETUPS.iter().map(|setup| measure(*setup)).collect();
    for (setup, result) in SETUPS.iter().zip(&measured) {
        println!(
            "{:<20} {:>14.0} {:>14.1?} {:>14.1?}",
            setup.name(),
            result.commits_per_second,
            result.latency_p50,
            result.latency_p99
        );
    }
    let ratio =
        |a: usize, b: usize| measured[a].commits_per_second / measured[b].commits_per_second;
    println!(
        "batched / unbatched throughput, memory: {:.2}x",
        ratio(1, 0)
    );
    println!(
        "batched / unbatched throughput, disk:   {:.2}x",
        ratio(3, 2)
    );
    println!(
        "memory / disk throughput, unbatched:    {:.0}x",
        ratio(0, 2)
    );
    println!(
        "memory / disk throughput, batched:      {:.0}x",
        ratio(1, 3)
    );
    let latency = |index: usize| measured[index].latency_p50.as_secs_f64();
    println!(
        "disk / memory p50 latency:              {:.0}x",
        latency(2) / latency(0)
    );
    let fsync = fsync_latency_p50();
    println!("baseline: one 4 KiB append + fdatasync on this disk, p50 {fsync:.1?}");
    println!(
        "disk p50 commit latency / fdatasync p50: {:.1}",
        measured[2].latency_p50.as_secs_f64() / fsync.as_secs_f64()
    );
}

/// The disk's own cost, the baseline the disk numbers are judged against.
fn fsync_latency_p50() -> Duration {
    use std::io::Write;
    let directory = tempfile::tempdir().expect("temporary directory");
    let mut file = std::fs::File::create(directory.path().join("fsync")).expect("file");
    let block = [7u8; 4096];
    let mut samples: Vec<Duration> = (0..FSYNC_SAMPLES)
        .map(|_| {
            let started = Instant::now();
            file.write_all(&block).expect("write");
            file.sync_data().expect("fdatasync");
            started.elapsed()
        })
        .collect();
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench_commits(&mut criterion);
    criterion.final_summary();
    print_ratios();
}
