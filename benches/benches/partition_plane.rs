//! The partition plane's benchmarks (issue 34, item 12), each beside its baseline in the same
//! run, on the same two-thread runtime a node runs (all voters of a group in this process,
//! each on its own file journal and redb database, over an in-memory network:
//! `tessera_benches::partition_group`):
//!
//! - **Commit latency**: one state-writing commit — a counter's write set, one state key of
//!   16 bytes and the receipt of the message it handled — through `PartitionState` of a
//!   three-voter group (R = 3), against the same write set committed to `LocalState` on a file
//!   (today's local group commit). p50 and p99 of sequential commits, and their ratio.
//! - **Throughput**: 64 committers, one entity each, committing such write sets concurrently
//!   for a fixed count, R = 3 against R = 1 (a one-voter group, the same code path): commits
//!   per second and R3 / R1 (the target: at least 50 %).
//! - **Rebuild rate**: a backup of a three-voter group holding 50 MiB of entity state loses
//!   its disk (journal and database deleted) and restarts empty; the time until its machine
//!   holds every row, against redb writing the same rows into a fresh database in one synced
//!   transaction: MiB of entity state per second.
//!
//! Each group member opens as many client sessions as a node's partition member does (32;
//! `PARTITION_BENCH_SESSIONS=8` in the environment opens fewer, to see what they change).
//! Run: `cargo bench -p tessera-benches --bench partition_plane` prints criterion's means,
//! then the tables (the disk's `fdatasync` first, which every durable commit pays); naming one
//! table (`-- latency`, `-- throughput`, `-- rebuild`) prints it alone, and `-- --test` runs
//! every scenario once at a small size (a smoke check of a few seconds). The results, and what
//! they say: `docs/partitions.md`, "Benchmarks".

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use tessera_benches::partition_group::{Network, Voter, partition_config, start_voter};
use tessera_consensus::group::{GroupConfig, GroupId, GroupStatus};
use tessera_contract::EntityAddress;
use tessera_state::partition::PartitionState;
use tessera_state::{
    CommitError, EntityState, GroupCommitConfig, LocalState, Receipt, StateStore, WriteSet,
    WriteStamps,
};
use tokio::runtime::Runtime;

#[path = "partition_plane/rebuild.rs"]
mod rebuild;

/// The partition group every scenario runs (one group; the number does not matter).
const GROUP: GroupId = GroupId(1);
/// Client sessions of each member: as many as a node's partition member opens
/// (`PARTITION_SESSIONS` in `crates/host/src/node/member/partitions.rs`).
const SESSIONS: usize = 32;
/// Bytes of the counter's one state key.
const COUNTER_VALUE_BYTES: usize = 16;
/// Concurrent committers (one entity each) in the throughput runs.
const COMMITTERS: usize = 64;
/// Commits per iteration of criterion's throughput runs (the tables run more).
const CRITERION_THROUGHPUT_COMMITS: usize = 512;
/// How long a group may take to elect, a commit to be answered, a replica to rebuild.
const WAIT_MAX: Duration = Duration::from_secs(120);

/// How much work each scenario does: the full run, or the smoke check of `--test`.
#[derive(Clone, Copy)]
struct Sizes {
    /// Sequential commits timed one by one on each side.
    latency_samples: usize,
    /// Commits per throughput run.
    throughput_commits: usize,
    /// Throughput runs on each side, alternating.
    throughput_runs: usize,
    /// Entity state the rebuilt replica must fetch.
    rebuild_bytes: usize,
}

const FULL: Sizes = Sizes {
    latency_samples: 1_000,
    throughput_commits: 4_096,
    throughput_runs: 3,
    rebuild_bytes: 50 << 20,
};

const SMOKE: Sizes = Sizes {
    latency_samples: 20,
    throughput_commits: 256,
    throughput_runs: 1,
    rebuild_bytes: 1 << 20,
};

/// The node's runtime threads: two on this 2-core machine, for every side alike.
const WORKER_THREADS: usize = 2;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .enable_all()
        .build()
        .expect("runtime")
}

fn nodes(replicas: usize) -> Vec<String> {
    (1..=replicas).map(|index| format!("n{index}")).collect()
}

/// Client sessions of each member: [`SESSIONS`], or `PARTITION_BENCH_SESSIONS` from the
/// environment (1 to 64) to see what more operations in flight would change.
fn sessions() -> usize {
    std::env::var("PARTITION_BENCH_SESSIONS")
        .ok()
        .and_then(|sessions| sessions.parse().ok())
        .unwrap_or(SESSIONS)
}

fn config(voters: &[String], node: &str) -> GroupConfig {
    GroupConfig {
        sessions: sessions(),
        ..partition_config(GROUP, voters.to_vec(), node.to_string())
    }
}

/// Waits until `check` holds, polling.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_MAX;
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// One partition's group of `R` voters in this process, and its primary's `PartitionState`.
struct Plane {
    dir: tempfile::TempDir,
    network: Arc<Network>,
    voters: Vec<String>,
    members: BTreeMap<String, Voter>,
    primary: String,
}

impl Plane {
    async fn start(replicas: usize) -> Plane {
        let dir = tempfile::tempdir().expect("temp dir");
        let network = Arc::new(Network::default());
        let voters = nodes(replicas);
        let members: BTreeMap<String, Voter> = voters
            .iter()
            .map(|node| {
                let voter = start_voter(&network, config(&voters, node), dir.path());
                (node.clone(), voter)
            })
            .collect();
        until("the group elects a primary", || {
            members
                .values()
                .all(|voter| voter.group.status().primary.is_some())
        })
        .await;
        let primary = members["n1"].group.status().primary.expect("a primary");
        Plane {
            dir,
            network,
            voters,
            members,
            primary,
        }
    }

    /// The entity layer's state on the primary (the node that serves the partition).
    fn state(&self) -> Arc<dyn EntityState> {
        let primary = &self.members[&self.primary];
        Arc::new(PartitionState::new(
            primary.store.clone(),
            primary.group.clone(),
        ))
    }

    fn status(&self, node: &str) -> GroupStatus {
        self.members[node].group.status()
    }
}

/// Today's local store on a file: redb with group commit, as a node with the plane off.
fn local_state(dir: &tempfile::TempDir) -> Arc<dyn EntityState> {
    let store = StateStore::open(&dir.path().join("local.redb")).expect("the local store opens");
    Arc::new(LocalState::new(store, GroupCommitConfig::default()))
}

/// Stamps of new writes, unique in the process (never 0).
static WRITTEN: AtomicU64 = AtomicU64::new(1);

/// An entity the entity layer writes, one message after another: each write set is stamped
/// with the stamp of the last (the copy it was computed from) and carries the receipt of the
/// tell it handled, as a counter's add does.
struct Committer {
    entity: EntityAddress,
    sender: EntityAddress,
    stamp: u64,
    seq: u64,
}

impl Committer {
    fn new(name: &str) -> Committer {
        Committer {
            entity: EntityAddress::new("bench", "counter", name),
            sender: EntityAddress::new("bench", "caller", name),
            stamp: 0,
            seq: 0,
        }
    }

    /// The next message's write set: `value` under the state key, and the receipt.
    fn next(&mut self, value: Vec<u8>) -> WriteSet {
        self.seq += 1;
        let written = WRITTEN.fetch_add(1, Ordering::Relaxed);
        let mut writes = WriteSet::new(self.entity.clone());
        writes.put("value", value);
        writes.messaging_mut().receipt = Some(Receipt::Entity {
            sender: self.sender.clone(),
            seq: self.seq,
        });
        writes.set_stamps(WriteStamps {
            read: self.stamp,
            written,
        });
        self.stamp = written;
        writes
    }

    fn next_counter(&mut self) -> WriteSet {
        let mut value = self.seq.to_le_bytes().to_vec();
        value.resize(COUNTER_VALUE_BYTES, 0);
        self.next(value)
    }
}

async fn commit(state: &dyn EntityState, writes: WriteSet) {
    match state.commit(writes).await {
        Ok(()) => {}
        Err(CommitError::Unavailable(reason)) => panic!("the group did not commit: {reason}"),
        Err(error) => panic!("the commit failed: {error}"),
    }
}

/// Commits `count` counter write sets one after another; the time of each.
async fn sequential(
    state: &dyn EntityState,
    committer: &mut Committer,
    count: usize,
) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let writes = committer.next_counter();
        let started = Instant::now();
        commit(state, writes).await;
        latencies.push(started.elapsed());
    }
    latencies
}

/// `total` commits by [`COMMITTERS`] concurrent committers (one entity each, each one commit
/// at a time); the time they took.
async fn concurrent(
    state: &Arc<dyn EntityState>,
    committers: &mut Vec<Committer>,
    total: usize,
) -> Duration {
    let per_committer = total.div_ceil(COMMITTERS);
    let started = Instant::now();
    let tasks: Vec<_> = std::mem::take(committers)
        .into_iter()
        .map(|mut committer| {
            let state = state.clone();
            tokio::spawn(async move {
                for _ in 0..per_committer {
                    commit(state.as_ref(), committer.next_counter()).await;
                }
                committer
            })
        })
        .collect();
    for task in tasks {
        committers.push(task.await.expect("a committer"));
    }
    started.elapsed()
}

fn committers(prefix: &str) -> Vec<Committer> {
    (0..COMMITTERS)
        .map(|index| Committer::new(&format!("{prefix}-{index}")))
        .collect()
}

/// The `q`-quantile of sorted `samples`.
fn quantile(samples: &[Duration], q: f64) -> Duration {
    let index = ((samples.len() as f64 * q) as usize).min(samples.len() - 1);
    samples[index]
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn bench_latency(criterion: &mut Criterion, runtime: &Runtime) {
    let mut group = criterion.benchmark_group("partition_commit");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    let plane = runtime.block_on(Plane::start(3));
    let local_dir = tempfile::tempdir().expect("temp dir");
    let sides = [
        ("r3", plane.state(), Committer::new("latency-r3")),
        (
            "local",
            local_state(&local_dir),
            Committer::new("latency-local"),
        ),
    ];
    for (name, state, mut committer) in sides {
        group.bench_function(name, |bencher| {
            bencher.iter_custom(|iterations| {
                runtime.block_on(async {
                    let latencies =
                        sequential(state.as_ref(), &mut committer, iterations as usize).await;
                    latencies.iter().sum()
                })
            });
        });
    }
    group.finish();
}

fn bench_throughput(criterion: &mut Criterion, runtime: &Runtime) {
    let mut group = criterion.benchmark_group("partition_throughput");
    // Each sample the same number of runs (criterion's linear sampling would run the last
    // sample ten times as long as the first).
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Elements(CRITERION_THROUGHPUT_COMMITS as u64));
    for replicas in [3, 1] {
        let plane = runtime.block_on(Plane::start(replicas));
        let state = plane.state();
        let mut committers = committers(&format!("throughput-r{replicas}"));
        group.bench_function(format!("r{replicas}"), |bencher| {
            bencher.iter_custom(|iterations| {
                runtime.block_on(async {
                    let mut took = Duration::ZERO;
                    for _ in 0..iterations {
                        took +=
                            concurrent(&state, &mut committers, CRITERION_THROUGHPUT_COMMITS).await;
                    }
                    took
                })
            });
        });
    }
    group.finish();
}

fn print_latency(runtime: &Runtime, sizes: Sizes) {
    let plane = runtime.block_on(Plane::start(3));
    let local_dir = tempfile::tempdir().expect("temp dir");
    let sides = [
        ("R = 3 (PartitionState)", plane.state()),
        ("local group commit (LocalState)", local_state(&local_dir)),
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(), Vec::new()];
    let mut committers = [Committer::new("table-r3"), Committer::new("table-local")];
    let round = 100.min(sizes.latency_samples);
    println!(
        "\ncommit latency of one state-writing message ({COUNTER_VALUE_BYTES}-byte state key + \
         receipt), {} sequential commits each, alternating in rounds of {round}:",
        sizes.latency_samples
    );
    runtime.block_on(async {
        while samples[0].len() < sizes.latency_samples {
            for (side, (_, state)) in sides.iter().enumerate() {
                let taken = sequential(state.as_ref(), &mut committers[side], round).await;
                samples[side].extend(taken);
            }
        }
    });
    println!(
        "{:<34} {:>10} {:>10} {:>10}",
        "", "p50 ms", "p99 ms", "mean ms"
    );
    let mut quantiles = Vec::new();
    for ((name, _), taken) in sides.iter().zip(&mut samples) {
        taken.sort_unstable();
        let mean = taken.iter().sum::<Duration>() / taken.len() as u32;
        let (p50, p99) = (quantile(taken, 0.5), quantile(taken, 0.99));
        println!(
            "{name:<34} {:>10.3} {:>10.3} {:>10.3}",
            millis(p50),
            millis(p99),
            millis(mean)
        );
        quantiles.push((p50, p99));
    }
    println!(
        "R = 3 / local: p50 {:.2}x, p99 {:.2}x",
        millis(quantiles[0].0) / millis(quantiles[1].0),
        millis(quantiles[0].1) / millis(quantiles[1].1)
    );
}

fn print_throughput(runtime: &Runtime, sizes: Sizes) {
    println!(
        "\nthroughput: {} state-writing commits by {COMMITTERS} concurrent committers (one entity \
         each) through the primary's PartitionState, {} runs each, alternating:",
        sizes.throughput_commits, sizes.throughput_runs
    );
    let planes = [3, 1].map(|replicas| {
        let plane = runtime.block_on(Plane::start(replicas));
        let state = plane.state();
        (
            replicas,
            plane,
            state,
            committers(&format!("table-r{replicas}")),
        )
    });
    let mut took = [Duration::ZERO; 2];
    let mut cpu = [Duration::ZERO; 2];
    let mut planes = planes;
    runtime.block_on(async {
        for _ in 0..sizes.throughput_runs {
            for (side, (_, _, state, committers)) in planes.iter_mut().enumerate() {
                let cpu_before = cpu_time();
                took[side] += concurrent(state, committers, sizes.throughput_commits).await;
                cpu[side] += cpu_time() - cpu_before;
            }
        }
    });
    let total =
        (sizes.throughput_commits.div_ceil(COMMITTERS) * COMMITTERS * sizes.throughput_runs) as f64;
    let rates = took.map(|took| total / took.as_secs_f64());
    for (((replicas, plane, _, _), rate), cpu) in planes.iter().zip(rates).zip(cpu) {
        let status = plane.status(&plane.primary);
        println!(
            "R = {replicas}: {rate:>8.0} commits/s | process CPU {:.0} µs a commit ({:.0} % of \
             the {WORKER_THREADS} threads' time) | {} ops committed, {:.1} commits an op",
            cpu.as_secs_f64() * 1e6 / total,
            cpu.as_secs_f64() / (total / rate) / WORKER_THREADS as f64 * 100.0,
            status.commit,
            total / status.commit.max(1) as f64
        );
    }
    println!(
        "R = 3 / R = 1: {:.0} % (target: at least 50 %)",
        rates[0] / rates[1] * 100.0
    );
}

/// The tables printed after criterion's means, by name.
const TABLES: [&str; 3] = ["latency", "throughput", "rebuild"];

/// `fdatasync` calls timed for the disk's baseline.
const FSYNC_SAMPLES: usize = 100;

/// The disk's own cost, which every durable commit above pays at least once.
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
    quantile(&samples, 0.5)
}

/// Process CPU time (user + system) so far.
fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole rusage into the pointer it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

fn main() {
    let arguments: Vec<String> = std::env::args().collect();
    if arguments.iter().any(|argument| argument == "--list") {
        return;
    }
    let sizes = if arguments.iter().any(|argument| argument == "--test") {
        SMOKE
    } else {
        FULL
    };
    // Named tables run alone (criterion takes the names as filters too).
    let named: Vec<&str> = TABLES
        .into_iter()
        .filter(|table| arguments.iter().any(|argument| argument == table))
        .collect();
    let tables = if named.is_empty() {
        TABLES.to_vec()
    } else {
        named
    };
    let runtime = runtime();
    println!(
        "partition plane, {} client sessions a member, {} worker threads",
        sessions(),
        WORKER_THREADS
    );
    let mut criterion = Criterion::default().configure_from_args();
    bench_latency(&mut criterion, &runtime);
    bench_throughput(&mut criterion, &runtime);
    criterion.final_summary();
    println!(
        "\nbaseline of the disk: one 4 KiB append + fdatasync, p50 {:.2} ms",
        millis(fsync_latency_p50())
    );
    for table in tables {
        match table {
            "latency" => print_latency(&runtime, sizes),
            "throughput" => print_throughput(&runtime, sizes),
            _ => rebuild::print(&runtime, sizes.rebuild_bytes),
        }
    }
}
